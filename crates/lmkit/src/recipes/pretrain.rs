//! Pretraining from the user's text, both families, one entry point:
//! [`pretrain`] resolves [`PretrainOptions`] (each family's defaults; on
//! `resume`, the checkpoint's values, and an error where a given value would
//! break an exact resume) and runs GPT-2 causal-LM pretraining
//! ([`super::gpt2_pretrain`]) or BERT MLM + NSP pretraining
//! ([`super::bert_pretrain`]).
//!
//! OUTPUT holds `metrics.jsonl`, `checkpoints/step-N/` (HF model, tokenizer,
//! optimizer moments and trainer state; the newest `keep` are kept), GPT-2's
//! token shards in `data/`, and at the end the final model in HF layout.

use super::bert_pretrain::{run_bert_pretraining_on, BertDims, BertPretrainOptions, BertRunConfig};
use super::pretrain_options::{
    check_resumed_family, check_resumed_init, check_resumed_size, optim_config, or_saved,
    rank_batch_size, saved_state,
};
pub use super::pretrain_options::{
    has_checkpoint, preset, ModelSize, PretrainEvent, PretrainOptions, PretrainSummary,
    BERT_PRESETS, GPT2_PRESETS,
};
use super::{gpt2_pretrain, invalid, Result};
use crate::models::auto_dtype::DtypeRequest;
use crate::spec::config::AnyConfig;
use crate::spec::names::Family;
use crate::spec::optim::{LrSchedule, OptimConfig, ScheduleKind};
use crate::spec::Precision;
use crate::train::{StopRequest, TrainState};
use crate::util::comm::{Communicator, SingleProcess};
use lmkit_tokenizers::wordpiece::WordPieceTokenizer;
use std::path::{Path, PathBuf};

/// Runs (or continues) the pretraining `o` describes. `stop` is
/// polled after every step: when it says so the run saves a checkpoint and
/// returns with `interrupted` set.
pub fn pretrain(
    o: &PretrainOptions,
    on_event: &mut dyn FnMut(PretrainEvent),
    stop: &StopRequest,
) -> Result<PretrainSummary> {
    pretrain_on(o, &SingleProcess, on_event, stop)
}

/// [`pretrain`] as one rank of a data-parallel job over `comm` (every rank
/// calls it with the same options): `batch_size` is per rank, each rank
/// trains on its own rows of every global batch of `batch_size` × ranks,
/// gradients are averaged over the ranks, and rank 0 alone writes files
/// (events come on every rank; a caller shows rank 0's). A checkpoint
/// resumes with any number of ranks that keeps the global batch.
pub fn pretrain_on(
    o: &PretrainOptions,
    comm: &dyn Communicator,
    on_event: &mut dyn FnMut(PretrainEvent),
    stop: &StopRequest,
) -> Result<PretrainSummary> {
    if o.overlap_filter {
        if comm.is_root() {
            write_overlap_filter(o, on_event)?;
        }
        // Rank 0 may take a while: not a stalled collective.
        comm.set_watch(false);
        comm.barrier();
        comm.set_watch(true);
    }
    match o.family {
        Family::Gpt2 => {
            if o.whole_word_masking {
                return Err(invalid("`whole_word_masking` applies to BERT only"));
            }
            gpt2_pretrain::run(o, comm, on_event, stop)
        }
        Family::Bert => {
            if o.recompute {
                return Err(invalid(
                    "`recompute` applies to GPT-2 only (BERT keeps its activations)",
                ));
            }
            run_bert(o, comm, on_event, stop)
        }
    }
}

/// The file `overlap_filter` writes into OUTPUT.
pub const OVERLAP_FILTER_FILE: &str = "overlap.bloom";

/// Builds OUTPUT/overlap.bloom from the run's text (8-grams, false-positive
/// rate 1e-8, as the GPT-2 paper); kept as it is when it already exists (a
/// resumed run's data does not change).
fn write_overlap_filter(
    o: &PretrainOptions,
    on_event: &mut dyn FnMut(PretrainEvent),
) -> Result<()> {
    use crate::data::overlap::{build_filter, BuildOptions};
    let path = o.output.join(OVERLAP_FILTER_FILE);
    if path.exists() {
        on_event(PretrainEvent::Note(format!(
            "overlap filter: keeping {}",
            path.display()
        )));
        return Ok(());
    }
    if o.data.is_empty() {
        return Err(invalid(
            "`overlap_filter` needs the run's text: give `data`",
        ));
    }
    std::fs::create_dir_all(&o.output).map_err(|e| crate::Error::io(&o.output, e))?;
    let t0 = std::time::Instant::now();
    let mut opts = BuildOptions::default();
    if let Some(f) = &o.text_field {
        opts.text_field = f.clone();
    }
    let filter = build_filter(&o.data, &opts, |_, _| {})?;
    filter.save(&path)?;
    on_event(PretrainEvent::Note(format!(
        "overlap filter: {} 8-grams in {:.1} s, {:.1} MB -> {}",
        filter.inserted(),
        t0.elapsed().as_secs_f64(),
        filter.bits() as f64 / 8e6,
        path.display()
    )));
    Ok(())
}

/// BERT: resolve the options into the BERT recipe's own and run it.
fn run_bert(
    o: &PretrainOptions,
    comm: &dyn Communicator,
    on_event: &mut dyn FnMut(PretrainEvent),
    stop: &StopRequest,
) -> Result<PretrainSummary> {
    if o.sample_every.is_some() || o.sample_prompt.is_some() || o.sample_tokens.is_some() {
        return Err(invalid(
            "`sample_every`/`sample_prompt`/`sample_tokens` generate text: GPT-2 only",
        ));
    }
    let resumed = saved_state(o, on_event)?;
    if let Some((dir, state)) = &resumed {
        check_resumed_family(dir, state, Family::Bert)?;
        check_resumed_bert(o, dir, state)?;
    }
    let saved = resumed.map(|(_, s)| s);
    let sr: Option<BertRunConfig> = saved
        .as_ref()
        .and_then(|s| serde_json::from_value(s.extra["run"].clone()).ok());
    let sr = sr.as_ref();
    let so = saved.as_ref().map(|s| &s.optim);
    let seq_len = or_saved(o.seq_len, sr.map(|r| r.seq_len), 128);
    let max_steps = o.max_steps.or(sr.map(|r| r.max_steps)).unwrap_or(1000);
    let run = BertRunConfig {
        seq_len,
        batch_size: rank_batch_size(
            o.batch_size,
            sr.map(|r| (r.batch_size, r.ranks)),
            comm.world_size(),
        )?,
        ranks: comm.world_size(),
        grad_accum: or_saved(o.grad_accum, sr.map(|r| r.grad_accum), 1),
        seed: or_saved(o.seed, sr.map(|r| r.seed), 1337),
        whole_word_masking: o.whole_word_masking || sr.is_some_and(|r| r.whole_word_masking),
        short_seq_prob: sr.map_or(0.1, |r| r.short_seq_prob),
        val_fraction: or_saved(o.val_fraction, sr.map(|r| r.val_fraction), 0.05),
        max_steps,
        eval_every: o.eval_every.or(sr.map(|r| r.eval_every)).unwrap_or(100),
        eval_batches: o.eval_batches.or(sr.map(|r| r.eval_batches)).unwrap_or(20),
        save_every: o.save_every.or(sr.map(|r| r.save_every)).unwrap_or(500),
        keep: super::check_keep(o.keep.or(sr.map(|r| r.keep)).unwrap_or(2))?,
        log_every: o.log_every.or(sr.map(|r| r.log_every)).unwrap_or(1).max(1),
        // `auto` is resolved once the model's shapes are known (`dtype_auto`).
        dtype: or_saved(
            o.dtype.and_then(DtypeRequest::fixed),
            sr.map(|r| r.dtype),
            Precision::F32,
        ),
    };
    // The data of a resumed run: as given, else the files it was started on.
    let data = match (&saved, o.data.is_empty()) {
        (Some(s), true) => s
            .extra
            .get("data_paths")
            .and_then(|v| serde_json::from_value::<Vec<PathBuf>>(v.clone()).ok())
            .ok_or_else(|| {
                invalid("`data`: this checkpoint does not record its data files; give the same `data` again")
            })?,
        _ => o.data.clone(),
    };
    // On resume the model comes from the checkpoint (its size was checked above).
    let dims = if o.size.given() && saved.is_none() {
        let s = &o.size;
        let (l, c, h, p) = match &s.preset {
            Some(name) => preset(Family::Bert, name)?,
            None => {
                if s.n_layer.is_none() || s.n_embd.is_none() || s.n_head.is_none() {
                    return Err(invalid(
                        "give `preset`, or all of `n_layer`, `n_embd` and `n_head`",
                    ));
                }
                (0, 0, 0, seq_len.max(512))
            }
        };
        Some(BertDims {
            layers: s.n_layer.unwrap_or(l),
            hidden: s.n_embd.unwrap_or(c),
            heads: s.n_head.unwrap_or(h),
            intermediate: None,
            max_positions: s.n_positions.unwrap_or(p),
        })
    } else {
        None
    };
    let defaults = OptimConfig {
        schedule: LrSchedule {
            kind: ScheduleKind::Linear,
            max_lr: 1e-4,
            min_lr: 0.0,
            warmup_steps: 0,
            total_steps: max_steps,
        },
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.01,
        grad_clip: 1.0,
        grad_accum: run.grad_accum,
    };
    let optim = optim_config(o, so, &defaults, max_steps, run.grad_accum)?;
    // A resumed run reads the field it was started with unless told otherwise.
    let text_field = o
        .text_field
        .clone()
        .or_else(|| {
            Some(
                saved
                    .as_ref()?
                    .extra
                    .get("text_field")?
                    .as_str()?
                    .to_string(),
            )
        })
        .unwrap_or_else(|| crate::data::DEFAULT_TEXT_FIELD.to_string());
    let opts = BertPretrainOptions {
        data,
        text_field,
        output: o.output.clone(),
        tokenizer: o.tokenizer.clone(),
        init_from: o.init_from.clone(),
        dims,
        resume: o.resume,
        run,
        optim,
        decay_embeddings: o.decay_embeddings,
        stop_after: o.stop_after,
        max_shard_size: o.max_shard_size,
        shard_optimizer: o.shard_optimizer,
        profile: o.profile,
        dtype_auto: o.dtype == Some(DtypeRequest::Auto) && sr.is_none(),
    };
    run_bert_pretraining_on(&opts, comm, on_event, stop)
}

/// A resumed BERT run given the options of the command that started it:
/// size, `init_from` and `tokenizer` must agree with the checkpoint.
fn check_resumed_bert(o: &PretrainOptions, dir: &Path, state: &TrainState) -> Result<()> {
    check_resumed_init(&o.init_from, state)?;
    if o.size.given() {
        let AnyConfig::Bert(c) = AnyConfig::from_file(dir.join("config.json"))? else {
            return Err(invalid(format!("{}: not a BERT checkpoint", dir.display())));
        };
        check_resumed_size(
            Family::Bert,
            &o.size,
            (
                c.num_hidden_layers,
                c.hidden_size,
                c.num_attention_heads,
                c.max_position_embeddings,
            ),
        )?;
    }
    if let Some(given) = &o.tokenizer {
        let mine = WordPieceTokenizer::from_dir(dir)?;
        if WordPieceTokenizer::from_dir(given)?.vocab() != mine.vocab() {
            return Err(invalid(format!(
                "`tokenizer` {}: its vocabulary differs from the checkpoint's; `resume` continues with the checkpoint's tokenizer",
                given.display()
            )));
        }
    }
    Ok(())
}
