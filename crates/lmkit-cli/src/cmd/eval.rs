//! `lmkit eval`: score a model on an evaluation file — a fine-tuned model on
//! its task (the scoring fine-tuning runs after every epoch, the same
//! metrics without the `eval_` prefix) or a GPT-2 on a zero-shot benchmark.
//! The tasks and benchmarks, with their data formats, are the library's
//! registry (`lmkit eval --help` lists them).

use std::path::{Path, PathBuf};

use crate::progress::Progress;
use anyhow::{bail, Context, Result};
use lmkit::checkpoint::resolve_model_dir;
use lmkit::data::overlap::BloomFilter;
use lmkit::eval::benchmark::{EvalOptions, Evaluation, Keep};
use lmkit::tasks::{evaluate, EvalTarget};
use serde_json::{json, Value};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// What to score (see the list below).
    #[arg(long)]
    pub task: EvalTarget,
    /// Model directory (HF layout) or a name in the local HF hub cache.
    #[arg(long)]
    pub model: String,
    /// Evaluation file (format per task, see the list below).
    #[arg(long)]
    pub data: PathBuf,
    /// Score only the first N items.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Sequences per batch: per forward pass for the fine-tuned tasks [default: 64] and
    /// lambada (passages); decoding together for summarize, translate and zero-shot-qa
    /// [default: 8]. Scores do not depend on it.
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Longest input; qa: the window length [default: 128; qa: 384; at most the model's
    /// positions].
    #[arg(long)]
    pub max_seq_len: Option<usize>,
    /// qa: overlap between windows [default: 128, at most half the window].
    #[arg(long)]
    pub doc_stride: Option<usize>,
    /// qa: longest answer in tokens.
    #[arg(long, default_value_t = EvalOptions::default().max_answer_len)]
    pub max_answer_len: usize,
    /// qa: answers kept per question in --predictions.
    #[arg(long, default_value_t = EvalOptions::default().n_best)]
    pub n_best: usize,
    /// perplexity: window length [default: n_positions].
    #[arg(long)]
    pub context: Option<usize>,
    /// perplexity: tokens between window starts [default: half the window].
    #[arg(long)]
    pub stride: Option<usize>,
    /// summarize: greedy decoding instead of top-k sampling.
    #[arg(long)]
    pub greedy: bool,
    /// summarize: k of top-k sampling.
    #[arg(long, default_value_t = EvalOptions::default().top_k)]
    pub top_k: usize,
    /// summarize: tokens generated after "TL;DR:"; translate, zero-shot-qa: most
    /// tokens of a translation or an answer.
    #[arg(long, default_value_t = EvalOptions::default().max_new_tokens)]
    pub max_new_tokens: usize,
    /// translate, zero-shot-qa (NQ-style rows): example pairs in every prompt, taken
    /// from the front of the data and not scored.
    #[arg(long, default_value_t = EvalOptions::default().shots)]
    pub shots: usize,
    /// translate: translate the targets into the sources.
    #[arg(long)]
    pub reverse: bool,
    /// translate: plain-text translations aligned line by line with the
    /// plain-text --data (instead of JSONL).
    #[arg(long)]
    pub targets: Option<PathBuf>,
    /// summarize: the sampling seed.
    #[arg(long, default_value_t = EvalOptions::default().seed)]
    pub seed: u64,
    /// Write per-item predictions to this JSONL file.
    #[arg(long)]
    pub predictions: Option<PathBuf>,
    /// Print one JSON object with the metrics.
    #[arg(long)]
    pub json: bool,
    /// A training-text filter (`lmkit overlap --save-filter`, `pretrain
    /// --overlap-filter`): also score the items that do not overlap the
    /// training text, side by side with all items.
    #[arg(long)]
    pub overlap: Option<PathBuf>,
    /// With --overlap: an item overlaps when more than this share of its
    /// n-grams is in the training text (0: any).
    #[arg(long, default_value_t = 0.0, requires = "overlap")]
    pub overlap_threshold: f64,
}

impl Args {
    fn options(&self) -> EvalOptions {
        EvalOptions {
            limit: self.limit,
            batch_size: self.batch_size,
            max_seq_len: self.max_seq_len,
            doc_stride: self.doc_stride,
            max_answer_len: self.max_answer_len,
            n_best: self.n_best,
            context: self.context,
            stride: self.stride,
            greedy: self.greedy,
            top_k: self.top_k,
            max_new_tokens: self.max_new_tokens,
            shots: self.shots,
            reverse: self.reverse,
            targets: self.targets.clone(),
            seed: self.seed,
        }
    }
}

/// Writes the predictions, a JSON row per item, to a new file or stdout (`-`).
fn write_predictions(path: &Path, rows: &[Value]) -> Result<()> {
    super::write_output(path, false, |w| {
        for r in rows {
            writeln!(w, "{r}")?;
        }
        Ok(())
    })
}

/// Prints a metrics line: on stdout, or on stderr when the predictions
/// take stdout (`--predictions -`).
fn print_metrics(a: &Args, line: &str) {
    if a.predictions
        .as_deref()
        .is_some_and(|p| p.as_os_str() == "-")
    {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}

/// Runs the evaluation on the items `keep` accepts, with a progress bar.
fn score(a: &Args, dir: &Path, opts: &EvalOptions, keep: Keep<'_>) -> Result<Evaluation> {
    let pb = Progress::new("{bar:40} {pos}/{len} ({eta} left)");
    let r = evaluate(a.task, dir, &a.data, opts, keep, &mut |done, total| {
        pb.set_length(total as u64);
        pb.update(done as u64, String::new);
    });
    pb.finish();
    Ok(r?)
}

pub fn run(a: Args) -> Result<()> {
    // Refused before the evaluation runs, not after.
    if let Some(p) = &a.predictions {
        super::check_new_output(p)?;
    }
    let dir = resolve_model_dir(&a.model)?;
    let opts = a.options();
    let Some(fpath) = &a.overlap else {
        let r = score(&a, &dir, &opts, None)?;
        return report(&a, r.metrics.into(), &r.predictions);
    };
    if !(0.0..1.0).contains(&a.overlap_threshold) {
        bail!(
            "--overlap-threshold {} must be in [0, 1)",
            a.overlap_threshold
        );
    }
    let filter = BloomFilter::load(fpath)
        .with_context(|| format!("reading the overlap filter {}", fpath.display()))?;
    let t = a.overlap_threshold;
    let seen = std::cell::Cell::new((0usize, 0usize)); // (items, overlapping)
    let clean = |segs: &[&str]| {
        let over = filter.doc_overlap(segs).share() > t;
        let (n, o) = seen.get();
        seen.set((n + 1, o + usize::from(over)));
        !over
    };
    let all = score(&a, &dir, &opts, None)?;
    let kept = score(&a, &dir, &opts, Some(&clean))?;
    let (items, overlapping) = seen.get();
    let (all_m, kept_m) = (Value::from(all.metrics), Value::from(kept.metrics));
    let metrics = json!({
        "task": all_m["task"],
        "all": all_m,
        "clean": kept_m,
        "overlap": {"filter": fpath.display().to_string(), "n": filter.n(), "threshold": t,
                    "items": items, "overlapping": overlapping},
    });
    if a.json {
        if let Some(p) = &a.predictions {
            write_predictions(p, &all.predictions)?;
        }
        print_metrics(&a, &metrics.to_string());
        return Ok(());
    }
    report(&a, all_m, &all.predictions)?;
    print_metrics(
        &a,
        &format!(
            "without the {overlapping} of {items} items that overlap the training text (share > {:.0}%):",
            100.0 * t
        ),
    );
    print_metrics(&a, &metrics_line(&a, &kept_m));
    Ok(())
}

/// Prints the metrics (and writes the predictions).
fn report(a: &Args, metrics: Value, preds: &[Value]) -> Result<()> {
    if let Some(p) = &a.predictions {
        write_predictions(p, preds)?;
    }
    print_metrics(a, &metrics_line(a, &metrics));
    Ok(())
}

/// The metrics as JSON (`--json`) or `key value, ...`.
fn metrics_line(a: &Args, metrics: &Value) -> String {
    match metrics {
        Value::Object(m) if !a.json => m
            .iter()
            .filter(|(k, _)| k.as_str() != "task")
            .map(|(k, v)| match v.as_f64() {
                Some(x) if v.is_f64() => format!("{k} {x:.4}"),
                _ => format!("{k} {v}"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        _ => metrics.to_string(),
    }
}
