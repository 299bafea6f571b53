//! BERT pretraining's data: the corpus of tokenized documents and its
//! validation split ([`prepare_corpus`]), the `[B, T]` pair batches
//! ([`PairBatcher`]), and each epoch's pairs and visiting order, all
//! seeded so that `(epoch, cursor)` is all a resume needs.

use std::path::PathBuf;

use lmkit_tokenizers::wordpiece::WordPieceTokenizer;
use rayon::prelude::*;

use crate::data::mlm::{MlmConfig, MlmMasker, IGNORE_INDEX};
use crate::data::nsp::{build_nsp_pairs, read_bert_documents, NspConfig, NspPair};
use crate::models::bert::{BertBatch, BertTargets, BertTrainBatch};
use crate::util::rng::Rng;

use super::super::{invalid, Result};
use super::BertRunConfig;

/// Sub-stream tags of the pretraining RNGs.
const PAIRS: u64 = 0x5041_4952; // "PAIR"
const MASKS: u64 = 0x4d41_534b; // "MASK"
const ORDER: u64 = 0x4f52_4452; // "ORDR"
pub(super) const VAL: u64 = 0x0056_414c; // "VAL"

/// Tokenized documents (sentences of ids), split into training and validation.
pub struct BertCorpus {
    pub train: Vec<Vec<Vec<u32>>>,
    pub val: Vec<Vec<Vec<u32>>>,
    /// A fingerprint of the token stream (checked on resume).
    pub fingerprint: String,
    /// What the reader did that the user should know (e.g. split a single document).
    pub notes: Vec<String>,
}

/// Reads ([`read_bert_documents`]: one sentence per line, a blank line
/// between documents) and tokenizes `paths`; holds out every
/// `round(1/val_fraction)`-th document (none with fewer than 2 per side).
/// Next-sentence prediction draws its random B from another document, so a
/// corpus of a single document is split in two halves at a sentence
/// boundary (said in `notes`).
pub fn prepare_corpus(
    paths: &[PathBuf],
    text_field: &str,
    tok: &WordPieceTokenizer,
    val_fraction: f64,
) -> Result<BertCorpus> {
    if !(0.0..=0.5).contains(&val_fraction) {
        return Err(invalid(format!(
            "validation fraction {val_fraction} is outside [0, 0.5]"
        )));
    }
    // Sentences are tokenized alone: no padding, no truncation.
    let mut tok = tok.clone();
    tok.set_padding(None);
    tok.set_truncation(None);
    let tok = &tok;
    let texts = read_bert_documents(paths, text_field)?;
    let mut docs: Vec<Vec<Vec<u32>>> = texts
        .par_iter()
        .map(|d| -> Result<Vec<Vec<u32>>> {
            let mut sents = Vec::new();
            for s in d {
                let ids = tok.encode(s, false)?.ids;
                if !ids.is_empty() {
                    sents.push(ids);
                }
            }
            Ok(sents)
        })
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .filter(|d| !d.is_empty())
        .collect();
    let mut notes = Vec::new();
    if docs.len() == 1 && docs[0].len() >= 2 {
        let n = docs[0].len();
        let second = docs[0].split_off(n / 2);
        docs.push(second);
        notes.push(format!(
            "note: the data is one document; next-sentence prediction draws its random second \
             segments from another document, so it is split in two halves ({} and {} sentences). \
             Separate documents with a blank line (one sentence per line), or give several files",
            n / 2,
            n - n / 2
        ));
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for d in &docs {
        for s in d {
            for &id in s {
                h = (h ^ id as u64).wrapping_mul(0x0100_0000_01b3);
            }
            h = (h ^ 0xffff_ffff).wrapping_mul(0x0100_0000_01b3);
        }
    }
    let fingerprint = format!("{}:{h:016x}", docs.len());
    let every = if val_fraction > 0.0 {
        (1.0 / val_fraction).round().max(2.0) as usize
    } else {
        0
    };
    let (mut train, mut val) = (Vec::new(), Vec::new());
    for (i, d) in docs.into_iter().enumerate() {
        if every > 0 && i % every == every - 1 {
            val.push(d);
        } else {
            train.push(d);
        }
    }
    if val.len() < 2 || train.len() < 2 {
        train.append(&mut val);
    }
    if train.len() < 2 {
        return Err(invalid(format!(
            "next-sentence prediction needs at least 2 sentences, the data has {}",
            train.iter().map(Vec::len).sum::<usize>()
        )));
    }
    Ok(BertCorpus {
        train,
        val,
        fingerprint,
        notes,
    })
}

/// Builds `[B, T]` pretraining batches: `[CLS] A [SEP] B [SEP]`, token
/// types, right padding, MLM labels and NSP labels.
pub struct PairBatcher {
    pub masker: MlmMasker,
    pub cls: u32,
    pub sep: u32,
    pub pad: u32,
    pub seq_len: usize,
}

impl PairBatcher {
    pub fn new(tok: &WordPieceTokenizer, seq_len: usize, whole_word: bool) -> Result<PairBatcher> {
        let mask = tok
            .mask_id()
            .ok_or_else(|| invalid("the tokenizer has no [MASK] token"))?;
        let specials: Vec<u32> = (0..tok.vocab_size() as u32)
            .filter(|&i| tok.is_special(i))
            .collect();
        let prefix = tok.options().continuing_subword_prefix.clone();
        let masker = MlmMasker::new(
            MlmConfig {
                whole_word,
                ..MlmConfig::default()
            },
            tok.vocab(),
            &specials,
            mask,
            &prefix,
        )?;
        Ok(PairBatcher {
            masker,
            cls: tok.cls_id(),
            sep: tok.sep_id(),
            pad: tok.pad_id(),
            seq_len,
        })
    }

    /// Fills `out` with `pairs` (each masked with `rng_of(k)` for its index k).
    pub fn fill(
        &self,
        pairs: &[&NspPair],
        rng_of: &dyn Fn(usize) -> Rng,
        out: &mut BertTrainBatch,
    ) {
        let (b, t) = (pairs.len(), self.seq_len);
        let mut ids = vec![self.pad; b * t];
        let mut types = vec![0u32; b * t];
        let mut mask = vec![0u8; b * t];
        let mut labels = vec![IGNORE_INDEX; b * t];
        let mut nsp = Vec::with_capacity(b);
        for (r, p) in pairs.iter().enumerate() {
            let (mut pid, ptype) = p.to_input(self.cls, self.sep);
            let n = pid.len().min(t);
            let mut lab = vec![IGNORE_INDEX; pid.len()];
            self.masker.mask(&mut pid, &mut lab, &mut rng_of(r));
            ids[r * t..r * t + n].copy_from_slice(&pid[..n]);
            types[r * t..r * t + n].copy_from_slice(&ptype[..n]);
            mask[r * t..r * t + n].fill(1);
            labels[r * t..r * t + n].copy_from_slice(&lab[..n]);
            nsp.push(i32::from(p.is_random_next));
        }
        // B·T arrays by construction.
        out.batch = BertBatch::new(b, t, ids, types, mask).expect("B·T arrays");
        out.targets = BertTargets::Pretraining { mlm: labels, nsp };
    }
}

/// The pairs and visiting order of one epoch.
pub(super) struct Epoch {
    pub(super) epoch: u64,
    pub(super) pairs: Vec<NspPair>,
    pub(super) order: Vec<u32>,
}

pub(super) fn epoch_plan(corpus: &BertCorpus, run: &BertRunConfig, epoch: u64) -> Result<Epoch> {
    let mut cfg = NspConfig::new(run.seq_len);
    cfg.short_seq_prob = run.short_seq_prob;
    let pairs = build_nsp_pairs(
        &corpus.train,
        &cfg,
        &mut Rng::derive(run.seed ^ PAIRS, epoch),
    )?;
    if pairs.len() < run.batch_size {
        return Err(invalid(format!(
            "the data makes {} sequence pairs, fewer than one batch of {}",
            pairs.len(),
            run.batch_size
        )));
    }
    let mut order: Vec<u32> = (0..pairs.len() as u32).collect();
    Rng::derive(run.seed ^ ORDER, epoch).shuffle(&mut order);
    Ok(Epoch {
        epoch,
        pairs,
        order,
    })
}

pub(super) fn mask_rng(seed: u64, epoch: u64, pair: u32) -> Rng {
    Rng::derive(seed ^ MASKS, (epoch << 32) | pair as u64)
}

/// The same pairs and masks a run would train on at `epoch`, for inspection
/// and tests: `(pair, masked ids, labels, token types)` of the first `n`
/// pairs in visiting order.
pub fn preview_epoch(
    corpus: &BertCorpus,
    tok: &WordPieceTokenizer,
    run: &BertRunConfig,
    epoch: u64,
    n: usize,
) -> Result<Vec<(NspPair, BertTrainBatch)>> {
    let plan = epoch_plan(corpus, run, epoch)?;
    let batcher = PairBatcher::new(tok, run.seq_len, run.whole_word_masking)?;
    let mut out = Vec::new();
    for &i in plan.order.iter().take(n) {
        let p = &plan.pairs[i as usize];
        let mut tb = BertTrainBatch::default();
        batcher.fill(&[p], &|_| mask_rng(run.seed, epoch, i), &mut tb);
        out.push((p.clone(), tb));
    }
    Ok(out)
}
