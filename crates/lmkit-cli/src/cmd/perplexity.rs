//! `lmkit perplexity`: perplexity of a GPT-2 model on a text file, with HF's
//! sliding window. The whole file is encoded (no special tokens) and every
//! token after the first is scored once.

use std::path::PathBuf;

use anyhow::{Context, Result};

#[derive(clap::Args)]
pub struct Args {
    /// Model directory (HF layout) or a model name in the local HF hub cache.
    #[arg(long)]
    pub model: String,
    /// Text file to score.
    #[arg(long)]
    pub input: PathBuf,
    /// Tokens between the starts of consecutive windows (default: half the context).
    #[arg(long)]
    pub stride: Option<usize>,
    /// Window length in tokens (default: the model's n_positions).
    #[arg(long)]
    pub context: Option<usize>,
    /// Weight format: f32, bf16, int8, or auto (the fastest on this CPU, measured once and cached).
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Tokenizer directory (default: the model's).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Print `{"tokens": N, "nll": MEAN_NLL, "perplexity": P}` (plus details) as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let (tokenizer, mut engine) =
        super::load_gpt2("perplexity", &a.model, a.tokenizer.as_deref(), &a.dtype)?;
    let dtype = engine.dtype();
    let text = super::read_input(Some(&a.input))?;
    let ids = tokenizer.encode_ordinary(&text);
    let context = a.context.unwrap_or(engine.config().n_positions);
    let stride = a.stride.unwrap_or((context / 2).max(1));
    if a.stride == Some(0) || a.context == Some(0) {
        anyhow::bail!("--stride and --context must be positive");
    }
    let pb = crate::progress::Progress::new("{bar:40} {pos}/{len} tokens ({per_sec}, {eta} left)");
    pb.set_length(ids.len().saturating_sub(1) as u64);
    let report = engine
        .perplexity(&ids, context, stride, |done, _| {
            pb.update(done as u64, || "tokens scored".into())
        })
        .with_context(|| format!("scoring {}", a.input.display()))?;
    pb.summary(report.tokens as u64, "tokens", "scored", "");
    if a.json {
        let json = serde_json::json!({
            "tokens": report.tokens,
            "nll": report.mean_nll,
            "perplexity": report.perplexity,
            "windows": report.windows,
            "context": context,
            "stride": stride,
            "dtype": dtype.as_str(),
        });
        println!("{json}");
    } else {
        println!(
            "perplexity {:.4} (mean NLL {:.6} over {} tokens, {} windows of {context} tokens, stride {stride}, {dtype})",
            report.perplexity, report.mean_nll, report.tokens, report.windows
        );
    }
    Ok(())
}
