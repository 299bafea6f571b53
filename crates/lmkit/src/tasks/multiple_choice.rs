//! Multiple choice, both families, `batch_size` examples of K choices per
//! step: `BertForMultipleChoice` (HF run_swag: each choice the pair
//! (context, question + choice), the pooled `[CLS]` of each scored by
//! `classifier` [1, C], cross-entropy over the K scores) or
//! `GPT2DoubleHeadsModel` (GPT-1 §3.2: each choice is `context question
//! <|endoftext|> choice`, `multiple_choice_head` scores its last token, and
//! the loss adds `lm_coef` times the LM loss on the same sequences; saved
//! with `pad_token_id` and `num_labels` 1, as HF has it).
//!
//! Data: JSONL `{"context", "question"?, "choices", "label"}` or SWAG's
//! columns, the same K on every row of a file (the evaluation file may have
//! another K). Metrics: `loss` (cross-entropy of the right choice),
//! `accuracy`, `examples`.

use lmkit_tokenizers::wordpiece::WordPieceTokenizer;
use lmkit_tokenizers::{BpeTokenizer, Encoding};
use serde_json::json;

use crate::checkpoint::{load_pretrained, open_model_dir_for, LoadOptions};
use crate::data::multiple_choice::{read_multiple_choice, ChoiceData};
use crate::eval::benchmark::{metrics, Evaluation};
use crate::eval::run::{
    encode_gpt2_multiple_choice, encode_multiple_choice, eval_gpt2_multiple_choice,
    eval_multiple_choice, ChoiceEval,
};
use crate::models::bert::{Bert, BertTargets, BertTrainBatch, BertTrainer, HeadKind};
use crate::models::gpt2::classify::task_batch;
use crate::models::gpt2::{Gpt2, Gpt2TaskBatch, Gpt2TaskTrainer};
use crate::spec::config::{AnyConfig, BertConfig, Gpt2Config};
use crate::spec::names::{Architecture, Family};

use super::common::{
    check_fits, eval_len, gpt2_task_tokens, load_bert_as, load_gpt2_as, pad_batch, save_bert,
    save_gpt2,
};
use super::error::{invalid, Result};
use super::{EvalCx, Metrics, PrepareCx, Prepared, Session, Task};

pub struct MultipleChoice;

impl Task for MultipleChoice {
    fn name(&self) -> &'static str {
        "multiple-choice"
    }
    fn summary(&self) -> &'static str {
        "multiple choice (BERT, or GPT-2's double-heads model with the auxiliary LM loss)"
    }
    fn data_format(&self) -> &'static str {
        "JSONL {\"context\", \"question\"?, \"choices\", \"label\"} or SWAG's columns"
    }
    fn scores(&self) -> &'static str {
        "accuracy"
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
        let mut data = read_multiple_choice(cx.data)?;
        data.examples = cx.opts.select(data.examples, cx.keep, |e| {
            std::iter::once(e.context.as_str())
                .chain(e.question.as_deref())
                .chain(e.choices.iter().map(String::as_str))
                .collect()
        });
        let (dir, bs, max) = (cx.model_dir, cx.opts.forward_batch(), cx.opts.max_seq_len);
        let r = match &cx.config {
            AnyConfig::Bert(_) => {
                let model = Bert::from_dir(dir)?;
                model.require(HeadKind::MultipleChoice)?;
                let tok = WordPieceTokenizer::from_dir(dir)?;
                let t = eval_len(max, 128, model.config.max_position_embeddings);
                BertSet::new(&tok, &data, t)?.score(&model, bs)?
            }
            AnyConfig::Gpt2(_) => {
                let arch = Architecture::Gpt2DoubleHeadsModel;
                let pre = load_pretrained(
                    &dir.display().to_string(),
                    Some(arch),
                    LoadOptions::default(),
                )?;
                let AnyConfig::Gpt2(config) = pre.config else {
                    return Err(invalid(format!("{}: not a GPT-2 config", dir.display())));
                };
                let tok = BpeTokenizer::from_dir(dir)?;
                let eos = tok.endoftext_id().ok_or_else(|| {
                    invalid(format!(
                        "{}: the tokenizer has no <|endoftext|> token (the choice delimiter)",
                        dir.display()
                    ))
                })?;
                let mut model = Gpt2::from_params_for(config, arch, pre.params)?;
                let t = eval_len(max, 128, model.config.n_positions);
                Gpt2Set::new(&tok, &data, t, eos).score(&mut model, bs)?
            }
        };
        let predictions = data
            .examples
            .iter()
            .zip(r.predictions.iter().zip(&r.scores))
            .map(|(e, (&p, s))| json!({"line": e.line, "choice": p, "label": e.label, "scores": s}))
            .collect();
        Ok(Evaluation {
            metrics: choice_metrics(&r),
            predictions,
        })
    }
}

/// The metrics of a multiple-choice evaluation (both families).
pub fn choice_metrics(r: &ChoiceEval) -> Metrics {
    metrics(json!({
        "loss": r.loss,
        "accuracy": r.accuracy,
        "examples": r.count,
    }))
}

/// BERT's encodings of a multiple-choice set: `[E·K]`, with the gold choices.
struct BertSet {
    encs: Vec<Encoding>,
    k: usize,
    gold: Vec<usize>,
    pad: u32,
}

impl BertSet {
    fn new(tok: &WordPieceTokenizer, data: &ChoiceData, max_len: usize) -> Result<Self> {
        Ok(BertSet {
            encs: encode_multiple_choice(tok, data, max_len)?,
            k: data.num_choices,
            gold: data.labels(),
            pad: tok.pad_id(),
        })
    }

    fn score(&self, model: &Bert, batch_size: usize) -> Result<ChoiceEval> {
        Ok(eval_multiple_choice(
            model, self.pad, &self.encs, self.k, &self.gold, batch_size,
        )?)
    }
}

/// GPT-2's token rows of a multiple-choice set: `[E·K]`, with the gold choices.
struct Gpt2Set {
    rows: Vec<Vec<u32>>,
    k: usize,
    gold: Vec<usize>,
}

impl Gpt2Set {
    fn new(tok: &BpeTokenizer, data: &ChoiceData, max_len: usize, eos: u32) -> Self {
        Gpt2Set {
            rows: encode_gpt2_multiple_choice(tok, data, max_len, eos),
            k: data.num_choices,
            gold: data.labels(),
        }
    }

    fn score(&self, model: &mut Gpt2, batch_size: usize) -> Result<ChoiceEval> {
        Ok(eval_gpt2_multiple_choice(
            model, &self.rows, self.k, &self.gold, batch_size,
        )?)
    }
}

fn prepare_bert(cx: &PrepareCx<'_>, config: BertConfig) -> Result<Prepared> {
    let (dir, opts) = (cx.model_dir, cx.opts);
    let arch = Architecture::BertForMultipleChoice;
    // A sequence classifier's `classifier` has one row per label; this head
    // has one score per choice: said plainly rather than as a shape mismatch.
    let (_, file) = open_model_dir_for(dir, None)?;
    if let Some(shape) = file
        .shape("classifier.weight")
        .filter(|s| s.first() != Some(&1))
    {
        return Err(invalid(format!(
            "{}: its classifier.weight has shape {shape:?} (a sequence classifier's); multiple \
             choice scores each choice with one output [1, hidden]: start from the encoder it \
             was fine-tuned from, or a BertForMultipleChoice checkpoint",
            dir.display()
        )));
    }
    let tok = WordPieceTokenizer::from_dir(dir)?;
    check_fits(dir, &tok, &config, true)?;
    let train = read_multiple_choice(cx.train)?;
    let eval = cx.eval.map(read_multiple_choice).transpose()?;
    let max_len = opts.max_seq_len.min(config.max_position_embeddings);
    let (model, _) = load_bert_as(dir, config, arch, opts.seed)?;
    let set = BertSet::new(&tok, &train, max_len)?;
    let eval_set = eval
        .as_ref()
        .map(|d| BertSet::new(&tok, d, max_len))
        .transpose()?;
    let description = format!(
        "multiple-choice: {} choices, {} train examples ({} sequences of ≤ {max_len} tokens)",
        set.k,
        train.examples.len(),
        set.encs.len()
    );
    let (bs, shard) = (opts.eval_batch_size, opts.max_shard_size);
    Ok(Prepared::Bert(Session {
        model: BertTrainer::new(model)?,
        batch: BertTrainBatch::default(),
        train_items: set.gold.len(),
        eval_items: eval_set.as_ref().map_or(0, |s| s.gold.len()),
        description,
        fill: Box::new(move |idx, bt| {
            // [B, K, T] as [B·K, T]: each example's K choices in order.
            let k = set.k;
            let refs: Vec<&Encoding> = idx
                .iter()
                .flat_map(|&i| &set.encs[i * k..(i + 1) * k])
                .collect();
            bt.batch = pad_batch(&refs, set.pad);
            bt.targets =
                BertTargets::MultipleChoice(idx.iter().map(|&i| set.gold[i] as i32).collect());
        }),
        evaluate: Box::new(move |m| {
            let Some(s) = &eval_set else { return Ok(None) };
            Ok(Some(choice_metrics(&s.score(&m.model, bs)?)))
        }),
        save: Box::new(move |t, d| save_bert(&t.model, arch, &tok, shard, d)),
    }))
}

fn prepare_gpt2(cx: &PrepareCx<'_>, mut config: Gpt2Config) -> Result<Prepared> {
    let (dir, opts) = (cx.model_dir, cx.opts);
    let arch = Architecture::Gpt2DoubleHeadsModel;
    let tok = BpeTokenizer::from_dir(dir)?;
    let (eos, pad) = gpt2_task_tokens(&tok, &mut config, "choice")?;
    // HF's GPT2DoubleHeadsModel: one score per choice.
    config.set_num_labels(1);
    let train = read_multiple_choice(cx.train)?;
    let eval = cx.eval.map(read_multiple_choice).transpose()?;
    let (model, _) = load_gpt2_as(dir, config, arch, opts.seed)?;
    let t = opts.max_seq_len.min(model.config.n_positions);
    let set = Gpt2Set::new(&tok, &train, t, eos);
    let eval_set = eval.as_ref().map(|d| Gpt2Set::new(&tok, d, t, eos));
    let description = format!(
        "multiple-choice (GPT-2, lm_coef {}): {} choices, {} train examples ({} sequences of ≤ {t} tokens)",
        opts.lm_coef,
        set.k,
        train.examples.len(),
        set.rows.len()
    );
    let (bs, shard) = (opts.eval_batch_size, opts.max_shard_size);
    Ok(Prepared::Gpt2Head(Session {
        model: Gpt2TaskTrainer {
            model,
            lm_coef: opts.lm_coef,
        },
        batch: Gpt2TaskBatch::default(),
        train_items: set.gold.len(),
        eval_items: eval_set.as_ref().map_or(0, |s| s.gold.len()),
        description,
        fill: Box::new(move |idx, bt| {
            let k = set.k;
            let refs: Vec<&[u32]> = idx
                .iter()
                .flat_map(|&i| &set.rows[i * k..(i + 1) * k])
                .map(Vec::as_slice)
                .collect();
            let gold = idx.iter().map(|&i| set.gold[i] as u32).collect();
            *bt = task_batch(&refs, pad, gold, k);
        }),
        evaluate: Box::new(move |m| {
            let Some(s) = &eval_set else { return Ok(None) };
            Ok(Some(choice_metrics(&s.score(&mut m.model, bs)?)))
        }),
        save: Box::new(move |t, d| save_gpt2(&t.model, arch, &tok, shard, d)),
    }))
}
