//! The routes text-embeddings-inference users call: `/embed`, `/tokenize`,
//! `/decode`, with TEI's request fields and response shapes. As in TEI,
//! `truncate` is off by default: an input longer than the model takes is a
//! 413 naming its length, not silently cut. lmkit's own extension,
//! `chunking`, embeds it whole in windows instead (also on `/v1/embeddings`).

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use lmkit::models::bert::{Chunking, EmbedOptions, LongInputs};
use lmkit::spec::Family;
use lmkit_tokenizers::BpeTokenizer;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::models::{BertModel, Model};
use crate::openai::{model, texts_of, Inputs};
use crate::{parse_body, App, Body};

/// TEI's answer to an input over the model's length when `truncate` is off:
/// 413, "`inputs` must have less than N tokens. Given: M".
pub fn too_long(param: &'static str, max: usize, given: usize) -> ApiError {
    ApiError {
        param: Some(param),
        ..ApiError::new(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            format!("`{param}` must have less than {max} tokens. Given: {given}"),
        )
        .code("input_too_long")
    }
}

/// Checks that each text (or `(a, b)` pair) encodes to at most `max` tokens,
/// special tokens included.
pub fn check_fits<'a>(
    m: &BertModel,
    param: &'static str,
    max: usize,
    inputs: impl Iterator<Item = (&'a str, Option<&'a str>)>,
) -> Result<(), ApiError> {
    let tok = &m.pipeline.tokenizer;
    for (a, b) in inputs {
        let enc = match b {
            None => tok.encode(a, true),
            Some(b) => tok.encode_pair(a, b, true),
        }
        .map_err(|e| ApiError::invalid(param, e.to_string()))?;
        if enc.ids.len() > max {
            return Err(too_long(param, max, enc.ids.len()));
        }
    }
    Ok(())
}

/// The model a TEI request names, or the only one served (TEI serves one).
pub(crate) fn pick<'a>(
    app: &'a App,
    name: Option<&str>,
    family: Option<Family>,
    route: &str,
) -> Result<&'a Model, ApiError> {
    match name {
        Some(n) => model(app, n, family, route),
        None => {
            let fits: Vec<&Model> = app
                .models
                .values()
                .filter(|m| family.is_none_or(|f| m.family() == f))
                .collect();
            match fits.as_slice() {
                [one] => Ok(one),
                _ => Err(ApiError::invalid(
                    "model",
                    format!(
                        "{route}: name the model (\"model\": NAME): this server holds {} that fit",
                        fits.len()
                    ),
                )),
            }
        }
    }
}

/// The embedding options of a request, checked against the model: what a
/// long text gets (`truncate` absent means `default_truncate`), `dimensions`.
pub fn embed_options(
    m: &BertModel,
    normalize: Option<bool>,
    truncate: Option<bool>,
    chunking: Option<Chunking>,
    dimensions: Option<usize>,
    default_truncate: bool,
) -> Result<EmbedOptions, ApiError> {
    let long = LongInputs::from_flags(truncate, chunking, default_truncate)
        .map_err(|e| ApiError::invalid("chunking", e.to_string()))?;
    if let Some(c) = chunking {
        c.room_and_stride(m.pipeline.max_len())
            .map_err(|e| ApiError::invalid("chunking", e.to_string()))?;
    }
    let full = m.pipeline.embedding_dims(None);
    if let Some(d) = dimensions.filter(|&d| d == 0 || d > full) {
        return Err(ApiError::invalid(
            "dimensions",
            format!("`dimensions` {d}: this model's embeddings have {full} (ask for 1 to {full})"),
        ));
    }
    Ok(EmbedOptions {
        normalize,
        long,
        dimensions,
        ..EmbedOptions::default()
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EmbedRequest {
    inputs: Inputs,
    #[serde(default = "yes")]
    normalize: bool,
    truncate: Option<bool>,
    /// lmkit's: embed long texts in windows (see `lmkit::models::bert::Chunking`).
    chunking: Option<Chunking>,
    dimensions: Option<usize>,
    model: Option<String>,
}

fn yes() -> bool {
    true
}

pub async fn embed(State(app): State<Arc<App>>, body: crate::Body) -> Response {
    let run = async {
        let r: EmbedRequest = parse_body(body)?;
        let Model::Bert(m) = pick(&app, r.model.as_deref(), Some(Family::Bert), "/embed")? else {
            unreachable!("pick() checked the family")
        };
        let texts = texts_of(r.inputs, "inputs")?;
        let normalize = Some(r.normalize);
        let opts = embed_options(m, normalize, r.truncate, r.chunking, r.dimensions, false)?;
        let vecs = m.embed(texts, opts, "inputs").await?;
        Ok::<_, ApiError>(Json(json!(vecs)))
    };
    match run.await {
        Ok(r) => r.into_response(),
        Err(e) => e.into_response(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenizeRequest {
    inputs: Inputs,
    #[serde(default = "yes")]
    add_special_tokens: bool,
    model: Option<String>,
}

pub async fn tokenize(State(app): State<Arc<App>>, body: Body) -> Response {
    let run = || -> Result<Value, ApiError> {
        let v: Value = parse_body(body)?;
        if crate::vllm::is_vllm_tokenize(&v) {
            return crate::vllm::tokenize(&app, v);
        }
        let r: TokenizeRequest = crate::from_value(v)?;
        let m = pick(&app, r.model.as_deref(), None, "/tokenize")?;
        let texts = match r.inputs {
            Inputs::Text(t) => vec![t],
            Inputs::Texts(v) => v,
            _ => return Err(ApiError::invalid("inputs", "inputs are text")),
        };
        let mut out = Vec::new();
        for t in &texts {
            let rows: Vec<Value> = match m {
                Model::Bert(b) => {
                    let tok = &b.pipeline.tokenizer;
                    let enc = tok
                        .encode(t, r.add_special_tokens)
                        .map_err(|e| ApiError::invalid("inputs", e.to_string()))?;
                    enc.ids
                        .iter()
                        .zip(&enc.offsets)
                        .map(|(&id, &(s, e))| {
                            let special = tok.is_special(id);
                            let text = if special {
                                tok.id_to_token(id).unwrap_or("").to_string()
                            } else {
                                t.get(s..e).unwrap_or("").to_string()
                            };
                            json!({"id": id, "text": text, "special": special,
                                   "start": (!special).then_some(s), "stop": (!special).then_some(e)})
                        })
                        .collect()
                }
                Model::Gpt2(g) => bpe_tokens(&g.tokenizer, g.eos, t, r.add_special_tokens),
                Model::Gpt2Classifier(c) => {
                    bpe_tokens(&c.tokenizer, c.eos, t, r.add_special_tokens)
                }
            };
            out.push(Value::Array(rows));
        }
        Ok(Value::Array(out))
    };
    match run() {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum IdInputs {
    One(Vec<u32>),
    Many(Vec<Vec<u32>>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DecodeRequest {
    ids: IdInputs,
    #[serde(default = "yes")]
    skip_special_tokens: bool,
    model: Option<String>,
}

pub async fn decode(State(app): State<Arc<App>>, body: Body) -> Response {
    let run = || -> Result<Value, ApiError> {
        let r: DecodeRequest = parse_body(body)?;
        let m = pick(&app, r.model.as_deref(), None, "/decode")?;
        let lists = match r.ids {
            IdInputs::One(v) => vec![v],
            IdInputs::Many(v) => v,
        };
        let mut out = Vec::new();
        for ids in &lists {
            let text = match m {
                Model::Bert(b) => b
                    .pipeline
                    .tokenizer
                    .decode(ids, r.skip_special_tokens)
                    .map_err(|e| ApiError::invalid("ids", e.to_string()))?,
                Model::Gpt2(g) => bpe_decode(&g.tokenizer, g.eos, ids, r.skip_special_tokens)?,
                Model::Gpt2Classifier(c) => {
                    bpe_decode(&c.tokenizer, c.eos, ids, r.skip_special_tokens)?
                }
            };
            out.push(json!(text));
        }
        Ok(Value::Array(out))
    };
    match run() {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

/// A GPT-2 tokenizer's tokens of `text`, as `/tokenize` lists them.
fn bpe_tokens(tok: &BpeTokenizer, eos: Option<u32>, text: &str, special: bool) -> Vec<Value> {
    let ids = tok.encode_ids(text.as_bytes(), special);
    let mut at = 0usize;
    ids.iter()
        .map(|&id| {
            let bytes = tok.token_bytes(id).unwrap_or_default();
            let (s, e) = (at, at + bytes.len());
            at = e;
            json!({"id": id, "text": String::from_utf8_lossy(bytes), "special": Some(id) == eos,
                   "start": s, "stop": e})
        })
        .collect()
}

/// A GPT-2 tokenizer's text of `ids` (without `eos` when `skip_special`).
fn bpe_decode(
    tok: &BpeTokenizer,
    eos: Option<u32>,
    ids: &[u32],
    skip_special: bool,
) -> Result<String, ApiError> {
    let kept: Vec<u32> = ids
        .iter()
        .copied()
        .filter(|&id| !(skip_special && Some(id) == eos))
        .collect();
    let bytes = tok
        .decode(&kept)
        .map_err(|e| ApiError::invalid("ids", e.to_string()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}
