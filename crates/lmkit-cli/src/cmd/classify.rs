//! `lmkit classify`: sequence classification, one input line → one output
//! line: `label<TAB>score` of the best label, or with `--json` an object
//! `{"label", "score", "scores": [{"label", "score"}, ...]}` (all labels,
//! best first). Scores are HF's: softmax, or sigmoid for multi-label / a
//! single label, raw logits for regression. Empty lines and lines longer
//! than the model's positions are errors naming the line (`--truncate`
//! cuts long lines instead).

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use serde_json::json;

#[derive(clap::Args)]
pub struct Args {
    /// Model with a sequence-classification head (`classifier.*`): a folder or a hub name.
    #[arg(long)]
    pub model: String,
    /// One text per line (default: stdin).
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// Truncate inputs longer than the model's positions instead of failing.
    #[arg(long)]
    pub truncate: bool,
    /// Sequences per forward pass.
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// Weight format: f32, or bf16 matmuls (faster, ~1e-2 less exact); int8 is GPT-2 only.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
}

pub fn run(args: Args) -> Result<()> {
    let p = super::embed::load("classify", &args.model, &args.dtype)?;
    let lines = super::embed::read_lines(args.input.as_deref())?;
    if let Some(i) = lines.iter().position(|l| l.trim().is_empty()) {
        bail!("line {} is empty: nothing to classify", i + 1);
    }
    let texts: Vec<&str> = lines.iter().map(String::as_str).collect();
    let mut w = BufWriter::new(std::io::stdout().lock());
    let chunk = args.batch_size.max(1).saturating_mul(64);
    for (ci, texts) in texts.chunks(chunk).enumerate() {
        let results = p
            .classify(texts, args.batch_size.max(1), args.truncate)
            .with_context(|| {
                format!(
                    "classifying lines {}..{}",
                    ci * chunk + 1,
                    ci * chunk + texts.len()
                )
            })?;
        for r in results {
            let best = &r[0];
            if args.json {
                let all: Vec<_> = r
                    .iter()
                    .map(|s| json!({"label": s.label, "score": s.score}))
                    .collect();
                let v = json!({"label": best.label, "score": best.score, "scores": all});
                writeln!(w, "{v}")?;
            } else {
                writeln!(w, "{}\t{}", best.label, best.score)?;
            }
        }
    }
    w.flush()?;
    Ok(())
}
