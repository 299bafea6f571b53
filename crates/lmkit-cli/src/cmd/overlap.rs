//! `lmkit overlap`: how much of an evaluation set is already in the
//! training text — the GPT-2 paper's 8-gram Bloom-filter check. Builds the
//! filter from `--train` (or reads a saved one with `--filter`), then
//! reports the share of the evaluation set's n-grams found in it, overall
//! and per document, the documents above `--threshold`, and optionally
//! writes the evaluation set without them.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use crate::progress::Progress;

use anyhow::{bail, Context, Result};
use lmkit::data::overlap::{
    build_filter, clean_text, overlap_report, read_eval_documents, BloomFilter, BuildOptions,
    DocKind,
};
use lmkit::util::size::parse_byte_size;
use serde_json::json;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Training text: files or folders (text, JSONL / Parquet rows), as `pretrain` reads them.
    #[arg(long, num_args = 1.., required_unless_present = "filter")]
    pub train: Vec<PathBuf>,
    /// The field of --train's JSONL / Parquet rows that holds the text.
    #[arg(long, default_value = "text", requires = "train")]
    pub text_field: String,
    /// A filter saved by --save-filter or `pretrain --overlap-filter`, instead of --train.
    #[arg(long, conflicts_with = "train")]
    pub filter: Option<PathBuf>,
    /// Evaluation text: text files (a blank line between documents) or JSONL (a row per document).
    #[arg(long, num_args = 1..)]
    pub eval: Vec<PathBuf>,
    /// Words per n-gram.
    #[arg(long, default_value_t = 8)]
    pub n: usize,
    /// False-positive rate the filter is sized for.
    #[arg(long, default_value_t = 1e-8)]
    pub fp_rate: f64,
    /// Largest filter to build (e.g. 4GiB, 500MB); a larger one is refused before allocating.
    #[arg(long, default_value = "4GiB", value_parser = parse_byte_size)]
    pub max_memory: u64,
    /// A document overlaps when more than this share of its n-grams is in the training text.
    #[arg(long, default_value_t = 0.0)]
    pub threshold: f64,
    /// Save the filter built from --train to this file (new file only; `-`:
    /// stdout, the report then on stderr).
    #[arg(long, requires = "train")]
    pub save_filter: Option<PathBuf>,
    /// Write the evaluation documents that do not overlap to this file (new
    /// file only; `-`: stdout, the report then on stderr).
    #[arg(long)]
    pub write_clean: Option<PathBuf>,
    /// One JSON object with every figure, per-document values included.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<()> {
    if !(0.0..1.0).contains(&a.threshold) {
        bail!("--threshold {} must be in [0, 1)", a.threshold);
    }
    if a.eval.is_empty() && a.save_filter.is_none() {
        bail!("nothing to do: give --eval FILES (and/or --save-filter FILE with --train)");
    }
    let outputs: Vec<&PathBuf> = [&a.save_filter, &a.write_clean]
        .into_iter()
        .flatten()
        .collect();
    for p in &outputs {
        super::check_new_output(p)?;
    }
    let is_stdout = |p: &PathBuf| p.as_os_str() == "-";
    if outputs.iter().filter(|p| is_stdout(p)).count() > 1 {
        bail!("only one of --save-filter and --write-clean can be `-` (stdout)");
    }
    // The report goes to stderr when an output file takes stdout.
    let mut out: Box<dyn Write> = if outputs.iter().any(|p| is_stdout(p)) {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    };
    let (filter, train_bytes, build_s) = load_or_build_filter(&a)?;
    if let Some(p) = &a.save_filter {
        super::write_output(p, true, |w| filter.write_to(w))?;
    }
    let filter_info = describe_filter(&a, &filter, train_bytes, build_s);
    if a.eval.is_empty() {
        if a.json {
            writeln!(out, "{}", json!({ "filter": filter_info }))?;
        }
        return Ok(());
    }
    let docs = read_eval_documents(&a.eval)?;
    let report = overlap_report(&filter, &docs, a.threshold);
    let kept = match &a.write_clean {
        Some(p) => {
            let (text, kept) = clean_text(&docs, &report.overlapping)?;
            super::write_output(p, false, |w| w.write_all(text.as_bytes()))?;
            Some(kept)
        }
        None => None,
    };
    // SQuAD questions are named by their ids.
    let overlapping_ids: Vec<&str> = report
        .overlapping
        .iter()
        .filter(|&&i| docs[i].kind == DocKind::Squad)
        .map(|&i| docs[i].raw.as_str())
        .collect();
    if a.json {
        writeln!(
            out,
            "{}",
            json!({ "filter": filter_info, "eval": report, "clean_documents_written": kept,
                    "overlapping_ids": overlapping_ids })
        )?;
        return Ok(());
    }
    writeln!(
        out,
        "{} documents, {} {}-grams: {:.2}% found in the training text",
        report.documents,
        report.ngrams,
        report.n,
        100.0 * report.share
    )?;
    writeln!(
        out,
        "documents by the share of their n-grams found ({} shorter than {} words left out):",
        report.too_short, report.n
    )?;
    for (i, c) in report.histogram.iter().enumerate() {
        writeln!(out, "  {:>3}-{:<3}% {c}", i * 10, (i + 1) * 10)?;
    }
    writeln!(
        out,
        "{} documents overlap (share > {:.0}%)",
        report.overlapping.len(),
        100.0 * report.threshold
    )?;
    if !overlapping_ids.is_empty() {
        writeln!(out, "overlapping questions: {}", overlapping_ids.join(", "))?;
    }
    if let (Some(p), Some(k)) = (&a.write_clean, kept) {
        writeln!(
            out,
            "{k} documents without overlap written to {}",
            if is_stdout(p) {
                "stdout".into()
            } else {
                p.display().to_string()
            }
        )?;
    }
    Ok(())
}

/// The filter of `--filter`, or the one built from `--train` with the bytes
/// of training text hashed and the seconds it took.
fn load_or_build_filter(a: &Args) -> Result<(BloomFilter, Option<u64>, f64)> {
    let t0 = Instant::now();
    let (filter, train_bytes) = match &a.filter {
        Some(f) => (
            BloomFilter::load(f).with_context(|| format!("reading the filter {}", f.display()))?,
            None,
        ),
        None => {
            let opts = BuildOptions {
                n: a.n,
                fp_rate: a.fp_rate,
                max_memory: a.max_memory,
                text_field: a.text_field.clone(),
            };
            let pb = Progress::new(
                "hashing training text {bar:30} {bytes}/{total_bytes} ({bytes_per_sec})",
            );
            let mut total = 0;
            let f = build_filter(&a.train, &opts, |done, all| {
                total = all;
                pb.set_length(all);
                pb.update(done, || "bytes of training text hashed".into());
            })?;
            pb.finish();
            (f, Some(total))
        }
    };
    let build_s = t0.elapsed().as_secs_f64();
    Ok((filter, train_bytes, build_s))
}

/// The filter's figures as JSON; without `--json`, also a summary on stderr.
fn describe_filter(
    a: &Args,
    filter: &BloomFilter,
    train_bytes: Option<u64>,
    build_s: f64,
) -> serde_json::Value {
    let bytes = filter.bits().div_ceil(64) * 8;
    let per_ngram = bytes as f64 / filter.inserted().max(1) as f64;
    let is_stdout = |p: &PathBuf| p.as_os_str() == "-";
    let filter_info = json!({
        "n": filter.n(),
        "ngrams_inserted": filter.inserted(),
        "bits": filter.bits(),
        "bytes": bytes,
        "bytes_per_ngram": per_ngram,
        "probes": filter.k(),
        "target_fp_rate": filter.target_fp_rate(),
        "expected_fp_rate": filter.expected_fp_rate(),
        "train_bytes": train_bytes,
        "build_seconds": train_bytes.map(|_| build_s),
        "train_gb_per_minute": train_bytes.map(|b| b as f64 / 1e9 / (build_s / 60.0).max(1e-9)),
    });
    if !a.json {
        match train_bytes {
            Some(b) => eprintln!(
                "filter: {} {}-grams from {:.1} MB of training text in {:.1} s ({:.2} GB/min); \
                 {:.1} MB, {:.2} bytes per n-gram, {} probes, false-positive rate {:.1e}",
                filter.inserted(),
                filter.n(),
                b as f64 / 1e6,
                build_s,
                b as f64 / 1e9 / (build_s / 60.0).max(1e-9),
                bytes as f64 / 1e6,
                per_ngram,
                filter.k(),
                filter.expected_fp_rate()
            ),
            None => eprintln!(
                "filter: {} {}-grams, {} probes, false-positive rate {:.1e}",
                filter.inserted(),
                filter.n(),
                filter.k(),
                filter.expected_fp_rate()
            ),
        }
        if let Some(p) = a.save_filter.as_ref().filter(|p| !is_stdout(p)) {
            eprintln!("filter saved to {}", p.display());
        }
    }
    filter_info
}
