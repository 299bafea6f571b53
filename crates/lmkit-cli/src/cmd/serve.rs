//! `lmkit serve`: flags → [`lmkit_server::ServeOptions`] → load the models,
//! bind, print the address and the models, serve until Ctrl-C / SIGTERM
//! (in-flight requests finish).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use lmkit_server::{ModelSpec, ServeOptions, Server};

#[derive(clap::Args)]
pub struct Args {
    /// A model to serve, `[NAME=]DIR_OR_HUB_NAME` (repeat for several): a
    /// GPT-2 or BERT folder in HF layout, or a hub name in the local cache.
    /// NAME (what requests call it) defaults to the folder's name.
    #[arg(long = "model", required = true)]
    pub models: Vec<String>,
    /// Address to listen on (loopback unless told otherwise).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// Require `Authorization: Bearer KEY` (every route but / and /health).
    /// Also read from LMKIT_API_KEY.
    #[arg(long, env = "LMKIT_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Most texts per embedding forward batch, and most completions decoded together.
    #[arg(long, default_value_t = ServeOptions::default().max_batch)]
    pub max_batch: usize,
    /// Most requests waiting per model; more are answered 429.
    #[arg(long, default_value_t = ServeOptions::default().max_queue)]
    pub max_queue: usize,
    /// Largest max_tokens a completion may ask for.
    #[arg(long, default_value_t = ServeOptions::default().max_tokens)]
    pub max_tokens: usize,
    /// Longest wait in a model's queue, seconds; longer is answered 503.
    #[arg(long, default_value_t = ServeOptions::default().timeout.as_secs_f64())]
    pub timeout_s: f64,
    /// Weights of every model: f32, bf16, int8 or auto (the fastest on this CPU, per model; BERT: its encoder's matmuls in that format).
    #[arg(long, default_value = "f32")]
    pub dtype: String,
    /// Largest request body, bytes.
    #[arg(long, default_value_t = ServeOptions::default().body_limit)]
    pub body_limit: usize,
    /// Memory per GPT-2 model for prompt prefixes kept for reuse (keys and
    /// values in blocks of 16 tokens, least recently used evicted), MiB; 0
    /// turns the prefix cache off.
    #[arg(long, default_value_t = ServeOptions::default().prefix_cache_mb)]
    pub prefix_cache_mb: usize,
}

pub fn run(a: Args) -> Result<()> {
    if !(a.timeout_s.is_finite() && a.timeout_s > 0.0 && a.timeout_s < 1e9) {
        bail!(
            "--timeout-s {} must be a positive number of seconds",
            a.timeout_s
        );
    }
    let models = a
        .models
        .iter()
        .map(|m| m.parse::<ModelSpec>().map_err(anyhow::Error::msg))
        .collect::<Result<Vec<_>>>()?;
    let opts = ServeOptions {
        models,
        api_key: a.api_key.clone(),
        max_batch: a.max_batch,
        max_queue: a.max_queue,
        max_tokens: a.max_tokens,
        timeout: Duration::from_secs_f64(a.timeout_s),
        dtype: a.dtype.parse()?,
        body_limit: a.body_limit,
        prefix_cache_mb: a.prefix_cache_mb,
    };
    let server = Server::load(&opts)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(a.addr)
            .await
            .with_context(|| format!("binding {}", a.addr))?;
        let addr = listener.local_addr()?;
        eprintln!("lmkit serve: listening on http://{addr}");
        for (name, family) in server.models() {
            eprintln!("  model {name} ({family})");
        }
        server
            .serve(listener, opts.body_limit, lmkit_server::shutdown_signal())
            .await
            .context("serving")?;
        eprintln!("lmkit serve: stopped");
        Ok(())
    })
}
