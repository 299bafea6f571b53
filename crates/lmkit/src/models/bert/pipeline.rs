//! BERT inference end to end (text in, answers out): sentence embeddings,
//! fill-mask, sequence classification, next-sentence prediction and span
//! question answering, over a [`Bert`] and its WordPiece tokenizer.
//!
//! Shape legend: B batch, T sequence, C channels, V vocabulary.

use std::path::Path;

use lmkit_tokenizers::wordpiece::{Truncation, WordPieceTokenizer};
use lmkit_tokenizers::Encoding;

use super::batch::plan_batches;
use super::classify::{self, LabelScore, ScoreFn};
use super::embed::{self, Pooling, SentenceConfig};
use super::fill_mask::{self, Prediction};
use super::long_inputs::{windows, LongInputs};
use super::model::{Bert, BertActivations, BertBatch, HeadKind};
use super::ner::{group_entities, NerEntity, TokenTag};
use super::qa::{self, Answer, QaOptions};
use crate::error::{Error, Result};

/// Padded tokens per batch that length bucketing aims for (32 × 128).
pub const DEFAULT_MAX_BATCH_TOKENS: usize = 32 * 128;

/// A BERT model directory loaded for inference: weights, tokenizer and the
/// sentence-transformers settings if the directory has them.
#[derive(Debug)]
pub struct BertPipeline {
    pub model: Bert,
    pub tokenizer: WordPieceTokenizer,
    /// `None` for plain HF checkpoints (no `modules.json`).
    pub sentence: Option<SentenceConfig>,
}

/// Options of [`BertPipeline::embed`].
#[derive(Debug, Clone, PartialEq)]
pub struct EmbedOptions {
    /// Overrides the model's pooling (default: its sentence-transformers
    /// config, else mean).
    pub pooling: Option<Pooling>,
    /// Overrides normalization (default: whether the model has a Normalize module).
    pub normalize: Option<bool>,
    /// Most sequences per forward pass.
    pub batch_size: usize,
    /// Texts longer than the model's length: truncated, refused, or
    /// embedded in windows ([`LongInputs`]).
    pub long: LongInputs,
    /// Keep the first `dimensions` of each embedding, re-normalized when
    /// embeddings are normalized (OpenAI's `dimensions`).
    pub dimensions: Option<usize>,
}

impl Default for EmbedOptions {
    fn default() -> Self {
        EmbedOptions {
            pooling: None,
            normalize: None,
            batch_size: 32,
            long: LongInputs::Truncate,
            dimensions: None,
        }
    }
}

impl BertPipeline {
    /// Loads `dir`: `config.json`, `model.safetensors`, the tokenizer
    /// (`tokenizer.json` or `vocab.txt`) and sentence-transformers files.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<BertPipeline> {
        let dir = dir.as_ref();
        let model = Bert::from_dir(dir)?;
        let mut tokenizer = WordPieceTokenizer::from_dir(dir)?;
        // Batching pads itself; truncation is decided per task.
        tokenizer.set_padding(None);
        tokenizer.set_truncation(None);
        if tokenizer.vocab_size() > model.config.vocab_size {
            return Err(Error::InvalidInput(format!(
                "{}: the tokenizer has {} tokens but the model's vocab_size is {}",
                dir.display(),
                tokenizer.vocab_size(),
                model.config.vocab_size
            )));
        }
        let sentence = SentenceConfig::from_dir(dir)?;
        Ok(BertPipeline {
            model,
            tokenizer,
            sentence,
        })
    }

    /// Longest input in tokens (specials included): the sentence-transformers
    /// `max_seq_length` if set, capped by the position embeddings.
    pub fn max_len(&self) -> usize {
        let pos = self.model.config.max_position_embeddings;
        self.sentence
            .as_ref()
            .and_then(|s| s.max_seq_length)
            .map_or(pos, |m| m.min(pos))
    }

    fn check_len(&self, enc: &Encoding, what: &dyn Fn() -> String) -> Result<()> {
        let max = self.model.config.max_position_embeddings;
        if enc.len() > max {
            return Err(Error::InvalidInput(format!(
                "{}: {} tokens exceed the model's maximum of {max}",
                what(),
                enc.len()
            )));
        }
        Ok(())
    }

    /// Runs the encoder over `encs` in length-bucketed batches and calls
    /// `each(index, batch, acts, row)` for every input after its batch ran;
    /// `unpad`: on the real tokens only ([`Bert::forward_unpadded`]), for
    /// callers that read no padding's row.
    fn run_bucketed(
        &self,
        encs: &[Encoding],
        batch_size: usize,
        unpad: bool,
        mut each: impl FnMut(&[usize], &BertBatch, &BertActivations) -> Result<()>,
    ) -> Result<()> {
        let lens: Vec<usize> = encs.iter().map(Encoding::len).collect();
        let max_tokens = DEFAULT_MAX_BATCH_TOKENS
            .max(batch_size.saturating_mul(lens.iter().copied().max().unwrap_or(0).min(128)));
        let mut acts = BertActivations::new(false);
        for idx in plan_batches(&lens, batch_size.max(1), max_tokens) {
            let refs: Vec<&Encoding> = idx.iter().map(|&i| &encs[i]).collect();
            let batch = BertBatch::from_encodings(&refs, self.tokenizer.pad_id())?;
            if unpad {
                self.model.forward_unpadded(&batch, &mut acts)?;
            } else {
                self.model.forward(&batch, &mut acts)?;
            }
            each(&idx, &batch, &acts)?;
        }
        Ok(())
    }

    /// Width of the embeddings [`Self::embed`] gives with `pooling` (the
    /// model's when `None`), before any `dimensions`.
    pub fn embedding_dims(&self, pooling: Option<Pooling>) -> usize {
        let modes = match pooling {
            Some(_) => 1,
            None => self.sentence.as_ref().map_or_else(
                || SentenceConfig::default().pooling.len(),
                |s| s.pooling.len(),
            ),
        };
        modes * self.model.config.hidden_size
    }

    /// Sentence embeddings, one per text, in input order. Texts longer than
    /// [`Self::max_len`] are truncated (as sentence-transformers does),
    /// refused, or embedded in windows whose pooled vectors are averaged,
    /// weighted by their tokens ([`EmbedOptions::long`]). An empty text
    /// embeds `[CLS] [SEP]`.
    pub fn embed(&self, texts: &[&str], opts: &EmbedOptions) -> Result<Vec<Vec<f32>>> {
        let st = self.sentence.clone().unwrap_or_default();
        let modes = match opts.pooling {
            Some(p) => vec![p],
            None => st.pooling.clone(),
        };
        let normalize = opts.normalize.unwrap_or(st.normalize);
        let max_len = self.max_len();
        if max_len < 3 {
            return Err(Error::InvalidInput(format!(
                "max_seq_length {max_len} leaves no room for text"
            )));
        }
        let d = modes.len() * self.model.config.hidden_size;
        if let Some(k) = opts.dimensions.filter(|&k| k == 0 || k > d) {
            return Err(Error::InvalidInput(format!(
                "`dimensions` {k}: this model's embeddings have {d} (ask for 1 to {d})"
            )));
        }
        let (room, stride) = match opts.long {
            LongInputs::Chunk(c) => c.room_and_stride(max_len)?,
            _ => (max_len - 2, max_len - 2),
        };
        let lowered: Vec<String>;
        let lowered_refs: Vec<&str>;
        let texts: &[&str] = if st.do_lower_case {
            lowered = texts.iter().map(|t| t.to_lowercase()).collect();
            lowered_refs = lowered.iter().map(String::as_str).collect();
            &lowered_refs
        } else {
            texts
        };
        // Each text becomes one or more pieces (windows); piece -> (text, weight).
        let mut pieces: Vec<Encoding> = Vec::new();
        let mut owner: Vec<(usize, f32)> = Vec::new();
        let encoded = self.tokenizer.encode_batch(texts, false)?;
        let (cls, sep) = (self.tokenizer.cls_id(), self.tokenizer.sep_id());
        for (ti, body) in encoded.into_iter().enumerate() {
            let n = body.ids.len();
            let spans = match opts.long {
                LongInputs::Chunk(_) => windows(n, room, stride),
                LongInputs::Refuse if n > room => {
                    return Err(Error::ContextTooLong {
                        len: n + 2,
                        max: max_len,
                    })
                }
                _ => vec![(0, n.min(room))],
            };
            for (start, end) in spans {
                let mut ids = Vec::with_capacity(end - start + 2);
                ids.push(cls);
                ids.extend_from_slice(&body.ids[start..end]);
                ids.push(sep);
                let k = ids.len();
                pieces.push(Encoding {
                    ids,
                    type_ids: vec![0; k],
                    offsets: vec![(0, 0); k],
                    special_tokens_mask: vec![0; k],
                    attention_mask: vec![1; k],
                });
                owner.push((ti, k as f32));
            }
        }
        let pooled = self.pool_pieces(&pieces, &modes, opts.batch_size)?;
        // Average windows of a text (token-weighted), keep `dimensions`, then normalize.
        let mut out = vec![vec![0.0f32; d]; texts.len()];
        let mut weight = vec![0.0f32; texts.len()];
        for (pi, &(ti, w)) in owner.iter().enumerate() {
            weight[ti] += w;
            for (o, &x) in out[ti].iter_mut().zip(&pooled[pi * d..(pi + 1) * d]) {
                *o += w * x;
            }
        }
        for (v, w) in out.iter_mut().zip(weight) {
            v.iter_mut().for_each(|x| *x /= w);
            if let Some(k) = opts.dimensions {
                v.truncate(k);
            }
            if normalize {
                embed::l2_normalize(v);
            }
        }
        Ok(out)
    }

    /// The pooled vectors (`modes` concatenated) of `pieces`, flat, in order.
    fn pool_pieces(
        &self,
        pieces: &[Encoding],
        modes: &[Pooling],
        batch_size: usize,
    ) -> Result<Vec<f32>> {
        let c = self.model.config.hidden_size;
        let d = modes.len() * c;
        let mut pooled = vec![0.0f32; pieces.len() * d];
        self.run_bucketed(pieces, batch_size, true, |idx, batch, acts| {
            let mut out = vec![0.0; idx.len() * d];
            match acts.packed() {
                // Each sequence's rows: its real tokens, in order.
                Some(p) => {
                    let ones = vec![1u8; batch.t];
                    for (bi, rows) in p.spans().enumerate() {
                        let len = rows.len();
                        embed::pool(
                            &acts.hidden()[rows.start * c..rows.end * c],
                            &ones[..len],
                            1,
                            len,
                            c,
                            modes,
                            &mut out[bi * d..(bi + 1) * d],
                        );
                    }
                }
                None => embed::pool(
                    acts.hidden(),
                    &batch.attention_mask,
                    batch.b,
                    batch.t,
                    c,
                    modes,
                    &mut out,
                ),
            }
            for (row, &i) in idx.iter().enumerate() {
                pooled[i * d..(i + 1) * d].copy_from_slice(&out[row * d..(row + 1) * d]);
            }
            Ok(())
        })?;
        Ok(pooled)
    }

    /// Top-`k` predictions for each `[MASK]` of `text`, in order of appearance.
    pub fn fill_mask(&self, text: &str, k: usize) -> Result<Vec<Vec<Prediction>>> {
        self.model.require(HeadKind::MaskedLm)?;
        let mask = self
            .tokenizer
            .mask_id()
            .ok_or_else(|| Error::InvalidInput("the tokenizer has no [MASK] token".into()))?;
        let enc = self.tokenizer.encode(text, true)?;
        self.check_len(&enc, &|| "the text".into())?;
        let rows: Vec<usize> = (0..enc.len()).filter(|&i| enc.ids[i] == mask).collect();
        if rows.is_empty() {
            let tok = self.tokenizer.id_to_token(mask).unwrap_or("[MASK]");
            return Err(Error::InvalidInput(format!(
                "the text has no {tok} token to fill"
            )));
        }
        let batch = BertBatch::from_encodings(&[&enc], self.tokenizer.pad_id())?;
        let mut acts = BertActivations::new(false);
        self.model.forward(&batch, &mut acts)?;
        let logits = self.model.mlm_logits(&acts, &rows)?;
        let v = self.model.config.vocab_size;
        let name = |id: u32| self.tokenizer.id_to_token(id).map(str::to_string);
        let single = rows.len() == 1;
        let mut out = Vec::with_capacity(rows.len());
        for (l, &slot) in logits.chunks_exact(v).zip(&rows) {
            let mut preds = fill_mask::predictions(l, k, &name);
            for p in &mut preds {
                let mut filled = enc.ids.clone();
                filled[slot] = p.id;
                p.sequence = self.tokenizer.decode(&filled, single)?;
            }
            out.push(preds);
        }
        Ok(out)
    }

    /// Labels with scores (best first) for each text, as HF's
    /// text-classification pipeline computes them. Texts longer than the
    /// model's positions are an error unless `truncate`.
    pub fn classify(
        &self,
        texts: &[&str],
        batch_size: usize,
        truncate: bool,
    ) -> Result<Vec<Vec<LabelScore>>> {
        self.model.require(HeadKind::Classifier)?;
        let encs = self.encode_checked(truncate, |tok, t| {
            tok.encode_batch_truncated(texts, true, t)
        })?;
        self.ranked(self.classifier_logits(&encs, batch_size)?)
    }

    /// [`Self::classify`] for text pairs (`tokenizer(a, b)`: entailment,
    /// paraphrase, a model fine-tuned on `text_pair`).
    pub fn classify_pairs(
        &self,
        pairs: &[(&str, &str)],
        batch_size: usize,
        truncate: bool,
    ) -> Result<Vec<Vec<LabelScore>>> {
        self.model.require(HeadKind::Classifier)?;
        let encs = self.encode_checked(truncate, |tok, t| {
            tok.encode_pair_batch_truncated(pairs, true, t)
        })?;
        self.ranked(self.classifier_logits(&encs, batch_size)?)
    }

    /// Raw classifier logits `[num_labels]` of each text pair, as HF's
    /// `BertForSequenceClassification` gives them for `tokenizer(a, b)`: with
    /// one label, a cross-encoder's relevance score (TEI's `/rerank`,
    /// sentence-transformers' `CrossEncoder`, before its sigmoid). Pairs
    /// longer than the model's positions are an error unless `truncate`
    /// (longest first, as HF).
    pub fn score_pairs(
        &self,
        pairs: &[(&str, &str)],
        batch_size: usize,
        truncate: bool,
    ) -> Result<Vec<Vec<f32>>> {
        self.model.require(HeadKind::Classifier)?;
        let encs = self.encode_checked(truncate, |tok, t| {
            tok.encode_pair_batch_truncated(pairs, true, t)
        })?;
        self.classifier_logits(&encs, batch_size)
    }

    /// The classifier's logits `[num_labels]` of each encoding.
    fn classifier_logits(&self, encs: &[Encoding], batch_size: usize) -> Result<Vec<Vec<f32>>> {
        let l = self.model.config.num_labels();
        let mut out = vec![Vec::new(); encs.len()];
        self.run_bucketed(encs, batch_size, true, |idx, _, acts| {
            let logits = self.model.classifier_logits(&self.model.pooled(acts)?)?;
            for (row, &i) in idx.iter().enumerate() {
                out[i] = logits[row * l..(row + 1) * l].to_vec();
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Labels with scores, best first, as HF's text-classification pipeline
    /// turns logits into them (softmax, or sigmoid for one label / multi-label).
    fn ranked(&self, logits: Vec<Vec<f32>>) -> Result<Vec<Vec<LabelScore>>> {
        let cfg = &self.model.config;
        let f = ScoreFn::for_problem(cfg.problem_type, cfg.num_labels());
        Ok(logits
            .iter()
            .map(|l| classify::ranked(l, &cfg.id2label, f))
            .collect())
    }

    /// Encodes with `encode`, truncated to the model's positions if
    /// `truncate`, else checked to fit them.
    fn encode_checked(
        &self,
        truncate: bool,
        encode: impl Fn(
            &WordPieceTokenizer,
            Option<&Truncation>,
        ) -> lmkit_tokenizers::Result<Vec<Encoding>>,
    ) -> Result<Vec<Encoding>> {
        // The limit is handed to the encode call: a copy of the tokenizer
        // to set it on cost more than the encoding (~3 ms for MiniLM's).
        let limit = truncate.then(|| Truncation::new(self.model.config.max_position_embeddings));
        let encs = encode(
            &self.tokenizer,
            limit.as_ref().or(self.tokenizer.truncation()),
        )?;
        for (i, e) in encs.iter().enumerate() {
            self.check_len(e, &|| format!("input {}", i + 1))?;
        }
        Ok(encs)
    }

    /// Entities in `text` (HF's token-classification pipeline with
    /// `aggregation_strategy="simple"`, see [`super::ner`]); a text longer
    /// than the model's positions is an error unless `truncate`.
    pub fn ner(&self, text: &str, truncate: bool) -> Result<Vec<NerEntity>> {
        self.model.require(HeadKind::TokenClassifier)?;
        let enc = self
            .encode_checked(truncate, |tok, t| {
                tok.encode_batch_truncated(&[text], true, t)
            })?
            .remove(0);
        let batch = BertBatch::from_encodings(&[&enc], self.tokenizer.pad_id())?;
        let mut acts = BertActivations::new(false);
        self.model.forward(&batch, &mut acts)?;
        let logits = self.model.token_logits(&acts)?;
        let names = &self.model.config.id2label;
        let l = names.len();
        // Byte offsets → character offsets.
        let chars = |b: usize| text.get(..b).map_or(0, |s| s.chars().count());
        let mut tokens = Vec::new();
        for (i, &id) in enc.ids.iter().enumerate() {
            if enc.special_tokens_mask.get(i) == Some(&1) {
                continue;
            }
            let p = ScoreFn::Softmax.apply(&logits[i * l..(i + 1) * l]);
            let best = (0..l).fold(0, |b, k| if p[k] > p[b] { k } else { b });
            let (s, e) = enc.offsets.get(i).copied().unwrap_or((0, 0));
            let word = if id == self.tokenizer.unk_id() {
                text.get(s..e).unwrap_or_default().to_string()
            } else {
                self.tokenizer
                    .id_to_token(id)
                    .unwrap_or_default()
                    .to_string()
            };
            tokens.push(TokenTag {
                tag: names[best].clone(),
                score: p[best],
                word,
                start: chars(s),
                end: chars(e),
            });
        }
        Ok(group_entities(&tokens))
    }

    /// Next-sentence prediction: `[p(B follows A), p(B is random)]`.
    pub fn next_sentence(&self, a: &str, b: &str) -> Result<[f32; 2]> {
        self.model.require(HeadKind::NextSentence)?;
        let enc = self.tokenizer.encode_pair(a, b, true)?;
        self.check_len(&enc, &|| "the sentence pair".into())?;
        let batch = BertBatch::from_encodings(&[&enc], self.tokenizer.pad_id())?;
        let mut acts = BertActivations::new(false);
        self.model.forward(&batch, &mut acts)?;
        let logits = self.model.nsp_logits(&self.model.pooled(&acts)?)?;
        let p = ScoreFn::Softmax.apply(&logits);
        Ok([p[0], p[1]])
    }

    /// Answers to `question` in `context`: the context is split into windows
    /// of `max_len` tokens overlapping by `stride` (HF pipeline defaults 384
    /// and 128), each window scored, the best spans returned.
    pub fn answer(
        &self,
        question: &str,
        context: &str,
        max_len: usize,
        stride: usize,
        opts: QaOptions,
    ) -> Result<Vec<Answer>> {
        self.model.require(HeadKind::QuestionAnswering)?;
        if question.trim().is_empty() {
            return Err(Error::InvalidInput("the question is empty".into()));
        }
        if context.trim().is_empty() {
            return Err(Error::InvalidInput("the context is empty".into()));
        }
        let max_len = max_len.min(self.model.config.max_position_embeddings);
        let windows = self
            .tokenizer
            .encode_pair_windows(question, context, max_len, stride)
            .map_err(|e| {
                Error::InvalidInput(format!(
                    "{e} (windows of `max_seq_len` {max_len} tokens overlapping by `doc_stride` {stride})"
                ))
            })?;
        let encs: Vec<Encoding> = windows.into_iter().map(|w| w.encoding).collect();
        let mut logits: Vec<(Vec<f32>, Vec<f32>)> = vec![Default::default(); encs.len()];
        self.run_bucketed(&encs, 8, true, |idx, _, acts| {
            let (s, e) = self.model.qa_logits(acts)?;
            for (bi, &i) in idx.iter().enumerate() {
                let r = acts.span(bi, encs[i].len())?;
                logits[i] = (s[r.clone()].to_vec(), e[r].to_vec());
            }
            Ok(())
        })?;
        let wins: Vec<qa::QaWindow> = encs
            .iter()
            .zip(&logits)
            .map(|(enc, (s, e))| qa::QaWindow {
                encoding: enc,
                start_logits: s,
                end_logits: e,
            })
            .collect();
        let cont = |id: u32| {
            self.tokenizer
                .id_to_token(id)
                .is_some_and(|t| t.starts_with("##"))
        };
        Ok(qa::best_answers(&wins, context, &cont, opts))
    }
}
