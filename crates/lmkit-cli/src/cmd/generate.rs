//! `lmkit generate`: continue a prompt with a GPT-2 model, streaming the text
//! as it is produced; `--json` prints one JSON object at the end instead.
//!
//! Decoding: sampling (temperature 1, top-k 50, as HF's defaults) unless
//! `--greedy`; the repetition penalty applies to both. Generation stops at
//! `--max-new-tokens`, at the end-of-text token (unless `--ignore-eos`) or
//! when the text contains a `--stop` string (the text ends before it).

use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use lmkit::models::gpt2::{GenerationConfig, SamplingParams};
use lmkit::util::profile;

#[derive(clap::Args)]
pub struct Args {
    /// Model directory (HF layout) or a model name in the local HF hub cache.
    #[arg(long)]
    pub model: String,
    /// The text to continue (`-`: read it from stdin).
    #[arg(
        long,
        required_unless_present = "prompt_file",
        conflicts_with = "prompt_file"
    )]
    pub prompt: Option<String>,
    /// Read the prompt from this file (`-`: stdin).
    #[arg(long)]
    pub prompt_file: Option<PathBuf>,
    /// Tokens to generate at most.
    #[arg(long, default_value_t = 50)]
    pub max_new_tokens: usize,
    /// Always take the most likely token (no sampling).
    #[arg(long, conflicts_with_all = ["temperature", "top_k", "top_p"])]
    pub greedy: bool,
    /// Sampling temperature (> 0).
    #[arg(long, default_value_t = 1.0)]
    pub temperature: f32,
    /// Sample among the K most likely tokens (0 = all).
    #[arg(long, default_value_t = 50)]
    pub top_k: usize,
    /// Sample among the most likely tokens whose probabilities sum to P (1 = all).
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Penalise tokens already in the text (1 = off; HF's CTRL penalty).
    #[arg(long, default_value_t = 1.0)]
    pub repetition_penalty: f32,
    /// Subtract this from the logit of every token already generated (OpenAI's presence penalty, -2..2).
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    pub presence_penalty: f32,
    /// Subtract this once per earlier occurrence in the generated text (OpenAI's frequency penalty, -2..2).
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    pub frequency_penalty: f32,
    /// Seed of the sampler (default: from the clock; printed with --json).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Keep generating after the end-of-text token.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Stop when the text contains this string (repeatable); it is not printed.
    #[arg(long = "stop")]
    pub stop: Vec<String>,
    /// Weight format: f32, bf16, int8, or auto (the fastest on this CPU, measured once and cached).
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Drop tokens from the start of a prompt too long for the context, instead of failing.
    #[arg(long)]
    pub truncate: bool,
    /// Tokenizer directory (vocab.json + merges.txt or tokenizer.json; default: the model's).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Print one JSON object (text, ids, prompt_tokens, prefill_ms, decode_tokens_per_s, ...) at the end.
    #[arg(long)]
    pub json: bool,
    /// Print the time of prefill and decode phase by phase (matmuls, attention, LayerNorm, ...) to stderr at the end.
    #[arg(long)]
    pub profile: bool,
}

pub fn run(a: Args) -> Result<()> {
    let (tokenizer, mut engine) =
        super::load_gpt2("generate", &a.model, a.tokenizer.as_deref(), &a.dtype)?;
    let dtype = engine.dtype();
    let sampling = SamplingParams {
        greedy: a.greedy,
        temperature: a.temperature,
        top_k: a.top_k,
        top_p: a.top_p,
        repetition_penalty: a.repetition_penalty,
        presence_penalty: a.presence_penalty,
        frequency_penalty: a.frequency_penalty,
    };
    let seed = a.seed.unwrap_or_else(clock_seed);
    let eos = engine.eos_token_id(&tokenizer);
    let cfg = GenerationConfig {
        max_new_tokens: a.max_new_tokens,
        sampling,
        seed,
        eos_token_id: eos,
        ignore_eos: a.ignore_eos,
        truncate: a.truncate,
    };
    // As HF's tokenizer: special-token text in the prompt becomes its id.
    let prompt_text = match (&a.prompt, &a.prompt_file) {
        (Some(p), _) if p != "-" => p.clone(),
        (Some(_), _) => super::read_input_text(None)?,
        (None, f) => super::read_input_text(f.as_deref())?,
    };
    let prompt = lmkit::models::gpt2::Gpt2Engine::prompt_ids(&tokenizer, &prompt_text)?;

    let mut stdout = std::io::stdout().lock();
    let mut write_err = None;
    let profiling = a.profile.then(profile::Enable::new);
    let _ = profile::take();
    let done = engine.complete(&tokenizer, &prompt, &cfg, &a.stop, |piece| {
        if a.json {
            return ControlFlow::Continue(());
        }
        match stdout
            .write_all(piece.as_bytes())
            .and_then(|_| stdout.flush())
        {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                write_err = Some(e);
                ControlFlow::Break(())
            }
        }
    });
    let done = match done {
        Err(e @ lmkit::Error::ContextTooLong { .. }) => {
            bail!("{e}: pass --truncate to drop tokens from the start of the prompt, or lower --max-new-tokens")
        }
        other => other?,
    };
    if let Some(e) = write_err {
        return Err(e).context("writing to stdout");
    }
    let out = &done.output;
    if profiling.is_some() {
        let mut p = profile::StepProfiler::default();
        p.add((out.prefill_ms + out.decode_ms) * 1e-3, &profile::take());
        if let Some(r) = p.report() {
            eprint!("{}", r.table_of("prefill and decode"));
        }
    }
    if a.json {
        let json = serde_json::json!({
            "text": done.text,
            "ids": out.ids,
            "prompt_tokens": out.prompt_tokens,
            "truncated_tokens": out.truncated_tokens,
            "new_tokens": out.ids.len(),
            "finish_reason": out.finish_reason.as_str(),
            "prefill_ms": out.prefill_ms,
            "decode_ms": out.decode_ms,
            "decode_tokens_per_s": out.decode_tokens_per_s,
            "seed": seed,
            "dtype": dtype.as_str(),
            "weight_bytes": engine.weight_bytes(),
        });
        writeln!(stdout, "{json}").context("writing to stdout")?;
    } else {
        writeln!(stdout).context("writing to stdout")?;
    }
    Ok(())
}

/// A seed from the clock, for runs that did not ask for reproducibility.
fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
