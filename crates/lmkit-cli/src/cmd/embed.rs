//! `lmkit embed`: sentence embeddings, one JSON array of floats per input
//! line, in input order. Pooling and normalization follow the model's
//! sentence-transformers files (mean, no normalization for plain BERT
//! checkpoints) unless overridden. An empty line gets the embedding of the
//! empty text (`[CLS] [SEP]`), as sentence-transformers gives it; a line
//! longer than the model's `max_seq_length` is truncated, or with
//! `--window` split into windows whose pooled vectors are averaged.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use lmkit::models::bert::{BertPipeline, EmbedOptions, Pooling};

#[derive(clap::Args)]
pub struct Args {
    /// Model: a folder in HF layout (sentence-transformers files optional) or a hub name.
    #[arg(long)]
    pub model: String,
    /// One text per line (default or `-`: stdin).
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Pooling: mean, cls or max (default: the model's sentence-transformers config, else mean).
    #[arg(long)]
    pub pooling: Option<String>,
    /// L2-normalize the embeddings (default: the model's config).
    #[arg(long, conflicts_with = "no_normalize")]
    pub normalize: bool,
    /// Do not normalize, even if the model's config does.
    #[arg(long)]
    pub no_normalize: bool,
    /// Sequences per forward pass.
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// Split long inputs into windows and average them instead of truncating.
    #[arg(long)]
    pub window: bool,
    /// Weight format: f32, or bf16 matmuls (faster, ~1e-2 less exact); int8 is GPT-2 only.
    #[arg(long, default_value = "f32")]
    pub dtype: String,
}

/// The lines of `input` (stdin when `None`), without line terminators.
pub fn read_lines(input: Option<&Path>) -> Result<Vec<String>> {
    let text = super::read_input_text(input)?;
    Ok(text.lines().map(str::to_string).collect())
}

/// Loads the model for `command` (a folder or a hub name) with weights as
/// `dtype`: f32, or bf16 matmuls.
/// Loads a BERT pipeline for `command` from a folder or a hub name.
pub fn load(command: &str, model: &str, dtype: &str) -> Result<BertPipeline> {
    let bf16 = match dtype.parse::<lmkit::models::gpt2::WeightDtype>()? {
        lmkit::models::gpt2::WeightDtype::F32 => false,
        lmkit::models::gpt2::WeightDtype::Bf16 => true,
        lmkit::models::gpt2::WeightDtype::Int8 => {
            bail!("--dtype int8: BERT models run f32 or bf16 (int8 weights are for GPT-2)")
        }
    };
    let model = lmkit::checkpoint::resolve_model_dir(model)?;
    lmkit::checkpoint::read_config(&model, Some((lmkit::spec::Family::Bert, command)))?;
    let mut p = BertPipeline::from_dir(&model)
        .with_context(|| format!("loading model {}", model.display()))?;
    p.model.set_bf16(bf16);
    Ok(p)
}

pub fn run(args: Args) -> Result<()> {
    if args.batch_size == 0 {
        bail!("--batch-size must be at least 1");
    }
    let pooling = args.pooling.as_deref().map(Pooling::parse).transpose()?;
    let normalize = match (args.normalize, args.no_normalize) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    };
    let p = load("embed", &args.model, &args.dtype)?;
    let lines = read_lines(args.input.as_deref())?;
    let texts: Vec<&str> = lines.iter().map(String::as_str).collect();
    let opts = EmbedOptions {
        pooling,
        normalize,
        batch_size: args.batch_size,
        window: args.window,
    };
    let out = std::io::stdout();
    let mut w = BufWriter::new(out.lock());
    // Chunks bound memory for big inputs while keeping batches full.
    for chunk in texts.chunks(args.batch_size.saturating_mul(64)) {
        for v in p.embed(chunk, &opts)? {
            serde_json::to_writer(&mut w, &v)?;
            w.write_all(b"\n")?;
        }
    }
    w.flush()?;
    Ok(())
}
