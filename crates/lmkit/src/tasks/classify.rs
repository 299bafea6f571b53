//! Sequence classification, both families: `BertForSequenceClassification`
//! (HF run_glue: the pooled `[CLS]`, cross-entropy) and
//! `GPT2ForSequenceClassification` (GPT-1 §3.2 with GPT-2's vocabulary: a
//! pair is `text <|endoftext|> pair`, `score` reads the last non-pad token,
//! and the loss adds `lm_coef` times the LM loss on the same tokens).
//!
//! Data: JSONL `{"text", "text_pair"?, "label"}`. Labels come from the
//! checkpoint when it already has a classifier (its `id2label`), else from
//! the training file. Metrics: `loss`, `accuracy`, macro-`f1`, `examples`.

use lmkit_tokenizers::wordpiece::WordPieceTokenizer;
use lmkit_tokenizers::{BpeTokenizer, Encoding};
use serde_json::json;

use crate::checkpoint::{read_config, resolve_model_dir};
use crate::data::classify_data::{read_classify_jsonl, ClassifyData, LabelMap};
use crate::error::Error;
use crate::eval::benchmark::{metrics, EvalOptions, Evaluation, Keep};
use crate::eval::run::{
    encode_classify, encode_gpt2_classify, eval_classify, eval_gpt2_classify, ClassifyEval,
};
use crate::models::auto_dtype::DtypeRequest;
use crate::models::bert::{Bert, BertTargets, BertTrainBatch, BertTrainer, HeadKind};
use crate::models::bert::{BertPipeline, LabelScore};
use crate::models::gpt2::classify::task_batch;
use crate::models::gpt2::{Gpt2Classifier, Gpt2TaskBatch, Gpt2TaskTrainer, WeightDtype};
use crate::models::load::load_bert;
use crate::spec::config::ModelConfig;
use crate::spec::config::{AnyConfig, BertConfig, Gpt2Config};
use crate::spec::names::{Architecture, Family};

use super::common::{
    check_fits, eval_len, gpt2_task_tokens, has_tensors, load_bert_as, load_gpt2_as, pad_batch,
    save_bert, save_gpt2,
};
use super::error::{invalid, Result};
use super::{EvalCx, Metrics, PrepareCx, Prepared, Session, Task};

pub struct Classify;

impl Task for Classify {
    fn name(&self) -> &'static str {
        "classify"
    }
    fn summary(&self) -> &'static str {
        "sequence classification (BERT, or GPT-2 with GPT-1's auxiliary LM loss)"
    }
    fn data_format(&self) -> &'static str {
        "JSONL {\"text\", \"text_pair\"?, \"label\"}"
    }
    fn scores(&self) -> &'static str {
        "accuracy, macro-F1"
    }
    fn families(&self) -> &'static [Family] {
        &[Family::Bert, Family::Gpt2]
    }
    fn training_options(&self) -> &'static [&'static str] {
        &["lm_coef"]
    }

    fn prepare(&self, cx: &PrepareCx<'_>) -> Result<Prepared> {
        match cx.config.clone() {
            AnyConfig::Bert(c) => prepare_bert(cx, c),
            AnyConfig::Gpt2(c) => prepare_gpt2(cx, c),
        }
    }

    fn evaluate(&self, cx: &EvalCx<'_>) -> Result<Evaluation> {
        let mut data = read_classify_jsonl(cx.data)?;
        data.examples = select(cx.opts, data.examples, cx.keep);
        let max = cx.opts.max_seq_len;
        let bs = cx.opts.forward_batch();
        let (labels, r) = match &cx.config {
            AnyConfig::Bert(_) => {
                let model = Bert::from_dir(cx.model_dir)?;
                model.require(HeadKind::Classifier)?;
                let tok = WordPieceTokenizer::from_dir(cx.model_dir)?;
                let labels = LabelMap::from_names(model.config.id2label.clone())?;
                let set =
                    BertSet::new(&tok, &data, &labels, eval_len(max, 128, positions(&model)))?;
                (labels, set.score(&model, bs)?)
            }
            AnyConfig::Gpt2(_) => {
                let mut c = Gpt2Classifier::from_dir(cx.model_dir)?;
                let labels = LabelMap::from_names(c.model.config.id2label.clone())?;
                let eos = c.tokenizer.endoftext_id().ok_or_else(|| {
                    invalid("the tokenizer has no <|endoftext|> token (the pair delimiter)")
                })?;
                let t = eval_len(max, 128, c.model.config.n_positions);
                let set = Gpt2Set::new(&c.tokenizer, &data, &labels, t, eos)?;
                (labels, set.score(&mut c.model, bs)?)
            }
        };
        let predictions = data
            .examples
            .iter()
            .zip(&r.predictions)
            .map(|(e, &p)| json!({"line": e.line, "label": labels.name(p)}))
            .collect();
        Ok(Evaluation {
            metrics: classify_metrics(&r),
            predictions,
        })
    }
}

/// The first `limit` examples, then those `keep` accepts (by text and pair).
pub(super) fn select<L>(
    opts: &EvalOptions,
    examples: Vec<crate::data::classify_data::ClassifyExample<L>>,
    keep: Keep<'_>,
) -> Vec<crate::data::classify_data::ClassifyExample<L>> {
    opts.select(examples, keep, |e| {
        std::iter::once(e.text.as_str())
            .chain(e.text_pair.as_deref())
            .collect()
    })
}

fn positions(model: &Bert) -> usize {
    model.config.max_position_embeddings
}

/// The metrics of a classification evaluation (both families).
pub fn classify_metrics(r: &ClassifyEval) -> Metrics {
    metrics(json!({
        "loss": r.loss,
        "accuracy": r.scores.accuracy,
        "f1": r.scores.f1,
        "examples": r.scores.count,
    }))
}

/// A BERT classification set: encodings and gold label ids.
struct BertSet {
    encs: Vec<Encoding>,
    gold: Vec<usize>,
    pad: u32,
}

impl BertSet {
    fn new(
        tok: &WordPieceTokenizer,
        data: &ClassifyData,
        labels: &LabelMap,
        max_len: usize,
    ) -> Result<Self> {
        Ok(BertSet {
            encs: encode_classify(tok, data, max_len)?,
            gold: labels.ids(data)?,
            pad: tok.pad_id(),
        })
    }

    fn score(&self, model: &Bert, batch_size: usize) -> Result<ClassifyEval> {
        Ok(eval_classify(
            model, self.pad, &self.encs, &self.gold, batch_size,
        )?)
    }
}

/// A GPT-2 classification set: token rows and gold label ids.
struct Gpt2Set {
    rows: Vec<Vec<u32>>,
    gold: Vec<usize>,
}

impl Gpt2Set {
    fn new(
        tok: &BpeTokenizer,
        data: &ClassifyData,
        labels: &LabelMap,
        max_len: usize,
        eos: u32,
    ) -> Result<Self> {
        Ok(Gpt2Set {
            rows: encode_gpt2_classify(tok, data, max_len, eos),
            gold: labels.ids(data)?,
        })
    }

    fn score(
        &self,
        model: &mut crate::models::gpt2::Gpt2,
        batch_size: usize,
    ) -> Result<ClassifyEval> {
        Ok(eval_gpt2_classify(
            model, &self.rows, &self.gold, batch_size,
        )?)
    }
}

/// The label map: the checkpoint's when it has a classifier, else the
/// training file's.
fn label_map(has_head: bool, id2label: &[String], train: &ClassifyData) -> Result<LabelMap> {
    Ok(if has_head {
        LabelMap::from_names(id2label.to_vec())?
    } else {
        LabelMap::from_examples(train)?
    })
}

/// Whether any example of the sets is a text pair.
pub(super) fn has_pairs<'a, L: 'a>(sets: impl IntoIterator<Item = &'a ClassifyData<L>>) -> bool {
    sets.into_iter()
        .any(|d| d.examples.iter().any(|e| e.text_pair.is_some()))
}

fn prepare_bert(cx: &PrepareCx<'_>, mut config: BertConfig) -> Result<Prepared> {
    let (dir, opts) = (cx.model_dir, cx.opts);
    let arch = Architecture::BertForSequenceClassification;
    let tok = WordPieceTokenizer::from_dir(dir)?;
    let train = read_classify_jsonl(cx.train)?;
    let labels = label_map(has_tensors(dir, "classifier.")?, &config.id2label, &train)?;
    config.id2label = labels.names().to_vec();
    let eval = cx.eval.map(read_classify_jsonl).transpose()?;
    check_fits(
        dir,
        &tok,
        &config,
        has_pairs(std::iter::once(&train).chain(&eval)),
    )?;
    let max_len = opts.max_seq_len.min(config.max_position_embeddings);
    let (model, _) = load_bert_as(dir, config, arch, opts.seed)?;
    let set = BertSet::new(&tok, &train, &labels, max_len)?;
    let eval_set = eval
        .as_ref()
        .map(|d| BertSet::new(&tok, d, &labels, max_len))
        .transpose()?;
    let description = format!(
        "classify: {} labels ({}), {} train examples",
        labels.num_labels(),
        labels.names().join(", "),
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
            bt.targets = BertTargets::Classify(idx.iter().map(|&i| set.gold[i] as i32).collect());
        }),
        evaluate: Box::new(move |m| {
            let Some(s) = &eval_set else { return Ok(None) };
            Ok(Some(classify_metrics(&s.score(&m.model, bs)?)))
        }),
        save: Box::new(move |t, d| save_bert(&t.model, arch, &tok, shard, d)),
    }))
}

fn prepare_gpt2(cx: &PrepareCx<'_>, mut config: Gpt2Config) -> Result<Prepared> {
    let (dir, opts) = (cx.model_dir, cx.opts);
    let arch = Architecture::Gpt2ForSequenceClassification;
    if opts.lm_coef > 0.0 && !config.tie_word_embeddings {
        return Err(invalid(
            "the model has tie_word_embeddings false, and GPT2ForSequenceClassification keeps \
             no LM head for the auxiliary LM loss: use lm_coef 0",
        ));
    }
    let tok = BpeTokenizer::from_dir(dir)?;
    let (eos, pad) = gpt2_task_tokens(&tok, &mut config, "pair")?;
    let train = read_classify_jsonl(cx.train)?;
    let labels = label_map(has_tensors(dir, "score.")?, &config.id2label, &train)?;
    config.id2label = labels.names().to_vec();
    let eval = cx.eval.map(read_classify_jsonl).transpose()?;
    let (model, _) = load_gpt2_as(dir, config, arch, opts.seed)?;
    let t = opts.max_seq_len.min(model.config.n_positions);
    let set = Gpt2Set::new(&tok, &train, &labels, t, eos)?;
    let eval_set = eval
        .as_ref()
        .map(|d| Gpt2Set::new(&tok, d, &labels, t, eos))
        .transpose()?;
    let description = format!(
        "classify (GPT-2, lm_coef {}): {} labels ({}), {} train examples",
        opts.lm_coef,
        labels.num_labels(),
        labels.names().join(", "),
        set.rows.len()
    );
    let (bs, shard) = (opts.eval_batch_size, opts.max_shard_size);
    Ok(Prepared::Gpt2Head(Session {
        model: Gpt2TaskTrainer {
            model,
            lm_coef: opts.lm_coef,
        },
        batch: Gpt2TaskBatch::default(),
        train_items: set.rows.len(),
        eval_items: eval_set.as_ref().map_or(0, |s| s.rows.len()),
        description,
        fill: Box::new(move |idx, bt| {
            let refs: Vec<&[u32]> = idx.iter().map(|&i| set.rows[i].as_slice()).collect();
            let gold = idx.iter().map(|&i| set.gold[i] as u32).collect();
            *bt = task_batch(&refs, pad, gold, 1);
        }),
        evaluate: Box::new(move |m| {
            let Some(s) = &eval_set else { return Ok(None) };
            Ok(Some(classify_metrics(&s.score(&mut m.model, bs)?)))
        }),
        save: Box::new(move |t, d| save_gpt2(&t.model, arch, &tok, shard, d)),
    }))
}

// ---------------------------------------------------------------- inference

/// A sequence classifier of either family (the family read from config.json).
pub enum Classifier {
    Bert(Box<BertPipeline>),
    Gpt2(Box<Gpt2Classifier>),
}

/// All labels with scores, best first, for each input.
pub type Ranked = Vec<Vec<LabelScore>>;

impl Classifier {
    /// Loads `model` (a folder or a hub name); GPT-2 classifiers run f32
    /// (`auto` included).
    pub fn load(model: &str, dtype: DtypeRequest<WeightDtype>) -> crate::Result<Self> {
        let dir = resolve_model_dir(model)?;
        match read_config(&dir, None)?.family() {
            Family::Bert => Ok(Classifier::Bert(Box::new(load_bert(
                "classify", model, dtype,
            )?))),
            Family::Gpt2 => {
                if let DtypeRequest::Fixed(dtype @ (WeightDtype::Bf16 | WeightDtype::Int8)) = dtype
                {
                    return Err(Error::InvalidInput(format!(
                        "`dtype` {dtype}: GPT-2 classifiers run f32"
                    )));
                }
                Ok(Classifier::Gpt2(Box::new(Gpt2Classifier::from_dir(&dir)?)))
            }
        }
    }

    /// Labels with scores for each text (HF's text-classification pipeline).
    pub fn classify(
        &mut self,
        texts: &[&str],
        batch_size: usize,
        truncate: bool,
    ) -> crate::Result<Ranked> {
        match self {
            Classifier::Bert(p) => p.classify(texts, batch_size, truncate),
            Classifier::Gpt2(c) => c.classify(texts, batch_size, truncate),
        }
    }

    /// [`Self::classify`] for text pairs.
    pub fn classify_pairs(
        &mut self,
        pairs: &[(&str, &str)],
        batch_size: usize,
        truncate: bool,
    ) -> crate::Result<Ranked> {
        match self {
            Classifier::Bert(p) => p.classify_pairs(pairs, batch_size, truncate),
            Classifier::Gpt2(c) => c.classify_pairs(pairs, batch_size, truncate),
        }
    }

    /// Rows of texts and pairs (`(text, Some(pair))`) classified in input
    /// order: the texts and the pairs each in their own batches.
    pub fn classify_rows(
        &mut self,
        rows: &[(&str, Option<&str>)],
        batch_size: usize,
        truncate: bool,
    ) -> crate::Result<Ranked> {
        match self {
            Classifier::Bert(p) => classify_rows_with(
                rows,
                |t| p.classify(t, batch_size, truncate),
                |ab| p.classify_pairs(ab, batch_size, truncate),
            ),
            Classifier::Gpt2(c) => {
                let c = std::cell::RefCell::new(c);
                classify_rows_with(
                    rows,
                    |t| c.borrow_mut().classify(t, batch_size, truncate),
                    |ab| c.borrow_mut().classify_pairs(ab, batch_size, truncate),
                )
            }
        }
    }
}

/// Classifies `rows` in input order with `texts` for the single texts and
/// `pairs` for the pairs.
pub fn classify_rows_with(
    rows: &[(&str, Option<&str>)],
    texts: impl FnOnce(&[&str]) -> crate::Result<Ranked>,
    pairs: impl FnOnce(&[(&str, &str)]) -> crate::Result<Ranked>,
) -> crate::Result<Ranked> {
    let (paired, single): (Vec<usize>, Vec<usize>) =
        (0..rows.len()).partition(|&i| rows[i].1.is_some());
    let mut out = vec![Vec::new(); rows.len()];
    if !single.is_empty() {
        let t: Vec<&str> = single.iter().map(|&i| rows[i].0).collect();
        for (&i, r) in single.iter().zip(texts(&t)?) {
            out[i] = r;
        }
    }
    if !paired.is_empty() {
        let ab: Vec<(&str, &str)> = paired
            .iter()
            .map(|&i| (rows[i].0, rows[i].1.unwrap_or_default()))
            .collect();
        for (&i, r) in paired.iter().zip(pairs(&ab)?) {
            out[i] = r;
        }
    }
    Ok(out)
}
