//! Causal-LM fine-tuning of a GPT-2 (HF run_clm): documents (form-feed
//! separated, or JSONL `text`) each preceded by `<|endoftext|>`,
//! concatenated and cut into blocks of `max_seq_len` tokens.
//!
//! Metrics: the mean next-token `loss` over the blocks, its `perplexity`
//! and the `tokens` scored. (The sliding-window perplexity of a whole text
//! is the benchmark `perplexity`.)

use lmkit_tokenizers::BpeTokenizer;
use serde_json::json;

use crate::checkpoint::{load_pretrained, LoadOptions};
use crate::data::TokenBatch;
use crate::eval::benchmark::{metrics, Evaluation};
use crate::models::gpt2::Gpt2;
use crate::models::{LossParts, Trainable};
use crate::spec::config::AnyConfig;
use crate::spec::names::{Architecture, Family};
use std::path::Path;

use super::common::{eval_len, save_gpt2};
use super::error::{check_vocab, invalid, Result};
use super::{EvalCx, Metrics, PrepareCx, Prepared, Session, Task};

pub struct Lm;

impl Task for Lm {
    fn name(&self) -> &'static str {
        "lm"
    }
    fn summary(&self) -> &'static str {
        "causal-LM fine-tuning of a GPT-2 on text"
    }
    fn data_format(&self) -> &'static str {
        "text (documents between form feeds) or JSONL `text`"
    }
    fn scores(&self) -> &'static str {
        "loss and perplexity over blocks of max_seq_len"
    }
    fn families(&self) -> &'static [Family] {
        &[Family::Gpt2]
    }

    fn prepare(&self, cx: &PrepareCx<'_>) -> Result<Prepared> {
        let (dir, opts) = (cx.model_dir, cx.opts);
        let (tok, model) = load(dir)?;
        let t = opts.max_seq_len.min(model.config.n_positions);
        let blocks = lm_blocks(cx.train, &tok, t)?;
        let eval_blocks = cx.eval.map(|p| lm_blocks(p, &tok, t)).transpose()?;
        let description = format!(
            "lm: {} blocks of {t} tokens, GPT-2 {} layers d {}",
            blocks.len(),
            model.config.n_layer,
            model.config.n_embd
        );
        let (bs, shard) = (opts.eval_batch_size, opts.max_shard_size);
        Ok(Prepared::Gpt2(Session {
            model,
            batch: TokenBatch::new(opts.batch_size, t),
            train_items: blocks.len(),
            eval_items: eval_blocks.as_ref().map_or(0, Vec::len),
            description,
            fill: Box::new(move |idx, bt| {
                let rows: Vec<&[u32]> = idx.iter().map(|&i| blocks[i].as_slice()).collect();
                *bt = block_batch(&rows, t);
            }),
            evaluate: Box::new(move |m| {
                let Some(b) = &eval_blocks else {
                    return Ok(None);
                };
                Ok(Some(score(m, b, t, bs)?))
            }),
            save: Box::new(move |m, d| save_gpt2(m, Architecture::Gpt2LMHeadModel, &tok, shard, d)),
        }))
    }

    fn evaluate(&self, cx: &EvalCx<'_>) -> Result<Evaluation> {
        if cx.keep.is_some() {
            return Err(invalid(
                "`task` lm scores blocks that cross documents: the overlap filter is for `perplexity`",
            ));
        }
        let (tok, mut model) = load(cx.model_dir)?;
        let t = eval_len(cx.opts.max_seq_len, 128, model.config.n_positions);
        let mut blocks = lm_blocks(cx.data, &tok, t)?;
        if let Some(n) = cx.opts.limit {
            blocks.truncate(n);
        }
        Ok(Evaluation {
            metrics: score(&mut model, &blocks, t, cx.opts.forward_batch())?,
            predictions: vec![],
        })
    }
}

/// The GPT-2 of `dir` as a causal LM, with its tokenizer.
fn load(dir: &Path) -> Result<(BpeTokenizer, Gpt2)> {
    let tok = BpeTokenizer::from_dir(dir)?;
    let pre = load_pretrained(
        &dir.display().to_string(),
        Some(Architecture::Gpt2LMHeadModel),
        LoadOptions::default(),
    )?;
    let AnyConfig::Gpt2(config) = pre.config else {
        return Err(invalid(format!("{}: not a GPT-2 config", dir.display())));
    };
    check_vocab(tok.vocab_size(), config.vocab_size)?;
    Ok((tok, Gpt2::from_params(config, pre.params)?))
}

/// `[rows, T]` inputs and their next tokens from `T + 1`-token blocks.
fn block_batch(rows: &[&[u32]], t: usize) -> TokenBatch {
    let mut bt = TokenBatch::new(rows.len(), t);
    for (r, blk) in rows.iter().enumerate() {
        bt.inputs[r * t..(r + 1) * t].copy_from_slice(&blk[..t]);
        for k in 0..t {
            bt.targets[r * t + k] = blk[k + 1] as i32;
        }
    }
    bt
}

/// The mean next-token loss over `blocks`, `batch_size` at a time.
fn score(m: &mut Gpt2, blocks: &[Vec<u32>], t: usize, batch_size: usize) -> Result<Metrics> {
    let mut total = LossParts::default();
    for chunk in blocks.chunks(batch_size.max(1)) {
        let rows: Vec<&[u32]> = chunk.iter().map(Vec::as_slice).collect();
        total.add(m.evaluate(&block_batch(&rows, t))?);
    }
    let loss = total.mean();
    Ok(metrics(
        json!({"loss": loss, "perplexity": loss.exp(), "tokens": total.count}),
    ))
}

/// GPT-2 blocks of a text file: documents (form-feed separated, or JSONL
/// `text`) each preceded by `<|endoftext|>`, concatenated, cut into
/// `T + 1`-token windows at stride T.
fn lm_blocks(path: &Path, tok: &BpeTokenizer, t: usize) -> Result<Vec<Vec<u32>>> {
    let docs = crate::data::nsp::read_documents(&[path.to_path_buf()])?;
    let eos = tok
        .endoftext_id()
        .ok_or_else(|| invalid("the tokenizer has no <|endoftext|> token"))?;
    let mut ids = Vec::new();
    for d in &docs {
        ids.push(eos);
        ids.extend(tok.encode_ordinary(d.as_bytes()));
    }
    let blocks: Vec<Vec<u32>> = (0..ids.len().saturating_sub(1) / t)
        .map(|k| ids[k * t..k * t + t + 1].to_vec())
        .collect();
    if blocks.is_empty() {
        return Err(invalid(format!(
            "{}: {} tokens, fewer than one block of {}+1",
            path.display(),
            ids.len(),
            t
        )));
    }
    Ok(blocks)
}
