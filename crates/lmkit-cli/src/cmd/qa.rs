//! `lmkit qa`: extractive question answering over a context file. The
//! context is split into windows of `--max-seq-len` tokens overlapping by
//! `--doc-stride` (HF pipeline defaults 384 / 128), so long contexts work;
//! answers are spans of the context (whole words, at most
//! `--max-answer-len` tokens). Prints the answer text, or with `--json` one
//! object per answer `{"score", "start", "end", "answer"}` (character
//! offsets into the context, as HF reports them).

use std::path::PathBuf;

use anyhow::{bail, Result};
use lmkit::models::bert::QaOptions;
use serde_json::json;

#[derive(clap::Args)]
pub struct Args {
    /// Model with a QA head (`qa_outputs.*`): a folder or a hub name.
    #[arg(long)]
    pub model: String,
    #[arg(long)]
    pub question: String,
    /// File holding the context text.
    #[arg(long)]
    pub context: PathBuf,
    /// Number of answers.
    #[arg(long, default_value_t = 1)]
    pub top_k: usize,
    /// Longest answer, in tokens.
    #[arg(long, default_value_t = 15)]
    pub max_answer_len: usize,
    /// Tokens per window, question and specials included [default: 384, at
    /// most the model's max_position_embeddings].
    #[arg(long)]
    pub max_seq_len: Option<usize>,
    /// Tokens of overlap between consecutive windows [default: 128, at most
    /// half the window].
    #[arg(long)]
    pub doc_stride: Option<usize>,
    /// Also consider "no answer" (scored by [CLS]).
    #[arg(long)]
    pub allow_no_answer: bool,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// Weight format: f32, or the encoder's matmuls in bf16 (faster where the CPU's bf16 dot product outruns its f32 FMAs, as on AMD Zen 4/5; ~1e-2 less exact) or int8 (fastest, activations quantized per row), or auto (the fastest on this CPU, measured once and cached).
    #[arg(long, default_value = "f32")]
    pub dtype: String,
}

pub fn run(args: Args) -> Result<()> {
    if args.top_k == 0 || args.max_answer_len == 0 {
        bail!("--top-k and --max-answer-len must be at least 1");
    }
    let context = super::read_input_text(Some(&args.context))?;
    let p = super::embed::load("qa", &args.model, &args.dtype)?;
    let (window, stride) = lmkit::models::bert::qa_windows(
        args.max_seq_len,
        args.doc_stride,
        p.model.config.max_position_embeddings,
    )?;
    let opts = QaOptions {
        top_k: args.top_k,
        max_answer_len: args.max_answer_len,
        handle_impossible_answer: args.allow_no_answer,
    };
    let answers = p.answer(&args.question, &context, window, stride, opts)?;
    if answers.is_empty() {
        bail!("no answer span found in the context");
    }
    for a in answers {
        if args.json {
            println!(
                "{}",
                json!({"score": a.score, "start": a.start, "end": a.end, "answer": a.answer})
            );
        } else {
            println!("{}", a.answer);
        }
    }
    Ok(())
}
