//! vLLM's tokenizer routes, in its request and response shapes: what
//! lm-evaluation-harness's `tokenizer_backend=remote` calls (and other
//! clients written against vLLM). `POST /tokenize` is shared with TEI's: a
//! body with `prompt` is vLLM's (`{"tokens", "count", "max_model_len"}`),
//! one with `inputs` TEI's. `POST /detokenize` and `GET /tokenizer_info`
//! are vLLM's alone.
//!
//! As HF tokenizers (and so vLLM) do, special-token strings in a GPT-2
//! prompt become their ids (`"<|endoftext|>"` → 50256): lm-eval finds the
//! end-of-text id by tokenizing the `eos_token` string.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use lmkit::spec::Family;

use crate::error::ApiError;
use crate::models::Model;
use crate::tei::pick;
use crate::{parse_body, App, Body};

/// Whether a `/tokenize` body is vLLM's (it names `prompt`), not TEI's.
pub fn is_vllm_tokenize(body: &Value) -> bool {
    body.get("prompt").is_some()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenizeRequest {
    prompt: String,
    #[serde(default = "yes")]
    add_special_tokens: bool,
    #[serde(default)]
    return_token_strs: bool,
    model: Option<String>,
}

fn yes() -> bool {
    true
}

/// vLLM's `/tokenize` of `body` (see [`is_vllm_tokenize`]).
pub fn tokenize(app: &App, body: Value) -> Result<Value, ApiError> {
    let r: TokenizeRequest = crate::from_value(body)?;
    let m = pick(app, r.model.as_deref(), None, "/tokenize")?;
    let ids = ids_of(m, &r.prompt, r.add_special_tokens)?;
    let strs = r.return_token_strs.then(|| {
        ids.iter()
            .map(|&id| token_text(m, id).unwrap_or_default())
            .collect::<Vec<_>>()
    });
    Ok(json!({
        "count": ids.len(),
        "max_model_len": max_len(m),
        "tokens": ids,
        "token_strs": strs,
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DetokenizeRequest {
    tokens: Vec<u32>,
    model: Option<String>,
}

/// `POST /detokenize`: `{"tokens": [...]}` → `{"prompt": text}`.
pub async fn detokenize(State(app): State<Arc<App>>, body: Body) -> Response {
    let run = || -> Result<Value, ApiError> {
        let r: DetokenizeRequest = parse_body(body)?;
        let m = pick(&app, r.model.as_deref(), None, "/detokenize")?;
        let text = match m {
            Model::Bert(b) => b.pipeline.tokenizer.decode(&r.tokens, false),
            Model::Gpt2(g) => decode_bpe(&g.tokenizer, &r.tokens),
            Model::Gpt2Classifier(c) => decode_bpe(&c.tokenizer, &r.tokens),
        }
        .map_err(|e| ApiError::invalid("tokens", e.to_string()))?;
        Ok(json!({ "prompt": text }))
    };
    match run() {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `GET /tokenizer_info`: the special tokens and the length limit, as vLLM
/// lists them from the HF tokenizer config. vLLM serves one model and its
/// clients name none: this is the served GPT-2 when there is one (beside
/// embedding models, say), else the only model.
pub async fn tokenizer_info(State(app): State<Arc<App>>) -> Response {
    let run = || -> Result<Value, ApiError> {
        let m = pick(&app, None, Some(Family::Gpt2), "/tokenizer_info")
            .or_else(|_| pick(&app, None, None, "/tokenizer_info"))?;
        let (class, eos, bos, pad) = match m {
            Model::Bert(b) => {
                let tok = &b.pipeline.tokenizer;
                let pad = tok.id_to_token(tok.pad_id()).map(str::to_string);
                ("BertTokenizerFast", None, None, pad)
            }
            _ => {
                let eos = gpt2_eos(m).and_then(|id| token_text(m, id));
                ("GPT2TokenizerFast", eos.clone(), eos, None)
            }
        };
        Ok(json!({
            "tokenizer_class": class,
            "eos_token": eos,
            "bos_token": bos,
            "pad_token": pad,
            "model_max_length": max_len(m),
        }))
    };
    match run() {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The ids of `text` (BERT: `[CLS] … [SEP]` with `special`; GPT-2 adds none
/// and reads special-token strings as their ids, as HF's tokenizer does).
fn ids_of(m: &Model, text: &str, special: bool) -> Result<Vec<u32>, ApiError> {
    match m {
        Model::Bert(b) => b
            .pipeline
            .tokenizer
            .encode(text, special)
            .map(|e| e.ids)
            .map_err(|e| ApiError::invalid("prompt", e.to_string())),
        Model::Gpt2(g) => Ok(g.tokenizer.encode_ids(text.as_bytes(), true)),
        Model::Gpt2Classifier(c) => Ok(c.tokenizer.encode_ids(text.as_bytes(), true)),
    }
}

/// A token's text (lossy UTF-8 for a byte-level piece).
fn token_text(m: &Model, id: u32) -> Option<String> {
    match m {
        Model::Bert(b) => b.pipeline.tokenizer.id_to_token(id).map(str::to_string),
        Model::Gpt2(g) => g
            .tokenizer
            .token_bytes(id)
            .map(|b| String::from_utf8_lossy(b).into()),
        Model::Gpt2Classifier(c) => c
            .tokenizer
            .token_bytes(id)
            .map(|b| String::from_utf8_lossy(b).into()),
    }
}

fn gpt2_eos(m: &Model) -> Option<u32> {
    match m {
        Model::Gpt2(g) => g.eos,
        Model::Gpt2Classifier(c) => c.eos,
        Model::Bert(_) => None,
    }
}

/// The longest input the model takes, in tokens.
fn max_len(m: &Model) -> usize {
    match m {
        Model::Bert(b) => b.pipeline.max_len(),
        Model::Gpt2(g) => g.config.n_positions,
        Model::Gpt2Classifier(c) => c.n_positions,
    }
}

fn decode_bpe(
    tok: &lmkit_tokenizers::BpeTokenizer,
    ids: &[u32],
) -> lmkit_tokenizers::Result<String> {
    tok.decode(ids)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}
