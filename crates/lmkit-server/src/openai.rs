//! The OpenAI API routes: `/v1/completions` (GPT-2; JSON or Server-Sent
//! Events), `/v1/embeddings` (BERT), `/v1/models`, and chat routes that say
//! why they cannot serve these models.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use futures_util::stream::{self, Stream, StreamExt};
use lmkit::models::bert::Chunking;
use lmkit::models::gpt2::{GenerationConfig, SamplingParams, SequenceRequest, TokenLogprob};
use lmkit::spec::Family;
use lmkit_tokenizers::BpeTokenizer;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::models::{GenEvent, Gpt2Model, Model};
use crate::tei::embed_options;
use crate::{parse_body, App, Body};

/// A string, a list of strings, token ids, or a list of token-id lists.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Inputs {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u32>),
    IdLists(Vec<Vec<u32>>),
}

/// A string or a list of strings.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompletionRequest {
    model: String,
    prompt: Inputs,
    #[serde(default = "default_max_tokens")]
    max_tokens: Option<usize>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    /// Extensions (as vLLM): top-k, HF's repetition penalty, and going on
    /// past the end-of-text token.
    top_k: Option<usize>,
    repetition_penalty: Option<f32>,
    ignore_eos: Option<bool>,
    n: Option<usize>,
    stream: Option<bool>,
    stop: Option<OneOrMany>,
    seed: Option<u64>,
    logprobs: Option<u32>,
    echo: Option<bool>,
    presence_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
    best_of: Option<usize>,
    logit_bias: Option<serde_json::Map<String, Value>>,
    suffix: Option<String>,
    user: Option<String>,
    stream_options: Option<StreamOptions>,
}

/// OpenAI's `stream_options`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StreamOptions {
    /// A last chunk with empty `choices` and the request's `usage`.
    #[serde(default)]
    include_usage: bool,
}

fn default_max_tokens() -> Option<usize> {
    Some(16)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn request_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{:x}{:04x}",
        unix_now(),
        N.fetch_add(1, Ordering::Relaxed) & 0xffff
    )
}

/// The model `name`, which must be of `family` (if given) for `route`.
pub fn model<'a>(
    app: &'a App,
    name: &str,
    family: Option<Family>,
    route: &str,
) -> Result<&'a Model, ApiError> {
    let m = app.models.get(name).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "model {name:?} is not served here (serving: {})",
                app.models.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        )
        .code("model_not_found")
    })?;
    let Some(family) = family else { return Ok(m) };
    let fits = matches!(
        (family, m),
        (Family::Gpt2, Model::Gpt2(_)) | (Family::Bert, Model::Bert(_))
    );
    if !fits {
        let what = match family {
            Family::Gpt2 => "a GPT-2 language model",
            Family::Bert => "a BERT model",
        };
        let is = match m {
            Model::Gpt2Classifier(_) => "a GPT-2 sequence classifier (served at /predict)",
            Model::Gpt2(_) => "a GPT-2 language model",
            Model::Bert(_) => "a BERT model",
        };
        return Err(ApiError {
            param: Some("model"),
            ..ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("{route} needs {what}; {name:?} is {is}"),
            )
        });
    }
    Ok(m)
}

/// A completion's settings, checked.
struct Plan {
    prompts: Vec<Vec<u32>>,
    /// The prompt texts, for `echo`.
    echoes: Vec<String>,
    n: usize,
    cfg: GenerationConfig,
    stops: Vec<String>,
    echo: bool,
    /// OpenAI's `logprobs`: alternatives per token (0 to 5).
    logprobs: Option<usize>,
}

fn plan(app: &App, m: &Gpt2Model, r: &CompletionRequest) -> Result<Plan, ApiError> {
    let unsupported =
        |param: &'static str, why: &str| Err(ApiError::invalid(param, why.to_string()));
    let logprobs = match r.logprobs {
        None => None,
        Some(k) if k <= 5 => Some(k as usize),
        Some(k) => {
            return Err(ApiError::invalid(
                "logprobs",
                format!("logprobs {k} must be between 0 and 5"),
            ))
        }
    };
    for (param, v) in [
        ("presence_penalty", r.presence_penalty),
        ("frequency_penalty", r.frequency_penalty),
    ] {
        if v.is_some_and(|v| !(-2.0..=2.0).contains(&v)) {
            return Err(ApiError::invalid(
                param,
                format!("{param} must be between -2 and 2"),
            ));
        }
    }
    if r.best_of.is_some_and(|v| v > 1) {
        return unsupported("best_of", "best_of > 1 is not supported");
    }
    if r.logit_bias.as_ref().is_some_and(|b| !b.is_empty()) {
        return unsupported("logit_bias", "logit_bias is not supported");
    }
    if r.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
        return unsupported("suffix", "suffix (insertion) is not supported by GPT-2");
    }
    let _ = &r.user;
    if r.stream_options.is_some() && !r.stream.unwrap_or(false) {
        return Err(ApiError::invalid(
            "stream_options",
            "stream_options is only allowed with stream: true",
        ));
    }
    let max_tokens = r.max_tokens.unwrap_or(16);
    if max_tokens == 0 || max_tokens > app.limits.max_tokens {
        return Err(ApiError::invalid(
            "max_tokens",
            format!(
                "max_tokens {max_tokens} must be between 1 and this server's limit of {}",
                app.limits.max_tokens
            ),
        ));
    }
    let n = r.n.unwrap_or(1);
    if !(1..=16).contains(&n) {
        return Err(ApiError::invalid(
            "n",
            format!("n {n} must be between 1 and 16"),
        ));
    }
    let sampling = sampling_of(r)?;
    let stops = match &r.stop {
        None => Vec::new(),
        Some(OneOrMany::One(s)) => vec![s.clone()],
        Some(OneOrMany::Many(v)) => v.clone(),
    };
    if stops.len() > 4 || stops.iter().any(String::is_empty) {
        return Err(ApiError::invalid(
            "stop",
            "stop takes up to 4 non-empty strings",
        ));
    }
    let (prompts, echoes) = prompts_of(m, r, max_tokens)?;
    let tok = &m.tokenizer;
    let echoes = if r.echo.unwrap_or(false) {
        prompts
            .iter()
            .zip(echoes)
            .map(|(ids, t)| {
                if t.is_empty() {
                    String::from_utf8_lossy(&tok.decode(ids).unwrap_or_default()).into_owned()
                } else {
                    t
                }
            })
            .collect()
    } else {
        echoes
    };
    let seed = r.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    Ok(Plan {
        prompts,
        echoes,
        n,
        cfg: GenerationConfig {
            max_new_tokens: max_tokens,
            sampling,
            seed,
            eos_token_id: m.eos,
            ignore_eos: r.ignore_eos.unwrap_or(false),
            truncate: false,
        },
        stops,
        echo: r.echo.unwrap_or(false),
        logprobs,
    })
}

/// The sampling settings of a completion request, checked.
fn sampling_of(r: &CompletionRequest) -> Result<SamplingParams, ApiError> {
    let temperature = r.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::invalid(
            "temperature",
            format!("temperature {temperature} must be between 0 and 2"),
        ));
    }
    let top_p = r.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid(
            "top_p",
            format!("top_p {top_p} must be in (0, 1]"),
        ));
    }
    let sampling = SamplingParams {
        greedy: temperature == 0.0,
        temperature: if temperature == 0.0 { 1.0 } else { temperature },
        top_k: r.top_k.unwrap_or(0),
        top_p,
        repetition_penalty: r.repetition_penalty.unwrap_or(1.0),
        presence_penalty: r.presence_penalty.unwrap_or(0.0),
        frequency_penalty: r.frequency_penalty.unwrap_or(0.0),
    };
    sampling
        .validate()
        .map_err(|e| ApiError::invalid("repetition_penalty", e.to_string()))?;
    Ok(sampling)
}

/// The request's prompts as token ids (with their texts, empty for ids
/// given), each non-empty, in the vocabulary and leaving room for
/// `max_tokens` in the context.
fn prompts_of(
    m: &Gpt2Model,
    r: &CompletionRequest,
    max_tokens: usize,
) -> Result<(Vec<Vec<u32>>, Vec<String>), ApiError> {
    let vocab = m.config.vocab_size;
    let tok = &m.tokenizer;
    let (prompts, echoes): (Vec<Vec<u32>>, Vec<String>) = match &r.prompt {
        Inputs::Text(t) => (vec![tok.encode_ids(t.as_bytes(), true)], vec![t.clone()]),
        Inputs::Texts(v) => v
            .iter()
            .map(|t| (tok.encode_ids(t.as_bytes(), true), t.clone()))
            .unzip(),
        Inputs::Ids(ids) => (vec![ids.clone()], vec![String::new()]),
        Inputs::IdLists(v) => (v.clone(), vec![String::new(); v.len()]),
    };
    if prompts.is_empty() || prompts.len() > 64 {
        return Err(ApiError::invalid("prompt", "prompt holds 1 to 64 prompts"));
    }
    let ctx = m.config.n_positions;
    for p in &prompts {
        if p.is_empty() {
            return Err(ApiError::invalid("prompt", "a prompt encodes to no tokens"));
        }
        if let Some(&bad) = p.iter().find(|&&id| id as usize >= vocab) {
            return Err(ApiError::invalid(
                "prompt",
                format!("token id {bad} is outside the model's vocabulary of {vocab}"),
            ));
        }
        if p.len() + max_tokens - 1 > ctx {
            return Err(ApiError {
                code: Some("context_length_exceeded"),
                ..ApiError::invalid(
                    "prompt",
                    format!(
                        "the prompt has {} tokens and max_tokens is {max_tokens}: more than the model's context of {ctx}",
                        p.len()
                    ),
                )
            });
        }
    }
    Ok((prompts, echoes))
}

pub async fn completions(State(app): State<Arc<App>>, body: Body) -> Response {
    match completions_inner(app, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn completions_inner(app: Arc<App>, body: Body) -> Result<Response, ApiError> {
    let r: CompletionRequest = parse_body(body)?;
    let Model::Gpt2(m) = model(&app, &r.model, Some(Family::Gpt2), "/v1/completions")? else {
        unreachable!("model() checked the family")
    };
    let plan = plan(&app, m, &r)?;
    let (id, created, name) = (request_id("cmpl"), unix_now(), r.model.clone());
    // Every (prompt, choice) is one job; choice i of prompt p has index p·n + i.
    let mut jobs = Vec::new();
    for (p, prompt) in plan.prompts.iter().enumerate() {
        for k in 0..plan.n {
            let mut cfg = plan.cfg.clone();
            cfg.seed = cfg.seed.wrapping_add(k as u64);
            let rx = m.submit(SequenceRequest {
                prompt: prompt.clone(),
                cfg,
                stops: plan.stops.clone(),
                logprobs: plan.logprobs,
                prompt_logprobs: plan.echo && plan.logprobs.is_some(),
            })?;
            jobs.push(Job {
                index: p * plan.n + k,
                prompt: p,
                rx,
            });
        }
    }
    if r.stream.unwrap_or(false) {
        let usage = r.stream_options.as_ref().is_some_and(|o| o.include_usage);
        let tok = m.tokenizer.clone();
        return Ok(stream_response(id, created, name, plan, jobs, usage, tok).into_response());
    }
    let (mut choices, mut prompt_tokens, mut completion_tokens) = (Vec::new(), 0, 0);
    for Job {
        index,
        prompt,
        mut rx,
    } in jobs
    {
        let mut text = if plan.echo {
            plan.echoes[prompt].clone()
        } else {
            String::new()
        };
        let mut lps = Logprobs::default();
        loop {
            match rx.recv().await {
                Some(GenEvent::Prompt(l)) => lps.prompt(&m.tokenizer, &plan.prompts[prompt], &l),
                Some(GenEvent::Token {
                    id,
                    text: t,
                    logprob,
                }) => {
                    text.push_str(&t);
                    lps.push(&m.tokenizer, id, logprob.as_ref());
                }
                Some(GenEvent::Done {
                    finish_reason,
                    prompt_tokens: pt,
                    completion_tokens: ct,
                }) => {
                    if index % plan.n == 0 {
                        prompt_tokens += pt;
                    }
                    completion_tokens += ct;
                    let logprobs = if plan.logprobs.is_some() {
                        lps.take()
                    } else {
                        Value::Null
                    };
                    choices.push(json!({
                        "text": text, "index": index, "logprobs": logprobs, "finish_reason": finish_reason,
                    }));
                    break;
                }
                Some(GenEvent::Failed(e)) => return Err(e),
                None => return Err(worker_stopped()),
            }
        }
    }
    Ok(Json(json!({
        "id": id,
        "object": "text_completion",
        "created": created,
        "model": name,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }))
    .into_response())
}

/// One choice of a completion request, running.
struct Job {
    /// The choice's index in the response.
    index: usize,
    /// Which of the request's prompts.
    prompt: usize,
    rx: tokio::sync::mpsc::UnboundedReceiver<GenEvent>,
}

fn worker_stopped() -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "the generation worker stopped",
    )
}

/// A token as OpenAI's `logprobs` shows it: its text, or `bytes:\xNN...`
/// when it is not whole UTF-8 on its own.
fn token_text(tok: &BpeTokenizer, id: u32) -> String {
    let bytes = tok.token_bytes(id).unwrap_or_default();
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_string(),
        Err(_) => {
            let mut s = String::from("bytes:");
            for b in bytes {
                s.push_str(&format!("\\x{b:02x}"));
            }
            s
        }
    }
}

/// OpenAI's legacy `logprobs` object (`tokens`, `token_logprobs`,
/// `top_logprobs`, `text_offset`), built token by token. The top list holds
/// the k most likely tokens and the chosen one (so up to k + 1, as OpenAI).
#[derive(Default)]
struct Logprobs {
    tokens: Vec<String>,
    token_logprobs: Vec<Option<f32>>,
    top_logprobs: Vec<Value>,
    text_offset: Vec<usize>,
    /// Characters of text so far (the echoed prompt included).
    at: usize,
}

impl Logprobs {
    fn push(&mut self, tok: &BpeTokenizer, id: u32, lp: Option<&TokenLogprob>) {
        let text = token_text(tok, id);
        self.text_offset.push(self.at);
        self.at += text.chars().count();
        self.tokens.push(text);
        self.token_logprobs.push(lp.map(|l| l.logprob));
        self.top_logprobs.push(match lp {
            None => Value::Null,
            Some(l) => {
                let mut top = serde_json::Map::new();
                for &(alt, v) in &l.top {
                    top.insert(token_text(tok, alt), json!(v));
                }
                top.entry(token_text(tok, id)).or_insert(json!(l.logprob));
                Value::Object(top)
            }
        });
    }

    /// The echoed prompt's tokens (the first has no log-probability).
    fn prompt(&mut self, tok: &BpeTokenizer, ids: &[u32], lps: &[Option<TokenLogprob>]) {
        for (&id, lp) in ids.iter().zip(lps) {
            self.push(tok, id, lp.as_ref());
        }
    }

    /// The object for the tokens pushed since the last call.
    fn take(&mut self) -> Value {
        json!({
            "tokens": std::mem::take(&mut self.tokens),
            "token_logprobs": std::mem::take(&mut self.token_logprobs),
            "top_logprobs": std::mem::take(&mut self.top_logprobs),
            "text_offset": std::mem::take(&mut self.text_offset),
        })
    }
}

/// Server-Sent Events: one chunk per text piece (per token with
/// `logprobs`), the choices interleaved as their tokens come, a last chunk
/// per choice with its finish reason, with `usage` a chunk with empty
/// `choices` and the token counts, then `data: [DONE]`. A failure midway is
/// sent as an error event (the status line is already out).
fn stream_response(
    id: String,
    created: u64,
    model: String,
    plan: Plan,
    jobs: Vec<Job>,
    usage: bool,
    tok: Arc<BpeTokenizer>,
) -> Sse<impl Stream<Item = Result<Event, std::convert::Infallible>>> {
    let head = json!({"id": id, "object": "text_completion", "created": created, "model": model});
    let chunk = {
        let head = head.clone();
        move |index: usize, text: &str, logprobs: Value, finish: Option<&str>| {
            let mut c = head.clone();
            c["choices"] = json!([{"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish}]);
            Event::default().data(c.to_string())
        }
    };
    // (prompt, completion) tokens of the choices finished so far.
    let counts = Arc::new(std::sync::Mutex::new((0usize, 0usize)));
    let plan = Arc::new(plan);
    let per_job: Vec<_> = jobs
        .into_iter()
        .map(|job| {
            let (chunk, tally, plan, tok) =
                (chunk.clone(), counts.clone(), plan.clone(), tok.clone());
            let with_lps = plan.logprobs.is_some();
            let echo = &plan.echoes[job.prompt];
            // With prompt logprobs the echo waits for them; otherwise it goes first.
            let first = (plan.echo && !echo.is_empty() && !with_lps)
                .then(|| chunk(job.index, echo, Value::Null, None));
            let state = (job, false, Logprobs::default());
            let events = stream::unfold(state, move |(mut job, done, mut lps)| {
                let (chunk, tally, plan, tok) =
                    (chunk.clone(), tally.clone(), plan.clone(), tok.clone());
                async move {
                    if done {
                        return None;
                    }
                    let index = job.index;
                    loop {
                        let (ev, done) = match job.rx.recv().await {
                            Some(GenEvent::Prompt(l)) => {
                                lps.prompt(&tok, &plan.prompts[job.prompt], &l);
                                let echo = if plan.echo {
                                    plan.echoes[job.prompt].as_str()
                                } else {
                                    ""
                                };
                                (chunk(index, echo, lps.take(), None), false)
                            }
                            Some(GenEvent::Token { id, text, logprob }) => {
                                if !with_lps && text.is_empty() {
                                    continue; // nothing to show yet
                                }
                                let l = if with_lps {
                                    lps.push(&tok, id, logprob.as_ref());
                                    lps.take()
                                } else {
                                    Value::Null
                                };
                                (chunk(index, &text, l, None), false)
                            }
                            Some(GenEvent::Done {
                                finish_reason,
                                prompt_tokens,
                                completion_tokens,
                            }) => {
                                if let Ok(mut c) = tally.lock() {
                                    if index % plan.n == 0 {
                                        c.0 += prompt_tokens;
                                    }
                                    c.1 += completion_tokens;
                                }
                                (chunk(index, "", Value::Null, Some(finish_reason)), true)
                            }
                            Some(GenEvent::Failed(e)) => {
                                (Event::default().data(e.body().to_string()), true)
                            }
                            None => (
                                Event::default().data(worker_stopped().body().to_string()),
                                true,
                            ),
                        };
                        return Some((ev, (job, done, lps)));
                    }
                }
            });
            Box::pin(stream::iter(first).chain(events))
        })
        .collect::<Vec<_>>();
    let last = stream::once(async move {
        usage.then(|| {
            let (p, c) = counts.lock().map(|g| *g).unwrap_or_default();
            let mut u = head;
            u["choices"] = json!([]);
            u["usage"] = json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c});
            Event::default().data(u.to_string())
        })
    })
    .filter_map(|e| async move { e });
    let all = stream::select_all(per_job)
        .chain(last)
        .chain(stream::once(async { Event::default().data("[DONE]") }))
        .map(Ok);
    Sse::new(all)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EmbeddingRequest {
    model: String,
    input: Inputs,
    encoding_format: Option<String>,
    dimensions: Option<usize>,
    user: Option<String>,
    /// lmkit's: `false` refuses a text over the model's length (413).
    truncate: Option<bool>,
    /// lmkit's: embed long texts in windows (see `lmkit::models::bert::Chunking`).
    chunking: Option<Chunking>,
}

/// Texts of an embeddings or TEI request: token-id inputs are refused (a
/// BERT model's ids are not the client's tokenizer's).
pub fn texts_of(input: Inputs, param: &'static str) -> Result<Vec<String>, ApiError> {
    let texts = match input {
        Inputs::Text(t) => vec![t],
        Inputs::Texts(v) => v,
        Inputs::Ids(_) | Inputs::IdLists(_) => {
            return Err(ApiError::invalid(
                param,
                "token-id input is not supported for embeddings: send text",
            ))
        }
    };
    if texts.is_empty() || texts.len() > 2048 {
        return Err(ApiError::invalid(param, "input holds 1 to 2048 texts"));
    }
    Ok(texts)
}

pub async fn embeddings(State(app): State<Arc<App>>, body: Body) -> Response {
    let run = async {
        let r: EmbeddingRequest = parse_body(body)?;
        let Model::Bert(m) = model(&app, &r.model, Some(Family::Bert), "/v1/embeddings")? else {
            unreachable!("model() checked the family")
        };
        let base64 = match r.encoding_format.as_deref() {
            None | Some("float") => false,
            Some("base64") => true,
            Some(other) => {
                return Err(ApiError::invalid(
                    "encoding_format",
                    format!("encoding_format {other:?}: expected float or base64"),
                ))
            }
        };
        let _ = r.user;
        let texts = texts_of(r.input, "input")?;
        let tok = &m.pipeline.tokenizer;
        let prompt_tokens: usize = texts
            .iter()
            .map(|t| tok.encode(t, true).map_or(0, |e| e.ids.len()))
            .sum();
        let opts = embed_options(m, None, r.truncate, r.chunking, r.dimensions, true)?;
        let vecs = m.embed(texts, opts, "input").await?;
        let data: Vec<Value> = vecs
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let embedding = if base64 {
                    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    json!(base64::engine::general_purpose::STANDARD.encode(bytes))
                } else {
                    json!(v)
                };
                json!({"object": "embedding", "index": i, "embedding": embedding})
            })
            .collect();
        Ok(Json(json!({
            "object": "list",
            "data": data,
            "model": r.model,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
        })))
    };
    match run.await {
        Ok(r) => r.into_response(),
        Err(e) => e.into_response(),
    }
}

pub async fn list_models(State(app): State<Arc<App>>) -> Json<Value> {
    let data: Vec<Value> = app
        .models
        .iter()
        .map(|(name, m)| {
            json!({"id": name, "object": "model", "created": app.started, "owned_by": "lmkit", "family": m.family()})
        })
        .collect();
    Json(json!({"object": "list", "data": data}))
}

pub async fn chat() -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "GPT-2 and BERT models have no chat template: use /v1/completions with a prompt",
    )
    .code("chat_not_supported")
}
