//! Task routes: TEI's `/predict` (sequence classification, BERT or GPT-2) and
//! `/rerank` (a cross-encoder's score, or a bi-encoder's cosine), and lmkit's `/v1/fill-mask` and
//! `/v1/qa` with the fields and shapes of HF's pipelines — each what its
//! CLI command computes.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use lmkit::models::bert::{qa_windows, EmbedOptions, HeadKind, LongInputs, QaOptions};
use lmkit::spec::Family;
use lmkit::tasks::classify::Ranked;
use lmkit::tasks::rerank::{self, RerankOptions};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::models::{BertModel, Model};
use crate::openai::{model, texts_of, Inputs};
use crate::tei::check_fits;
use crate::{parse_body, App, Body};

fn bert<'a>(app: &'a App, name: Option<&str>, route: &str) -> Result<&'a BertModel, ApiError> {
    let m = match name {
        Some(n) => model(app, n, Some(Family::Bert), route)?,
        None => {
            let berts: Vec<&Model> = app
                .models
                .values()
                .filter(|m| matches!(m, Model::Bert(_)))
                .collect();
            match berts.as_slice() {
                [one] => *one,
                _ => {
                    return Err(ApiError::invalid(
                        "model",
                        format!("{route}: name the model (\"model\": NAME)"),
                    ))
                }
            }
        }
    };
    match m {
        Model::Bert(b) => Ok(b),
        _ => unreachable!("model() checked the family"),
    }
}

/// The sequence classifier `/predict` runs: the named model, or the one
/// model that classifies (a BERT with a classifier head, or a GPT-2
/// classifier).
fn classifier<'a>(app: &'a App, name: Option<&str>) -> Result<&'a Model, ApiError> {
    let route = "/predict";
    if let Some(n) = name {
        return model(app, n, None, route);
    }
    let classifies = |m: &&Model| match m {
        Model::Bert(b) => b.pipeline.model.require(HeadKind::Classifier).is_ok(),
        Model::Gpt2Classifier(_) => true,
        Model::Gpt2(_) => false,
    };
    match app
        .models
        .values()
        .filter(classifies)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [one] => Ok(one),
        _ => Err(ApiError::invalid(
            "model",
            format!("{route}: name the model (\"model\": NAME)"),
        )),
    }
}

/// The model has the head a route needs, or a 400 saying which it lacks.
fn needs(m: &BertModel, head: HeadKind, route: &str) -> Result<(), ApiError> {
    m.pipeline
        .model
        .require(head)
        .map_err(|e| ApiError::invalid("model", format!("{route}: {e}")))
}

fn reply(r: Result<Value, ApiError>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PredictRequest {
    inputs: Inputs,
    #[serde(default)]
    truncate: bool,
    #[serde(default)]
    raw_scores: bool,
    model: Option<String>,
}

/// TEI's `/predict`: each input's labels with scores, best first, from a
/// BERT sequence classifier or a GPT-2 one (`GPT2ForSequenceClassification`),
/// as `lmkit classify` gives them.
pub async fn predict(State(app): State<Arc<App>>, body: Body) -> Response {
    reply(
        async {
            let r: PredictRequest = parse_body(body)?;
            let m = classifier(&app, r.model.as_deref())?;
            if r.raw_scores {
                return Err(ApiError::invalid(
                    "raw_scores",
                    "raw_scores is not supported",
                ));
            }
            let one = matches!(r.inputs, Inputs::Text(_));
            let texts = texts_of(r.inputs, "inputs")?;
            let truncate = r.truncate;
            if let Model::Bert(b) = m {
                needs(b, HeadKind::Classifier, "/predict")?;
                if !truncate {
                    let max = b.pipeline.model.config.max_position_embeddings;
                    let rows = texts.iter().map(|t| (t.as_str(), None));
                    check_fits(b, "inputs", max, rows)?;
                }
            }
            let classify = move |c: &mut dyn FnMut(&[&str]) -> lmkit::Result<Ranked>| {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                c(&refs)
            };
            let out = match m {
                Model::Bert(b) => {
                    b.run(move |p| classify(&mut |t| p.classify(t, 32, truncate)))
                        .await?
                }
                Model::Gpt2Classifier(c) => {
                    c.run(move |c| classify(&mut |t| c.classify(t, 32, truncate)))
                        .await?
                }
                Model::Gpt2(_) => {
                    return Err(ApiError::invalid(
                        "model",
                        "/predict needs a sequence classifier; this is a GPT-2 language model",
                    ))
                }
            };
            let lists: Vec<Value> = out
                .iter()
                .map(|scores| {
                    json!(scores
                        .iter()
                        .map(|s| json!({"label": s.label, "score": s.score}))
                        .collect::<Vec<_>>())
                })
                .collect();
            Ok(if one { lists[0].clone() } else { json!(lists) })
        }
        .await,
    )
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RerankRequest {
    query: String,
    texts: Vec<String>,
    #[serde(default)]
    return_text: bool,
    #[serde(default)]
    raw_scores: bool,
    truncate: Option<bool>,
    model: Option<String>,
}

/// TEI's `/rerank`: with a cross-encoder (a one-label classification
/// head) the score of each `(query, text)` pair, through a sigmoid unless
/// `raw_scores`, as TEI and sentence-transformers' `CrossEncoder`; with a
/// sentence-embedding model the cosine of the query's and the text's
/// embeddings. Best first.
pub async fn rerank(State(app): State<Arc<App>>, body: Body) -> Response {
    reply(
        async {
            let r: RerankRequest = parse_body(body)?;
            let m = bert(&app, r.model.as_deref(), "/rerank")?;
            if r.texts.is_empty() || r.texts.len() > 2048 {
                return Err(ApiError::invalid("texts", "texts holds 1 to 2048 texts"));
            }
            let truncate = r.truncate.unwrap_or(false);
            let cfg = &m.pipeline.model.config;
            let scores: Vec<f32> = if m.pipeline.model.require(HeadKind::Classifier).is_ok() {
                rerank::check(&m.pipeline).map_err(|e| {
                    ApiError::invalid("model", format!("/rerank: {e}: use /predict"))
                })?;
                if !truncate {
                    let max = cfg.max_position_embeddings;
                    let pairs = r.texts.iter().map(|t| (r.query.as_str(), Some(t.as_str())));
                    check_fits(m, "texts", max, pairs)?;
                }
                let (query, texts) = (r.query.clone(), r.texts.clone());
                let opts = RerankOptions {
                    raw_scores: r.raw_scores,
                    truncate,
                };
                m.run(move |p| {
                    let pairs: Vec<(&str, &str)> =
                        texts.iter().map(|t| (query.as_str(), t.as_str())).collect();
                    rerank::predict(p, &pairs, &opts, 32)
                })
                .await?
            } else {
                let mut all = vec![r.query.clone()];
                all.extend(r.texts.iter().cloned());
                // Normalized: the dot product is the cosine (raw or not).
                let opts = EmbedOptions {
                    normalize: Some(true),
                    long: if truncate {
                        LongInputs::Truncate
                    } else {
                        LongInputs::Refuse
                    },
                    ..EmbedOptions::default()
                };
                let vecs = m.embed(all, opts, "texts").await?;
                let q = &vecs[0];
                vecs[1..]
                    .iter()
                    .map(|v| q.iter().zip(v).map(|(a, b)| a * b).sum())
                    .collect()
            };
            Ok(json!(rerank::ranked(&scores)
                .iter()
                .map(|s| {
                    let mut o = json!({"index": s.index, "score": s.score});
                    if r.return_text {
                        o["text"] = json!(r.texts[s.index]);
                    }
                    o
                })
                .collect::<Vec<_>>()))
        }
        .await,
    )
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FillMaskRequest {
    inputs: String,
    #[serde(default = "five")]
    top_k: usize,
    model: Option<String>,
}

fn five() -> usize {
    5
}

pub async fn fill_mask(State(app): State<Arc<App>>, body: Body) -> Response {
    reply(
        async {
            let r: FillMaskRequest = parse_body(body)?;
            let m = bert(&app, r.model.as_deref(), "/v1/fill-mask")?;
            needs(m, HeadKind::MaskedLm, "/v1/fill-mask")?;
            if !(1..=100).contains(&r.top_k) {
                return Err(ApiError::invalid(
                    "top_k",
                    "top_k must be between 1 and 100",
                ));
            }
            let (text, k) = (r.inputs, r.top_k);
            let lists = m
                .run(move |p| {
                    let masks = p.fill_mask(&text, k)?;
                    // HF's pipeline shape: score, token (id), token_str, sequence.
                    let out: Vec<Value> = masks.iter().map(|preds| json!(preds)).collect();
                    Ok(out)
                })
                .await?;
            Ok(if lists.len() == 1 {
                lists[0].clone()
            } else {
                json!(lists)
            })
        }
        .await,
    )
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QaRequest {
    question: String,
    context: String,
    #[serde(default = "one")]
    top_k: usize,
    #[serde(default = "fifteen")]
    max_answer_len: usize,
    max_seq_len: Option<usize>,
    doc_stride: Option<usize>,
    #[serde(default)]
    handle_impossible_answer: bool,
    model: Option<String>,
}

fn one() -> usize {
    1
}

fn fifteen() -> usize {
    15
}

pub async fn qa(State(app): State<Arc<App>>, body: Body) -> Response {
    reply(
        async {
            let r: QaRequest = parse_body(body)?;
            let m = bert(&app, r.model.as_deref(), "/v1/qa")?;
            needs(m, HeadKind::QuestionAnswering, "/v1/qa")?;
            if !(1..=100).contains(&r.top_k) || r.max_answer_len == 0 {
                return Err(ApiError::invalid(
                    "top_k",
                    "top_k must be between 1 and 100 and max_answer_len at least 1",
                ));
            }
            let max_pos = m.pipeline.model.config.max_position_embeddings;
            let (window, stride) = qa_windows(r.max_seq_len, r.doc_stride, max_pos)
                .map_err(|e| ApiError::invalid("max_seq_len", e.to_string()))?;
            let opts = QaOptions {
                top_k: r.top_k,
                max_answer_len: r.max_answer_len,
                handle_impossible_answer: r.handle_impossible_answer,
            };
            let (q, c) = (r.question, r.context);
            let answers = m.run(move |p| p.answer(&q, &c, window, stride, opts)).await?;
            let list: Vec<Value> = answers
                .iter()
                .map(|a| json!({"score": a.score, "start": a.start, "end": a.end, "answer": a.answer}))
                .collect();
            Ok(if r.top_k == 1 && list.len() == 1 { list[0].clone() } else { json!(list) })
        }
        .await,
    )
}
