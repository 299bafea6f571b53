//! The models a server holds and the worker threads that run them.
//!
//! GPT-2: one worker thread per model owns the inference engine and a
//! continuous batch ([`ContinuousBatch`]): completions join it between
//! decode steps (up to `max_batch` at once) and leave it when done, each
//! step advancing all of them by one token in one pass over the weights.
//! Each token goes back as it is produced; a client that went away (its
//! channel closed) leaves the batch at the next step. BERT: one worker per model gathers the
//! embedding requests that arrive within a short wait (up to `max_batch`
//! texts) and embeds them in one call. Both queues are bounded: a full
//! queue is a 429, never a growing backlog.

use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use lmkit::checkpoint::{read_config, resolve_model_dir};
use lmkit::models::auto_dtype::DtypeRequest;
use lmkit::models::bert::{BertPipeline, EmbedOptions};
use lmkit::models::gpt2::{
    BatchEvent, ContinuousBatch, FinishReason, Gpt2Engine, PrefixCache, SeqId, SequenceRequest,
    TokenLogprob, WeightDtype, DEFAULT_BLOCK_TOKENS,
};
use lmkit::spec::config::{AnyConfig, Gpt2Config};
use lmkit::spec::names::{Architecture, Family};
use lmkit::tasks::classify::Classifier;
use lmkit_tokenizers::BpeTokenizer;
use tokio::sync::mpsc::UnboundedSender;

use crate::error::ApiError;
use crate::metrics::Metrics;

/// `[NAME=]DIR_OR_HUB_NAME` of `--model`.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    /// What requests call the model (`"model": NAME`).
    pub name: String,
    /// A folder in HF layout or a hub name in the local HF cache.
    pub source: String,
}

impl FromStr for ModelSpec {
    type Err = String;

    /// `NAME=SOURCE`, or `SOURCE` alone, named by its last path component.
    fn from_str(s: &str) -> Result<Self, String> {
        let (name, source) = match s.split_once('=') {
            Some((n, src)) if !n.is_empty() && !n.contains('/') => (n.to_string(), src.to_string()),
            _ => {
                let trimmed = s.trim_end_matches('/');
                let name = trimmed.rsplit('/').next().unwrap_or(trimmed).to_string();
                (name, s.to_string())
            }
        };
        if name.is_empty() || source.is_empty() {
            return Err(format!("{s:?}: expected [NAME=]DIR_OR_HUB_NAME"));
        }
        Ok(ModelSpec { name, source })
    }
}

/// Limits every model's worker keeps.
#[derive(Debug, Clone, Copy)]
pub struct WorkerLimits {
    pub max_batch: usize,
    pub max_queue: usize,
    /// Longest time a request may wait in a queue before it is answered 503.
    pub timeout: Duration,
    pub dtype: DtypeRequest<WeightDtype>,
    /// Each GPT-2 model's prefix cache, bytes; 0: none.
    pub prefix_cache_bytes: usize,
}

/// A loaded model.
pub enum Model {
    /// A GPT-2 language model: completions.
    Gpt2(Gpt2Model),
    /// A BERT: embeddings and its heads' routes.
    Bert(BertModel),
    /// A GPT-2 sequence classifier (`GPT2ForSequenceClassification`): `/predict`.
    Gpt2Classifier(ClassifierModel),
}

impl Model {
    pub fn family(&self) -> Family {
        match self {
            Model::Gpt2(_) | Model::Gpt2Classifier(_) => Family::Gpt2,
            Model::Bert(_) => Family::Bert,
        }
    }

    /// Requests waiting for this model.
    pub fn queued(&self) -> usize {
        match self {
            Model::Gpt2(m) => m.queued.load(Ordering::Relaxed),
            Model::Bert(m) => m.queued.load(Ordering::Relaxed),
            Model::Gpt2Classifier(m) => m.queued.load(Ordering::Relaxed),
        }
    }

    /// Loads `spec` (its family from `config.json`) and starts its worker.
    pub fn load(
        spec: &ModelSpec,
        limits: WorkerLimits,
        metrics: Arc<Metrics>,
    ) -> lmkit::Result<Model> {
        let dir: PathBuf = resolve_model_dir(&spec.source)?;
        let classifier = Architecture::Gpt2ForSequenceClassification.hf_name();
        Ok(match read_config(&dir, None)? {
            AnyConfig::Gpt2(c) if c.architectures.iter().any(|a| a == classifier) => {
                Model::Gpt2Classifier(ClassifierModel::load(&spec.name, &spec.source, limits)?)
            }
            AnyConfig::Gpt2(_) => Model::Gpt2(Gpt2Model::load(&spec.name, &dir, limits, metrics)?),
            AnyConfig::Bert(_) => Model::Bert(BertModel::load(&spec.name, &dir, limits, metrics)?),
        })
    }
}

/// What a completion's worker sends back.
#[derive(Debug)]
pub enum GenEvent {
    /// The prompt's log-probabilities (`prompt_logprobs`), first.
    Prompt(Vec<Option<TokenLogprob>>),
    /// A new token and the text now ready to show (possibly empty).
    Token {
        id: u32,
        text: String,
        logprob: Option<TokenLogprob>,
    },
    Done {
        finish_reason: &'static str,
        prompt_tokens: usize,
        completion_tokens: usize,
    },
    Failed(ApiError),
}

/// One completion to run. Its events go on an unbounded channel so that a
/// slow reader never stalls the batch; each completion sends at most
/// `max_tokens + 2` events.
pub struct GenJob {
    pub req: SequenceRequest,
    pub events: tokio::sync::mpsc::UnboundedSender<GenEvent>,
    enqueued: Instant,
}

pub struct Gpt2Model {
    pub tokenizer: Arc<BpeTokenizer>,
    pub config: Gpt2Config,
    /// The end-of-text id generation stops at.
    pub eos: Option<u32>,
    jobs: SyncSender<GenJob>,
    queued: Arc<AtomicUsize>,
    name: String,
}

impl Gpt2Model {
    fn load(
        name: &str,
        dir: &std::path::Path,
        limits: WorkerLimits,
        metrics: Arc<Metrics>,
    ) -> lmkit::Result<Self> {
        let tokenizer = Arc::new(BpeTokenizer::from_dir(dir).map_err(|e| {
            lmkit::Error::InvalidInput(format!("loading the tokenizer from {}: {e}", dir.display()))
        })?);
        let dtype = limits.dtype.resolve_for(&read_config(dir, None)?);
        let engine = Gpt2Engine::load(dir, dtype)?;
        let config = engine.config().clone();
        let eos = config.eos_token_id.or_else(|| tokenizer.endoftext_id());
        let (jobs, rx) = sync_channel(limits.max_queue);
        let queued = Arc::new(AtomicUsize::new(0));
        let batch = match limits.prefix_cache_bytes {
            0 => ContinuousBatch::new(),
            bytes => {
                ContinuousBatch::with_prefix_cache(PrefixCache::new(bytes, DEFAULT_BLOCK_TOKENS)?)
            }
        };
        let (tok, q) = (tokenizer.clone(), queued.clone());
        let worker = Worker {
            name: name.to_string(),
            limits,
            metrics,
        };
        std::thread::Builder::new()
            .name(format!("gpt2-{name}"))
            .spawn(move || gpt2_worker(engine, batch, tok, rx, q, worker))
            .map_err(|e| lmkit::Error::io("worker thread", e))?;
        Ok(Gpt2Model {
            tokenizer,
            config,
            eos,
            jobs,
            queued,
            name: name.to_string(),
        })
    }

    /// Queues a completion; its events arrive on the returned receiver.
    pub fn submit(
        &self,
        req: SequenceRequest,
    ) -> Result<tokio::sync::mpsc::UnboundedReceiver<GenEvent>, ApiError> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let job = GenJob {
            req,
            events: tx,
            enqueued: Instant::now(),
        };
        enqueue(&self.jobs, &self.queued, &self.name, job)?;
        Ok(rx)
    }
}

/// Puts `job` on a model's bounded queue, counting it in `queued`: a full
/// queue is a 429, a stopped worker a 503.
fn enqueue<J>(
    jobs: &SyncSender<J>,
    queued: &AtomicUsize,
    name: &str,
    job: J,
) -> Result<(), ApiError> {
    queued.fetch_add(1, Ordering::Relaxed);
    jobs.try_send(job).map_err(|e| {
        queued.fetch_sub(1, Ordering::Relaxed);
        match e {
            TrySendError::Full(_) => ApiError::overloaded(name),
            TrySendError::Disconnected(_) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("model {name:?} has stopped"),
            ),
        }
    })
}

/// The answer to a request that waited longer than `timeout` in a queue.
fn queue_timeout(timeout: Duration) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("waited over {} s in the queue", timeout.as_secs_f64()),
    )
    .code("timeout")
}

/// What a GPT-2 worker reports to and obeys.
struct Worker {
    name: String,
    limits: WorkerLimits,
    metrics: Arc<Metrics>,
}

fn gpt2_worker(
    mut engine: Gpt2Engine,
    mut batch: ContinuousBatch,
    tok: Arc<BpeTokenizer>,
    rx: Receiver<GenJob>,
    queued: Arc<AtomicUsize>,
    worker: Worker,
) {
    let Worker {
        name,
        limits,
        metrics,
    } = worker;
    // Each sequence's channel and start time.
    let mut live: HashMap<SeqId, (UnboundedSender<GenEvent>, Instant)> = HashMap::new();
    loop {
        // New completions join between steps: wait for one when idle,
        // otherwise take only those already queued.
        while batch.len() < limits.max_batch {
            let job = if batch.is_empty() {
                match rx.recv() {
                    Ok(j) => j,
                    Err(_) => return, // the server is gone
                }
            } else {
                match rx.try_recv() {
                    Ok(j) => j,
                    Err(_) => break,
                }
            };
            queued.fetch_sub(1, Ordering::Relaxed);
            if job.events.is_closed() {
                continue; // the client left while it waited
            }
            if job.enqueued.elapsed() > limits.timeout {
                let _ = job
                    .events
                    .send(GenEvent::Failed(queue_timeout(limits.timeout)));
                continue;
            }
            match batch.add(&engine, job.req) {
                Ok(seq) => {
                    live.insert(seq, (job.events, Instant::now()));
                }
                Err(e) => {
                    let _ = job.events.send(GenEvent::Failed(ApiError::from_lmkit(e)));
                }
            }
        }
        if batch.is_empty() {
            continue;
        }
        metrics.decode_batch(batch.len());
        let stepped = batch.step(&mut engine, &tok);
        if let Some(stats) = batch.prefix_cache_stats() {
            metrics.prefix_cache(&name, stats);
        }
        let events = match stepped {
            Ok(events) => events,
            Err(e) => {
                // Not expected once add() accepted them: fail them all.
                let e = ApiError::from_lmkit(e);
                for (seq, (tx, _)) in live.drain() {
                    batch.cancel(seq);
                    let _ = tx.send(GenEvent::Failed(e.clone()));
                }
                continue;
            }
        };
        for ev in events {
            let (seq, out) = match ev {
                BatchEvent::Prompt { seq, logprobs } => (seq, GenEvent::Prompt(logprobs)),
                BatchEvent::Token {
                    seq,
                    id,
                    text,
                    logprob,
                } => (seq, GenEvent::Token { id, text, logprob }),
                BatchEvent::Done { seq, completion } => {
                    let out = completion.output;
                    if let Some((_, t0)) = live.get(&seq) {
                        metrics.generated(out.ids.len(), t0.elapsed().as_secs_f64());
                    }
                    let done = GenEvent::Done {
                        finish_reason: match out.finish_reason {
                            FinishReason::Length => "length",
                            FinishReason::Eos | FinishReason::Stop => "stop",
                        },
                        prompt_tokens: out.prompt_tokens,
                        completion_tokens: out.ids.len(),
                    };
                    if let Some((tx, _)) = live.remove(&seq) {
                        let _ = tx.send(done);
                    }
                    continue;
                }
            };
            let gone = live.get(&seq).is_none_or(|(tx, _)| tx.send(out).is_err());
            if gone {
                // The client went away: free its place in the batch.
                batch.cancel(seq);
                live.remove(&seq);
            }
        }
    }
}

/// One embedding request: its texts and options (`batch_size` is the
/// worker's), and the request field that names its inputs (for a 413).
struct EmbedJob {
    texts: Vec<String>,
    opts: EmbedOptions,
    param: &'static str,
    reply: tokio::sync::oneshot::Sender<Result<Vec<Vec<f32>>, ApiError>>,
    enqueued: Instant,
}

pub struct BertModel {
    pub pipeline: Arc<BertPipeline>,
    jobs: SyncSender<EmbedJob>,
    queued: Arc<AtomicUsize>,
    max_queue: usize,
    name: String,
}

impl BertModel {
    fn load(
        name: &str,
        dir: &std::path::Path,
        limits: WorkerLimits,
        metrics: Arc<Metrics>,
    ) -> lmkit::Result<Self> {
        let mut p = BertPipeline::from_dir(dir)?;
        let dtype = limits.dtype.resolve_for(&read_config(dir, None)?);
        p.model.set_dtype(dtype)?;
        let pipeline = Arc::new(p);
        let (jobs, rx) = sync_channel(limits.max_queue);
        let queued = Arc::new(AtomicUsize::new(0));
        let (p, q) = (pipeline.clone(), queued.clone());
        std::thread::Builder::new()
            .name(format!("bert-{name}"))
            .spawn(move || bert_worker(p, rx, q, limits, metrics))
            .map_err(|e| lmkit::Error::io("worker thread", e))?;
        Ok(BertModel {
            pipeline,
            jobs,
            queued,
            max_queue: limits.max_queue,
            name: name.to_string(),
        })
    }

    /// Runs `f` (fill-mask, classification, QA...) on a blocking thread,
    /// counted in this model's queue: 429 when it is full.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&BertPipeline) -> lmkit::Result<T> + Send + 'static,
    ) -> Result<T, ApiError> {
        if self.queued.fetch_add(1, Ordering::Relaxed) >= self.max_queue {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            return Err(ApiError::overloaded(&self.name));
        }
        let p = self.pipeline.clone();
        let r = tokio::task::spawn_blocking(move || f(&p)).await;
        self.queued.fetch_sub(1, Ordering::Relaxed);
        match r {
            Ok(r) => r.map_err(ApiError::from_lmkit),
            Err(e) => Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                e.to_string(),
            )),
        }
    }

    /// Embeds `texts` with `opts` (sharing forward passes with concurrent
    /// requests of the same options); a text refused for its length is a
    /// 413 naming `param`, as TEI answers.
    pub async fn embed(
        &self,
        texts: Vec<String>,
        opts: EmbedOptions,
        param: &'static str,
    ) -> Result<Vec<Vec<f32>>, ApiError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job = EmbedJob {
            texts,
            opts,
            param,
            reply: tx,
            enqueued: Instant::now(),
        };
        enqueue(&self.jobs, &self.queued, &self.name, job)?;
        rx.await.unwrap_or_else(|_| {
            Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the embedding worker stopped",
            ))
        })
    }
}

/// A GPT-2 sequence classifier, run on a blocking thread per request (one
/// at a time: the model keeps its activations).
pub struct ClassifierModel {
    classifier: Arc<std::sync::Mutex<Classifier>>,
    /// Its BPE tokenizer, for `/tokenize` and `/decode`.
    pub tokenizer: Arc<BpeTokenizer>,
    pub eos: Option<u32>,
    /// The longest input it takes, in tokens.
    pub n_positions: usize,
    queued: Arc<AtomicUsize>,
    max_queue: usize,
    name: String,
}

impl ClassifierModel {
    fn load(name: &str, source: &str, limits: WorkerLimits) -> lmkit::Result<Self> {
        let classifier = Classifier::load(source, limits.dtype)?;
        let Classifier::Gpt2(c) = &classifier else {
            return Err(lmkit::Error::InvalidInput(format!(
                "{source}: not a GPT-2 classifier"
            )));
        };
        let tokenizer = Arc::new(c.tokenizer.clone());
        Ok(ClassifierModel {
            eos: c
                .model
                .config
                .eos_token_id
                .or_else(|| tokenizer.endoftext_id()),
            n_positions: c.model.config.n_positions,
            tokenizer,
            classifier: Arc::new(std::sync::Mutex::new(classifier)),
            queued: Arc::new(AtomicUsize::new(0)),
            max_queue: limits.max_queue,
            name: name.to_string(),
        })
    }

    /// Runs `f` on the classifier on a blocking thread, counted in this
    /// model's queue: 429 when it is full.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Classifier) -> lmkit::Result<T> + Send + 'static,
    ) -> Result<T, ApiError> {
        if self.queued.fetch_add(1, Ordering::Relaxed) >= self.max_queue {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            return Err(ApiError::overloaded(&self.name));
        }
        let c = self.classifier.clone();
        let r = tokio::task::spawn_blocking(move || {
            let mut c = c.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut c)
        })
        .await;
        self.queued.fetch_sub(1, Ordering::Relaxed);
        match r {
            Ok(r) => r.map_err(ApiError::from_lmkit),
            Err(e) => Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                e.to_string(),
            )),
        }
    }
}

/// How long the BERT worker waits for more requests to fill a batch.
const GATHER: Duration = Duration::from_millis(2);

fn bert_worker(
    p: Arc<BertPipeline>,
    rx: Receiver<EmbedJob>,
    queued: Arc<AtomicUsize>,
    limits: WorkerLimits,
    metrics: Arc<Metrics>,
) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        let mut n = jobs[0].texts.len();
        let until = Instant::now() + GATHER;
        while n < limits.max_batch {
            match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(j) => {
                    n += j.texts.len();
                    jobs.push(j);
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        queued.fetch_sub(jobs.len(), Ordering::Relaxed);
        let mut live = Vec::with_capacity(jobs.len());
        for j in jobs {
            if j.reply.is_closed() {
                continue;
            }
            if j.enqueued.elapsed() > limits.timeout {
                let _ = j.reply.send(Err(queue_timeout(limits.timeout)));
                continue;
            }
            live.push(j);
        }
        // Requests with the same options share one call.
        while let Some(first) = live.first() {
            let opts = EmbedOptions {
                batch_size: limits.max_batch,
                ..first.opts.clone()
            };
            let (group, rest): (Vec<_>, Vec<_>) =
                live.into_iter().partition(|j| same_options(&j.opts, &opts));
            live = rest;
            embed_group(&p, group, &opts, &metrics);
        }
    }
}

/// Equal options but for `batch_size` (the worker's own).
fn same_options(a: &EmbedOptions, b: &EmbedOptions) -> bool {
    a.pooling == b.pooling
        && a.normalize == b.normalize
        && a.long == b.long
        && a.dimensions == b.dimensions
}

/// Embeds the texts of `group` in one call; when that fails and the group
/// holds several requests, each runs alone, so that one request's error
/// (a text too long) is not another's.
fn embed_group(p: &BertPipeline, group: Vec<EmbedJob>, opts: &EmbedOptions, metrics: &Metrics) {
    let texts: Vec<&str> = group
        .iter()
        .flat_map(|j| j.texts.iter().map(String::as_str))
        .collect();
    metrics.embed_batch(texts.len());
    match p.embed(&texts, opts) {
        Ok(vecs) => {
            let mut it = vecs.into_iter();
            for j in group {
                let mine: Vec<Vec<f32>> = it.by_ref().take(j.texts.len()).collect();
                let _ = j.reply.send(Ok(mine));
            }
        }
        Err(_) if group.len() > 1 => {
            for j in group {
                embed_group(p, vec![j], opts, metrics);
            }
        }
        Err(e) => {
            if let Some(j) = group.into_iter().next() {
                let _ = j.reply.send(Err(embed_error(j.param, e)));
            }
        }
    }
}

/// A library error of an embedding as the server answers it: an input over
/// the model's length is TEI's 413.
fn embed_error(param: &'static str, e: lmkit::Error) -> ApiError {
    match e {
        lmkit::Error::ContextTooLong { len, max } => crate::tei::too_long(param, max, len),
        e => ApiError::from_lmkit(e),
    }
}
