//! Regression (STS-B style): a one-output `BertForSequenceClassification`
//! with `problem_type` regression, as HF run_glue trains it with
//! `num_labels=1`: the MSE of the output against the row's `label`.
//!
//! Data: JSONL `{"text", "text_pair"?, "label": number}`. The saved config
//! has `num_labels` 1 (`id2label` `{0: "LABEL_0"}` unless the checkpoint
//! already names its one output) and `problem_type` regression; a
//! checkpoint whose classifier has more than one output is an error.
//! Metrics: `loss` (MSE), `pearson`, `spearmanr`, `examples`.

use lmkit_tokenizers::wordpiece::WordPieceTokenizer;
use lmkit_tokenizers::Encoding;
use serde_json::json;

use crate::data::classify_data::{read_regression_jsonl, ClassifyData};
use crate::eval::benchmark::{metrics, Evaluation};
use crate::eval::run::{encode_classify, eval_regression, RegressionEval};
use crate::models::bert::{Bert, BertTargets, BertTrainBatch, BertTrainer, HeadKind};
use crate::spec::config::{AnyConfig, ProblemType};
use crate::spec::names::{Architecture, Family};

use super::classify::{has_pairs, select};
use super::common::{check_fits, eval_len, has_tensors, load_bert_as, pad_batch, save_bert};
use super::error::{invalid, Result};
use super::{EvalCx, Metrics, PrepareCx, Prepared, Session, Task};

pub struct Regression;

impl Task for Regression {
    fn name(&self) -> &'static str {
        "regression"
    }
    fn summary(&self) -> &'static str {
        "a one-output BERT classifier trained with MSE (STS-B style), scored with Pearson / Spearman"
    }
    fn data_format(&self) -> &'static str {
        "JSONL {\"text\", \"text_pair\"?, \"label\": number}"
    }
    fn scores(&self) -> &'static str {
        "Pearson, Spearman, MSE"
    }
    fn families(&self) -> &'static [Family] {
        &[Family::Bert]
    }

    fn prepare(&self, cx: &PrepareCx<'_>) -> Result<Prepared> {
        let AnyConfig::Bert(mut config) = cx.config.clone() else {
            return Err(invalid("regression needs a BERT model"));
        };
        let (dir, opts) = (cx.model_dir, cx.opts);
        let arch = Architecture::BertForSequenceClassification;
        let tok = WordPieceTokenizer::from_dir(dir)?;
        let train = read_regression_jsonl(cx.train)?;
        if !has_tensors(dir, "classifier.")? {
            config.set_num_labels(1);
        } else if config.num_labels() != 1 {
            return Err(invalid(format!(
                "{}: its classifier has {} outputs ({}); regression needs one: start from a model \
                 without a classifier (its encoder) or a one-output one",
                dir.display(),
                config.num_labels(),
                config.id2label.join(", ")
            )));
        }
        config.problem_type = Some(ProblemType::Regression);
        let eval = cx.eval.map(read_regression_jsonl).transpose()?;
        check_fits(
            dir,
            &tok,
            &config,
            has_pairs(std::iter::once(&train).chain(&eval)),
        )?;
        let max_len = opts.max_seq_len.min(config.max_position_embeddings);
        let (model, _) = load_bert_as(dir, config, arch, opts.seed)?;
        let set = Set::new(&tok, &train, max_len)?;
        let eval_set = eval
            .as_ref()
            .map(|d| Set::new(&tok, d, max_len))
            .transpose()?;
        let (lo, hi) = set
            .gold
            .iter()
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &y| {
                (a.min(y), b.max(y))
            });
        let description = format!(
            "regression: {} train examples, targets {lo}..{hi}",
            set.encs.len()
        );
        let (bs, shard) = (opts.eval_batch_size, opts.max_shard_size);
        Ok(Prepared::Bert(Session {
            model: BertTrainer::new(model)?,
            batch: BertTrainBatch::default(),
            train_items: set.encs.len(),
            eval_items: eval_set.as_ref().map_or(0, |s| s.encs.len()),
            description,
            fill: Box::new(move |idx, bt| {
                let refs: Vec<&Encoding> = idx.iter().map(|&i| &set.encs[i]).collect();
                bt.batch = pad_batch(&refs, set.pad);
                bt.targets = BertTargets::Regression(idx.iter().map(|&i| set.gold[i]).collect());
            }),
            evaluate: Box::new(move |m| {
                let Some(s) = &eval_set else { return Ok(None) };
                Ok(Some(regression_metrics(&s.score(&m.model, bs)?)))
            }),
            save: Box::new(move |t, d| save_bert(&t.model, arch, &tok, shard, d)),
        }))
    }

    fn evaluate(&self, cx: &EvalCx<'_>) -> Result<Evaluation> {
        let model = Bert::from_dir(cx.model_dir)?;
        model.require(HeadKind::Classifier)?;
        if model.config.problem_type != Some(ProblemType::Regression) {
            return Err(invalid(format!(
                "`task` regression needs a regression model (problem_type \"regression\"), \
                 but {} has problem_type {} and {} labels: score it with `task` classify",
                cx.model_dir.display(),
                model
                    .config
                    .problem_type
                    .map_or("unset".into(), |p| format!("\"{p}\"")),
                model.config.num_labels()
            )));
        }
        let tok = WordPieceTokenizer::from_dir(cx.model_dir)?;
        let mut data = read_regression_jsonl(cx.data)?;
        data.examples = select(cx.opts, data.examples, cx.keep);
        let max_len = eval_len(
            cx.opts.max_seq_len,
            128,
            model.config.max_position_embeddings,
        );
        let r = Set::new(&tok, &data, max_len)?.score(&model, cx.opts.forward_batch())?;
        let predictions = data
            .examples
            .iter()
            .zip(&r.predictions)
            .map(|(e, &p)| json!({"line": e.line, "score": p, "label": e.label}))
            .collect();
        Ok(Evaluation {
            metrics: regression_metrics(&r),
            predictions,
        })
    }
}

/// The metrics of a regression evaluation.
pub fn regression_metrics(r: &RegressionEval) -> Metrics {
    metrics(json!({
        "loss": r.loss,
        "pearson": r.scores.pearson,
        "spearmanr": r.scores.spearmanr,
        "examples": r.scores.count,
    }))
}

/// Encodings and gold scores.
struct Set {
    encs: Vec<Encoding>,
    gold: Vec<f32>,
    pad: u32,
}

impl Set {
    fn new(tok: &WordPieceTokenizer, data: &ClassifyData<f32>, max_len: usize) -> Result<Self> {
        Ok(Set {
            encs: encode_classify(tok, data, max_len)?,
            gold: data.examples.iter().map(|e| e.label).collect(),
            pad: tok.pad_id(),
        })
    }

    fn score(&self, model: &Bert, batch_size: usize) -> Result<RegressionEval> {
        Ok(eval_regression(
            model, self.pad, &self.encs, &self.gold, batch_size,
        )?)
    }
}
