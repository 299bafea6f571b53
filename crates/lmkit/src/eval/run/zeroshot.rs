//! The GPT-2 zero-shot evaluations: LAMBADA, CBT, TL;DR summarisation,
//! translation and question answering, each over a [`Gpt2Engine`]
//! (re-exported from [`crate::eval::run`]).

use std::ops::ControlFlow;

use lmkit_tokenizers::BpeTokenizer;

use crate::error::{Error, Result};
use crate::eval::bleu::{corpus_bleu, Bleu};
use crate::eval::cbt::{cbt_scores, CbtItem, CbtOutcome, CbtScores};
use crate::eval::lambada::{
    lambada_scores, score_target, LambadaItem, LambadaOutcome, LambadaScores,
};
use crate::eval::qa::QaItem;
use crate::eval::rouge::{rouge, rouge_means, Rouge, RougeMeans};
use crate::eval::squad::{exact_match, f1_score, max_over_gold, squad_scores, SquadScores};
use crate::eval::summarize::{first_sentences, tldr_prompt, SummarizeItem};
use crate::eval::translate::{translate_prompt, TranslationPair};
use crate::models::gpt2::{GenerationConfig, Gpt2Engine, KvCache, SamplingParams, SequenceRequest};

/// LAMBADA with a GPT-2 engine: per passage, `context + " " + word`
/// through the model and the log-softmax at the word's positions (see
/// [`crate::eval::lambada`] for the rule), `batch_size` passages per
/// [`Gpt2Engine::forward_many`] and logits only at the target rows.
/// Passages longer than the context keep their last `n_positions` tokens.
pub fn eval_lambada(
    engine: &mut Gpt2Engine,
    tok: &BpeTokenizer,
    items: &[LambadaItem],
    batch_size: usize,
    mut progress: impl FnMut(usize, usize),
) -> Result<(LambadaScores, Vec<LambadaOutcome>)> {
    let n_pos = engine.config().n_positions;
    let v = engine.config().vocab_size;
    let mut outcomes = Vec::with_capacity(items.len());
    for chunk in items.chunks(batch_size.max(1)) {
        // (passage ids after truncation, target ids)
        let mut seqs: Vec<(Vec<u32>, Vec<u32>)> = Vec::with_capacity(chunk.len());
        for it in chunk {
            let ctx = tok.encode_ordinary(it.context.as_bytes());
            let target = tok.encode_ordinary(it.target().as_bytes());
            if ctx.is_empty() || target.is_empty() {
                return Err(Error::InvalidInput(format!(
                    "line {}: the context or the target word encodes to no tokens",
                    it.line
                )));
            }
            if target.len() >= n_pos {
                return Err(Error::InvalidInput(format!(
                    "line {}: the target word alone fills the model's context",
                    it.line
                )));
            }
            let mut ids = ctx;
            ids.extend_from_slice(&target);
            let drop = ids.len().saturating_sub(n_pos);
            seqs.push((ids.split_off(drop), target));
        }
        let mut caches: Vec<KvCache> = seqs
            .iter()
            .map(|(ids, _)| engine.new_cache(1, ids.len()))
            .collect::<Result<_>>()?;
        let mut cache_refs: Vec<&mut KvCache> = caches.iter_mut().collect();
        let id_refs: Vec<&[u32]> = seqs.iter().map(|(ids, _)| ids.as_slice()).collect();
        engine.forward_many(&mut cache_refs, &id_refs)?;
        // Row p of a passage predicts its token p+1: the target's tokens
        // start at ids.len() - |target| >= 1.
        let mut rows = Vec::new();
        let mut at = 0;
        for (ids, target) in &seqs {
            let first = ids.len() - target.len();
            rows.extend(at + first - 1..at + ids.len() - 1);
            at += ids.len();
        }
        let mut logits = vec![0f32; rows.len() * v];
        engine.logits(&rows, &mut logits)?;
        let mut off = 0;
        for (_, target) in &seqs {
            let lp: Vec<Vec<f32>> = logits[off * v..(off + target.len()) * v]
                .chunks_exact(v)
                .map(log_softmax)
                .collect();
            off += target.len();
            let refs: Vec<&[f32]> = lp.iter().map(Vec::as_slice).collect();
            outcomes.push(score_target(&refs, target));
            progress(outcomes.len(), items.len());
        }
    }
    Ok((lambada_scores(&outcomes), outcomes))
}

/// `log softmax(row)[t]`, the normaliser summed in f64.
fn token_logprob(row: &[f32], t: u32) -> f64 {
    let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let lse = max as f64
        + row
            .iter()
            .map(|&x| ((x - max) as f64).exp())
            .sum::<f64>()
            .ln();
    row[t as usize] as f64 - lse
}

/// The Children's Book Test with a GPT-2 engine (rule in [`crate::eval::cbt`]),
/// batched over a question's candidates: the context goes through the
/// model once into a KV cache; each candidate's filled-in query continues
/// a copy of it, all candidates in one [`Gpt2Engine::forward_many`]. A
/// context too long for the model keeps its last `n_positions − longest
/// query` tokens (the same for every candidate).
pub fn eval_cbt(
    engine: &mut Gpt2Engine,
    tok: &BpeTokenizer,
    items: &[CbtItem],
    mut progress: impl FnMut(usize, usize),
) -> Result<(CbtScores, Vec<CbtOutcome>)> {
    let n_pos = engine.config().n_positions;
    let v = engine.config().vocab_size;
    let mut outcomes = Vec::with_capacity(items.len());
    for (k, it) in items.iter().enumerate() {
        let ctx = tok.encode_ordinary(it.context_text().as_bytes());
        let queries: Vec<Vec<u32>> = it
            .candidates
            .iter()
            .map(|c| tok.encode_ordinary(it.filled_query(c).as_bytes()))
            .collect();
        let longest = queries.iter().map(Vec::len).max().unwrap_or(0);
        if ctx.is_empty() || queries.iter().any(Vec::is_empty) {
            return Err(Error::InvalidInput(format!(
                "line {}: the context or a filled-in query encodes to no tokens",
                it.line
            )));
        }
        if longest >= n_pos {
            return Err(Error::InvalidInput(format!(
                "line {}: a filled-in query of {longest} tokens leaves no room for context \
                 in the model's {n_pos} positions",
                it.line
            )));
        }
        let keep = ctx.len().min(n_pos - longest);
        let dropped = ctx.len() - keep;
        let mut cache = engine.new_cache(1, keep + longest)?;
        engine.forward(&mut cache, &ctx[dropped..], None)?;
        // The context's last row predicts every query's first token.
        let mut first = vec![0f32; v];
        engine.logits(&[keep - 1], &mut first)?;
        let mut caches: Vec<KvCache> = vec![cache; queries.len()];
        let mut cache_refs: Vec<&mut KvCache> = caches.iter_mut().collect();
        let query_refs: Vec<&[u32]> = queries.iter().map(Vec::as_slice).collect();
        engine.forward_many(&mut cache_refs, &query_refs)?;
        // Query i's rows but its last predict its tokens 1.. .
        let mut rows = Vec::new();
        let mut at = 0;
        for q in &queries {
            rows.extend(at..at + q.len() - 1);
            at += q.len();
        }
        let mut logits = vec![0f32; rows.len() * v];
        engine.logits(&rows, &mut logits)?;
        let mut row = logits.chunks_exact(v);
        let scores: Vec<f64> = queries
            .iter()
            .map(|q| {
                let mut lp = token_logprob(&first, q[0]);
                for &t in &q[1..] {
                    lp += row.next().map_or(0.0, |r| token_logprob(r, t));
                }
                lp
            })
            .collect();
        outcomes.push(CbtOutcome::new(scores, it.answer_index(), dropped));
        progress(k + 1, items.len());
    }
    Ok((cbt_scores(&outcomes), outcomes))
}

fn log_softmax(row: &[f32]) -> Vec<f32> {
    let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let lse = max as f64
        + row
            .iter()
            .map(|&x| ((x - max) as f64).exp())
            .sum::<f64>()
            .ln();
    row.iter().map(|&x| (x as f64 - lse) as f32).collect()
}

/// How summaries are decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct SummarizeOptions {
    /// Tokens generated after "TL;DR:" (the paper: 100).
    pub max_new_tokens: usize,
    /// Top-k sampling with this k (the paper: 2); 0 = greedy.
    pub top_k: usize,
    pub seed: u64,
    /// Sentences kept from the continuation (the paper: 3).
    pub sentences: usize,
    /// Articles decoded together ([`Gpt2Engine::complete_many`]); the
    /// summaries do not depend on it.
    pub batch_size: usize,
}

impl Default for SummarizeOptions {
    fn default() -> Self {
        SummarizeOptions {
            max_new_tokens: 100,
            top_k: 2,
            seed: 0,
            sentences: 3,
            batch_size: GPT2_EVAL_BATCH,
        }
    }
}

/// Default sequences per batch of the GPT-2 evaluations: passages per
/// forward pass of LAMBADA, sequences decoding together for TL;DR,
/// translation and QA.
pub const GPT2_EVAL_BATCH: usize = 8;

/// Zero-shot TL;DR summaries and their ROUGE against the references,
/// `opts.batch_size` articles decoding together, article `k` sampled with
/// seed `opts.seed + k` (so its summary is the one it gets alone).
/// Articles longer than the context lose their beginning (the prompt keeps
/// room for the generated tokens). `progress(done, total)` as each finishes.
pub fn eval_summarize(
    engine: &mut Gpt2Engine,
    tok: &BpeTokenizer,
    items: &[SummarizeItem],
    opts: &SummarizeOptions,
    mut progress: impl FnMut(usize, usize),
) -> Result<(RougeMeans, Vec<(String, Rouge)>)> {
    let sampling = if opts.top_k == 0 {
        SamplingParams::greedy()
    } else {
        SamplingParams {
            top_k: opts.top_k,
            ..SamplingParams::default()
        }
    };
    let requests = items.iter().enumerate().map(|(k, it)| SequenceRequest {
        prompt: tok.encode_ordinary(tldr_prompt(&it.article).as_bytes()),
        cfg: GenerationConfig {
            max_new_tokens: opts.max_new_tokens,
            sampling: sampling.clone(),
            seed: opts.seed.wrapping_add(k as u64),
            eos_token_id: tok.endoftext_id(),
            truncate: true,
            ..GenerationConfig::default()
        },
        stops: Vec::new(),
        logprobs: None,
        prompt_logprobs: false,
    });
    let mut finished = 0;
    let gens = engine.complete_many(tok, requests, opts.batch_size, |_, _| {
        finished += 1;
        progress(finished, items.len());
    })?;
    let mut out = Vec::with_capacity(items.len());
    for (gen, it) in gens.into_iter().zip(items) {
        // The ids decoded whole (not the streamed text): an incomplete
        // character anywhere becomes U+FFFD as in `decode`.
        let ids: Vec<u32> = gen
            .output
            .ids
            .into_iter()
            .filter(|&id| Some(id) != tok.endoftext_id())
            .collect();
        let text = String::from_utf8_lossy(&tok.decode(&ids)?).into_owned();
        let summary = first_sentences(&text, opts.sentences);
        let score = rouge(&summary, &it.summary);
        out.push((summary, score));
    }
    let scores: Vec<Rouge> = out.iter().map(|(_, r)| *r).collect();
    Ok((rouge_means(&scores), out))
}

/// Greedy decoding of `prompt` up to the first newline (or end of text, or
/// `max_new_tokens`): the answer format of the zero-shot translation and QA
/// prompts. A prompt too long for the context loses its beginning (room is
/// kept for the new tokens).
fn line_request(tok: &BpeTokenizer, prompt: &str, max_new_tokens: usize) -> SequenceRequest {
    SequenceRequest {
        prompt: tok.encode_ordinary(prompt.as_bytes()),
        cfg: GenerationConfig {
            max_new_tokens,
            sampling: SamplingParams::greedy(),
            eos_token_id: tok.endoftext_id(),
            truncate: true,
            ..GenerationConfig::default()
        },
        stops: vec!["\n".to_string()],
        logprobs: None,
        prompt_logprobs: false,
    }
}

/// `line_request` for one prompt alone, its text trimmed: the reference
/// the batched [`greedy_lines`] equals.
pub fn greedy_line(
    engine: &mut Gpt2Engine,
    tok: &BpeTokenizer,
    prompt: &str,
    max_new_tokens: usize,
) -> Result<String> {
    let req = line_request(tok, prompt, max_new_tokens);
    let done = engine.complete(tok, &req.prompt, &req.cfg, &req.stops, |_| {
        ControlFlow::Continue(())
    })?;
    Ok(done.text.trim().to_string())
}

/// [`greedy_line`] of every prompt, `batch_size` decoding together
/// ([`Gpt2Engine::complete_many`]: each line is the one its prompt gets
/// alone); `progress(done, total)` as each finishes.
pub fn greedy_lines<'a>(
    engine: &mut Gpt2Engine,
    tok: &BpeTokenizer,
    prompts: impl ExactSizeIterator<Item = &'a str>,
    max_new_tokens: usize,
    batch_size: usize,
    mut progress: impl FnMut(usize, usize),
) -> Result<Vec<String>> {
    let total = prompts.len();
    let requests = prompts.map(|p| line_request(tok, p, max_new_tokens));
    let mut finished = 0;
    let done = engine.complete_many(tok, requests, batch_size, |_, _| {
        finished += 1;
        progress(finished, total);
    })?;
    Ok(done
        .into_iter()
        .map(|c| c.text.trim().to_string())
        .collect())
}

/// Zero-shot translations of `pairs[shots..]` with `pairs[..shots]` as the
/// example pairs of every prompt ([`crate::eval::translate`]), `batch_size`
/// decoding together ([`greedy_lines`]), and their corpus BLEU against the
/// targets. Returns the BLEU and the hypotheses.
pub fn eval_translate(
    engine: &mut Gpt2Engine,
    tok: &BpeTokenizer,
    pairs: &[TranslationPair],
    shots: usize,
    max_new_tokens: usize,
    batch_size: usize,
    progress: impl FnMut(usize, usize),
) -> Result<(Bleu, Vec<String>)> {
    if shots >= pairs.len() {
        return Err(Error::InvalidInput(format!(
            "`shots` = {shots} example pairs leave none of the {} pairs to translate",
            pairs.len()
        )));
    }
    let (examples, rest) = pairs.split_at(shots);
    let prompts: Vec<String> = rest
        .iter()
        .map(|p| translate_prompt(examples, &p.source))
        .collect();
    let hyps = greedy_lines(
        engine,
        tok,
        prompts.iter().map(String::as_str),
        max_new_tokens,
        batch_size,
        progress,
    )?;
    let refs: Vec<Vec<&str>> = rest.iter().map(|p| vec![p.target.as_str()]).collect();
    Ok((corpus_bleu(&hyps, &refs), hyps))
}

/// One answered question: the answer and its best EM / F1 (0 or 1, 0..=1).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QaAnswer {
    pub answer: String,
    pub exact_match: f64,
    pub f1: f64,
}

/// Zero-shot answers to every item ([`crate::eval::qa`]), `batch_size`
/// decoding together ([`greedy_lines`]), and their SQuAD EM / F1.
pub fn eval_qa(
    engine: &mut Gpt2Engine,
    tok: &BpeTokenizer,
    items: &[QaItem],
    max_new_tokens: usize,
    batch_size: usize,
    progress: impl FnMut(usize, usize),
) -> Result<(SquadScores, Vec<QaAnswer>)> {
    let prompts = items.iter().map(|it| it.prompt.as_str());
    let answers = greedy_lines(engine, tok, prompts, max_new_tokens, batch_size, progress)?;
    let out: Vec<QaAnswer> = answers
        .into_iter()
        .zip(items)
        .map(|(answer, it)| QaAnswer {
            exact_match: max_over_gold(exact_match, &answer, &it.golds),
            f1: max_over_gold(f1_score, &answer, &it.golds),
            answer,
        })
        .collect();
    let scores = squad_scores(
        out.iter()
            .zip(items)
            .map(|(a, it)| (a.answer.as_str(), it.golds.as_slice())),
    );
    Ok((scores, out))
}
