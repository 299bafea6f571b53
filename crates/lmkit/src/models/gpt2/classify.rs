//! GPT-2 sequence classification for inference (`GPT2ForSequenceClassification`):
//! a checkpoint and its BPE tokenizer, texts or text pairs in, labels with
//! HF pipeline scores out.
//!
//! Inputs are encoded as lmkit fine-tunes them: the text's tokens, for a
//! pair `text <|endoftext|> pair` (GPT-1's delimiter, with GPT-2's
//! vocabulary), no other special tokens; the head reads the last token that
//! is not `pad_token_id` ([`Gpt2::last_non_pad`]).
//!
//! Shape legend: B texts per batch, T tokens, L labels.

use std::path::Path;

use lmkit_tokenizers::BpeTokenizer;

use crate::checkpoint::{load_params, open_model_dir_for, LoadOptions};
use crate::error::{Error, Result};
use crate::models::bert::{classify::ranked, LabelScore, ScoreFn};
use crate::models::gpt2::{Gpt2, Gpt2TaskBatch};
use crate::spec::config::{AnyConfig, ProblemType};
use crate::spec::layout::gpt2_layout_for;
use crate::spec::names::{Architecture, Family};

/// The model's tokens for one input: `text`, or `text <|endoftext|> pair`.
pub fn encode_for_classify(
    tok: &BpeTokenizer,
    delimiter: u32,
    text: &str,
    pair: Option<&str>,
) -> Vec<u32> {
    let mut ids = tok.encode_ordinary(text.as_bytes());
    if let Some(p) = pair {
        ids.push(delimiter);
        ids.extend(tok.encode_ordinary(p.as_bytes()));
    }
    ids
}

/// One choice of a multiple-choice example as GPT-1 §3.2 transforms it:
/// `prefix <|endoftext|> choice` (`prefix` = context and question), the
/// multiple-choice head reading its last token. Longer than `max_len`, the
/// prefix loses tokens from its start (the end of a context is what a choice
/// continues), then the choice from its end.
pub fn encode_choice(
    tok: &BpeTokenizer,
    delimiter: u32,
    prefix: &str,
    choice: &str,
    max_len: usize,
) -> Vec<u32> {
    let p = tok.encode_ordinary(prefix.as_bytes());
    let mut c = tok.encode_ordinary(choice.as_bytes());
    c.truncate(max_len.saturating_sub(1));
    let keep = max_len.saturating_sub(1 + c.len()).min(p.len());
    let mut ids = Vec::with_capacity(keep + 1 + c.len());
    ids.extend_from_slice(&p[p.len() - keep..]);
    ids.push(delimiter);
    ids.extend(c);
    ids
}

/// A right-padded batch of `rows` (an empty row becomes one `pad` token)
/// with `labels`, `choices` rows per example.
pub fn task_batch(rows: &[&[u32]], pad: u32, labels: Vec<u32>, choices: usize) -> Gpt2TaskBatch {
    let t = rows.iter().map(|r| r.len().max(1)).max().unwrap_or(1);
    let mut inputs = vec![pad; rows.len() * t];
    for (i, r) in rows.iter().enumerate() {
        inputs[i * t..i * t + r.len()].copy_from_slice(r);
    }
    Gpt2TaskBatch {
        inputs,
        lens: rows.iter().map(|r| r.len().max(1)).collect(),
        rows: rows.len(),
        t,
        labels,
        choices,
    }
}

/// A GPT-2 sequence classifier with its tokenizer.
pub struct Gpt2Classifier {
    pub model: Gpt2,
    pub tokenizer: BpeTokenizer,
    /// `<|endoftext|>`: the pair delimiter.
    delimiter: u32,
    pad: u32,
}

impl Gpt2Classifier {
    /// Loads a `GPT2ForSequenceClassification` folder (config.json with a
    /// `pad_token_id`, weights, vocab.json + merges.txt).
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let arch = Architecture::Gpt2ForSequenceClassification;
        let (config, file) = open_model_dir_for(dir, Some((Family::Gpt2, arch.hf_name())))?;
        let AnyConfig::Gpt2(config) = config else {
            return Err(Error::InvalidInput("not a GPT-2 config".into()));
        };
        let layout = gpt2_layout_for(&config, arch)?;
        let mut params = layout.try_zeros()?;
        load_params(
            &layout,
            &mut params,
            &file,
            Family::Gpt2,
            LoadOptions::default(),
        )?;
        let tokenizer = BpeTokenizer::from_dir(dir)?;
        let delimiter = tokenizer.endoftext_id().ok_or_else(|| {
            Error::InvalidInput(format!(
                "{}: the tokenizer has no <|endoftext|> token (the pair delimiter)",
                dir.display()
            ))
        })?;
        let pad = config.pad_token_id.ok_or_else(|| {
            Error::InvalidInput(format!(
                "{}: config.json has no pad_token_id, which GPT-2 classification needs",
                dir.display()
            ))
        })?;
        let model = Gpt2::from_params_for(config, arch, params)?;
        Ok(Gpt2Classifier {
            model,
            tokenizer,
            delimiter,
            pad,
        })
    }

    /// Labels with scores (best first) for each text, as HF's
    /// text-classification pipeline scores them. Inputs longer than the
    /// model's positions are an error unless `truncate` (keeps the start).
    pub fn classify(
        &mut self,
        texts: &[&str],
        batch_size: usize,
        truncate: bool,
    ) -> Result<Vec<Vec<LabelScore>>> {
        let rows: Vec<(&str, Option<&str>)> = texts.iter().map(|&t| (t, None)).collect();
        self.run(&rows, batch_size, truncate)
    }

    /// [`Self::classify`] for text pairs (`text <|endoftext|> pair`).
    pub fn classify_pairs(
        &mut self,
        pairs: &[(&str, &str)],
        batch_size: usize,
        truncate: bool,
    ) -> Result<Vec<Vec<LabelScore>>> {
        let rows: Vec<(&str, Option<&str>)> = pairs.iter().map(|&(a, b)| (a, Some(b))).collect();
        self.run(&rows, batch_size, truncate)
    }

    /// Class logits `[L]` of each encoded row, `batch_size` rows at a time.
    pub fn logits(&mut self, rows: &[Vec<u32>], batch_size: usize) -> Result<Vec<Vec<f32>>> {
        let l = self.model.config.num_labels();
        let mut out = Vec::with_capacity(rows.len());
        for chunk in rows.chunks(batch_size.max(1)) {
            let refs: Vec<&[u32]> = chunk.iter().map(Vec::as_slice).collect();
            let batch = task_batch(&refs, self.pad, vec![0; chunk.len()], 1);
            let logits = self.model.forward_task(&batch, 0.0)?.logits;
            out.extend(logits.chunks_exact(l).map(<[f32]>::to_vec));
        }
        Ok(out)
    }

    fn run(
        &mut self,
        rows: &[(&str, Option<&str>)],
        batch_size: usize,
        truncate: bool,
    ) -> Result<Vec<Vec<LabelScore>>> {
        let max = self.model.config.n_positions;
        let mut encoded = Vec::with_capacity(rows.len());
        for (i, &(text, pair)) in rows.iter().enumerate() {
            let mut ids = encode_for_classify(&self.tokenizer, self.delimiter, text, pair);
            if ids.len() > max {
                if !truncate {
                    return Err(Error::InvalidInput(format!(
                        "input {} has {} tokens, more than the model's {max} positions",
                        i + 1,
                        ids.len()
                    )));
                }
                ids.truncate(max);
            }
            encoded.push(ids);
        }
        let logits = self.logits(&encoded, batch_size)?;
        let cfg = &self.model.config;
        let problem = cfg
            .extra
            .get("problem_type")
            .and_then(|v| v.as_str())
            .and_then(|t| ProblemType::parse(t).ok());
        let f = ScoreFn::for_problem(problem, cfg.num_labels());
        Ok(logits.iter().map(|l| ranked(l, &cfg.id2label, f)).collect())
    }
}
