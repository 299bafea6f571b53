//! `lmkit fill-mask`: the top-k tokens and probabilities for each `[MASK]`
//! of a text. `--json` prints what HF's fill-mask pipeline returns: a list of
//! `{"score", "token" (id), "token_str", "sequence"}` for a text with one
//! mask, a list of such lists (one per mask, in order) for several. A text
//! without `[MASK]` is an error.

use anyhow::{bail, Result};
use serde_json::json;

#[derive(clap::Args)]
pub struct Args {
    /// Model with a masked-LM head (`cls.predictions.*`): a folder or a hub name.
    #[arg(long)]
    pub model: String,
    /// Text containing one or more [MASK] tokens.
    #[arg(long)]
    pub text: String,
    /// Weight format: f32, or the encoder's matmuls in bf16 (faster where the CPU's bf16 dot product outruns its f32 FMAs, as on AMD Zen 4/5; ~1e-2 less exact) or int8 (fastest, activations quantized per row), or auto (the fastest on this CPU, measured once and cached).
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Candidates per mask.
    #[arg(long, default_value_t = 5)]
    pub top_k: usize,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> Result<()> {
    if args.top_k == 0 {
        bail!("--top-k must be at least 1");
    }
    let p = super::embed::load("fill-mask", &args.model, &args.dtype)?;
    let masks = p.fill_mask(&args.text, args.top_k)?;
    if args.json {
        let v = if masks.len() == 1 {
            json!(masks[0])
        } else {
            json!(masks)
        };
        println!("{v}");
    } else {
        for (m, preds) in masks.iter().enumerate() {
            if masks.len() > 1 {
                println!("[MASK] {}:", m + 1);
            }
            for x in preds {
                println!("{:.6}\t{}\t{}", x.score, x.id, x.token);
            }
        }
    }
    Ok(())
}
