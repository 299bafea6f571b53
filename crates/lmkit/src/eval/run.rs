//! Running models on evaluation sets: BERT and GPT-2 classification, SQuAD, GPT-2
//! LAMBADA and TL;DR summarisation. The scoring itself is in the sibling
//! modules; these functions produce the predictions.
//!
//! Shape legend: B batch, T sequence, V vocabulary, L labels.

use std::ops::ControlFlow;

use lmkit_tokenizers::wordpiece::{Truncation, WordPieceTokenizer};
use lmkit_tokenizers::{BpeTokenizer, Encoding};

use crate::data::classify_data::ClassifyData;
use crate::data::squad::SquadExample;
use crate::error::{Error, Result};
use crate::models::bert::qa::{best_answers, QaOptions, QaWindow};
use crate::models::bert::Answer;
use crate::models::bert::{Bert, BertActivations, BertBatch, HeadKind};
use crate::models::gpt2::classify::{encode_for_classify, task_batch};
use crate::models::gpt2::{GenerationConfig, Gpt2, Gpt2Engine, SamplingParams};

use super::classify::{classify_scores, ClassifyScores};
use super::lambada::{lambada_scores, score_target, LambadaItem, LambadaOutcome, LambadaScores};
use super::rouge::{rouge, rouge_means, Rouge, RougeMeans};
use super::squad::{squad_scores, SquadScores};
use super::summarize::{first_sentences, tldr_prompt, SummarizeItem};

/// Encodes classification examples as the fine-tuning loop does:
/// `[CLS] text [SEP] (pair [SEP])`, truncated longest-first to `max_len`.
pub fn encode_classify(
    tok: &WordPieceTokenizer,
    data: &ClassifyData,
    max_len: usize,
) -> Result<Vec<Encoding>> {
    let mut tok = tok.clone();
    tok.set_padding(None);
    tok.set_truncation(Some(Truncation::new(max_len)));
    data.examples
        .iter()
        .map(|e| match &e.text_pair {
            Some(p) => tok.encode_pair(&e.text, p, true),
            None => tok.encode(&e.text, true),
        })
        .map(|r| r.map_err(Error::from))
        .collect()
}

/// Predicted class per example and mean cross-entropy against `gold`.
pub struct ClassifyEval {
    pub scores: ClassifyScores,
    pub predictions: Vec<usize>,
    pub loss: f64,
}

/// Classifies `encs` in batches of `batch_size` (padded per batch) and
/// scores the argmax against `gold` ids.
pub fn eval_classify(
    model: &Bert,
    pad_id: u32,
    encs: &[Encoding],
    gold: &[usize],
    batch_size: usize,
) -> Result<ClassifyEval> {
    model.require(HeadKind::Classifier)?;
    let l = model.config.num_labels();
    let mut preds = Vec::with_capacity(encs.len());
    let mut nll = 0.0f64;
    let mut acts = BertActivations::new(false);
    for (ci, chunk) in encs.chunks(batch_size.max(1)).enumerate() {
        let refs: Vec<&Encoding> = chunk.iter().collect();
        let batch = BertBatch::from_encodings(&refs, pad_id)?;
        model.forward(&batch, &mut acts)?;
        let logits = model.classifier_logits(&model.pooled(&acts)?)?;
        for (r, row) in logits.chunks_exact(l).enumerate() {
            let g = gold[ci * batch_size.max(1) + r];
            nll += score_row(row, g, &mut preds);
        }
    }
    Ok(ClassifyEval {
        scores: classify_scores(gold, &preds, l),
        predictions: preds,
        loss: nll / encs.len().max(1) as f64,
    })
}

/// Pushes the argmax of one row of logits; returns its NLL of class `gold`.
fn score_row(row: &[f32], gold: usize, preds: &mut Vec<usize>) -> f64 {
    let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let lse = max as f64
        + row
            .iter()
            .map(|&x| ((x - max) as f64).exp())
            .sum::<f64>()
            .ln();
    preds.push((0..row.len()).fold(0, |b, k| if row[k] > row[b] { k } else { b }));
    lse - row[gold] as f64
}

/// Encodes classification examples for GPT-2 as its fine-tuning does
/// ([`encode_for_classify`]: `text`, or `text <|endoftext|> pair`), cut to
/// the first `max_len` tokens.
pub fn encode_gpt2_classify(
    tok: &BpeTokenizer,
    data: &ClassifyData,
    max_len: usize,
    delimiter: u32,
) -> Vec<Vec<u32>> {
    data.examples
        .iter()
        .map(|e| {
            let mut ids = encode_for_classify(tok, delimiter, &e.text, e.text_pair.as_deref());
            ids.truncate(max_len);
            ids
        })
        .collect()
}

/// [`eval_classify`] for a GPT-2 sequence classifier: `rows` are encoded
/// inputs ([`encode_gpt2_classify`]), padded per batch with the config's
/// `pad_token_id`; the loss is the classification loss alone.
pub fn eval_gpt2_classify(
    model: &mut Gpt2,
    rows: &[Vec<u32>],
    gold: &[usize],
    batch_size: usize,
) -> Result<ClassifyEval> {
    let logits = gpt2_classify_logits(model, rows, batch_size)?;
    let l = model.config.num_labels();
    let mut preds = Vec::with_capacity(rows.len());
    let mut nll = 0.0f64;
    for (row, &g) in logits.chunks_exact(l).zip(gold) {
        nll += score_row(row, g, &mut preds);
    }
    Ok(ClassifyEval {
        scores: classify_scores(gold, &preds, l),
        predictions: preds,
        loss: nll / rows.len().max(1) as f64,
    })
}

/// Class logits [rows, L] of a GPT-2 sequence classifier, `batch_size` rows at a time.
pub fn gpt2_classify_logits(
    model: &mut Gpt2,
    rows: &[Vec<u32>],
    batch_size: usize,
) -> Result<Vec<f32>> {
    let pad = model.config.pad_token_id.ok_or_else(|| {
        Error::InvalidInput("the GPT-2 classifier's config has no pad_token_id".into())
    })?;
    let mut out = Vec::with_capacity(rows.len() * model.config.num_labels());
    for chunk in rows.chunks(batch_size.max(1)) {
        let refs: Vec<&[u32]> = chunk.iter().map(Vec::as_slice).collect();
        let batch = task_batch(&refs, pad, vec![0; chunk.len()], 1);
        out.extend(model.forward_task(&batch, 0.0)?.logits);
    }
    Ok(out)
}

/// SQuAD predictions (best first, at most `opts.top_k` per question) and scores.
pub struct SquadEval {
    pub scores: SquadScores,
    /// `(question id, n-best answers)` in input order.
    pub predictions: Vec<(String, Vec<Answer>)>,
}

/// Answers every question with `max_len`-token windows overlapping by
/// `stride`, picking spans with the `tasks::qa` selection (softmax per
/// window, spans of at most `opts.max_answer_len` tokens, widened to whole
/// words), and scores the best one with SQuAD EM/F1.
pub fn eval_squad(
    model: &Bert,
    tok: &WordPieceTokenizer,
    examples: &[SquadExample],
    max_len: usize,
    stride: usize,
    opts: QaOptions,
    batch_size: usize,
) -> Result<SquadEval> {
    model.require(HeadKind::QuestionAnswering)?;
    let max_len = max_len.min(model.config.max_position_embeddings);
    let mut tok = tok.clone();
    tok.set_padding(None);
    tok.set_truncation(None);
    // Every window of every question, with its owner.
    let mut encs: Vec<Encoding> = Vec::new();
    let mut owner: Vec<usize> = Vec::new();
    for (qi, ex) in examples.iter().enumerate() {
        let wins = tok
            .encode_pair_windows(&ex.question, &ex.context, max_len, stride)
            .map_err(|e| {
                Error::InvalidInput(format!(
                    "{}: {e} (windows of `max_seq_len` {max_len} tokens overlapping by `doc_stride` {stride})",
                    ex.entry
                ))
            })?;
        for w in wins {
            encs.push(w.encoding);
            owner.push(qi);
        }
    }
    let mut logits: Vec<(Vec<f32>, Vec<f32>)> = Vec::with_capacity(encs.len());
    let mut acts = BertActivations::new(false);
    for chunk in encs.chunks(batch_size.max(1)) {
        let refs: Vec<&Encoding> = chunk.iter().collect();
        let batch = BertBatch::from_encodings(&refs, tok.pad_id())?;
        model.forward(&batch, &mut acts)?;
        let (s, e) = model.qa_logits(&acts)?;
        for (r, enc) in chunk.iter().enumerate() {
            let rg = r * batch.t..r * batch.t + enc.len();
            logits.push((s[rg.clone()].to_vec(), e[rg].to_vec()));
        }
    }
    let cont = |id: u32| tok.id_to_token(id).is_some_and(|t| t.starts_with("##"));
    let mut predictions = Vec::with_capacity(examples.len());
    let mut w = 0;
    for (qi, ex) in examples.iter().enumerate() {
        let start = w;
        while w < owner.len() && owner[w] == qi {
            w += 1;
        }
        let wins: Vec<QaWindow> = (start..w)
            .map(|k| QaWindow {
                encoding: &encs[k],
                start_logits: &logits[k].0,
                end_logits: &logits[k].1,
            })
            .collect();
        predictions.push((ex.id.clone(), best_answers(&wins, &ex.context, &cont, opts)));
    }
    let golds: Vec<Vec<String>> = examples.iter().map(SquadExample::answer_texts).collect();
    let scores = squad_scores(
        predictions
            .iter()
            .zip(&golds)
            .map(|((_, a), g)| (a.first().map_or("", |x| x.answer.as_str()), g.as_slice())),
    );
    Ok(SquadEval {
        scores,
        predictions,
    })
}

/// LAMBADA with a GPT-2 engine: per passage, one forward over
/// `context + " " + word` and the log-softmax at the word's positions
/// (see [`super::lambada`] for the rule). Passages longer than the context
/// keep their last `n_positions` tokens.
pub fn eval_lambada(
    engine: &mut Gpt2Engine,
    tok: &BpeTokenizer,
    items: &[LambadaItem],
    mut progress: impl FnMut(usize, usize),
) -> Result<(LambadaScores, Vec<LambadaOutcome>)> {
    let n_pos = engine.config().n_positions;
    let v = engine.config().vocab_size;
    let mut outcomes = Vec::with_capacity(items.len());
    for (k, it) in items.iter().enumerate() {
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
        let ids = &ids[drop..];
        let logits = engine.forward_all_logits(ids, 1, None)?;
        // Row p predicts token p+1: the target's tokens start at ids.len() - |target|.
        let first = ids.len() - target.len();
        let rows: Vec<Vec<f32>> = (first..ids.len())
            .map(|p| log_softmax(&logits[(p - 1) * v..p * v]))
            .collect();
        let refs: Vec<&[f32]> = rows.iter().map(Vec::as_slice).collect();
        outcomes.push(score_target(&refs, &target));
        progress(k + 1, items.len());
    }
    Ok((lambada_scores(&outcomes), outcomes))
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
}

impl Default for SummarizeOptions {
    fn default() -> Self {
        SummarizeOptions {
            max_new_tokens: 100,
            top_k: 2,
            seed: 0,
            sentences: 3,
        }
    }
}

/// Zero-shot TL;DR summaries and their ROUGE against the references.
/// Articles longer than the context lose their beginning (the prompt keeps
/// room for the generated tokens).
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
    let mut out = Vec::with_capacity(items.len());
    for (k, it) in items.iter().enumerate() {
        let prompt = tok.encode_ordinary(tldr_prompt(&it.article).as_bytes());
        let cfg = GenerationConfig {
            max_new_tokens: opts.max_new_tokens,
            sampling: sampling.clone(),
            seed: opts.seed.wrapping_add(k as u64),
            eos_token_id: tok.endoftext_id(),
            truncate: true,
            ..GenerationConfig::default()
        };
        let gen = engine.generate(&prompt, &cfg, |_| ControlFlow::Continue(()))?;
        let ids: Vec<u32> = gen
            .ids
            .into_iter()
            .filter(|&id| Some(id) != tok.endoftext_id())
            .collect();
        let text = String::from_utf8_lossy(&tok.decode(&ids)?).into_owned();
        let summary = first_sentences(&text, opts.sentences);
        let score = rouge(&summary, &it.summary);
        out.push((summary, score));
        progress(k + 1, items.len());
    }
    let scores: Vec<Rouge> = out.iter().map(|(_, r)| *r).collect();
    Ok((rouge_means(&scores), out))
}
