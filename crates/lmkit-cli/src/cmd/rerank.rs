//! `lmkit rerank`: the input texts scored against `--query` by a
//! cross-encoder (a BERT sequence classifier with one label, as
//! sentence-transformers' `CrossEncoder` saves it), best first: one line
//! `index<TAB>score<TAB>text` per text, or with `--json` one array of
//! `{"index", "score", "text"}` (TEI's `/rerank` shape). Scores are the
//! logit through the activation the model was saved with (sigmoid unless
//! Identity: `CrossEncoder.predict`'s default), or the logit with
//! `--raw-scores`. Texts are lines, or JSONL rows (a `.jsonl` file, or
//! `--jsonl`) with a `text` field; pairs longer than the model's positions
//! are errors unless `--truncate`.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{bail, Result};
use lmkit::tasks::rerank::{self, RerankOptions};
use serde_json::json;

#[derive(clap::Args)]
pub struct Args {
    /// Cross-encoder: a folder or a hub name.
    #[arg(long)]
    pub model: String,
    /// The query the texts are scored against.
    #[arg(long)]
    pub query: String,
    /// One text per line, or JSONL rows `{"text"}` (a `.jsonl` file, or
    /// --jsonl) (default or `-`: stdin).
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Read the input as JSONL whatever its name (e.g. from stdin).
    #[arg(long)]
    pub jsonl: bool,
    /// The logits, whatever activation the model was saved with.
    #[arg(long)]
    pub raw_scores: bool,
    /// Truncate pairs longer than the model's positions instead of failing.
    #[arg(long)]
    pub truncate: bool,
    /// One JSON array, best first.
    #[arg(long)]
    pub json: bool,
    /// Pairs per forward pass.
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// Weight format: f32, bf16, int8 or auto (see `lmkit classify --help`).
    #[arg(long, default_value = "f32")]
    pub dtype: String,
}

pub fn run(args: Args) -> Result<()> {
    if args.batch_size == 0 {
        bail!("--batch-size must be at least 1");
    }
    let p = rerank::load(&args.model, args.dtype.parse()?)?;
    let texts: Vec<String> = if super::jsonl_input(args.jsonl, args.input.as_deref()) {
        let (name, rows) = super::read_jsonl_input(args.input.as_deref())?;
        rows.into_iter()
            .map(|(line, v)| match v.get("text") {
                Some(serde_json::Value::String(s)) => Ok(s.clone()),
                _ => bail!("{name}:{line}: no string field `text`"),
            })
            .collect::<Result<_>>()?
    } else {
        super::embed::read_lines(args.input.as_deref())?
    };
    if texts.is_empty() {
        bail!("no texts to rerank: give them one per line (--input or stdin)");
    }
    let saved = rerank::saved_activation(&args.model)?;
    let opts = RerankOptions {
        raw_scores: args.raw_scores || saved == rerank::Activation::Identity,
        truncate: args.truncate,
    };
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let ranked = rerank::rank(&p, &args.query, &refs, &opts, args.batch_size)?;
    let mut w = BufWriter::new(std::io::stdout().lock());
    if args.json {
        let rows: Vec<_> = ranked
            .iter()
            .map(|s| json!({"index": s.index, "score": s.score, "text": texts[s.index]}))
            .collect();
        writeln!(w, "{}", json!(rows))?;
    } else {
        for s in &ranked {
            writeln!(w, "{}\t{}\t{}", s.index, s.score, texts[s.index])?;
        }
    }
    w.flush()?;
    Ok(())
}
