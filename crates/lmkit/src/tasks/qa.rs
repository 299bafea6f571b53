//! SQuAD span QA (`BertForQuestionAnswering`, HF run_qa): each question's
//! context cut into windows of `max_seq_len` tokens overlapping by
//! `doc_stride`, start / end logits per token, the best span of
//! `max_answer_len` tokens at most over the windows.
//!
//! Data: SQuAD v1.1 JSON. Metrics: the official `exact_match` and `f1`
//! (answer normalisation as SQuAD's script) and `examples` (questions).
//! `qa` is SQuAD everywhere (`squad` is accepted for it); zero-shot QA with
//! a GPT-2 is the benchmark `zero-shot-qa`.

use lmkit_tokenizers::wordpiece::WordPieceTokenizer;
use lmkit_tokenizers::Encoding;
use serde_json::{json, Value};

use crate::data::squad::{read_squad, SquadExample};
use crate::eval::benchmark::{metrics, Evaluation};
use crate::eval::run::{eval_squad, SquadEval};
use crate::models::bert::{
    qa_windows, Bert, BertTargets, BertTrainBatch, BertTrainer, HeadKind, QaOptions,
};
use crate::spec::config::AnyConfig;
use crate::spec::names::{Architecture, Family};

use super::common::{check_fits, load_bert_as, pad_batch, save_bert};
use super::error::{invalid, Result};
use super::{EvalCx, Metrics, PrepareCx, Prepared, Session, Task};

pub struct Qa;

impl Task for Qa {
    fn name(&self) -> &'static str {
        "qa"
    }
    fn aliases(&self) -> &'static [&'static str] {
        &["squad"]
    }
    fn summary(&self) -> &'static str {
        "SQuAD span QA (BERT), long contexts in overlapping windows"
    }
    fn data_format(&self) -> &'static str {
        "SQuAD v1.1 JSON (`squad` is the same task)"
    }
    fn scores(&self) -> &'static str {
        "exact match and F1"
    }
    fn families(&self) -> &'static [Family] {
        &[Family::Bert]
    }
    fn default_max_seq_len(&self) -> usize {
        384
    }
    fn training_options(&self) -> &'static [&'static str] {
        &["doc_stride"]
    }
    fn other_family_hint(&self, family: Family) -> Option<&'static str> {
        (family == Family::Gpt2).then_some(
            "`qa` is SQuAD span QA; zero-shot question answering with a GPT-2 (the old `eval --task qa`) is `zero-shot-qa`",
        )
    }

    fn prepare(&self, cx: &PrepareCx<'_>) -> Result<Prepared> {
        let AnyConfig::Bert(config) = cx.config.clone() else {
            return Err(invalid("qa needs a BERT model"));
        };
        let (dir, opts) = (cx.model_dir, cx.opts);
        let arch = Architecture::BertForQuestionAnswering;
        if opts.doc_stride >= opts.max_seq_len {
            return Err(invalid(format!(
                "`doc_stride` {} must be smaller than `max_seq_len` {}",
                opts.doc_stride, opts.max_seq_len
            )));
        }
        // Saved as read; windows are cut from the plain one.
        let tok = WordPieceTokenizer::from_dir(dir)?;
        let eval_tok = plain(tok.clone());
        check_fits(dir, &tok, &config, true)?;
        let max_len = opts.max_seq_len.min(config.max_position_embeddings);
        let train = read_squad(cx.train)?;
        let eval = cx.eval.map(read_squad).transpose()?;
        let feats = qa_train_features(&eval_tok, &train, max_len, opts.doc_stride)?;
        let (model, _) = load_bert_as(dir, config, arch, opts.seed)?;
        let description = format!(
            "qa: {} questions → {} windows of ≤ {max_len} tokens (stride {})",
            train.len(),
            feats.len(),
            opts.doc_stride
        );
        let qa = QaOptions {
            top_k: opts.n_best.max(1),
            max_answer_len: opts.max_answer_len,
            handle_impossible_answer: false,
        };
        let (pad, stride, bs) = (tok.pad_id(), opts.doc_stride, opts.eval_batch_size);
        let shard = opts.max_shard_size;
        Ok(Prepared::Bert(Session {
            model: BertTrainer::new(model)?,
            batch: BertTrainBatch::default(),
            train_items: feats.len(),
            eval_items: eval.as_ref().map_or(0, Vec::len),
            description,
            fill: Box::new(move |idx, bt| {
                let refs: Vec<&Encoding> = idx.iter().map(|&i| &feats[i].encoding).collect();
                bt.batch = pad_batch(&refs, pad);
                bt.targets = BertTargets::Qa {
                    start: idx.iter().map(|&i| feats[i].start as i32).collect(),
                    end: idx.iter().map(|&i| feats[i].end as i32).collect(),
                };
            }),
            evaluate: Box::new(move |m| {
                let Some(ex) = &eval else { return Ok(None) };
                let r = eval_squad(&m.model, &eval_tok, ex, max_len, stride, qa, bs)?;
                Ok(Some(squad_metrics(&r)))
            }),
            save: Box::new(move |t, d| save_bert(&t.model, arch, &tok, shard, d)),
        }))
    }

    fn evaluate(&self, cx: &EvalCx<'_>) -> Result<Evaluation> {
        let model = Bert::from_dir(cx.model_dir)?;
        model.require(HeadKind::QuestionAnswering)?;
        let tok = plain(WordPieceTokenizer::from_dir(cx.model_dir)?);
        let ex = cx.opts.select(read_squad(cx.data)?, cx.keep, |e| {
            vec![&*e.context, e.question.as_str()]
        });
        let (max_len, stride) = qa_windows(
            cx.opts.max_seq_len,
            cx.opts.doc_stride,
            model.config.max_position_embeddings,
        )?;
        let qa = QaOptions {
            top_k: cx.opts.n_best.max(1),
            max_answer_len: cx.opts.max_answer_len.max(1),
            handle_impossible_answer: false,
        };
        let r = eval_squad(
            &model,
            &tok,
            &ex,
            max_len,
            stride,
            qa,
            cx.opts.forward_batch(),
        )?;
        let predictions = r
            .predictions
            .iter()
            .map(|(id, ans)| {
                let best: Vec<Value> = ans
                    .iter()
                    .map(|x| json!({"text": x.answer, "score": x.score}))
                    .collect();
                json!({"id": id, "prediction": ans.first().map_or("", |x| x.answer.as_str()), "n_best": best})
            })
            .collect();
        Ok(Evaluation {
            metrics: squad_metrics(&r),
            predictions,
        })
    }
}

/// The tokenizer without padding or truncation: windows are cut here.
fn plain(mut tok: WordPieceTokenizer) -> WordPieceTokenizer {
    tok.set_padding(None);
    tok.set_truncation(None);
    tok
}

/// The metrics of a SQuAD evaluation.
pub fn squad_metrics(r: &SquadEval) -> Metrics {
    metrics(json!({
        "exact_match": r.scores.exact_match,
        "f1": r.scores.f1,
        "examples": r.scores.total,
    }))
}

/// One training window of a SQuAD question (HF run_qa's `prepare_train_features`).
#[derive(Debug, Clone, PartialEq)]
pub struct QaFeature {
    pub encoding: Encoding,
    /// Answer token span (inclusive), or (0, 0) = `[CLS]` when the window
    /// does not contain the whole answer.
    pub start: usize,
    pub end: usize,
}

/// Windows of `max_len` tokens (stride `stride`) for every question with
/// start/end labels from its first answer; a question whose answer text is
/// not at its `answer_start` is an error naming the entry.
pub fn qa_train_features(
    tok: &WordPieceTokenizer,
    examples: &[SquadExample],
    max_len: usize,
    stride: usize,
) -> Result<Vec<QaFeature>> {
    let mut out = Vec::new();
    for ex in examples {
        let ans = ex
            .answers
            .first()
            .ok_or_else(|| invalid(format!("{}: a training question needs an answer", ex.entry)))?;
        let s = ans.byte_start.ok_or_else(|| {
            invalid(format!(
                "{}: answer {:?} is not at answer_start {} of the context",
                ex.entry, ans.text, ans.char_start
            ))
        })?;
        let e = s + ans.text.len();
        let wins = tok
            .encode_pair_windows(&ex.question, &ex.context, max_len, stride)
            .map_err(|err| invalid(format!("{}: {err}", ex.entry)))?;
        for w in wins {
            let ctx = w.context_range();
            let enc = w.encoding;
            let (mut start, mut end) = (0, 0);
            if !ctx.is_empty() {
                let (first, last) = (ctx.start, ctx.end - 1);
                if enc.offsets[first].0 <= s && enc.offsets[last].1 >= e {
                    // As HF: the last token starting at or before the answer
                    // start, the first token ending at or after its end.
                    let mut i = first;
                    while i <= last && enc.offsets[i].0 <= s {
                        i += 1;
                    }
                    start = i - 1;
                    let mut j = last + 1;
                    while j > first && enc.offsets[j - 1].1 >= e {
                        j -= 1;
                    }
                    end = j;
                }
            }
            out.push(QaFeature {
                encoding: enc,
                start,
                end,
            });
        }
    }
    Ok(out)
}
