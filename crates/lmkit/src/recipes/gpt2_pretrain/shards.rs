//! The token shards a GPT-2 pretraining run trains on: tokenized into
//! `OUTPUT/data` by rank 0 (or reused, or checked on `resume`), opened by
//! every rank, with the sampler of the training windows.

use std::path::Path;

use lmkit_tokenizers::BpeTokenizer;

use super::super::pretrain_options::{PretrainEvent, PretrainOptions};
use super::super::{invalid, Result};
use super::{vocab_id, Gpt2RunConfig};
use crate::data::{self, BatchSampler, PrepareOptions, TokenData};
use crate::util::comm::Communicator;

/// The token shards in `OUTPUT/data` (rank 0 tokenizes or checks them, the
/// others open them) and the sampler of the run's training windows.
pub(super) fn open_data(
    o: &PretrainOptions,
    comm: &dyn Communicator,
    tokenizer: &BpeTokenizer,
    vocab_size: usize,
    eos: u32,
    run: &Gpt2RunConfig,
    on_event: &mut dyn FnMut(PretrainEvent),
) -> Result<(TokenData, BatchSampler)> {
    let val_fraction = run.val_fraction;
    let data_dir = o.output.join("data");
    let prepared = if comm.is_root() {
        Some(prepare_data(
            o,
            &data_dir,
            tokenizer,
            vocab_size,
            eos,
            val_fraction,
            on_event,
        )?)
    } else {
        None
    };
    comm.set_watch(false);
    comm.barrier();
    comm.set_watch(true);
    let data = match prepared {
        Some(d) => d,
        None => data::open_shards(&data_dir)?,
    };
    if data.meta.vocab_size as usize != vocab_size {
        return Err(invalid(format!(
            "{}: shards were made for a vocabulary of {}, the model has {}",
            data_dir.display(),
            data.meta.vocab_size,
            vocab_size
        )));
    }
    let global_batch = run.batch_size * run.ranks;
    let sampler = BatchSampler::new(data.train.len(), global_batch, run.seq_len, run.seed)?;
    if data.val.is_none() {
        on_event(PretrainEvent::Note(if val_fraction == 0.0 {
            "note: no validation split (`val_fraction` 0): validation loss is not measured".into()
        } else {
            format!(
                "note: the data is too small to hold out a validation split ({} tokens; `val_fraction` {val_fraction} \
                 takes every {}th chunk of {} tokens): validation loss is not measured",
                data.meta.train_tokens,
                (1.0 / val_fraction).round().max(2.0),
                data.meta.chunk_tokens
            )
        }));
    }
    Ok((data, sampler))
}

/// Tokenizes the data into `dir` (or reuses the shards there).
fn prepare_data(
    o: &PretrainOptions,
    dir: &Path,
    tok: &BpeTokenizer,
    vocab_size: usize,
    eos: u32,
    val_fraction: f64,
    on_event: &mut dyn FnMut(PretrainEvent),
) -> Result<TokenData> {
    // A resumed run reads the field its shards were made from unless told otherwise.
    let text_field = match &o.text_field {
        Some(f) => f.clone(),
        None => o
            .resume
            .then(|| std::fs::read_to_string(dir.join("meta.json")).ok())
            .flatten()
            .and_then(|t| serde_json::from_str::<data::ShardMeta>(&t).ok())
            .map_or_else(|| data::DEFAULT_TEXT_FIELD.to_string(), |m| m.text_field),
    };
    let opts = PrepareOptions {
        vocab_size,
        eos_id: eos,
        val_fraction,
        tokenizer_id: vocab_id(tok),
        text_field,
    };
    // A resumed run continues on its own shards: given data must be the
    // same (checked before anything in OUTPUT/data is replaced).
    if o.resume && dir.join("meta.json").exists() {
        if !o.data.is_empty() {
            if let Err(why) = data::check_shards(&o.data, dir, &opts)? {
                return Err(invalid(format!(
                    "`data` is not the data of the run being resumed: {why}; \
                     drop `data` to continue on the shards in {}, or start a new `output`",
                    dir.display()
                )));
            }
        }
        return Ok(data::open_shards(dir)?);
    }
    if o.data.is_empty() {
        return Err(invalid("`data` (text files) is required"));
    }
    let encode = |text: &str| -> std::result::Result<Vec<u32>, String> {
        Ok(tok.encode_ids(text.as_bytes(), false))
    };
    let mut progress = |done: u64, total: u64| on_event(PretrainEvent::Tokenizing { done, total });
    let prepared = data::prepare_shards(&o.data, dir, &opts, &encode, &mut progress)?;
    let m = &prepared.meta;
    on_event(PretrainEvent::Note(format!(
        "data: {} documents, {} train + {} val tokens ({}){}",
        m.documents,
        m.train_tokens,
        m.val_tokens,
        if m.token_width == 2 { "u16" } else { "u32" },
        if prepared.reused {
            ", reusing the existing shards"
        } else {
            ""
        }
    )));
    Ok(data::open_shards(dir)?)
}
