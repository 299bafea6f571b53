//! GPT-2 causal-LM pretraining from scratch (or continued from an HF
//! checkpoint) on the user's text, as nanoGPT/llm.c do it: documents joined
//! with `<|endoftext|>` into binary token shards (`OUTPUT/data`, reused while
//! the sources and the tokenizer are unchanged), seeded random windows of
//! T+1 tokens, AdamW with cosine decay, periodic validation loss and
//! samples, atomic checkpoints and exact resume.
//!
//! Entry point: [`super::pretrain::pretrain`] with `family: Gpt2`.

use std::path::{Path, PathBuf};

use lmkit_tokenizers::BpeTokenizer;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::pretrain_options::{
    check_resumed_family, check_resumed_init, check_resumed_size, init_from_record, optim_config,
    or_saved, preset, rank_batch_size, saved_state, PretrainEvent, PretrainOptions,
    PretrainSummary,
};
use super::run_record::check_same_run;
use super::{check_vocab, invalid, io, RecipeError, Result};
use crate::checkpoint::{load_pretrained, save_params_sharded, LoadOptions};
use crate::data::{batch, BatchSampler, TokenBatch, TokenData, TokenShard};
use crate::models::auto_dtype::{layer_shapes, DtypeRequest};
use crate::models::gpt2::{GenerationConfig, Gpt2, Gpt2Engine, SamplingParams, WeightDtype};
use crate::models::{LossParts, Trainable};
use crate::spec::config::{AnyConfig, Gpt2Config};
use crate::spec::names::{Architecture, Family};
use crate::spec::optim::{LrSchedule, OptimConfig, ScheduleKind};
use crate::spec::Precision;
use crate::train::runner::{ModelWriteError, Row, StopRequest};
use crate::train::{
    load_train_state, DataParallel, DataPosition, OptimState, RunConfig, RunTask, Runner,
    TrainState,
};
use crate::util::comm::Communicator;

mod shards;
use shards::open_data;

/// Run settings of a GPT-2 pretraining run after defaults and resume are
/// applied; stored in the trainer state so `resume` continues with them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Gpt2RunConfig {
    pub seq_len: usize,
    pub batch_size: usize,
    pub grad_accum: usize,
    pub max_steps: u64,
    pub eval_every: u64,
    pub eval_batches: usize,
    pub sample_every: u64,
    pub sample_tokens: usize,
    pub sample_prompt: String,
    pub save_every: u64,
    pub keep: usize,
    pub log_every: u64,
    pub seed: u64,
    pub val_fraction: f64,
    pub decay_embeddings: bool,
    /// Ranks of the data-parallel run (`batch_size` is per rank: the global
    /// batch is `batch_size × ranks`); 1 in checkpoints from before.
    #[serde(default = "super::pretrain_options::one")]
    pub ranks: usize,
    /// The block matmuls' number format; f32 in checkpoints from before.
    #[serde(default)]
    pub dtype: Precision,
}

impl Gpt2RunConfig {
    /// The settings a resumed run may change (the per-rank batch follows
    /// the ranks, keeping the global batch: `rank_batch_size`).
    pub(crate) const MAY_CHANGE: &'static [&'static str] = &[
        "batch_size",
        "ranks",
        "max_steps",
        "eval_every",
        "eval_batches",
        "sample_every",
        "sample_tokens",
        "sample_prompt",
        "save_every",
        "keep",
        "log_every",
    ];
}

/// A fresh GPT-2 config from the model size options.
fn new_config(
    o: &PretrainOptions,
    vocab_size: usize,
    eos: u32,
    seq_len: usize,
) -> Result<Gpt2Config> {
    let s = &o.size;
    let (l, c, h, p) = match &s.preset {
        Some(name) => preset(Family::Gpt2, name)?,
        None => {
            if s.n_layer.is_none() || s.n_embd.is_none() || s.n_head.is_none() {
                return Err(invalid(
                    "give `preset`, or all of `n_layer`, `n_embd` and `n_head`",
                ));
            }
            (0, 0, 0, 0)
        }
    };
    let p = s.n_positions.unwrap_or(if p == 0 { seq_len } else { p });
    if seq_len > p {
        return Err(invalid(format!(
            "`seq_len` {seq_len} exceeds the model's context (n_positions {p})"
        )));
    }
    let cfg = Gpt2Config {
        vocab_size,
        n_positions: p,
        n_embd: s.n_embd.unwrap_or(c),
        n_layer: s.n_layer.unwrap_or(l),
        n_head: s.n_head.unwrap_or(h),
        resid_pdrop: 0.0,
        embd_pdrop: 0.0,
        attn_pdrop: 0.0,
        bos_token_id: Some(eos),
        eos_token_id: Some(eos),
        ..Gpt2Config::default()
    };
    cfg.validate()?;
    Ok(cfg)
}

/// An HF GPT-2 checkpoint folder as a config and a parameter buffer.
fn load_hf_gpt2(dir: &Path) -> Result<(Gpt2Config, Vec<f32>)> {
    let pre = load_pretrained(
        &dir.display().to_string(),
        Some(Architecture::Gpt2LMHeadModel),
        LoadOptions::default(),
    )?;
    match pre.config {
        AnyConfig::Gpt2(c) => Ok((c, pre.params)),
        AnyConfig::Bert(_) => Err(invalid(format!(
            "{}: this is a BERT checkpoint; GPT-2 pretraining needs GPT-2",
            dir.display()
        ))),
    }
}

/// Mean validation loss over up to `max` global batches of `b` × ranks
/// rows, `None` when the split holds less than one. Each rank scores its
/// rows of every batch; the sums are added over the ranks.
fn eval_loss(
    model: &mut Gpt2,
    val: &TokenShard,
    b: usize,
    t: usize,
    max: usize,
    comm: &dyn Communicator,
) -> Result<Option<f64>> {
    let global = b * comm.world_size();
    let n = batch::eval_batch_count(val, global, t, max);
    if n == 0 {
        return Ok(None);
    }
    let mut bt = TokenBatch::new(b, t);
    let mut total = LossParts::default();
    for i in 0..n {
        batch::fill_eval_rows(val, i * global + comm.rank() * b, &mut bt);
        total.add(model.evaluate(&bt)?);
    }
    let mut l = [total.sum, total.count as f64];
    comm.all_reduce_sum_f64(&mut l);
    Ok(Some(l[0] / l[1]))
}

/// The whole run (see [`super::pretrain::pretrain`]).
pub(crate) fn run(
    o: &PretrainOptions,
    comm: &dyn Communicator,
    on_event: &mut dyn FnMut(PretrainEvent),
    stop: &StopRequest,
) -> Result<PretrainSummary> {
    let out = &o.output;
    std::fs::create_dir_all(out).map_err(io(out))?;
    let ckpt_root = out.join("checkpoints");

    // Model, tokenizer, and saved state.
    let resumed = load_resumed(o, on_event)?;
    let saved_run: Option<Gpt2RunConfig> = resumed
        .as_ref()
        .and_then(|(_, s, _)| serde_json::from_value(s.extra["run"].clone()).ok());
    let mut run_cfg = run_config(o, saved_run.as_ref(), comm.world_size())?;
    let (seq_len, batch_size, ranks) = (run_cfg.seq_len, run_cfg.batch_size, run_cfg.ranks);
    let global_batch = batch_size * ranks;
    let resumed_dir = resumed.as_ref().map(|(dir, _, _)| dir.as_path());
    let (tokenizer, mut model, eos) = load_model(o, resumed_dir, &run_cfg, on_event)?;
    let cfg = model.config.clone();
    if o.dtype == Some(DtypeRequest::Auto) && saved_run.is_none() {
        let shapes = layer_shapes(cfg.n_embd, cfg.inner());
        run_cfg.dtype = DtypeRequest::<Precision>::Auto.resolve_training(&shapes, ranks)?;
        model.set_precision(run_cfg.dtype);
    }

    let (data, mut sampler) =
        open_data(o, comm, &tokenizer, cfg.vocab_size, eos, &run_cfg, on_event)?;
    let (mut state, mut opt, optim) =
        train_state(o, resumed, model.num_params(), &mut sampler, &run_cfg)?;
    let start_step = state.step;

    let mut metrics = super::open_metrics(comm.is_root(), out, o.resume, start_step)?;
    on_event(PretrainEvent::Start {
        message: start_message(&cfg, &run_cfg, model.num_params(), &data),
        start_step,
        max_steps: run_cfg.max_steps,
    });

    let mut task = Gpt2Task {
        data: &data,
        sampler,
        tokenizer: &tokenizer,
        run: &run_cfg,
        max_shard_size: o.max_shard_size,
        comm,
    };
    if let Some(val) = &data.val {
        if batch::eval_batch_count(val, global_batch, seq_len, run_cfg.eval_batches) == 0 {
            on_event(PretrainEvent::Note(
                "note: the validation split is smaller than one batch; skipping validation".into(),
            ));
        }
    }
    let config = RunConfig {
        max_steps: run_cfg.max_steps,
        log_every: run_cfg.log_every,
        eval_every: run_cfg.eval_every,
        save_every: run_cfg.save_every,
        keep: run_cfg.keep,
        stop_after: o.stop_after,
        checkpoint_dir: Some(ckpt_root),
        final_dir: Some(out.clone()),
        eval_at_start: true,
        profile: o.profile,
    };
    let runner = Runner {
        model: &mut model,
        opt: &mut opt,
        state: &mut state,
        optim: &optim,
        metrics: metrics.as_mut(),
        config: &config,
        parallel: DataParallel {
            comm,
            shard_optimizer: o.shard_optimizer,
        },
    };
    let mut batch_buf = TokenBatch::new(batch_size, seq_len);
    runner.run(
        &mut task,
        &mut batch_buf,
        &mut |e| {
            if let Some(e) = PretrainEvent::of_run(e) {
                on_event(e)
            }
        },
        stop,
    )
}

/// A resumed run's checkpoint folder, trainer state and optimizer state.
type Resumed = (PathBuf, TrainState, OptimState);

/// With `resume`, the newest complete checkpoint, checked to be a GPT-2
/// run from the same `init_from`.
fn load_resumed(
    o: &PretrainOptions,
    on_event: &mut dyn FnMut(PretrainEvent),
) -> Result<Option<Resumed>> {
    Ok(match saved_state(o, on_event)? {
        Some((dir, state)) => {
            check_resumed_family(&dir, &state, Family::Gpt2)?;
            check_resumed_init(&o.init_from, &state)?;
            let (state, opt) = load_train_state(&dir)?;
            Some((dir, state, opt))
        }
        None => None,
    })
}

/// The run settings: each given option, else the resumed run's (`sr`),
/// else the default; checked against the resumed run's and for positive
/// sizes.
fn run_config(
    o: &PretrainOptions,
    sr: Option<&Gpt2RunConfig>,
    ranks: usize,
) -> Result<Gpt2RunConfig> {
    let seq_len = or_saved(o.seq_len, sr.map(|r| r.seq_len), 256);
    let batch_size = rank_batch_size(o.batch_size, sr.map(|s| (s.batch_size, s.ranks)), ranks)?;
    let grad_accum = or_saved(o.grad_accum, sr.map(|r| r.grad_accum), 1);
    let seed = or_saved(o.seed, sr.map(|r| r.seed), 1337);
    let val_fraction = or_saved(o.val_fraction, sr.map(|r| r.val_fraction), 0.05);
    let max_steps = o.max_steps.or(sr.map(|r| r.max_steps)).unwrap_or(1000);
    let eval_every = o.eval_every.or(sr.map(|r| r.eval_every)).unwrap_or(100);
    // `auto` is resolved once the model's shapes are known ([`run`]).
    let dtype = or_saved(
        o.dtype.and_then(DtypeRequest::fixed),
        sr.map(|r| r.dtype),
        Precision::F32,
    );
    let run_cfg = Gpt2RunConfig {
        seq_len,
        batch_size,
        grad_accum,
        max_steps,
        eval_every,
        eval_batches: o.eval_batches.or(sr.map(|r| r.eval_batches)).unwrap_or(20),
        sample_every: o
            .sample_every
            .or(sr.map(|r| r.sample_every))
            .or(o.eval_every)
            .unwrap_or(100),
        sample_tokens: o
            .sample_tokens
            .or(sr.map(|r| r.sample_tokens))
            .unwrap_or(48),
        sample_prompt: o
            .sample_prompt
            .clone()
            .or(sr.map(|r| r.sample_prompt.clone()))
            .unwrap_or_default(),
        save_every: o.save_every.or(sr.map(|r| r.save_every)).unwrap_or(500),
        keep: super::check_keep(o.keep.or(sr.map(|r| r.keep)).unwrap_or(2))?,
        log_every: o.log_every.or(sr.map(|r| r.log_every)).unwrap_or(1).max(1),
        seed,
        val_fraction,
        decay_embeddings: o.decay_embeddings || sr.is_some_and(|r| r.decay_embeddings),
        ranks,
        dtype,
    };
    if let Some(saved) = sr {
        check_same_run(&run_cfg, saved, Gpt2RunConfig::MAY_CHANGE)?;
    }
    if seq_len == 0 || batch_size == 0 || grad_accum == 0 || max_steps == 0 {
        return Err(invalid(
            "`seq_len`, `batch_size`, `grad_accum` and `max_steps` must be positive",
        ));
    }
    Ok(run_cfg)
}

/// The tokenizer and the model (the checkpoint `resumed`'s, or a fresh
/// start's) set up for the run, and the tokenizer's <|endoftext|> id.
fn load_model(
    o: &PretrainOptions,
    resumed: Option<&Path>,
    run: &Gpt2RunConfig,
    on_event: &mut dyn FnMut(PretrainEvent),
) -> Result<(BpeTokenizer, Gpt2, u32)> {
    let seq_len = run.seq_len;
    let (tokenizer, mut model) = match resumed {
        Some(dir) => resume_model(o, dir)?,
        None => new_model(o, seq_len, run.seed, on_event)?,
    };
    model.set_precision(run.dtype);
    model.set_recompute(o.recompute);
    let cfg = &model.config;
    check_vocab(tokenizer.vocab_size(), cfg.vocab_size)?;
    if seq_len > cfg.n_positions {
        return Err(invalid(format!(
            "`seq_len` {seq_len} exceeds the model's context (n_positions {})",
            cfg.n_positions
        )));
    }
    let eos = tokenizer
        .endoftext_id()
        .ok_or_else(|| invalid("the tokenizer has no <|endoftext|> token"))?;
    if run.decay_embeddings {
        model.layout.set_decay("wte.weight", true)?;
        model.layout.set_decay("wpe.weight", true)?;
    }
    Ok((tokenizer, model, eos))
}

/// The checkpoint `dir`'s tokenizer (a given `tokenizer` must have the same
/// vocabulary) and model (of the size the options give, if any).
fn resume_model(o: &PretrainOptions, dir: &Path) -> Result<(BpeTokenizer, Gpt2)> {
    let tok = BpeTokenizer::from_dir(dir)?;
    if let Some(given) = &o.tokenizer {
        if vocab_id(&BpeTokenizer::from_dir(given)?) != vocab_id(&tok) {
            return Err(invalid(format!(
                "`tokenizer` {}: its vocabulary differs from the checkpoint's; `resume` continues with the checkpoint's tokenizer",
                given.display()
            )));
        }
    }
    let (cfg, params) = load_hf_gpt2(dir)?;
    check_resumed_size(
        Family::Gpt2,
        &o.size,
        (cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.n_positions),
    )?;
    Ok((tok, Gpt2::from_params(cfg, params)?))
}

/// A fresh start's tokenizer and model: `init_from`'s, or a new one of the
/// options' size seeded with `seed`.
fn new_model(
    o: &PretrainOptions,
    seq_len: usize,
    seed: u64,
    on_event: &mut dyn FnMut(PretrainEvent),
) -> Result<(BpeTokenizer, Gpt2)> {
    let tok_dir = o
        .tokenizer
        .clone()
        .or_else(|| o.init_from.clone())
        .ok_or_else(|| invalid("`tokenizer` (a folder) is required"))?;
    let tok = BpeTokenizer::from_dir(&tok_dir)?;
    let eos = tok.endoftext_id().ok_or_else(|| {
        invalid(format!(
            "{}: the tokenizer has no <|endoftext|> token to join documents with",
            tok_dir.display()
        ))
    })?;
    let model = match &o.init_from {
        Some(dir) => {
            if o.size.given() {
                return Err(invalid(
                    "`init_from` takes the model size from the checkpoint; drop `preset` and `n_*`",
                ));
            }
            let (mut cfg, params) = load_hf_gpt2(dir)?;
            if cfg.resid_pdrop != 0.0 || cfg.embd_pdrop != 0.0 || cfg.attn_pdrop != 0.0 {
                on_event(PretrainEvent::Note(
                    "note: lmkit trains without dropout; the saved config will say 0".into(),
                ));
                (cfg.resid_pdrop, cfg.embd_pdrop, cfg.attn_pdrop) = (0.0, 0.0, 0.0);
            }
            Gpt2::from_params(cfg, params)?
        }
        None => Gpt2::new_random(new_config(o, tok.vocab_size(), eos, seq_len)?, seed)?,
    };
    Ok((tok, model))
}

/// The optimizer settings and the trainer and optimizer state to start
/// from: the checkpoint's (checked against the model; the sampler moved to
/// its position) or new ones, with the run recorded in `extra`; an error
/// when the run is already at `max_steps`.
fn train_state(
    o: &PretrainOptions,
    resumed: Option<Resumed>,
    num_params: usize,
    sampler: &mut BatchSampler,
    run: &Gpt2RunConfig,
) -> Result<(TrainState, OptimState, OptimConfig)> {
    let (max_steps, grad_accum) = (run.max_steps, run.grad_accum);
    let init_record = match &resumed {
        Some((_, s, _)) => s.extra.get("init_from").cloned().unwrap_or(Value::Null),
        None => init_from_record(&o.init_from),
    };
    let defaults = OptimConfig {
        schedule: LrSchedule {
            kind: ScheduleKind::Cosine,
            max_lr: 6e-4,
            min_lr: 6e-5,
            warmup_steps: 0,
            total_steps: max_steps,
        },
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.1,
        grad_clip: 1.0,
        grad_accum,
    };
    let saved_optim = resumed.as_ref().map(|(_, s, _)| s.optim);
    let optim = optim_config(o, saved_optim.as_ref(), &defaults, max_steps, grad_accum)?;
    let (mut state, opt) = match resumed {
        Some((_, mut state, opt)) => {
            if state.num_params != num_params {
                return Err(invalid(
                    "the checkpoint's optimizer state does not match the model's size",
                ));
            }
            sampler.set_position(state.data)?;
            state.optim = optim;
            (state, opt)
        }
        None => (
            TrainState::new(
                run.seed,
                optim,
                run.batch_size * run.ranks,
                run.seq_len,
                num_params,
            ),
            OptimState::new(num_params),
        ),
    };
    state.extra = json!({"arch": "gpt2", "run": run, "init_from": init_record});
    let start_step = state.step;
    if start_step >= max_steps {
        return Err(invalid(format!(
            "the checkpoint is at step {start_step}, already at `max_steps` {max_steps}; raise `max_steps`"
        )));
    }
    Ok((state, opt, optim))
}

/// The line that opens a run: the model, the data and the step's shape.
fn start_message(
    cfg: &Gpt2Config,
    run: &Gpt2RunConfig,
    num_params: usize,
    data: &TokenData,
) -> String {
    let (batch_size, ranks) = (run.batch_size, run.ranks);
    let per_step = if ranks > 1 {
        format!("{} ({batch_size} x {ranks} ranks)", batch_size * ranks)
    } else {
        batch_size.to_string()
    };
    format!(
        "model: GPT-2 {} layers, d {}, {} heads, vocab {}, {:.2}M parameters | data: {} train / {} val tokens | \
         {} x {} tokens x {} accum per step, {} steps{}",
        cfg.n_layer,
        cfg.n_embd,
        cfg.n_head,
        cfg.vocab_size,
        num_params as f64 / 1e6,
        data.meta.train_tokens,
        data.meta.val_tokens,
        per_step,
        run.seq_len,
        run.grad_accum,
        run.max_steps,
        match run.dtype {
            Precision::F32 => String::new(),
            d => format!(" | {}", d.describe()),
        }
    )
}

/// GPT-2 pretraining's part of a [`Runner`] run.
struct Gpt2Task<'a> {
    data: &'a TokenData,
    sampler: BatchSampler,
    tokenizer: &'a BpeTokenizer,
    run: &'a Gpt2RunConfig,
    max_shard_size: Option<u64>,
    comm: &'a dyn Communicator,
}

impl RunTask<Gpt2> for Gpt2Task<'_> {
    type Error = RecipeError;

    fn next_batch(&mut self, batch: &mut TokenBatch) -> Result<()> {
        let c = self.comm;
        self.sampler
            .next_batch_part(&self.data.train, batch, c.rank(), c.world_size());
        Ok(())
    }

    fn position(&self) -> DataPosition {
        self.sampler.position()
    }

    fn evaluate(&mut self, model: &mut Gpt2) -> Result<Option<Row>> {
        let Some(val) = &self.data.val else {
            return Ok(None);
        };
        let r = self.run;
        Ok(eval_loss(
            model,
            val,
            r.batch_size,
            r.seq_len,
            r.eval_batches,
            self.comm,
        )?
        .map(|v| {
            let row = json!({"val_loss": v, "val_ppl": v.exp()});
            row.as_object().cloned().expect("object")
        }))
    }

    fn after_step(&mut self, model: &mut Gpt2, state: &mut TrainState) -> Option<String> {
        let r = self.run;
        if r.sample_every == 0 || !state.step.is_multiple_of(r.sample_every) {
            return None;
        }
        // The seed comes from the trainer's RNG (saved in checkpoints), so
        // a resumed run prints the same samples.
        let seed = state.rng.next_u64();
        let text = Gpt2Engine::from_params(
            &model.config,
            &model.layout,
            &model.params,
            WeightDtype::F32,
        )
        .map_err(RecipeError::from)
        .and_then(|mut e| {
            continue_text(
                &mut e,
                self.tokenizer,
                &r.sample_prompt,
                r.sample_tokens,
                seed,
            )
        });
        Some(match text {
            Ok(t) => format!("{}{t}", r.sample_prompt),
            Err(e) => format!("(sampling failed: {e})"),
        })
    }

    fn write_model(&self, model: &Gpt2, dir: &Path) -> std::result::Result<(), ModelWriteError> {
        save_params_sharded(
            &model.layout,
            &model.params,
            &model.config,
            dir,
            Architecture::Gpt2LMHeadModel,
            self.max_shard_size,
        )?;
        self.tokenizer.save(dir)?;
        Ok(())
    }
}

/// Identifies a tokenizer by its vocabulary (the same however it was loaded).
fn vocab_id(tok: &BpeTokenizer) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for id in 0..tok.vocab_size() as u32 {
        for b in tok.id_to_token(id).unwrap_or("").bytes().chain([0xff]) {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("vocab:{h:016x}")
}

/// Sampling settings of the periodic and quickstart samples.
fn sample_config(max_new: usize, seed: u64, eos: Option<u32>) -> GenerationConfig {
    GenerationConfig {
        max_new_tokens: max_new,
        sampling: SamplingParams {
            temperature: 0.8,
            top_k: 40,
            ..SamplingParams::default()
        },
        seed,
        eos_token_id: eos,
        truncate: true,
        ..GenerationConfig::default()
    }
}

/// Continues `prompt` (empty: from <|endoftext|>) with the inference engine.
fn continue_text(
    engine: &mut Gpt2Engine,
    tok: &BpeTokenizer,
    prompt: &str,
    max_new: usize,
    seed: u64,
) -> Result<String> {
    let eos = tok.endoftext_id();
    let mut ids = tok.encode_ids(prompt.as_bytes(), false);
    if ids.is_empty() {
        ids.extend(eos);
    }
    // Fit the context: keep at least half of it (or the whole prompt) for the prompt.
    let ctx = engine.config().n_positions;
    let max_new = max_new.min(ctx.saturating_sub(ids.len().min(ctx / 2)).max(1));
    let out = engine.generate(&ids, &sample_config(max_new, seed, eos), |_| {
        std::ops::ControlFlow::Continue(())
    })?;
    let new: Vec<u32> = out.ids.into_iter().filter(|&id| Some(id) != eos).collect();
    Ok(String::from_utf8_lossy(&tok.decode(&new)?).into_owned())
}

/// Samples from the trained model in `model_dir` (HF layout + tokenizer):
/// `(prompt, continuation)` for each prompt, sampled at temperature 0.8,
/// top-k 40, seeded with `seed + i`.
pub fn sample_texts(
    model_dir: &Path,
    prompts: &[&str],
    max_new: usize,
    seed: u64,
) -> Result<Vec<(String, String)>> {
    let tok = BpeTokenizer::from_dir(model_dir)?;
    let mut engine = Gpt2Engine::load(model_dir, WeightDtype::F32)?;
    prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            Ok((
                p.to_string(),
                continue_text(&mut engine, &tok, p, max_new, seed + i as u64)?,
            ))
        })
        .collect()
}
