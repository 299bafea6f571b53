//! `lmkit ner`: token classification (named entities), one input line → one
//! output line. Plain output: `start..end<TAB>entity_group<TAB>score<TAB>word`
//! per entity, a blank line after each input line; `--json`: one JSON array
//! per input line of HF's token-classification pipeline objects
//! (`aggregation_strategy="simple"`): `{"entity_group", "score", "word",
//! "start", "end"}`, offsets in characters of the line.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};

#[derive(clap::Args)]
pub struct Args {
    /// Model with a token-classification head (BertForTokenClassification):
    /// a folder or a hub name.
    #[arg(long)]
    pub model: String,
    /// One text per line (default or `-`: stdin).
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// Truncate lines longer than the model's positions instead of failing.
    #[arg(long)]
    pub truncate: bool,
    /// Weight format: f32, or the encoder's matmuls in bf16 (faster where the CPU's bf16 dot product outruns its f32 FMAs, as on AMD Zen 4/5; ~1e-2 less exact) or int8 (fastest, activations quantized per row), or auto (the fastest on this CPU, measured once and cached).
    #[arg(long, default_value = "f32")]
    pub dtype: String,
}

pub fn run(args: Args) -> Result<()> {
    let p = super::embed::load("ner", &args.model, &args.dtype)?;
    let lines = super::embed::read_lines(args.input.as_deref())?;
    let mut w = BufWriter::new(std::io::stdout().lock());
    for (i, line) in lines.iter().enumerate() {
        let ents = p
            .ner(line, args.truncate)
            .with_context(|| format!("tagging line {}", i + 1))?;
        if args.json {
            writeln!(w, "{}", serde_json::to_string(&ents)?)?;
        } else {
            for e in &ents {
                writeln!(
                    w,
                    "{}..{}\t{}\t{:.4}\t{}",
                    e.start, e.end, e.entity_group, e.score, e.word
                )?;
            }
            writeln!(w)?;
        }
    }
    w.flush()?;
    Ok(())
}
