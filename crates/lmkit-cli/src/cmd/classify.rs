//! `lmkit classify`: sequence classification, one input line → one output
//! line: `label<TAB>score` of the best label, or with `--json` an object
//! `{"label", "score", "scores": [{"label", "score"}, ...]}` (all labels,
//! best first). Scores are HF's: softmax, or sigmoid for multi-label / a
//! single label, raw logits for regression. Empty lines and lines longer
//! than the model's positions are errors naming the line (`--truncate`
//! cuts long lines instead). JSONL input (a `.jsonl` file, or `--jsonl`)
//! gives `{"text", "text_pair"?}` rows: a row with `text_pair` is classified
//! as the pair, as HF's pipeline does for `{"text", "text_pair"}`.
//! The model is a `BertForSequenceClassification` or a
//! `GPT2ForSequenceClassification` (the family is read from config.json;
//! GPT-2 joins a pair as `text <|endoftext|> pair`, as `finetune` trains it).

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use lmkit::tasks::classify::Classifier;
use serde_json::json;

#[derive(clap::Args)]
pub struct Args {
    /// Model with a sequence-classification head (BERT `classifier.*`, GPT-2
    /// `score.*`): a folder or a hub name.
    #[arg(long)]
    pub model: String,
    /// One text per line, or JSONL rows `{"text", "text_pair"?}` (a `.jsonl`
    /// file, or --jsonl) (default or `-`: stdin).
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Read the input as JSONL whatever its name (e.g. from stdin).
    #[arg(long)]
    pub jsonl: bool,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// Truncate inputs longer than the model's positions instead of failing.
    #[arg(long)]
    pub truncate: bool,
    /// Sequences per forward pass.
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// Weight format: f32, or BERT's encoder matmuls in bf16 (faster where the CPU's bf16 dot product outruns its f32 FMAs, as on AMD Zen 4/5; ~1e-2 less exact) or int8 (fastest, activations quantized per row), or auto (the fastest on this CPU, measured once and cached); GPT-2 classifiers run f32.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
}

/// `{"text", "text_pair"?}` rows of a JSONL input.
fn read_rows(input: Option<&std::path::Path>) -> Result<Vec<(String, Option<String>)>> {
    let (name, rows) = super::read_jsonl_input(input)?;
    let mut out = Vec::with_capacity(rows.len());
    for (line, v) in rows {
        let field = |k: &str| match v.get(k) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(anyhow::anyhow!("{name}:{line}: `{k}` is not a string")),
        };
        let text =
            field("text")?.ok_or_else(|| anyhow::anyhow!("{name}:{line}: no `text` field"))?;
        out.push((text, field("text_pair")?));
    }
    Ok(out)
}

pub fn run(args: Args) -> Result<()> {
    let mut p = Classifier::load(&args.model, args.dtype.parse()?)?;
    let jsonl = super::jsonl_input(args.jsonl, args.input.as_deref());
    let rows: Vec<(String, Option<String>)> = if jsonl {
        read_rows(args.input.as_deref())?
    } else {
        super::embed::read_lines(args.input.as_deref())?
            .into_iter()
            .map(|l| (l, None))
            .collect()
    };
    let what = if jsonl { "row" } else { "line" };
    if let Some(i) = rows.iter().position(|r| r.0.trim().is_empty()) {
        bail!("{what} {} is empty: nothing to classify", i + 1);
    }
    let mut w = BufWriter::new(std::io::stdout().lock());
    let pb = crate::progress::Progress::new(&format!(
        "{{bar:40}} {{pos}}/{{len}} {what}s ({{per_sec}}, {{eta}} left)"
    ));
    pb.set_length(rows.len() as u64);
    let chunk = args.batch_size.max(1).saturating_mul(64);
    let bs = args.batch_size.max(1);
    for (ci, rows) in rows.chunks(chunk).enumerate() {
        let context = || {
            format!(
                "classifying {what}s {}..{}",
                ci * chunk + 1,
                ci * chunk + rows.len()
            )
        };
        let refs: Vec<(&str, Option<&str>)> = rows
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_deref()))
            .collect();
        let results = p
            .classify_rows(&refs, bs, args.truncate)
            .with_context(context)?;
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
        let done = (ci * chunk + rows.len()) as u64;
        pb.update(done, || format!("{what}s classified"));
    }
    w.flush()?;
    pb.summary(rows.len() as u64, &format!("{what}s"), "classified", "");
    Ok(())
}
