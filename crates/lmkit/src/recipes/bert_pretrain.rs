//! BERT pretraining (masked LM + next-sentence prediction) on the user's
//! text: the data pipeline and the training loop behind
//! `lmkit pretrain --arch bert`.
//!
//! Data: documents as sentences ([`read_bert_documents`]: one sentence per
//! line, a blank line between documents, as BERT's own scripts read them;
//! JSONL `text` rows) → WordPiece ids. Every `1/val_fraction`-th
//! document is held out for validation. Each epoch builds fresh NSP pairs
//! from the training documents ([`build_nsp_pairs`], seeded by
//! `(seed, epoch)`) and visits them in a fresh permutation; every pair gets
//! a fresh MLM mask drawn from `(seed, epoch, pair)`. So the position
//! `(epoch, cursor)` in the training state is all a resume needs. Batches are
//! `[B, seq_len]`, right-padded. Validation pairs and masks are fixed.
//!
//! Loss = mean MLM loss + mean NSP loss (HF `BertForPreTraining`); metric
//! rows carry `loss`, `mlm_loss`, `nsp_loss`, `nsp_accuracy`. Checkpoints are
//! the train engine's (`checkpoints/step-N/` with an HF `BertForPreTraining`,
//! the tokenizer, optimizer moments and the trainer state); the final model
//! is written to OUTPUT.
//!
//! Shape legend: B batch, T sequence length.
//!
//! [`read_bert_documents`]: crate::data::nsp::read_bert_documents

use std::path::{Path, PathBuf};

use lmkit_tokenizers::wordpiece::WordPieceTokenizer;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::checkpoint::save_params_sharded;
use crate::data::nsp::{build_nsp_pairs, NspConfig, NspPair};
use crate::data::DataPosition;
use crate::models::auto_dtype::{layer_shapes, DtypeRequest};
use crate::models::bert::Bert;
use crate::models::bert::{hf_init, BertTrainBatch, BertTrainer, HeadStats};
use crate::spec::config::{AnyConfig, BertConfig, HfActivation};
use crate::spec::layout::bert_layout;
use crate::spec::names::{Architecture, Family};
use crate::spec::Precision;

use super::finetune::load_bert_as;
use super::pretrain_options::{
    check_resumed_family, init_from_record, PretrainEvent, PretrainSummary,
};
use super::run_record::{check_global_batch, check_same_run};
use super::{check_vocab, invalid, io, RecipeError, Result};
use crate::models::{LossParts, Trainable};
use crate::train::runner::{ModelWriteError, Row};
use crate::train::{
    latest_checkpoint, load_train_state, DataParallel, OptimConfig, OptimState, RunConfig, RunTask,
    Runner, TrainState,
};
use crate::train::{StepStats, StopRequest};
use crate::util::comm::{Communicator, SingleProcess};
use crate::util::rng::Rng;

mod corpus;
use corpus::{epoch_plan, mask_rng, Epoch, VAL};
pub use corpus::{prepare_corpus, preview_epoch, BertCorpus, PairBatcher};

/// Size of a new model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BertDims {
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    /// Default 4 × hidden.
    pub intermediate: Option<usize>,
    pub max_positions: usize,
}

/// Run settings that a resume must keep (stored in the trainer state).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BertRunConfig {
    pub seq_len: usize,
    /// Per rank: the global batch is `batch_size × ranks`.
    pub batch_size: usize,
    pub grad_accum: usize,
    pub seed: u64,
    pub whole_word_masking: bool,
    pub short_seq_prob: f64,
    pub val_fraction: f64,
    pub max_steps: u64,
    pub eval_every: u64,
    pub eval_batches: usize,
    pub save_every: u64,
    pub keep: usize,
    pub log_every: u64,
    /// Ranks of the data-parallel run; 1 in checkpoints from before.
    #[serde(default = "super::pretrain_options::one")]
    pub ranks: usize,
    /// The encoder matmuls' number format; f32 in checkpoints from before.
    #[serde(default)]
    pub dtype: Precision,
}

impl BertRunConfig {
    /// The settings a resumed run may change (the global batch is checked
    /// on its own: the ranks may change with it).
    pub(crate) const MAY_CHANGE: &'static [&'static str] = &[
        "batch_size",
        "ranks",
        "max_steps",
        "eval_every",
        "eval_batches",
        "save_every",
        "keep",
        "log_every",
    ];

    /// Pairs per optimizer micro-batch over all ranks.
    pub fn global_batch(&self) -> usize {
        self.batch_size * self.ranks.max(1)
    }
}

/// Everything `lmkit pretrain --arch bert` decides.
#[derive(Debug, Clone)]
pub struct BertPretrainOptions {
    pub data: Vec<PathBuf>,
    /// The field of JSONL / Parquet rows that holds the text.
    pub text_field: String,
    pub output: PathBuf,
    /// WordPiece vocabulary folder (vocab.txt or tokenizer.json).
    pub tokenizer: Option<PathBuf>,
    /// Start from this BERT checkpoint (missing MLM/NSP heads are initialised).
    pub init_from: Option<PathBuf>,
    /// A new model of this size (when neither `init_from` nor `resume`).
    pub dims: Option<BertDims>,
    pub resume: bool,
    pub run: BertRunConfig,
    pub optim: OptimConfig,
    pub decay_embeddings: bool,
    /// Stop (with a checkpoint) after this many steps of this invocation.
    pub stop_after: Option<u64>,
    /// Write models in shards of at most this many bytes; `None`: one file.
    pub max_shard_size: Option<u64>,
    /// ZeRO stage 1 over the ranks of a data-parallel run.
    pub shard_optimizer: bool,
    /// Time each step's phases ([`RunConfig::profile`]).
    pub profile: bool,
    /// `dtype` auto on a new run: `run.dtype` is replaced, once the model's
    /// shapes are known, by the faster of f32 and bf16 on this CPU
    /// ([`crate::models::auto_dtype`]).
    pub dtype_auto: bool,
}

/// A BERT config for a new model.
pub fn new_bert_config(dims: &BertDims, vocab_size: usize, pad_id: u32) -> Result<BertConfig> {
    let cfg = BertConfig {
        vocab_size,
        hidden_size: dims.hidden,
        num_hidden_layers: dims.layers,
        num_attention_heads: dims.heads,
        intermediate_size: dims.intermediate.unwrap_or(4 * dims.hidden),
        hidden_act: HfActivation::Gelu,
        hidden_dropout_prob: 0.0,
        attention_probs_dropout_prob: 0.0,
        max_position_embeddings: dims.max_positions,
        pad_token_id: Some(pad_id),
        architectures: vec!["BertForPreTraining".into()],
        ..BertConfig::default()
    };
    cfg.validate()?;
    Ok(cfg)
}

fn stats_row(prefix: &str, st: &HeadStats) -> Map<String, Value> {
    let acc = if st.nsp.count > 0 {
        st.nsp_correct as f64 / st.nsp.count as f64
    } else {
        0.0
    };
    json!({
        format!("{prefix}loss"): st.mlm.mean() + st.nsp.mean(),
        format!("{prefix}mlm_loss"): st.mlm.mean(),
        format!("{prefix}nsp_loss"): st.nsp.mean(),
        format!("{prefix}nsp_accuracy"): acc,
    })
    .as_object()
    .cloned()
    .expect("object")
}

fn load_tokenizer(dir: &Path) -> Result<WordPieceTokenizer> {
    let mut tok = WordPieceTokenizer::from_dir(dir).map_err(|e| {
        invalid(format!(
            "loading a WordPiece tokenizer from {}: {e} (BERT pretraining needs vocab.txt or a WordPiece tokenizer.json)",
            dir.display()
        ))
    })?;
    tok.set_padding(None);
    tok.set_truncation(None);
    Ok(tok)
}

/// The whole run (or its continuation with `resume`), as one process.
pub fn run_bert_pretraining(
    o: &BertPretrainOptions,
    on_event: &mut dyn FnMut(PretrainEvent),
    stop: &StopRequest,
) -> Result<PretrainSummary> {
    run_bert_pretraining_on(o, &SingleProcess, on_event, stop)
}

/// [`run_bert_pretraining`] as one rank of a data-parallel job over `comm`
/// (every rank calls it with the same options; `run.ranks` = the world
/// size): each rank tokenizes the corpus itself (it is deterministic), and
/// trains on its `batch_size` pairs of every global batch of
/// `batch_size × ranks` in the epoch's order, masked exactly as one process
/// would mask them. Each loss term is a mean over the global batch's
/// labelled tokens or pairs ([`crate::models::Trainable::loss_counts`]), so
/// the steps equal one process's over the global batch. Rank 0 alone
/// writes files.
pub fn run_bert_pretraining_on(
    o: &BertPretrainOptions,
    comm: &dyn Communicator,
    on_event: &mut dyn FnMut(PretrainEvent),
    stop: &StopRequest,
) -> Result<PretrainSummary> {
    let out = &o.output;
    let root = comm.is_root();
    let (mut run, ckpt_root, latest) = check_run(o, comm)?;
    let (tok, model, resumed) = load_model(o, &run, &ckpt_root, latest, on_event)?;
    let cfg = model.config.clone();
    if o.dtype_auto {
        let shapes = layer_shapes(cfg.hidden_size, cfg.intermediate_size);
        run.dtype = DtypeRequest::<Precision>::Auto.resolve_training(&shapes, comm.world_size())?;
    }
    let (corpus, batcher, val_pairs) = prepare_data(o, &tok, &run, on_event)?;
    let mut trainer = new_trainer(model, &run, o.decay_embeddings)?;
    let num_params = trainer.num_params();
    let (mut state, mut opt) = train_state(o, &run, resumed, num_params, &corpus)?;
    let start_step = state.step;
    let mut metrics = super::open_metrics(root, out, o.resume, start_step)?;
    on_event(PretrainEvent::Start {
        message: start_message(&cfg, &run, num_params, &corpus, val_pairs.len()),
        start_step,
        max_steps: run.max_steps,
    });

    let mut task = BertTask {
        corpus: &corpus,
        run: &run,
        batcher: &batcher,
        val_pairs: &val_pairs,
        tok: &tok,
        pos: state.data,
        plan: epoch_plan(&corpus, &run, state.data.epoch)?,
        max_shard_size: o.max_shard_size,
        comm,
    };
    let config = RunConfig {
        max_steps: run.max_steps,
        log_every: run.log_every,
        eval_every: run.eval_every,
        save_every: run.save_every,
        keep: run.keep,
        stop_after: o.stop_after,
        checkpoint_dir: Some(ckpt_root),
        final_dir: Some(out.clone()),
        eval_at_start: true,
        profile: o.profile,
    };
    let optim = o.optim;
    let runner = Runner {
        model: &mut trainer,
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
    let mut tb = BertTrainBatch::default();
    runner.run(
        &mut task,
        &mut tb,
        &mut |e| {
            if let Some(e) = PretrainEvent::of_run(e) {
                on_event(e)
            }
        },
        stop,
    )
}

/// The checks made before anything is loaded: the job's ranks, the output
/// folder (created by rank 0) and the run settings. Returns the run
/// settings, the checkpoint folder and its newest checkpoint.
fn check_run(
    o: &BertPretrainOptions,
    comm: &dyn Communicator,
) -> Result<(BertRunConfig, PathBuf, Option<PathBuf>)> {
    let out = &o.output;
    if o.run.ranks.max(1) != comm.world_size() {
        return Err(invalid(format!(
            "`run.ranks` {} is not the job's {} ranks",
            o.run.ranks,
            comm.world_size()
        )));
    }
    if comm.is_root() {
        std::fs::create_dir_all(out).map_err(io(out))?;
    }
    let ckpt_root = out.join("checkpoints");
    let latest = latest_checkpoint(&ckpt_root).map_err(|e| invalid(e.to_string()))?;
    let run = o.run.clone();
    if run.seq_len < 8 || run.batch_size == 0 || run.grad_accum == 0 || run.max_steps == 0 {
        return Err(invalid(
            "`seq_len` (≥ 8), `batch_size`, `grad_accum` and `max_steps` must be positive",
        ));
    }
    Ok((run, ckpt_root, latest))
}

/// A resumed run's trainer and optimizer state.
type Resumed = (TrainState, OptimState);

/// The tokenizer, the model and (with `resume`) the saved state: the newest
/// checkpoint's, or a fresh start's; checked against `run`.
fn load_model(
    o: &BertPretrainOptions,
    run: &BertRunConfig,
    ckpt_root: &Path,
    latest: Option<PathBuf>,
    on_event: &mut dyn FnMut(PretrainEvent),
) -> Result<(WordPieceTokenizer, Bert, Option<Resumed>)> {
    let (tok, model, resumed) = if o.resume {
        let dir = latest.ok_or_else(|| {
            invalid(format!(
                "`resume`: no checkpoint in {} to resume from",
                ckpt_root.display()
            ))
        })?;
        resume_model(&dir, run)?
    } else {
        if let Some(d) = latest {
            return Err(invalid(format!(
                "{} already holds a checkpoint ({}); pass `resume` to continue it or choose another `output`",
                o.output.display(),
                d.display()
            )));
        }
        let tok_dir = o
            .tokenizer
            .clone()
            .or_else(|| o.init_from.clone())
            .ok_or_else(|| invalid("`tokenizer` (a WordPiece vocabulary folder) is required"))?;
        let tok = load_tokenizer(&tok_dir)?;
        let model = new_model(o, run, &tok, on_event)?;
        (tok, model, None)
    };
    let cfg = &model.config;
    check_vocab(tok.vocab_size(), cfg.vocab_size)?;
    if run.seq_len > cfg.max_position_embeddings {
        return Err(invalid(format!(
            "`seq_len` {} exceeds the model's max_position_embeddings {}",
            run.seq_len, cfg.max_position_embeddings
        )));
    }
    Ok((tok, model, resumed))
}

/// The checkpoint `dir`'s tokenizer, model and state, after checking that
/// `run` may continue it.
fn resume_model(
    dir: &Path,
    run: &BertRunConfig,
) -> Result<(WordPieceTokenizer, Bert, Option<Resumed>)> {
    let (state, opt) = load_train_state(dir).map_err(|e| invalid(e.to_string()))?;
    check_resumed_family(dir, &state, Family::Bert)?;
    let saved: BertRunConfig = serde_json::from_value(state.extra["run"].clone())
        .map_err(|e| invalid(format!("{}: trainer state: {e}", dir.display())))?;
    check_global_batch((run.batch_size, run.ranks), (saved.batch_size, saved.ranks))?;
    check_same_run(run, &saved, BertRunConfig::MAY_CHANGE)?;
    let tok = load_tokenizer(dir)?;
    let model = Bert::from_dir(dir)?;
    if model.architecture != Some(Architecture::BertForPreTraining) {
        return Err(invalid(format!(
            "{}: expected a BertForPreTraining checkpoint",
            dir.display()
        )));
    }
    Ok((tok, model, Some((state, opt))))
}

/// A fresh start's model: `init_from`'s (heads it lacks initialised), or a
/// new one of `dims`.
fn new_model(
    o: &BertPretrainOptions,
    run: &BertRunConfig,
    tok: &WordPieceTokenizer,
    on_event: &mut dyn FnMut(PretrainEvent),
) -> Result<Bert> {
    Ok(match (&o.init_from, &o.dims) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "`init_from` takes the model size from the checkpoint; drop `preset` and `n_*`",
            ))
        }
        (Some(dir), None) => {
            let AnyConfig::Bert(mut cfg) = AnyConfig::from_file(dir.join("config.json"))? else {
                return Err(invalid(format!(
                    "`init_from` {}: not a BERT checkpoint",
                    dir.display()
                )));
            };
            if cfg.hidden_dropout_prob != 0.0 || cfg.attention_probs_dropout_prob != 0.0 {
                on_event(PretrainEvent::Note(
                    "note: lmkit trains without dropout; the saved config will say 0".into(),
                ));
                cfg.hidden_dropout_prob = 0.0;
                cfg.attention_probs_dropout_prob = 0.0;
            }
            load_bert_as(dir, cfg, Architecture::BertForPreTraining, run.seed)?.0
        }
        (None, Some(d)) => {
            let cfg = new_bert_config(d, tok.vocab_size(), tok.pad_id())?;
            let heads = Architecture::BertForPreTraining.bert_heads();
            let layout = bert_layout(&cfg, heads)?;
            let mut params = layout.try_zeros()?;
            hf_init(
                &layout,
                &mut params,
                cfg.initializer_range,
                cfg.pad_token_id,
                &mut Rng::new(run.seed),
                &|_| true,
            );
            Bert::from_parts(
                cfg,
                heads,
                layout,
                params,
                Some(Architecture::BertForPreTraining),
            )?
        }
        (None, None) => {
            return Err(invalid(
                "give `preset`, or all of `n_layer`, `n_embd` and `n_head`, or `init_from`",
            ))
        }
    })
}

/// The corpus, the batcher and the fixed validation pairs (none, said in
/// a note, when the corpus holds out fewer than 2 documents).
fn prepare_data(
    o: &BertPretrainOptions,
    tok: &WordPieceTokenizer,
    run: &BertRunConfig,
    on_event: &mut dyn FnMut(PretrainEvent),
) -> Result<(BertCorpus, PairBatcher, Vec<NspPair>)> {
    if o.data.is_empty() {
        return Err(invalid("`data` (text files) is required"));
    }
    let corpus = prepare_corpus(&o.data, &o.text_field, tok, run.val_fraction)?;
    for n in &corpus.notes {
        on_event(PretrainEvent::Note(n.clone()));
    }
    let batcher = PairBatcher::new(tok, run.seq_len, run.whole_word_masking)?;
    let val_pairs: Vec<NspPair> = if corpus.val.len() >= 2 {
        let mut c = NspConfig::new(run.seq_len);
        c.short_seq_prob = run.short_seq_prob;
        build_nsp_pairs(&corpus.val, &c, &mut Rng::derive(run.seed ^ VAL, 0))?
    } else {
        on_event(PretrainEvent::Note(if run.val_fraction == 0.0 {
            "note: no validation split (`val_fraction` 0): validation loss is not measured".into()
        } else {
            format!(
                "note: no validation split: `val_fraction` {} holds out every {}th document, and the \
                 data's {} documents leave fewer than 2 on a side; validation loss is not measured",
                run.val_fraction,
                (1.0 / run.val_fraction).round().max(2.0),
                corpus.train.len() + corpus.val.len()
            )
        }));
        Vec::new()
    };
    Ok((corpus, batcher, val_pairs))
}

/// The trainer of `model` in the run's number format, the embeddings
/// weight-decayed with `decay_embeddings`.
fn new_trainer(model: Bert, run: &BertRunConfig, decay_embeddings: bool) -> Result<BertTrainer> {
    let mut trainer = BertTrainer::new(model)?;
    Trainable::set_precision(&mut trainer, run.dtype)?;
    if decay_embeddings {
        for n in [
            "embeddings.word_embeddings.weight",
            "embeddings.position_embeddings.weight",
            "embeddings.token_type_embeddings.weight",
        ] {
            trainer.model.layout.set_decay(n, true)?;
        }
    }
    Ok(trainer)
}

/// The trainer and optimizer state to start from (the checkpoint's, checked
/// against the model and the corpus, or new ones), with the run recorded in
/// `extra`; an error when the run is already at `max_steps`.
fn train_state(
    o: &BertPretrainOptions,
    run: &BertRunConfig,
    resumed: Option<Resumed>,
    num_params: usize,
    corpus: &BertCorpus,
) -> Result<(TrainState, OptimState)> {
    let (mut state, opt) = match resumed {
        Some((mut state, opt)) => {
            if state.num_params != num_params {
                return Err(invalid(
                    "the checkpoint's optimizer state does not match the model's size",
                ));
            }
            if state.extra["data"].as_str() != Some(corpus.fingerprint.as_str()) {
                return Err(invalid(format!(
                    "`data` is not the text the checkpoint was trained on ({} documents and tokens differ from the run's {}); \
                     resume with the same files, unchanged, or start a new `output`",
                    corpus.fingerprint.split(':').next().unwrap_or("?"),
                    state.extra["data"]
                        .as_str()
                        .and_then(|f| f.split(':').next())
                        .unwrap_or("?"),
                )));
            }
            state.optim = o.optim;
            (state, opt)
        }
        None => (
            TrainState::new(
                run.seed,
                o.optim,
                run.global_batch(),
                run.seq_len,
                num_params,
            ),
            OptimState::new(num_params),
        ),
    };
    let init_record = match &state.extra.get("init_from") {
        Some(v) if o.resume => (*v).clone(),
        _ => init_from_record(&o.init_from),
    };
    let data_paths: Vec<PathBuf> = o
        .data
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .collect();
    state.extra = json!({
        "arch": "bert",
        "run": run,
        "data": corpus.fingerprint,
        "data_paths": data_paths,
        "text_field": o.text_field,
        "init_from": init_record,
    });
    let start_step = state.step;
    if start_step >= run.max_steps {
        return Err(invalid(format!(
            "the checkpoint is at step {start_step}, already at `max_steps` {}; raise `max_steps`",
            run.max_steps
        )));
    }
    Ok((state, opt))
}

/// The line that opens a run: the model, the data and the step's shape.
fn start_message(
    cfg: &BertConfig,
    run: &BertRunConfig,
    num_params: usize,
    corpus: &BertCorpus,
    val_pairs: usize,
) -> String {
    let per_step = if run.ranks > 1 {
        format!(
            "{} ({} x {} ranks)",
            run.global_batch(),
            run.batch_size,
            run.ranks
        )
    } else {
        run.batch_size.to_string()
    };
    format!(
        "model: BERT {} layers, d {}, {} heads, vocab {}, {:.2}M parameters | data: {} train / {} val documents, {} val pairs | \
         {} x {} tokens x {} accum per step, {} steps{}{}",
        cfg.num_hidden_layers,
        cfg.hidden_size,
        cfg.num_attention_heads,
        cfg.vocab_size,
        num_params as f64 / 1e6,
        corpus.train.len(),
        corpus.val.len(),
        val_pairs,
        per_step,
        run.seq_len,
        run.grad_accum,
        run.max_steps,
        if run.whole_word_masking { ", whole-word masking" } else { "" },
        match run.dtype {
            Precision::F32 => String::new(),
            d => format!(" | {}", d.describe()),
        }
    )
}

/// BERT pretraining's part of a [`Runner`] run: the epoch's pairs in their
/// visiting order, masked as they are drawn.
struct BertTask<'a> {
    corpus: &'a BertCorpus,
    run: &'a BertRunConfig,
    batcher: &'a PairBatcher,
    val_pairs: &'a [NspPair],
    tok: &'a WordPieceTokenizer,
    pos: DataPosition,
    plan: Epoch,
    max_shard_size: Option<u64>,
    comm: &'a dyn Communicator,
}

/// `st` summed over the ranks (a collective): the statistics of the global
/// batch. Only what the metric rows read.
fn sum_over_ranks(st: &HeadStats, comm: &dyn Communicator) -> HeadStats {
    if comm.world_size() == 1 {
        return st.clone();
    }
    let mut v = [
        st.mlm.sum,
        st.mlm.count as f64,
        st.nsp.sum,
        st.nsp.count as f64,
        st.nsp_correct as f64,
    ];
    comm.all_reduce_sum_f64(&mut v);
    HeadStats {
        mlm: LossParts {
            sum: v[0],
            count: v[1] as usize,
        },
        nsp: LossParts {
            sum: v[2],
            count: v[3] as usize,
        },
        nsp_correct: v[4] as usize,
        ..st.clone()
    }
}

impl RunTask<BertTrainer> for BertTask<'_> {
    type Error = RecipeError;

    fn next_batch(&mut self, bt: &mut BertTrainBatch) -> Result<()> {
        let b = self.run.batch_size;
        let global = b * self.comm.world_size();
        if (self.pos.cursor as usize + global) > self.plan.order.len() {
            self.pos = DataPosition {
                epoch: self.pos.epoch + 1,
                cursor: 0,
            };
            self.plan = epoch_plan(self.corpus, self.run, self.pos.epoch)?;
        }
        // This rank's pairs of the global batch.
        let c = self.pos.cursor as usize + self.comm.rank() * b;
        let idx = &self.plan.order[c..c + b];
        let refs: Vec<&NspPair> = idx.iter().map(|&i| &self.plan.pairs[i as usize]).collect();
        let (seed, epoch) = (self.run.seed, self.plan.epoch);
        self.batcher
            .fill(&refs, &|k| mask_rng(seed, epoch, idx[k]), bt);
        self.pos.cursor += global as u64;
        Ok(())
    }

    fn position(&self) -> DataPosition {
        self.pos
    }

    fn step_row(&mut self, model: &mut BertTrainer, _: &StepStats, _: f64, row: &mut Row) {
        row.extend(stats_row(
            "",
            &sum_over_ranks(&model.take_stats(), self.comm),
        ));
        row.insert("epoch".into(), json!(self.pos.epoch));
    }

    fn evaluate(&mut self, tr: &mut BertTrainer) -> Result<Option<Row>> {
        if self.val_pairs.is_empty() {
            return Ok(None);
        }
        let run = self.run;
        let (b, comm) = (run.batch_size, self.comm);
        let global = b * comm.world_size();
        let n = (run.eval_batches * global).min(self.val_pairs.len());
        let mut total = HeadStats::default();
        let mut tb = BertTrainBatch::default();
        // Rank r scores its rows of each global batch; the sums are added.
        for start in (0..n).step_by(global) {
            let lo = (start + comm.rank() * b).min(n);
            let hi = (lo + b).min(n);
            if lo == hi {
                continue;
            }
            let refs: Vec<&NspPair> = (lo..hi).map(|i| &self.val_pairs[i]).collect();
            self.batcher.fill(
                &refs,
                &|k| mask_rng(run.seed ^ VAL, 0, (lo + k) as u32),
                &mut tb,
            );
            total.add(&tr.evaluate_batch(&tb)?);
        }
        Ok(Some(stats_row("val_", &sum_over_ranks(&total, comm))))
    }

    fn write_model(&self, m: &BertTrainer, dir: &Path) -> std::result::Result<(), ModelWriteError> {
        let m = &m.model;
        save_params_sharded(
            &m.layout,
            &m.params,
            &m.config,
            dir,
            Architecture::BertForPreTraining,
            self.max_shard_size,
        )?;
        self.tok.save(dir)?;
        Ok(())
    }
}
