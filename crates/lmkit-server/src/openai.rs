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
use lmkit::models::gpt2::{GenerationConfig, SamplingParams};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::models::{GenEvent, Gpt2Model, Model};
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
    family: Option<&str>,
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
    if m.family() != family {
        let what = if family == "gpt2" {
            "a GPT-2"
        } else {
            "a BERT"
        };
        return Err(ApiError {
            param: Some("model"),
            ..ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("{route} needs {what} model; {name:?} is {}", m.family()),
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
}

fn plan(app: &App, m: &Gpt2Model, r: &CompletionRequest) -> Result<Plan, ApiError> {
    let unsupported =
        |param: &'static str, why: &str| Err(ApiError::invalid(param, why.to_string()));
    if r.presence_penalty.is_some_and(|v| v != 0.0) {
        return unsupported("presence_penalty", "presence_penalty is not supported; use repetition_penalty (HF's multiplicative penalty)");
    }
    if r.frequency_penalty.is_some_and(|v| v != 0.0) {
        return unsupported("frequency_penalty", "frequency_penalty is not supported; use repetition_penalty (HF's multiplicative penalty)");
    }
    if r.logprobs.is_some_and(|v| v > 0) {
        return unsupported("logprobs", "logprobs are not supported yet");
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
    };
    sampling
        .validate()
        .map_err(|e| ApiError::invalid("repetition_penalty", e.to_string()))?;
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
    })
}

pub async fn completions(State(app): State<Arc<App>>, body: Body) -> Response {
    match completions_inner(app, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn completions_inner(app: Arc<App>, body: Body) -> Result<Response, ApiError> {
    let r: CompletionRequest = parse_body(body)?;
    let Model::Gpt2(m) = model(&app, &r.model, Some("gpt2"), "/v1/completions")? else {
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
            let rx = m.submit(prompt.clone(), cfg, plan.stops.clone())?;
            jobs.push((p * plan.n + k, p, rx));
        }
    }
    if r.stream.unwrap_or(false) {
        let usage = r.stream_options.as_ref().is_some_and(|o| o.include_usage);
        return Ok(stream_response(id, created, name, plan, jobs, usage).into_response());
    }
    let (mut choices, mut prompt_tokens, mut completion_tokens) = (Vec::new(), 0, 0);
    for (index, p, mut rx) in jobs {
        let mut text = if plan.echo {
            plan.echoes[p].clone()
        } else {
            String::new()
        };
        loop {
            match rx.recv().await {
                Some(GenEvent::Text(t)) => text.push_str(&t),
                Some(GenEvent::Done {
                    finish_reason,
                    prompt_tokens: pt,
                    completion_tokens: ct,
                }) => {
                    if index % plan.n == 0 {
                        prompt_tokens += pt;
                    }
                    completion_tokens += ct;
                    choices.push(json!({
                        "text": text, "index": index, "logprobs": null, "finish_reason": finish_reason,
                    }));
                    break;
                }
                Some(GenEvent::Failed(e)) => return Err(e),
                None => {
                    return Err(ApiError::new(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "the generation worker stopped",
                    ))
                }
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

/// Server-Sent Events: one chunk per text piece, a last chunk per choice
/// with its finish reason, with `usage` a chunk with empty `choices` and the
/// token counts, then `data: [DONE]`. A failure midway is sent as an error
/// event (the status line is already out).
fn stream_response(
    id: String,
    created: u64,
    model: String,
    plan: Plan,
    jobs: Vec<(usize, usize, tokio::sync::mpsc::Receiver<GenEvent>)>,
    usage: bool,
) -> Sse<impl Stream<Item = Result<Event, std::convert::Infallible>>> {
    let head = json!({"id": id, "object": "text_completion", "created": created, "model": model});
    let chunk = {
        let head = head.clone();
        move |index: usize, text: &str, finish: Option<&str>| {
            let mut c = head.clone();
            c["choices"] =
                json!([{"text": text, "index": index, "logprobs": null, "finish_reason": finish}]);
            Event::default().data(c.to_string())
        }
    };
    // (prompt, completion) tokens of the choices finished so far.
    let counts = Arc::new(std::sync::Mutex::new((0usize, 0usize)));
    let n = plan.n;
    let echoes = plan.echoes;
    let echo = plan.echo;
    let tally = counts.clone();
    let per_job = stream::iter(jobs).flat_map(move |(index, p, rx)| {
        let chunk = chunk.clone();
        let tally = tally.clone();
        let first = (echo && !echoes[p].is_empty()).then(|| chunk(index, &echoes[p], None));
        let events = stream::unfold((rx, false), move |(mut rx, done)| {
            let chunk = chunk.clone();
            let tally = tally.clone();
            async move {
                if done {
                    return None;
                }
                let ev = match rx.recv().await {
                    Some(GenEvent::Text(t)) => (chunk(index, &t, None), false),
                    Some(GenEvent::Done {
                        finish_reason,
                        prompt_tokens,
                        completion_tokens,
                    }) => {
                        if let Ok(mut c) = tally.lock() {
                            if index % n == 0 {
                                c.0 += prompt_tokens;
                            }
                            c.1 += completion_tokens;
                        }
                        (chunk(index, "", Some(finish_reason)), true)
                    }
                    Some(GenEvent::Failed(e)) => {
                        (Event::default().data(e.body().to_string()), true)
                    }
                    None => (
                        Event::default().data(
                            ApiError::new(
                                StatusCode::INTERNAL_SERVER_ERROR,
                                "the generation worker stopped",
                            )
                            .body()
                            .to_string(),
                        ),
                        true,
                    ),
                };
                Some((ev.0, (rx, ev.1)))
            }
        });
        stream::iter(first).chain(events)
    });
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
    let all = per_job
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
        let Model::Bert(m) = model(&app, &r.model, Some("bert"), "/v1/embeddings")? else {
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
        let tok = m.pipeline.tokenizer.clone();
        let prompt_tokens: usize = texts
            .iter()
            .map(|t| tok.encode(t, true).map_or(0, |e| e.ids.len()))
            .sum();
        let vecs = m.embed(texts, None).await?;
        if let Some(d) = r.dimensions {
            if vecs.first().is_some_and(|v| v.len() != d) {
                return Err(ApiError::invalid(
                    "dimensions",
                    format!("this model's embeddings have {} dimensions", vecs[0].len()),
                ));
            }
        }
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
