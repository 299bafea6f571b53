//! Continuous batching: many text generations advancing together, one
//! token each per step, joining and leaving between steps — what a server
//! needs when completions arrive at any time.
//!
//! Shape legend: S sequences in the batch, V vocabulary.
//!
//! Every sequence has its own one-row KV cache (sized to its prompt plus
//! its `max_new_tokens`), sampler, seed and stop strings. A step runs
//! [`Gpt2Engine::forward_many`] over all of them: the prompt of a sequence
//! that just joined (its prefill) and the last token of the others, so
//! the weights are read once per step for S sequences instead of S times.
//! Each sequence produces what [`Gpt2Engine::complete`] produces for it
//! alone (the same sampler, seed, EOS and stop handling), up to the
//! rounding of matrix products over more rows.

use std::time::Instant;

use lmkit_tokenizers::BpeTokenizer;

use crate::error::{Error, Result};
use crate::models::gpt2::engine::Gpt2Engine;
use crate::models::gpt2::generate::{FinishReason, GenerationConfig, GenerationOutput};
use crate::models::gpt2::prefix_cache::{PrefixCache, PrefixCacheStats};
use crate::models::gpt2::sampling::{token_logprob, Sampler, TokenLogprob};
use crate::models::gpt2::stream::TextStreamer;
use crate::models::gpt2::text::TextCompletion;
use crate::models::gpt2::KvCache;

/// One generation to run in a [`ContinuousBatch`].
#[derive(Debug, Clone)]
pub struct SequenceRequest {
    pub prompt: Vec<u32>,
    pub cfg: GenerationConfig,
    /// The text ends before the first of these.
    pub stops: Vec<String>,
    /// Report each new token's log-probability and its `k` most likely
    /// alternatives (OpenAI's `logprobs: k`).
    pub logprobs: Option<usize>,
    /// Also report the prompt's tokens' log-probabilities (OpenAI's `echo`
    /// with `logprobs`); the first prompt token has none.
    pub prompt_logprobs: bool,
}

/// Which sequence an event is about (from [`ContinuousBatch::add`]).
pub type SeqId = u64;

/// What a step produced for one sequence.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchEvent {
    /// The prompt's log-probabilities (`prompt_logprobs`), before its first token.
    Prompt {
        seq: SeqId,
        /// One per prompt token fed (after any truncation); `None` for the first.
        logprobs: Vec<Option<TokenLogprob>>,
    },
    /// A new token, with the text now ready to show (possibly empty: held
    /// back as an incomplete character or a possible stop string).
    Token {
        seq: SeqId,
        id: u32,
        text: String,
        /// With `logprobs`: under the model's distribution (before penalties
        /// and temperature).
        logprob: Option<TokenLogprob>,
    },
    /// The sequence is finished and has left the batch. Its last `Token`
    /// event came in the same step.
    Done {
        seq: SeqId,
        completion: TextCompletion,
    },
}

struct Sequence {
    id: SeqId,
    req: SequenceRequest,
    /// The prompt as fed (after truncation).
    kept: usize,
    cache: KvCache,
    sampler: Sampler,
    /// Prompt and generated ids.
    context: Vec<u32>,
    streamer: TextStreamer,
    out: GenerationOutput,
    /// Prompt positions restored from the prefix cache (not fed).
    reused: usize,
    /// `[reused, C]`: their final hidden states, for `prompt_logprobs`.
    reused_hidden: Vec<f32>,
    /// Prefilled (then each step feeds the last token).
    started: bool,
    first_token: Option<Instant>,
}

/// Generations advancing together; see the module docs.
#[derive(Default)]
pub struct ContinuousBatch {
    seqs: Vec<Sequence>,
    next_id: SeqId,
    /// `[S, V]`: each sequence's logits of the step.
    logits: Vec<f32>,
    /// `[V]`: a row before sampling changed it (for logprobs).
    raw: Vec<f32>,
    /// Keys and values of earlier prompts (see [`PrefixCache`]).
    prefix: Option<PrefixCache>,
}

/// Prompt rows whose logits are computed at once for `prompt_logprobs`.
const PROMPT_ROWS: usize = 64;

impl ContinuousBatch {
    pub fn new() -> Self {
        Self::default()
    }

    /// A batch whose prompts reuse the keys and values of earlier prompts'
    /// common prefixes, kept in `cache`: each sequence still gets exactly
    /// what it gets without it (see [`PrefixCache`]).
    pub fn with_prefix_cache(cache: PrefixCache) -> Self {
        ContinuousBatch {
            prefix: Some(cache),
            ..Self::default()
        }
    }

    /// The prefix cache's counters, if the batch has one.
    pub fn prefix_cache_stats(&self) -> Option<PrefixCacheStats> {
        self.prefix.as_ref().map(PrefixCache::stats)
    }

    /// Sequences in the batch.
    pub fn len(&self) -> usize {
        self.seqs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }

    /// Adds a generation; it is prefilled in the next [`Self::step`]. Checks
    /// it as [`Gpt2Engine::generate`] does (prompt, context, EOS, sampling
    /// settings) and allocates its cache.
    pub fn add(&mut self, engine: &Gpt2Engine, req: SequenceRequest) -> Result<SeqId> {
        let cfg = &req.cfg;
        engine.check_generation(cfg)?;
        if cfg.max_new_tokens == 0 {
            return Err(Error::InvalidInput(
                "max_new_tokens is 0: there is nothing to generate".into(),
            ));
        }
        let vocab = engine.config().vocab_size;
        if let Some(&id) = req.prompt.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::TokenIdOutOfRange { id, vocab });
        }
        if req.logprobs.is_some_and(|k| k > vocab) {
            return Err(Error::InvalidInput(format!(
                "logprobs asks for more alternatives than the {vocab} tokens of the vocabulary"
            )));
        }
        let kept = engine.fit_prompt(req.prompt.len(), cfg.max_new_tokens, cfg.truncate)?;
        let sampler = Sampler::new(cfg.sampling.clone(), cfg.seed)?;
        let mut cache = engine.new_cache(1, kept + cfg.max_new_tokens - 1)?;
        let truncated = req.prompt.len() - kept;
        let hit = match &mut self.prefix {
            Some(p) => {
                let min_feed = engine.min_exact_rows();
                let prompt = &req.prompt[truncated..];
                p.restore(prompt, min_feed, &mut cache, req.prompt_logprobs)
            }
            None => Default::default(),
        };
        let id = self.next_id;
        self.next_id += 1;
        self.seqs.push(Sequence {
            id,
            kept,
            cache,
            sampler,
            context: req.prompt[truncated..].to_vec(),
            streamer: TextStreamer::new(&req.stops),
            out: GenerationOutput {
                ids: Vec::with_capacity(cfg.max_new_tokens),
                prompt_tokens: kept,
                truncated_tokens: truncated,
                finish_reason: FinishReason::Length,
                prefill_ms: 0.0,
                decode_ms: 0.0,
                decode_tokens_per_s: 0.0,
            },
            reused: hit.tokens,
            reused_hidden: hit.hidden,
            started: false,
            first_token: None,
            req,
        });
        Ok(id)
    }

    /// Drops a sequence (its client went away); false if it is not here.
    pub fn cancel(&mut self, seq: SeqId) -> bool {
        let before = self.seqs.len();
        self.seqs.retain(|s| s.id != seq);
        self.seqs.len() != before
    }

    /// One step: every sequence gets one new token (a sequence that just
    /// joined is prefilled first). Finished sequences leave the batch. An
    /// error (none is expected once [`Self::add`] accepted a sequence)
    /// leaves the batch unchanged.
    pub fn step(
        &mut self,
        engine: &mut Gpt2Engine,
        tokenizer: &BpeTokenizer,
    ) -> Result<Vec<BatchEvent>> {
        if self.seqs.is_empty() {
            return Ok(Vec::new());
        }
        let v = engine.config().vocab_size;
        let start = Instant::now();
        let mut events = Vec::new();
        // Rows of each sequence in the step: [first, last].
        let mut spans = Vec::with_capacity(self.seqs.len());
        {
            let mut caches: Vec<&mut KvCache> = Vec::with_capacity(self.seqs.len());
            let mut feeds: Vec<&[u32]> = Vec::with_capacity(self.seqs.len());
            let mut at = 0;
            for s in &mut self.seqs {
                let feed = if s.started {
                    &s.context[s.context.len() - 1..]
                } else {
                    &s.context[s.reused..s.kept]
                };
                spans.push((at, at + feed.len() - 1));
                at += feed.len();
                feeds.push(feed);
                caches.push(&mut s.cache);
            }
            engine.forward_many(&mut caches, &feeds)?;
        }
        // Prompt log-probabilities of the sequences just prefilled. Position
        // p predicts token p + 1; positions restored from the prefix cache
        // take their hidden states from it, the others are rows of the
        // step, in the same chunks either way (so the same logits).
        let c = engine.config().n_embd;
        for (s, &(first, _)) in self.seqs.iter().zip(&spans) {
            if s.started || !s.req.prompt_logprobs {
                continue;
            }
            let k = s.req.logprobs.unwrap_or(0);
            let mut lps = vec![None];
            let (mut chunk, mut hidden) = (Vec::new(), Vec::new());
            for p0 in (0..s.kept - 1).step_by(PROMPT_ROWS) {
                let p1 = (p0 + PROMPT_ROWS).min(s.kept - 1);
                hidden.clear();
                for p in p0..p1 {
                    let row = if p < s.reused {
                        &s.reused_hidden[p * c..(p + 1) * c]
                    } else {
                        let r = first + p - s.reused;
                        &engine.hidden()[r * c..(r + 1) * c]
                    };
                    hidden.extend_from_slice(row);
                }
                chunk.resize((p1 - p0) * v, 0.0);
                engine.logits_of_hidden(&hidden, &mut chunk)?;
                for (i, row) in chunk.chunks_exact(v).enumerate() {
                    lps.push(Some(token_logprob(row, s.context[p0 + i + 1], k)));
                }
            }
            events.push(BatchEvent::Prompt {
                seq: s.id,
                logprobs: lps,
            });
        }
        // Prompts just prefilled join the prefix cache.
        if let Some(pool) = &mut self.prefix {
            let hidden = engine.hidden();
            for (s, &(first, _)) in self.seqs.iter().zip(&spans) {
                if !s.started {
                    let row = |p: usize| &hidden[(first + p - s.reused) * c..][..c];
                    pool.insert(&s.context[..s.kept], s.reused, &s.cache, row);
                }
            }
        }
        let rows: Vec<usize> = spans.iter().map(|&(_, last)| last).collect();
        self.logits.resize(rows.len() * v, 0.0);
        engine.logits(&rows, &mut self.logits)?;
        let now = Instant::now();
        let mut finished = Vec::new();
        for (i, s) in self.seqs.iter_mut().enumerate() {
            let row = &mut self.logits[i * v..(i + 1) * v];
            let keep_raw = s.req.logprobs.is_some();
            if keep_raw {
                self.raw.clear();
                self.raw.extend_from_slice(row);
            }
            let next = s.sampler.next_token(row, &s.context);
            let logprob = s.req.logprobs.map(|k| token_logprob(&self.raw, next, k));
            if !s.started {
                s.started = true;
                s.reused_hidden = Vec::new();
                s.first_token = Some(now);
                s.out.prefill_ms = (now - start).as_secs_f64() * 1e3;
            }
            s.out.ids.push(next);
            s.context.push(next);
            let cfg = &s.req.cfg;
            let eos = !cfg.ignore_eos && cfg.eos_token_id == Some(next);
            let mut text = if eos {
                String::new() // the end: not text
            } else {
                s.streamer
                    .push(tokenizer.token_bytes(next).unwrap_or_default())
            };
            let done = if eos {
                s.out.finish_reason = FinishReason::Eos;
                true
            } else if s.streamer.stopped() {
                s.out.finish_reason = FinishReason::Stop;
                true
            } else {
                s.out.ids.len() == cfg.max_new_tokens
            };
            if done {
                text.push_str(&s.streamer.finish());
            }
            events.push(BatchEvent::Token {
                seq: s.id,
                id: next,
                text,
                logprob,
            });
            if done {
                finished.push(i);
            }
        }
        let mut left: Vec<Sequence> = Vec::with_capacity(finished.len());
        for &i in finished.iter().rev() {
            left.push(self.seqs.remove(i));
        }
        for mut s in left.into_iter().rev() {
            let first = s.first_token.unwrap_or(now);
            s.out.decode_ms = (now - first).as_secs_f64() * 1e3;
            let decoded = s.out.ids.len().saturating_sub(1);
            if decoded > 0 && s.out.decode_ms > 0.0 {
                s.out.decode_tokens_per_s = decoded as f64 / (s.out.decode_ms / 1e3);
            }
            events.push(BatchEvent::Done {
                seq: s.id,
                completion: TextCompletion {
                    text: s.streamer.text().to_string(),
                    output: s.out,
                },
            });
        }
        Ok(events)
    }
}

impl Gpt2Engine {
    /// Runs every request to completion, at most `batch_size` (at least 1)
    /// at a time in one [`ContinuousBatch`]: a finished sequence's place is
    /// taken by the next request before the following step, so the batch
    /// stays full until the requests run out. `on_done(i, completion)` is
    /// called as request `i` finishes (in finishing order, for progress);
    /// the completions are returned in request order. Each is what
    /// [`Gpt2Engine::complete`] gives that request alone (see the module
    /// docs); a request with `max_new_tokens` 0 is answered as `complete`
    /// answers it, with no tokens. A bad request is an error before any
    /// step that would include it.
    pub fn complete_many(
        &mut self,
        tokenizer: &BpeTokenizer,
        requests: impl IntoIterator<Item = SequenceRequest>,
        batch_size: usize,
        mut on_done: impl FnMut(usize, &TextCompletion),
    ) -> Result<Vec<TextCompletion>> {
        let mut pending = requests.into_iter().enumerate();
        let mut done: Vec<Option<TextCompletion>> = Vec::new();
        let mut batch = ContinuousBatch::new();
        // (sequence, request index) of the sequences in the batch.
        let mut running: Vec<(SeqId, usize)> = Vec::new();
        loop {
            while batch.len() < batch_size.max(1) {
                let Some((i, req)) = pending.next() else {
                    break;
                };
                done.push(None);
                if req.cfg.max_new_tokens == 0 {
                    let c = self.complete(tokenizer, &req.prompt, &req.cfg, &req.stops, |_| {
                        std::ops::ControlFlow::Continue(())
                    })?;
                    on_done(i, &c);
                    done[i] = Some(c);
                    continue;
                }
                running.push((batch.add(self, req)?, i));
            }
            if batch.is_empty() {
                break;
            }
            for ev in batch.step(self, tokenizer)? {
                if let BatchEvent::Done { seq, completion } = ev {
                    let at = running.iter().position(|&(s, _)| s == seq).ok_or_else(|| {
                        Error::InvalidInput(format!("sequence {seq} finished but never joined"))
                    })?;
                    let (_, i) = running.swap_remove(at);
                    on_done(i, &completion);
                    done[i] = Some(completion);
                }
            }
        }
        done.into_iter()
            .enumerate()
            .map(|(i, c)| {
                c.ok_or_else(|| Error::InvalidInput(format!("request {i} never finished")))
            })
            .collect()
    }
}
