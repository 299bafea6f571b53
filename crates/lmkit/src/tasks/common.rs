//! What several tasks share: loading a checkpoint into a task's layout
//! with new heads initialised as HF does, the tokenizer checks, saving.

use std::path::Path;

use lmkit_tokenizers::wordpiece::WordPieceTokenizer;
use lmkit_tokenizers::{BpeTokenizer, Encoding};

use crate::checkpoint::{load_params, open_model_dir_for, save_params_sharded, LoadOptions};
use crate::models::bert::{hf_init, Bert, BertBatch};
use crate::models::gpt2::Gpt2;
use crate::spec::config::{BertConfig, Gpt2Config};
use crate::spec::layout::{bert_layout, gpt2_layout_for, ParamLayout};
use crate::spec::names::{Architecture, BertHeads, Family};
use crate::train::runner::ModelWriteError;
use crate::util::rng::Rng;

use super::error::{check_vocab, invalid, Result};

/// The stream new heads draw from: `(seed, "HEAD")`.
const HEAD_STREAM: u64 = 0x4845_4144;

/// Initialises the parameters `missing` names as HF's `_init_weights`
/// does for new heads, for both families: weights N(0, `std`), biases 0
/// (LayerNorm weights 1), drawn in layout order from `(seed, "HEAD")`.
pub fn hf_init_heads(
    layout: &ParamLayout,
    params: &mut [f32],
    std: f64,
    seed: u64,
    missing: &[String],
) {
    let mut rng = Rng::derive(seed, HEAD_STREAM);
    hf_init(layout, params, std, None, &mut rng, &|name| {
        missing.iter().any(|m| m == name)
    });
}

/// Loads `dir`'s parameters into `layout`: every base weight must be there;
/// heads the layout has but the file lacks are returned (not yet
/// initialised), heads the file has but the layout lacks are ignored.
fn load_into(
    dir: &Path,
    family: Family,
    arch: Architecture,
    layout: &ParamLayout,
) -> Result<(Vec<f32>, Vec<String>)> {
    let (_, file) = open_model_dir_for(dir, Some((family, arch.hf_name())))?;
    let mut params = layout.try_zeros()?;
    let report = load_params(
        layout,
        &mut params,
        &file,
        family,
        LoadOptions {
            allow_missing_heads: true,
            ignore_unused_heads: true,
        },
    )?;
    Ok((params, report.missing_heads))
}

/// Loads a BERT checkpoint into the layout of `arch` (its `config` adjusted
/// by the caller): base weights must all be there; heads `arch` has but the
/// file lacks are initialised as HF does ([`hf_init_heads`]), heads the file
/// has but `arch` lacks are ignored. Returns the model and the names of the
/// initialised parameters.
pub fn load_bert_as(
    dir: &Path,
    config: BertConfig,
    arch: Architecture,
    seed: u64,
) -> Result<(Bert, Vec<String>)> {
    let heads: BertHeads = arch.bert_heads();
    let layout = bert_layout(&config, heads)?;
    let (mut params, missing) = load_into(dir, Family::Bert, arch, &layout)?;
    hf_init_heads(
        &layout,
        &mut params,
        config.initializer_range,
        seed,
        &missing,
    );
    let model = Bert::from_parts(config, heads, layout, params, Some(arch))?;
    Ok((model, missing))
}

/// [`load_bert_as`] for GPT-2: `arch`'s layout, new heads as HF
/// initialises them. Returns the model and the initialised parameters.
pub(super) fn load_gpt2_as(
    dir: &Path,
    config: Gpt2Config,
    arch: Architecture,
    seed: u64,
) -> Result<(Gpt2, Vec<String>)> {
    let layout = gpt2_layout_for(&config, arch)?;
    let (mut params, missing) = load_into(dir, Family::Gpt2, arch, &layout)?;
    if missing.iter().any(|n| n == "lm_head.weight") {
        return Err(invalid(format!(
            "{}: the model has tie_word_embeddings false but no lm_head.weight, which {} keeps",
            dir.display(),
            arch.hf_name()
        )));
    }
    hf_init_heads(
        &layout,
        &mut params,
        config.initializer_range,
        seed,
        &missing,
    );
    Ok((Gpt2::from_params_for(config, arch, params)?, missing))
}

/// Whether `dir`'s weights hold tensors under `prefix` (a head it already has).
pub(super) fn has_tensors(dir: &Path, prefix: &str) -> Result<bool> {
    let (_, file) = open_model_dir_for(dir, None)?;
    Ok(file.names().iter().any(|k| k.starts_with(prefix)))
}

/// The tokenizer's ids fit the model's embeddings, and text pairs (segment
/// B has token type 1) need `type_vocab_size` ≥ 2: checked before training,
/// with the reason, rather than as an id out of range in the first batch.
pub(super) fn check_fits(
    dir: &Path,
    tok: &WordPieceTokenizer,
    config: &BertConfig,
    pairs: bool,
) -> Result<()> {
    check_vocab(tok.vocab_size(), config.vocab_size)?;
    if pairs && config.type_vocab_size < 2 {
        return Err(invalid(format!(
            "{}: the model has type_vocab_size {} (one segment), but the task gives it text pairs, \
             whose second segment is token type 1",
            dir.display(),
            config.type_vocab_size
        )));
    }
    Ok(())
}

/// GPT-2's task tokens: `<|endoftext|>` (the delimiter `what` names) and
/// the pad id, `<|endoftext|>` unless the config names one (then written to
/// the config's `pad_token_id`, as HF users do); both inside the vocabulary.
/// Returns `(eos, pad)`.
pub(super) fn gpt2_task_tokens(
    tok: &BpeTokenizer,
    config: &mut Gpt2Config,
    what: &str,
) -> Result<(u32, u32)> {
    check_vocab(tok.vocab_size(), config.vocab_size)?;
    let eos = tok.endoftext_id().ok_or_else(|| {
        invalid(format!(
            "the tokenizer has no <|endoftext|> token (the {what} delimiter and padding)"
        ))
    })?;
    let pad = *config.pad_token_id.get_or_insert(eos);
    for (name, id) in [("pad_token_id", pad), ("<|endoftext|>", eos)] {
        if id as usize >= config.vocab_size {
            return Err(invalid(format!(
                "{name} {id} is outside the model's vocabulary of {}",
                config.vocab_size
            )));
        }
    }
    Ok((eos, pad))
}

/// A BERT batch of our own encodings (built within the model's limits).
pub(super) fn pad_batch(encs: &[&Encoding], pad: u32) -> BertBatch {
    BertBatch::from_encodings(encs, pad).expect("encodings built within the model's limits")
}

/// Writes a BERT task's model: its weights in `arch`'s HF layout, its
/// config and the tokenizer.
pub(super) fn save_bert(
    m: &Bert,
    arch: Architecture,
    tok: &WordPieceTokenizer,
    max_shard_size: Option<u64>,
    dir: &Path,
) -> std::result::Result<(), ModelWriteError> {
    save_params_sharded(&m.layout, &m.params, &m.config, dir, arch, max_shard_size)?;
    tok.save(dir)?;
    Ok(())
}

/// [`save_bert`] for GPT-2.
pub(super) fn save_gpt2(
    m: &Gpt2,
    arch: Architecture,
    tok: &BpeTokenizer,
    max_shard_size: Option<u64>,
    dir: &Path,
) -> std::result::Result<(), ModelWriteError> {
    save_params_sharded(&m.layout, &m.params, &m.config, dir, arch, max_shard_size)?;
    tok.save(dir)?;
    Ok(())
}

/// `max_seq_len` given for an evaluation, else the task's default, at most
/// `positions`.
pub(super) fn eval_len(given: Option<usize>, default: usize, positions: usize) -> usize {
    given.unwrap_or(default).min(positions)
}
