//! Token classification (`BertForTokenClassification`, HF run_ner): tags on
//! the first word piece of each word, seqeval entity scores.
//!
//! Data: CoNLL-style columns (token first, tag last) or JSONL `{"tokens",
//! "tags"}`. Tags come from the checkpoint when it is already a token
//! classifier (its `id2label`), else from the training file (sorted).
//! Metrics: `loss`, seqeval's micro `precision` / `recall` / `f1`, token
//! `accuracy`, `examples` (sentences) and `per_type` (each entity type's
//! scores).

use lmkit_tokenizers::wordpiece::WordPieceTokenizer;
use lmkit_tokenizers::Encoding;
use serde_json::json;

use crate::data::classify_data::LabelMap;
use crate::data::tagging::{encode_sentences, read_tagging, tag_map, TaggedEncoding};
use crate::eval::benchmark::{metrics, Evaluation};
use crate::eval::run::{eval_token_classify, TokenClassifyEval};
use crate::models::bert::{Bert, BertTargets, BertTrainBatch, BertTrainer, HeadKind};
use crate::spec::config::AnyConfig;
use crate::spec::names::{Architecture, Family};
use crate::spec::IGNORE_INDEX;

use super::common::{check_fits, eval_len, load_bert_as, pad_batch, save_bert};
use super::error::{invalid, Result};
use super::{EvalCx, Metrics, PrepareCx, Prepared, Session, Task};

pub struct TokenClassify;

impl Task for TokenClassify {
    fn name(&self) -> &'static str {
        "token-classify"
    }
    fn summary(&self) -> &'static str {
        "token classification / NER (BERT), scored with seqeval's entity F1"
    }
    fn data_format(&self) -> &'static str {
        "CoNLL-style columns (token first, tag last) or JSONL {\"tokens\", \"tags\"}"
    }
    fn scores(&self) -> &'static str {
        "seqeval entity precision / recall / F1, token accuracy"
    }
    fn families(&self) -> &'static [Family] {
        &[Family::Bert]
    }

    fn prepare(&self, cx: &PrepareCx<'_>) -> Result<Prepared> {
        let AnyConfig::Bert(mut config) = cx.config.clone() else {
            return Err(invalid("token-classify needs a BERT model"));
        };
        let (dir, opts) = (cx.model_dir, cx.opts);
        let arch = Architecture::BertForTokenClassification;
        let tok = WordPieceTokenizer::from_dir(dir)?;
        check_fits(dir, &tok, &config, false)?;
        let train = read_tagging(cx.train)?;
        let is_tagger = config.architectures.iter().any(|a| a == arch.hf_name());
        let labels = if is_tagger {
            LabelMap::from_names(config.id2label.clone())?
        } else {
            tag_map(&train)?
        };
        config.id2label = labels.names().to_vec();
        let eval = cx.eval.map(read_tagging).transpose()?;
        let max_len = opts.max_seq_len.min(config.max_position_embeddings);
        let encs = encode_sentences(&tok, &train, &labels, max_len)?;
        let eval_encs = eval
            .as_ref()
            .map(|d| encode_sentences(&tok, d, &labels, max_len))
            .transpose()?;
        let (model, _) = load_bert_as(dir, config, arch, opts.seed)?;
        let description = format!(
            "token-classify: {} tags ({}), {} train sentences",
            labels.num_labels(),
            labels.names().join(", "),
            encs.len()
        );
        let (pad, bs, shard) = (tok.pad_id(), opts.eval_batch_size, opts.max_shard_size);
        Ok(Prepared::Bert(Session {
            model: BertTrainer::new(model)?,
            batch: BertTrainBatch::default(),
            train_items: encs.len(),
            eval_items: eval_encs.as_ref().map_or(0, Vec::len),
            description,
            fill: Box::new(move |idx, bt| {
                let refs: Vec<&Encoding> = idx.iter().map(|&i| &encs[i].encoding).collect();
                bt.batch = pad_batch(&refs, pad);
                let t = bt.batch.t;
                let mut labels = Vec::with_capacity(idx.len() * t);
                for &i in idx {
                    let l = &encs[i].labels;
                    labels.extend_from_slice(l);
                    labels.extend(std::iter::repeat_n(IGNORE_INDEX, t - l.len()));
                }
                bt.targets = BertTargets::TokenClassify(labels);
            }),
            evaluate: Box::new(move |m| {
                let Some(encs) = &eval_encs else {
                    return Ok(None);
                };
                Ok(Some(score(&m.model, pad, encs, bs)?.0))
            }),
            save: Box::new(move |t, d| save_bert(&t.model, arch, &tok, shard, d)),
        }))
    }

    fn evaluate(&self, cx: &EvalCx<'_>) -> Result<Evaluation> {
        let model = Bert::from_dir(cx.model_dir)?;
        model.require(HeadKind::TokenClassifier)?;
        let tok = WordPieceTokenizer::from_dir(cx.model_dir)?;
        let mut data = read_tagging(cx.data)?;
        data.sentences = cx.opts.select(data.sentences, cx.keep, |s| {
            s.words.iter().map(String::as_str).collect()
        });
        let labels = LabelMap::from_names(model.config.id2label.clone())?;
        let max_len = eval_len(
            cx.opts.max_seq_len,
            128,
            model.config.max_position_embeddings,
        );
        let encs = encode_sentences(&tok, &data, &labels, max_len)?;
        let (metrics, r) = score(&model, tok.pad_id(), &encs, cx.opts.forward_batch())?;
        let predictions = data
            .sentences
            .iter()
            .zip(&r.predictions)
            .map(|(s, p)| json!({"line": s.line, "tags": p}))
            .collect();
        Ok(Evaluation {
            metrics,
            predictions,
        })
    }
}

/// Scores tagged encodings: the metrics and the predictions.
fn score(
    model: &Bert,
    pad: u32,
    encs: &[TaggedEncoding],
    batch_size: usize,
) -> Result<(Metrics, TokenClassifyEval)> {
    let r = eval_token_classify(model, pad, encs, batch_size)?;
    let m = metrics(json!({
        "loss": r.loss,
        "precision": r.scores.precision,
        "recall": r.scores.recall,
        "f1": r.scores.f1,
        "accuracy": r.scores.accuracy,
        "examples": encs.len(),
        "per_type": r.scores.per_type,
    }));
    Ok((m, r))
}
