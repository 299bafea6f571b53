//! Running models on evaluation sets: BERT classification and SQuAD, GPT-2
//! LAMBADA and TL;DR summarisation. The scoring itself is in the sibling
//! modules; these functions produce the predictions.
//!
//! Shape legend: B batch, T sequence, V vocabulary, L labels.

use std::ops::ControlFlow;

use lmkit_tokenizers::wordpiece::{Truncation, WordPieceTokenizer};
use lmkit_tokenizers::{BpeTokenizer, Encoding};

use crate::data::classify_data::ClassifyData;
use crate::data::squad::SquadExample;
use crate::data::tagging::TaggedEncoding;
use crate::error::{Error, Result};
use crate::models::bert::qa::{best_answers, QaOptions, QaWindow};
use crate::models::bert::Answer;
use crate::models::bert::{Bert, BertActivations, BertBatch, HeadKind};
use crate::models::gpt2::{GenerationConfig, Gpt2Engine, SamplingParams};

use super::classify::{classify_scores, ClassifyScores};
use super::lambada::{lambada_scores, score_target, LambadaItem, LambadaOutcome, LambadaScores};
use super::rouge::{rouge, rouge_means, Rouge, RougeMeans};
use super::seqeval::{seqeval_scores, SeqevalScores};
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
            let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let lse = max as f64
                + row
                    .iter()
                    .map(|&x| ((x - max) as f64).exp())
                    .sum::<f64>()
                    .ln();
            let g = gold[ci * batch_size.max(1) + r];
            nll += lse - row[g] as f64;
            let best = (0..l).fold(0, |b, k| if row[k] > row[b] { k } else { b });
            preds.push(best);
        }
    }
    Ok(ClassifyEval {
        scores: classify_scores(gold, &preds, l),
        predictions: preds,
        loss: nll / encs.len().max(1) as f64,
    })
}

/// Token-classification predictions and scores.
pub struct TokenClassifyEval {
    /// seqeval scores of the predicted tags on the scored tokens.
    pub scores: SeqevalScores,
    /// Per sentence, the predicted tag of each scored token (the first
    /// piece of each word that fits `max_seq_len`).
    pub predictions: Vec<Vec<String>>,
    /// Mean cross-entropy over all scored tokens.
    pub loss: f64,
}

/// Tags `encs` (each with its labels, −100 = not scored) in batches of
/// `batch_size` and scores them as HF run_ner does: argmax per scored
/// token, the model's `id2label` names, seqeval on the sentences.
pub fn eval_token_classify(
    model: &Bert,
    pad_id: u32,
    encs: &[TaggedEncoding],
    batch_size: usize,
) -> Result<TokenClassifyEval> {
    model.require(HeadKind::TokenClassifier)?;
    let names = &model.config.id2label;
    let l = names.len();
    let (mut gold, mut preds) = (Vec::new(), Vec::new());
    let (mut nll, mut count) = (0.0f64, 0usize);
    let mut acts = BertActivations::new(false);
    for chunk in encs.chunks(batch_size.max(1)) {
        let refs: Vec<&Encoding> = chunk.iter().map(|e| &e.encoding).collect();
        let batch = BertBatch::from_encodings(&refs, pad_id)?;
        model.forward(&batch, &mut acts)?;
        let logits = model.token_logits(&acts)?;
        for (r, e) in chunk.iter().enumerate() {
            let (mut g, mut p) = (Vec::new(), Vec::new());
            for (i, &lab) in e.labels.iter().enumerate() {
                let Ok(lab) = usize::try_from(lab) else {
                    continue;
                };
                let name = names.get(lab).ok_or_else(|| {
                    Error::InvalidInput(format!("label {lab} is outside the model's {l} labels"))
                })?;
                let row = &logits[(r * batch.t + i) * l..(r * batch.t + i + 1) * l];
                let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let lse = max as f64
                    + row
                        .iter()
                        .map(|&x| ((x - max) as f64).exp())
                        .sum::<f64>()
                        .ln();
                nll += lse - row[lab] as f64;
                count += 1;
                let best = (0..l).fold(0, |b, k| if row[k] > row[b] { k } else { b });
                g.push(name.clone());
                p.push(names[best].clone());
            }
            gold.push(g);
            preds.push(p);
        }
    }
    let scores = seqeval_scores(&gold, &preds)
        .ok_or_else(|| Error::InvalidInput("gold and predicted tags differ in length".into()))?;
    Ok(TokenClassifyEval {
        scores,
        predictions: preds,
        loss: nll / count.max(1) as f64,
    })
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
