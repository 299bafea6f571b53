//! `lmkit serve`: one HTTP server (axum + tokio) for both families, in the
//! shape of the APIs their users already call.
//!
//! - OpenAI: `POST /v1/completions` (GPT-2; JSON or Server-Sent Events),
//!   `POST /v1/embeddings` (BERT / sentence-transformers), `GET /v1/models`;
//!   the chat routes answer 400 (these models have no chat template).
//! - text-embeddings-inference: `POST /embed`, `/tokenize`, `/decode`,
//!   `/predict` (classification), `/rerank` (a cross-encoder's pair scores,
//!   or a bi-encoder's cosine).
//! - `POST /v1/fill-mask` and `/v1/qa`, shaped as HF's pipelines.
//! - `GET /health`, `GET /metrics` (Prometheus), `GET /` (a page to try
//!   the models, embedded in the binary).
//!
//! Each model runs on its own worker thread behind a bounded queue
//! ([`models`]); a full queue answers 429. Errors are OpenAI's
//! `{"error": {"message", "type", "param", "code"}}` with a 4xx/5xx status.
//! With an API key, every route but `/` and `/health` needs
//! `Authorization: Bearer KEY` (compared in constant time).
//!
//! The server is a shell over the library: completions run in a
//! [`lmkit::models::gpt2::ContinuousBatch`] (each sequence what
//! [`lmkit::models::gpt2::Gpt2Engine::complete`], which `lmkit generate`
//! calls, gives it alone), embeddings are
//! [`lmkit::models::bert::BertPipeline::embed`] — what `lmkit embed` calls.

mod error;
pub mod linger;
mod metrics;
pub mod models;
mod openai;
mod tasks;
mod tei;
mod vllm;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use lmkit::models::auto_dtype::DtypeRequest;
use lmkit::models::gpt2::WeightDtype;
use serde::de::DeserializeOwned;

pub use error::ApiError;
pub use metrics::Metrics;
pub use models::ModelSpec;
use models::{Model, WorkerLimits};

/// Everything `lmkit serve` can be told.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub models: Vec<ModelSpec>,
    /// Requests must carry `Authorization: Bearer KEY`.
    pub api_key: Option<String>,
    /// Most texts per embedding forward batch, and most completions decoded together.
    pub max_batch: usize,
    /// Most requests waiting per model; more are answered 429.
    pub max_queue: usize,
    /// Largest `max_tokens` a completion may ask for.
    pub max_tokens: usize,
    /// Longest wait in a queue before a request is answered 503.
    pub timeout: Duration,
    /// Weights of GPT-2 models (f32, bf16, int8, or `auto`: the fastest on
    /// this CPU, per model); BERT models run their encoder's matmuls in the
    /// same format.
    pub dtype: DtypeRequest<WeightDtype>,
    /// Largest request body, bytes.
    pub body_limit: usize,
    /// Memory for each GPT-2 model's prefix cache (keys and values of
    /// earlier prompts, reused by prompts that start the same way), MiB;
    /// 0 turns it off.
    pub prefix_cache_mb: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            models: Vec::new(),
            api_key: None,
            max_batch: 32,
            max_queue: 64,
            max_tokens: 1024,
            timeout: Duration::from_secs(60),
            dtype: DtypeRequest::Fixed(WeightDtype::F32),
            body_limit: 4 << 20,
            prefix_cache_mb: 256,
        }
    }
}

/// What stops a server from starting.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{0}")]
    Options(String),
    #[error("model {name}: {source}")]
    Load {
        name: String,
        source: Box<lmkit::Error>,
    },
}

/// Limits the handlers check.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_tokens: usize,
}

/// The state every handler shares.
pub struct App {
    pub(crate) models: BTreeMap<String, Model>,
    pub(crate) limits: Limits,
    pub(crate) metrics: Arc<Metrics>,
    api_key: Option<Vec<u8>>,
    /// Unix time the server started (`created` of `/v1/models`).
    pub(crate) started: u64,
}

/// A request body, or why it could not be read (too large...).
pub(crate) type Body = Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>;

/// The JSON request in `body`; a body too large is 413, malformed JSON 400.
pub(crate) fn parse_body<T: DeserializeOwned>(body: Body) -> Result<T, ApiError> {
    let bytes = body.map_err(|e| {
        let status = e.status();
        ApiError::new(status, format!("request body: {}", e.body_text()))
    })?;
    serde_json::from_slice(&bytes).map_err(invalid_body)
}

/// [`parse_body`]'s second half, for a body already parsed as JSON (a
/// route that looks at it first to tell two request shapes apart).
pub(crate) fn from_value<T: DeserializeOwned>(v: serde_json::Value) -> Result<T, ApiError> {
    serde_json::from_value(v).map_err(invalid_body)
}

fn invalid_body(e: serde_json::Error) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, format!("request body: {e}"))
        .code("invalid_request_body")
}

/// A loaded server, ready to [`Server::serve`].
pub struct Server {
    app: Arc<App>,
}

impl Server {
    /// Loads every model (each starts its worker) and checks the options.
    pub fn load(opts: &ServeOptions) -> Result<Server, ServeError> {
        let bad = |m: &str| Err(ServeError::Options(m.to_string()));
        if opts.models.is_empty() {
            return bad("give at least one `model`");
        }
        if opts.max_batch == 0 || opts.max_queue == 0 || opts.max_tokens == 0 {
            return bad("`max_batch`, `max_queue` and `max_tokens` must be at least 1");
        }
        if opts.api_key.as_ref().is_some_and(String::is_empty) {
            return bad("`api_key` is empty");
        }
        let Some(prefix_cache_bytes) = opts.prefix_cache_mb.checked_mul(1 << 20) else {
            return Err(ServeError::Options(format!(
                "`prefix_cache_mb` {} is more memory than this machine can address",
                opts.prefix_cache_mb
            )));
        };
        let metrics = Arc::new(Metrics::default());
        let limits = WorkerLimits {
            max_batch: opts.max_batch,
            max_queue: opts.max_queue,
            timeout: opts.timeout,
            dtype: opts.dtype,
            prefix_cache_bytes,
        };
        let mut models = BTreeMap::new();
        for spec in &opts.models {
            if models.contains_key(&spec.name) {
                return Err(ServeError::Options(format!(
                    "two models are named {:?}: name them (`NAME=DIR`)",
                    spec.name
                )));
            }
            let m =
                Model::load(spec, limits, metrics.clone()).map_err(|source| ServeError::Load {
                    name: spec.name.clone(),
                    source: Box::new(source),
                })?;
            models.insert(spec.name.clone(), m);
        }
        Ok(Server {
            app: Arc::new(App {
                models,
                limits: Limits {
                    max_tokens: opts.max_tokens,
                },
                metrics,
                api_key: opts.api_key.as_ref().map(|k| k.as_bytes().to_vec()),
                started: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
            }),
        })
    }

    /// `(name, family)` of every model served.
    pub fn models(&self) -> Vec<(String, lmkit::spec::Family)> {
        self.app
            .models
            .iter()
            .map(|(n, m)| (n.clone(), m.family()))
            .collect()
    }

    /// The routes, with auth, metrics and the body limit.
    pub fn router(&self, body_limit: usize) -> Router {
        let app = self.app.clone();
        Router::new()
            .route("/v1/completions", post(openai::completions))
            .route("/v1/embeddings", post(openai::embeddings))
            .route("/v1/models", get(openai::list_models))
            .route("/v1/chat/completions", post(openai::chat))
            .route("/chat/completions", post(openai::chat))
            .route("/embed", post(tei::embed))
            .route("/tokenize", post(tei::tokenize))
            .route("/detokenize", post(vllm::detokenize))
            .route("/tokenizer_info", get(vllm::tokenizer_info))
            .route("/decode", post(tei::decode))
            .route("/predict", post(tasks::predict))
            .route("/rerank", post(tasks::rerank))
            .route("/v1/fill-mask", post(tasks::fill_mask))
            .route("/v1/qa", post(tasks::qa))
            .route("/metrics", get(metrics_text))
            .route("/health", get(health))
            .route("/", get(page))
            .route_layer(axum::middleware::from_fn_with_state(app.clone(), guard))
            .fallback(not_found)
            .layer(DefaultBodyLimit::max(body_limit))
            .layer(axum::middleware::from_fn_with_state(
                body_limit,
                linger::early_413,
            ))
            .with_state(app)
    }

    /// Serves on `listener` until `shutdown` completes, then stops
    /// accepting and lets in-flight requests finish. Connections close
    /// lingering ([`linger`]), so a refused body never resets them.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        body_limit: usize,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let router = self.router(body_limit);
        axum::serve(linger::LingeringListener(listener), router)
            .with_graceful_shutdown(shutdown)
            .await
    }
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

/// Equal keys, compared in time independent of where they differ.
fn same_key(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Auth (when a key is set) and per-route metrics around every route.
async fn guard(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("other", |m| m.as_str())
        .to_string();
    let t0 = Instant::now();
    let public = route == "/" || route == "/health";
    let allowed = match (&app.api_key, public) {
        (Some(key), false) => req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|given| same_key(given.trim().as_bytes(), key)),
        _ => true,
    };
    let resp = if allowed {
        next.run(req).await
    } else {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing or incorrect API key (Authorization: Bearer KEY)",
        )
        .code("invalid_api_key")
        .into_response()
    };
    app.metrics
        .request(&route, resp.status().as_u16(), t0.elapsed().as_secs_f64());
    resp
}

async fn not_found(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no route {} {}", req.method(), req.uri().path()),
    )
}

async fn health(State(app): State<Arc<App>>) -> Response {
    axum::Json(serde_json::json!({
        "status": "ok",
        "models": app.models.iter().map(|(n, m)| serde_json::json!({
            "name": n, "family": m.family(), "queued": m.queued(),
        })).collect::<Vec<_>>(),
    }))
    .into_response()
}

async fn metrics_text(State(app): State<Arc<App>>) -> Response {
    let queues: Vec<(String, usize)> = app
        .models
        .iter()
        .map(|(n, m)| (n.clone(), m.queued()))
        .collect();
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(&queues),
    )
        .into_response()
}

async fn page() -> Html<&'static str> {
    Html(include_str!("index.html"))
}
