//! Autoregressive generation on a [`Gpt2Engine`]: prefill the prompt into a
//! KV cache, then one token at a time (or a left-padded batch of prompts).
//!
//! Shape legend: B batch rows, T tokens, V vocabulary.

use std::ops::ControlFlow;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::models::gpt2::engine::Gpt2Engine;
use crate::models::gpt2::sampling::{Sampler, SamplingParams};

/// What to generate and how.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationConfig {
    /// Tokens to generate at most (the prompt not included).
    pub max_new_tokens: usize,
    pub sampling: SamplingParams,
    /// Seed of the sampler's RNG: the same seed, prompt and settings give the same tokens.
    pub seed: u64,
    /// End of text: generation stops after producing it (it is included in
    /// the output ids), unless `ignore_eos`.
    pub eos_token_id: Option<u32>,
    pub ignore_eos: bool,
    /// When the prompt plus the new tokens exceed the context, drop tokens
    /// from the start of the prompt instead of failing.
    pub truncate: bool,
}

impl Default for GenerationConfig {
    fn default() -> Self {
        GenerationConfig {
            max_new_tokens: 50,
            sampling: SamplingParams::default(),
            seed: 0,
            eos_token_id: None,
            ignore_eos: false,
            truncate: false,
        }
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// `max_new_tokens` reached.
    Length,
    /// The end-of-text token was produced.
    Eos,
    /// The `on_token` callback asked to stop (e.g. a stop string).
    Stop,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Length => "length",
            FinishReason::Eos => "eos",
            FinishReason::Stop => "stop",
        }
    }
}

/// The result of one generation.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationOutput {
    /// New token ids only (an EOS that ended generation included).
    pub ids: Vec<u32>,
    /// Prompt tokens actually fed (after any truncation).
    pub prompt_tokens: usize,
    /// Tokens dropped from the start of the prompt (`truncate`).
    pub truncated_tokens: usize,
    pub finish_reason: FinishReason,
    /// Time to the first new token: the prompt's forward pass and one sampling step.
    pub prefill_ms: f64,
    /// Time of the remaining tokens (one forward pass each).
    pub decode_ms: f64,
    /// Tokens per second of the decode phase (`ids.len() - 1` tokens over `decode_ms`).
    pub decode_tokens_per_s: f64,
}

impl Gpt2Engine {
    /// How many tokens of a `prompt_len`-token prompt to keep so that the
    /// prompt and `max_new` tokens fit the context: the last generated token
    /// is never fed back, so `kept + max_new - 1 <= n_positions`.
    pub(super) fn fit_prompt(
        &self,
        prompt_len: usize,
        max_new: usize,
        truncate: bool,
    ) -> Result<usize> {
        let ctx = self.config().n_positions;
        if prompt_len == 0 {
            return Err(Error::InvalidInput(
                "the prompt is empty: GPT-2 needs at least one token".into(),
            ));
        }
        let room = (ctx + 1).saturating_sub(max_new.max(1));
        if room == 0 {
            return Err(Error::InvalidInput(format!(
                "max_new_tokens = {max_new} does not fit a context of {ctx} tokens"
            )));
        }
        if prompt_len <= room {
            return Ok(prompt_len);
        }
        if truncate {
            return Ok(room);
        }
        Err(Error::ContextTooLong {
            len: prompt_len.saturating_add(max_new.max(1) - 1),
            max: ctx,
        })
    }

    /// An end-of-text id outside the vocabulary could never stop generation.
    pub(super) fn check_generation(&self, cfg: &GenerationConfig) -> Result<()> {
        let vocab = self.config().vocab_size;
        match cfg.eos_token_id {
            Some(id) if id as usize >= vocab && !cfg.ignore_eos => Err(Error::InvalidInput(
                format!("eos_token_id {id} is outside the vocabulary of {vocab}"),
            )),
            _ => Ok(()),
        }
    }

    /// Generates up to `cfg.max_new_tokens` tokens after `prompt`, calling
    /// `on_token` with each new id as soon as it is chosen (for streaming);
    /// `ControlFlow::Break` stops generation after that token.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        cfg: &GenerationConfig,
        mut on_token: impl FnMut(u32) -> ControlFlow<()>,
    ) -> Result<GenerationOutput> {
        self.check_generation(cfg)?;
        let mut sampler = Sampler::new(cfg.sampling.clone(), cfg.seed)?;
        let keep = self.fit_prompt(prompt.len(), cfg.max_new_tokens, cfg.truncate)?;
        let truncated_tokens = prompt.len() - keep;
        let prompt = &prompt[truncated_tokens..];
        let mut out = GenerationOutput {
            ids: Vec::with_capacity(cfg.max_new_tokens),
            prompt_tokens: keep,
            truncated_tokens,
            finish_reason: FinishReason::Length,
            prefill_ms: 0.0,
            decode_ms: 0.0,
            decode_tokens_per_s: 0.0,
        };
        if cfg.max_new_tokens == 0 {
            // Still validate the prompt (ids in range) as a generation would.
            if let Some(&id) = prompt
                .iter()
                .find(|&&id| id as usize >= self.config().vocab_size)
            {
                return Err(Error::TokenIdOutOfRange {
                    id,
                    vocab: self.config().vocab_size,
                });
            }
            return Ok(out);
        }
        let v = self.config().vocab_size;
        let mut cache = self.new_cache(1, keep + cfg.max_new_tokens - 1)?;
        let mut logits = vec![0f32; v];
        let mut context: Vec<u32> = prompt.to_vec();
        let start = Instant::now();
        self.forward(&mut cache, prompt, None)?;
        self.logits(&[keep - 1], &mut logits)?;
        let mut next = sampler.next_token(&mut logits, &context);
        out.prefill_ms = start.elapsed().as_secs_f64() * 1e3;
        let decode_start = Instant::now();
        loop {
            out.ids.push(next);
            context.push(next);
            let flow = on_token(next);
            if !cfg.ignore_eos && cfg.eos_token_id == Some(next) {
                out.finish_reason = FinishReason::Eos;
                break;
            }
            if flow.is_break() {
                out.finish_reason = FinishReason::Stop;
                break;
            }
            if out.ids.len() == cfg.max_new_tokens {
                break;
            }
            self.forward(&mut cache, &[next], None)?;
            self.logits(&[0], &mut logits)?;
            next = sampler.next_token(&mut logits, &context);
        }
        out.decode_ms = decode_start.elapsed().as_secs_f64() * 1e3;
        let decoded = out.ids.len().saturating_sub(1);
        if decoded > 0 && out.decode_ms > 0.0 {
            out.decode_tokens_per_s = decoded as f64 / (out.decode_ms / 1e3);
        }
        Ok(out)
    }

    /// Generates for several prompts at once: LEFT-padded into one batch
    /// (attention mask and per-row position ids, as HF's `generate`), each
    /// row with its own sampler seeded `cfg.seed + row`. Rows that finish
    /// early keep being fed (their output is ignored) until all are done.
    /// Timings are those of the whole batch.
    pub fn generate_batch(
        &mut self,
        prompts: &[Vec<u32>],
        cfg: &GenerationConfig,
    ) -> Result<Vec<GenerationOutput>> {
        self.check_generation(cfg)?;
        let b = prompts.len();
        if b == 0 {
            return Ok(Vec::new());
        }
        let keeps: Vec<usize> = prompts
            .iter()
            .map(|p| self.fit_prompt(p.len(), cfg.max_new_tokens, cfg.truncate))
            .collect::<Result<_>>()?;
        let t = *keeps.iter().max().unwrap_or(&1);
        let mut samplers: Vec<Sampler> = (0..b)
            .map(|r| Sampler::new(cfg.sampling.clone(), cfg.seed.wrapping_add(r as u64)))
            .collect::<Result<_>>()?;
        let mut outs: Vec<GenerationOutput> = prompts
            .iter()
            .zip(&keeps)
            .map(|(p, &k)| GenerationOutput {
                ids: Vec::new(),
                prompt_tokens: k,
                truncated_tokens: p.len() - k,
                finish_reason: FinishReason::Length,
                prefill_ms: 0.0,
                decode_ms: 0.0,
                decode_tokens_per_s: 0.0,
            })
            .collect();
        if cfg.max_new_tokens == 0 {
            return Ok(outs);
        }
        // [B, T] left-padded ids (padding id 0, masked) and mask.
        let mut ids = vec![0u32; b * t];
        let mut mask = vec![0u8; b * t];
        let mut contexts: Vec<Vec<u32>> = Vec::with_capacity(b);
        for (r, (p, &k)) in prompts.iter().zip(&keeps).enumerate() {
            let kept = &p[p.len() - k..];
            ids[r * t + t - k..(r + 1) * t].copy_from_slice(kept);
            mask[r * t + t - k..(r + 1) * t].fill(1);
            contexts.push(kept.to_vec());
        }
        let v = self.config().vocab_size;
        let mut cache = self.new_cache(b, t + cfg.max_new_tokens - 1)?;
        let mut logits = vec![0f32; b * v];
        let start = Instant::now();
        self.forward(&mut cache, &ids, Some(&mask))?;
        let last: Vec<usize> = (0..b).map(|r| r * t + t - 1).collect();
        self.logits(&last, &mut logits)?;
        let prefill_ms = start.elapsed().as_secs_f64() * 1e3;
        let decode_start = Instant::now();
        let mut done = vec![false; b];
        let mut step_ids = vec![0u32; b];
        loop {
            for r in 0..b {
                if done[r] {
                    continue;
                }
                let tok = samplers[r].next_token(&mut logits[r * v..(r + 1) * v], &contexts[r]);
                outs[r].ids.push(tok);
                contexts[r].push(tok);
                step_ids[r] = tok;
                if !cfg.ignore_eos && cfg.eos_token_id == Some(tok) {
                    outs[r].finish_reason = FinishReason::Eos;
                    done[r] = true;
                } else if outs[r].ids.len() == cfg.max_new_tokens {
                    done[r] = true;
                }
            }
            if done.iter().all(|d| *d) {
                break;
            }
            self.forward(&mut cache, &step_ids, None)?;
            let rows: Vec<usize> = (0..b).collect();
            self.logits(&rows, &mut logits)?;
        }
        let decode_ms = decode_start.elapsed().as_secs_f64() * 1e3;
        for o in &mut outs {
            o.prefill_ms = prefill_ms;
            o.decode_ms = decode_ms;
            let decoded = o.ids.len().saturating_sub(1);
            if decoded > 0 && decode_ms > 0.0 {
                o.decode_tokens_per_s = decoded as f64 / (decode_ms / 1e3);
            }
        }
        Ok(outs)
    }
}
