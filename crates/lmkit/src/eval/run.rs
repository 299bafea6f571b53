//! Running models on evaluation sets: BERT and GPT-2 classification, BERT
//! regression, SQuAD,
//! GPT-2 LAMBADA, CBT, TL;DR summarisation, translation and question
//! answering. The scoring itself is in the sibling
//! modules; these functions produce the predictions. The GPT-2 zero-shot
//! loops (LAMBADA, CBT, TL;DR, translation, QA) live in `zeroshot` and are
//! re-exported here.
//!
//! Shape legend: B batch, T sequence, V vocabulary, L labels.

mod zeroshot;

pub use zeroshot::{
    eval_cbt, eval_lambada, eval_qa, eval_summarize, eval_translate, greedy_line, greedy_lines,
    QaAnswer, SummarizeOptions, GPT2_EVAL_BATCH,
};

use lmkit_tokenizers::wordpiece::{Truncation, WordPieceTokenizer};
use lmkit_tokenizers::{BpeTokenizer, Encoding};

use crate::data::classify_data::ClassifyData;
use crate::data::multiple_choice::ChoiceData;
use crate::data::squad::SquadExample;
use crate::data::tagging::TaggedEncoding;
use crate::error::{Error, Result};
use crate::models::bert::qa::{best_answers, QaOptions, QaWindow};
use crate::models::bert::Answer;
use crate::models::bert::{Bert, BertActivations, BertBatch, HeadKind};
use crate::models::gpt2::classify::{encode_choice, encode_for_classify, task_batch};
use crate::models::gpt2::Gpt2;

use super::classify::{accuracy, classify_scores, ClassifyScores};
use super::regression::{regression_scores, RegressionScores};
use super::seqeval::{seqeval_scores, SeqevalScores};
use super::squad::{squad_scores, SquadScores};

/// Encodes classification (or regression) examples as the fine-tuning loop
/// does: `[CLS] text [SEP] (pair [SEP])`, truncated longest-first to `max_len`.
pub fn encode_classify<L>(
    tok: &WordPieceTokenizer,
    data: &ClassifyData<L>,
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
        model.forward_unpadded(&batch, &mut acts)?;
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

/// Predictions of a regression model and their scores.
pub struct RegressionEval {
    /// Pearson, Spearman and the MSE (also `loss`) against the gold scores.
    pub scores: RegressionScores,
    /// `[N]` the model's output per example.
    pub predictions: Vec<f32>,
    /// Mean squared error, HF's `MSELoss` (f64 here).
    pub loss: f64,
}

/// Runs a one-output `BertForSequenceClassification` (`problem_type`
/// regression) over `encs` in batches of `batch_size` and scores its outputs
/// against `gold` as HF run_glue scores STS-B (Pearson, Spearman) with the
/// MSE loss.
pub fn eval_regression(
    model: &Bert,
    pad_id: u32,
    encs: &[Encoding],
    gold: &[f32],
    batch_size: usize,
) -> Result<RegressionEval> {
    model.require(HeadKind::Classifier)?;
    if model.config.num_labels() != 1 {
        return Err(Error::InvalidInput(format!(
            "regression scoring needs a model with one output, this one has {} labels",
            model.config.num_labels()
        )));
    }
    if encs.len() != gold.len() {
        return Err(Error::InvalidInput(format!(
            "{} inputs but {} gold scores",
            encs.len(),
            gold.len()
        )));
    }
    let mut preds = Vec::with_capacity(encs.len());
    let mut acts = BertActivations::new(false);
    for chunk in encs.chunks(batch_size.max(1)) {
        let refs: Vec<&Encoding> = chunk.iter().collect();
        let batch = BertBatch::from_encodings(&refs, pad_id)?;
        model.forward_unpadded(&batch, &mut acts)?;
        preds.extend(model.classifier_logits(&model.pooled(&acts)?)?);
    }
    let scores = regression_scores(gold, &preds);
    Ok(RegressionEval {
        loss: scores.mse,
        scores,
        predictions: preds,
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

/// Encodes multiple-choice examples for BERT as HF run_swag does: each
/// choice the pair `[CLS] A [SEP] B [SEP]` of [`ChoiceExample::bert_pair`]
/// (context; question + choice), truncated longest-first to `max_len`.
/// `[E·K]`: the K choices of each example in order.
///
/// [`ChoiceExample::bert_pair`]: crate::data::multiple_choice::ChoiceExample::bert_pair
pub fn encode_multiple_choice(
    tok: &WordPieceTokenizer,
    data: &ChoiceData,
    max_len: usize,
) -> Result<Vec<Encoding>> {
    let mut tok = tok.clone();
    tok.set_padding(None);
    tok.set_truncation(Some(Truncation::new(max_len)));
    let mut out = Vec::with_capacity(data.examples.len() * data.num_choices);
    for e in &data.examples {
        for k in 0..e.choices.len() {
            let (a, b) = e.bert_pair(k);
            out.push(tok.encode_pair(a, &b, true)?);
        }
    }
    Ok(out)
}

/// Encodes multiple-choice examples for GPT-2 as its fine-tuning does
/// ([`encode_choice`]: `context question <|endoftext|> choice`, at most
/// `max_len` tokens). `[E·K]`: the K choices of each example in order.
pub fn encode_gpt2_multiple_choice(
    tok: &BpeTokenizer,
    data: &ChoiceData,
    max_len: usize,
    delimiter: u32,
) -> Vec<Vec<u32>> {
    let mut out = Vec::with_capacity(data.examples.len() * data.num_choices);
    for e in &data.examples {
        let prefix = e.gpt2_prefix();
        for c in &e.choices {
            out.push(encode_choice(tok, delimiter, &prefix, c, max_len));
        }
    }
    out
}

/// Multiple-choice predictions, their scores and accuracy.
pub struct ChoiceEval {
    /// Fraction of examples whose best-scored choice is the right one.
    pub accuracy: f64,
    pub count: usize,
    /// Mean cross-entropy of the right choice over each example's K scores.
    pub loss: f64,
    /// The best-scored choice of each example.
    pub predictions: Vec<usize>,
    /// `[E][K]` the head's score of every choice.
    pub scores: Vec<Vec<f32>>,
}

fn choice_eval(scores: Vec<Vec<f32>>, gold: &[usize]) -> ChoiceEval {
    let mut preds = Vec::with_capacity(gold.len());
    let nll: f64 = scores
        .iter()
        .zip(gold)
        .map(|(row, &g)| score_row(row, g, &mut preds))
        .sum();
    ChoiceEval {
        accuracy: accuracy(gold, &preds),
        count: gold.len(),
        loss: nll / gold.len().max(1) as f64,
        predictions: preds,
        scores,
    }
}

fn check_choices(rows: usize, k: usize, gold: &[usize]) -> Result<()> {
    if k == 0 || rows != gold.len() * k || gold.iter().any(|&g| g >= k) {
        return Err(Error::InvalidInput(format!(
            "multiple choice: {rows} sequences for {} examples of {k} choices (labels below {k})",
            gold.len()
        )));
    }
    Ok(())
}

/// Scores every choice with a `BertForMultipleChoice` (`encs` `[E·K]` from
/// [`encode_multiple_choice`]), `batch_size` examples (of K sequences) per
/// forward, padded per batch; the prediction is the best-scored choice.
pub fn eval_multiple_choice(
    model: &Bert,
    pad_id: u32,
    encs: &[Encoding],
    k: usize,
    gold: &[usize],
    batch_size: usize,
) -> Result<ChoiceEval> {
    model.require(HeadKind::MultipleChoice)?;
    check_choices(encs.len(), k, gold)?;
    let mut scores = Vec::with_capacity(gold.len());
    let mut acts = BertActivations::new(false);
    for chunk in encs.chunks(batch_size.max(1) * k) {
        let refs: Vec<&Encoding> = chunk.iter().collect();
        let batch = BertBatch::from_encodings(&refs, pad_id)?;
        model.forward_unpadded(&batch, &mut acts)?;
        let logits = model.choice_logits(&model.pooled(&acts)?)?;
        scores.extend(logits.chunks_exact(k).map(<[f32]>::to_vec));
    }
    Ok(choice_eval(scores, gold))
}

/// [`eval_multiple_choice`] for a `GPT2DoubleHeadsModel`: `rows` `[E·K]`
/// from [`encode_gpt2_multiple_choice`], each scored at its last token; the
/// loss is the multiple-choice loss alone (no LM term).
pub fn eval_gpt2_multiple_choice(
    model: &mut Gpt2,
    rows: &[Vec<u32>],
    k: usize,
    gold: &[usize],
    batch_size: usize,
) -> Result<ChoiceEval> {
    check_choices(rows.len(), k, gold)?;
    // Right padding after each row's last token, which the head reads: the
    // pad id changes nothing a causal model computes for the real tokens.
    let pad = model.config.pad_token_id.unwrap_or(0);
    let mut scores = Vec::with_capacity(gold.len());
    let bs = batch_size.max(1);
    for (chunk, g) in rows.chunks(bs * k).zip(gold.chunks(bs)) {
        let refs: Vec<&[u32]> = chunk.iter().map(Vec::as_slice).collect();
        let labels = g.iter().map(|&x| x as u32).collect();
        let batch = task_batch(&refs, pad, labels, k);
        let logits = model.forward_task(&batch, 0.0)?.logits;
        scores.extend(logits.chunks_exact(k).map(<[f32]>::to_vec));
    }
    Ok(choice_eval(scores, gold))
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
        model.forward_unpadded(&batch, &mut acts)?;
        let logits = model.token_logits(&acts)?;
        for (r, e) in chunk.iter().enumerate() {
            let rows = acts.span(r, e.labels.len())?;
            let (mut g, mut p) = (Vec::new(), Vec::new());
            for (i, &lab) in e.labels.iter().enumerate() {
                let Ok(lab) = usize::try_from(lab) else {
                    continue;
                };
                let name = names.get(lab).ok_or_else(|| {
                    Error::InvalidInput(format!("label {lab} is outside the model's {l} labels"))
                })?;
                let row = &logits[(rows.start + i) * l..(rows.start + i + 1) * l];
                let mut best = Vec::with_capacity(1);
                nll += score_row(row, lab, &mut best);
                count += 1;
                g.push(name.clone());
                p.push(names[best[0]].clone());
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
        model.forward_unpadded(&batch, &mut acts)?;
        let (s, e) = model.qa_logits(&acts)?;
        for (r, enc) in chunk.iter().enumerate() {
            let rg = acts.span(r, enc.len())?;
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
