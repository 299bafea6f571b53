//! The zero-shot GPT-2 benchmarks as one list, each run from a model
//! folder and a data file: what `lmkit eval` and `lmkit.evaluate` call for
//! them (the fine-tuning tasks' evaluations are in the `tasks` layer, with
//! the same [`EvalOptions`] and [`Evaluation`]).
//!
//! - `perplexity` (text file): sliding-window perplexity, every token after
//!   the first scored once.
//! - `lambada` (LAMBADA JSONL `{"text"}`): last-word accuracy (the whole word
//!   must be the greedy continuation) and per-word perplexity.
//! - `summarize` (JSONL `{"article", "summary"}`): zero-shot "TL;DR:"
//!   summaries (top-k 2 sampling as in the GPT-2 paper, or greedy), first 3
//!   sentences, ROUGE-1/2/L F1 (×100).
//! - `cbt` (the Children's Book Test's text format): each candidate scored by
//!   log p(query with the candidate | context); accuracy.
//! - `translate` (JSONL `{"source", "target"}`, or plain text with aligned
//!   `targets`): the first `shots` pairs are the prompt's examples, the rest
//!   translated greedily up to the first newline; corpus BLEU (sacreBLEU's
//!   defaults).
//! - `zero-shot-qa` (CoQA-style `{"story", "questions", "answers"}` or
//!   NQ-style `{"question", "answers"}` JSONL): greedy answers after `A:`;
//!   SQuAD exact match and F1.

use std::path::{Path, PathBuf};

use lmkit_tokenizers::BpeTokenizer;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::data::overlap::read_eval_documents;
use crate::data::DataError;
use crate::error::Error;
use crate::models::gpt2::{Gpt2Engine, WeightDtype};

use super::run::{
    eval_cbt, eval_lambada, eval_qa, eval_summarize, eval_translate, SummarizeOptions,
    GPT2_EVAL_BATCH,
};
use super::{
    qa_items, read_cbt, read_lambada, read_qa, read_summarize, read_translation_jsonl,
    read_translation_texts, reverse,
};

/// What stops an evaluation: the model, the data or the tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error(transparent)]
    Model(#[from] Error),
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Tokenizer(#[from] lmkit_tokenizers::Error),
}

pub type Result<T, E = EvalError> = std::result::Result<T, E>;

/// Options of every evaluation (benchmarks and fine-tuned tasks); each
/// reads the ones that concern it. Deserializes from the field names
/// (unknown ones are an error): how Python passes its keyword arguments.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvalOptions {
    /// Score only the first N items.
    pub limit: Option<usize>,
    /// Sequences per batch: per forward pass for the fine-tuned tasks
    /// [default: 64] and lambada (passages); decoding together for
    /// summarize, translate and zero-shot-qa [default: 8]. Scores do not
    /// depend on it.
    pub batch_size: Option<usize>,
    /// Longest input (qa: the window length) [default: the task's, 128 or
    /// 384, at most the model's positions].
    pub max_seq_len: Option<usize>,
    /// qa: overlap between windows [default: 128, at most half the window].
    pub doc_stride: Option<usize>,
    /// qa: longest answer in tokens.
    pub max_answer_len: usize,
    /// qa: answers kept per question in the predictions.
    pub n_best: usize,
    /// perplexity: window length [default: n_positions].
    pub context: Option<usize>,
    /// perplexity: tokens between window starts [default: half the window].
    pub stride: Option<usize>,
    /// summarize: greedy decoding instead of top-k sampling.
    pub greedy: bool,
    /// summarize: k of top-k sampling.
    pub top_k: usize,
    /// summarize: tokens generated after "TL;DR:"; translate, zero-shot-qa:
    /// most tokens of a translation or an answer.
    pub max_new_tokens: usize,
    /// translate, zero-shot-qa (NQ-style rows): example pairs in every
    /// prompt, taken from the front of the data and not scored.
    pub shots: usize,
    /// translate: translate the targets into the sources.
    pub reverse: bool,
    /// translate: plain-text translations aligned line by line with the
    /// plain-text data (instead of JSONL).
    pub targets: Option<PathBuf>,
    /// summarize: the sampling seed.
    pub seed: u64,
}

impl Default for EvalOptions {
    fn default() -> Self {
        EvalOptions {
            limit: None,
            batch_size: None,
            max_seq_len: None,
            doc_stride: None,
            max_answer_len: 30,
            n_best: 20,
            context: None,
            stride: None,
            greedy: false,
            top_k: 2,
            max_new_tokens: 100,
            shots: 3,
            reverse: false,
            targets: None,
            seed: 0,
        }
    }
}

impl EvalOptions {
    /// `batch_size` of the forward-pass evaluations (fine-tuned tasks).
    pub fn forward_batch(&self) -> usize {
        self.batch_size.unwrap_or(64).max(1)
    }

    /// `batch_size` of the GPT-2 benchmarks (LAMBADA, TL;DR, translation, QA).
    pub fn decode_batch(&self) -> usize {
        self.batch_size.unwrap_or(GPT2_EVAL_BATCH).max(1)
    }

    /// The first `limit` items, then those `keep` accepts.
    pub fn select<T>(
        &self,
        mut items: Vec<T>,
        keep: Keep<'_>,
        segments: impl Fn(&T) -> Vec<&str>,
    ) -> Vec<T> {
        if let Some(n) = self.limit {
            items.truncate(n);
        }
        keep_items(items, keep, segments)
    }
}

/// Which items to score: `None` all, else those it accepts given the item's
/// text segments (the CLI's `--overlap` filter).
pub type Keep<'a> = Option<&'a dyn Fn(&[&str]) -> bool>;

/// Progress of a long evaluation: `(done, total)` items.
pub type Progress<'a> = &'a mut dyn FnMut(usize, usize);

/// The items `keep` accepts.
pub fn keep_items<T>(items: Vec<T>, keep: Keep<'_>, segments: impl Fn(&T) -> Vec<&str>) -> Vec<T> {
    match keep {
        None => items,
        Some(k) => items.into_iter().filter(|it| k(&segments(it))).collect(),
    }
}

/// The outcome of an evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// By their bare names (`accuracy`, `f1`, `examples`...).
    pub metrics: Map<String, Value>,
    /// One JSON row per scored item.
    pub predictions: Vec<Value>,
}

/// A metrics map from a `json!({...})` object.
pub fn metrics(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => Map::from_iter([("value".to_string(), other)]),
    }
}

/// The zero-shot GPT-2 benchmarks of the GPT-2 paper.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Benchmark {
    Perplexity,
    Lambada,
    Summarize,
    Cbt,
    Translate,
    ZeroShotQa,
}

impl Benchmark {
    pub const ALL: [Benchmark; 6] = [
        Benchmark::Perplexity,
        Benchmark::Lambada,
        Benchmark::Summarize,
        Benchmark::Cbt,
        Benchmark::Translate,
        Benchmark::ZeroShotQa,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Benchmark::Perplexity => "perplexity",
            Benchmark::Lambada => "lambada",
            Benchmark::Summarize => "summarize",
            Benchmark::Cbt => "cbt",
            Benchmark::Translate => "translate",
            Benchmark::ZeroShotQa => "zero-shot-qa",
        }
    }

    /// One line for `--help`: the data and what is scored.
    pub fn summary(self) -> &'static str {
        match self {
            Benchmark::Perplexity => "GPT-2, a text file: sliding-window perplexity",
            Benchmark::Lambada => {
                "GPT-2, LAMBADA JSONL {\"text\"}: last-word accuracy and perplexity"
            }
            Benchmark::Summarize => {
                "GPT-2, JSONL {\"article\", \"summary\"}: zero-shot TL;DR summaries, ROUGE-1/2/L"
            }
            Benchmark::Cbt => "GPT-2, the Children's Book Test's text format: accuracy",
            Benchmark::Translate => {
                "GPT-2, JSONL {\"source\", \"target\"} (or text + --targets): few-shot translation, BLEU"
            }
            Benchmark::ZeroShotQa => {
                "GPT-2, CoQA- or NQ-style JSONL: answers after \"A:\", exact match and F1"
            }
        }
    }

    pub fn from_name(s: &str) -> Option<Benchmark> {
        Self::ALL.into_iter().find(|b| b.name() == s)
    }
}

/// Runs benchmark `b` with the GPT-2 in `dir` on `data`.
pub fn run(
    b: Benchmark,
    dir: &Path,
    data: &Path,
    opts: &EvalOptions,
    keep: Keep<'_>,
    progress: Progress<'_>,
) -> Result<Evaluation> {
    let tok = BpeTokenizer::from_dir(dir)?;
    let mut engine = Gpt2Engine::load(dir, WeightDtype::F32)?;
    let r = Run {
        engine: &mut engine,
        tok: &tok,
        data,
        opts,
        keep,
        progress,
    };
    match b {
        Benchmark::Perplexity => perplexity(r),
        Benchmark::Lambada => lambada(r),
        Benchmark::Summarize => summarize(r),
        Benchmark::Cbt => cbt(r),
        Benchmark::Translate => translate(r),
        Benchmark::ZeroShotQa => zero_shot_qa(r),
    }
}

/// One benchmark run: the model, its tokenizer, the data and the options.
struct Run<'a, 'p> {
    engine: &'a mut Gpt2Engine,
    tok: &'a BpeTokenizer,
    data: &'a Path,
    opts: &'a EvalOptions,
    keep: Keep<'a>,
    progress: Progress<'p>,
}

fn perplexity(r: Run<'_, '_>) -> Result<Evaluation> {
    let mut text = std::fs::read(r.data).map_err(|source| Error::Io {
        path: r.data.to_path_buf(),
        source,
    })?;
    if r.keep.is_some() {
        // Documents are blocks between blank lines; the kept ones rejoined.
        let docs = read_eval_documents(&[r.data.to_path_buf()])?;
        let kept = keep_items(docs, r.keep, |d| {
            d.segments.iter().map(String::as_str).collect()
        });
        text = kept
            .iter()
            .map(|d| d.raw.as_str())
            .collect::<Vec<_>>()
            .join("\n\n")
            .into_bytes();
    }
    let ids = r.tok.encode_ordinary(&text);
    let context = r.opts.context.unwrap_or(r.engine.config().n_positions);
    let stride = r.opts.stride.unwrap_or((context / 2).max(1));
    let report = r.engine.perplexity(&ids, context, stride, r.progress)?;
    Ok(Evaluation {
        metrics: metrics(
            json!({"tokens": report.tokens, "nll": report.mean_nll, "perplexity": report.perplexity}),
        ),
        predictions: vec![],
    })
}

fn lambada(r: Run<'_, '_>) -> Result<Evaluation> {
    let items = r.opts.select(read_lambada(r.data)?, r.keep, |it| {
        vec![it.context.as_str(), it.word.as_str()]
    });
    let (s, outs) = eval_lambada(r.engine, r.tok, &items, r.opts.decode_batch(), r.progress)?;
    let predictions = items
        .iter()
        .zip(&outs)
        .map(|(it, o)| json!({"line": it.line, "word": it.word, "logprob": o.logprob, "correct": o.greedy_correct}))
        .collect();
    Ok(Evaluation {
        metrics: metrics(
            json!({"accuracy": s.accuracy, "perplexity": s.perplexity, "count": s.count}),
        ),
        predictions,
    })
}

fn summarize(r: Run<'_, '_>) -> Result<Evaluation> {
    let items = r.opts.select(read_summarize(r.data)?, r.keep, |it| {
        vec![it.article.as_str(), it.summary.as_str()]
    });
    let so = SummarizeOptions {
        max_new_tokens: r.opts.max_new_tokens,
        top_k: if r.opts.greedy {
            0
        } else {
            r.opts.top_k.max(1)
        },
        seed: r.opts.seed,
        sentences: 3,
        batch_size: r.opts.decode_batch(),
    };
    let (m, outs) = eval_summarize(r.engine, r.tok, &items, &so, r.progress)?;
    let predictions = items
        .iter()
        .zip(&outs)
        .map(|(it, (s, r))| json!({"line": it.line, "summary": s, "rouge": r}))
        .collect();
    let decoding = if r.opts.greedy {
        "greedy".to_string()
    } else {
        format!("top-k {}", so.top_k)
    };
    Ok(Evaluation {
        metrics: metrics(
            json!({"rouge1": m.rouge1, "rouge2": m.rouge2, "rougeL": m.rouge_l,
                                "count": m.count, "decoding": decoding}),
        ),
        predictions,
    })
}

fn cbt(r: Run<'_, '_>) -> Result<Evaluation> {
    let items = r.opts.select(read_cbt(r.data)?, r.keep, |it| {
        it.context
            .iter()
            .map(String::as_str)
            .chain([it.query.as_str()])
            .collect()
    });
    let (s, outs) = eval_cbt(r.engine, r.tok, &items, r.progress)?;
    let predictions = items
        .iter()
        .zip(&outs)
        .map(|(it, o)| json!({"line": it.line, "answer": it.answer, "choice": it.candidates[o.choice],
                             "correct": o.correct, "scores": o.scores, "truncated_tokens": o.truncated_tokens}))
        .collect();
    Ok(Evaluation {
        metrics: metrics(json!({"accuracy": s.accuracy, "correct": s.correct, "count": s.count})),
        predictions,
    })
}

fn translate(r: Run<'_, '_>) -> Result<Evaluation> {
    let pairs = match &r.opts.targets {
        Some(t) => read_translation_texts(r.data, t)?,
        None => read_translation_jsonl(r.data)?,
    };
    let mut pairs = if r.opts.reverse {
        reverse(pairs)
    } else {
        pairs
    };
    // `limit` counts translated pairs; the examples come first.
    let shots = r.opts.shots.min(pairs.len());
    let rest = pairs.split_off(shots);
    let rest = r
        .opts
        .select(rest, r.keep, |p| vec![p.source.as_str(), p.target.as_str()]);
    pairs.extend(rest);
    let (b, hyps) = eval_translate(
        r.engine,
        r.tok,
        &pairs,
        r.opts.shots,
        r.opts.max_new_tokens,
        r.opts.decode_batch(),
        r.progress,
    )?;
    let predictions = pairs[shots..]
        .iter()
        .zip(&hyps)
        .map(|(p, h)| json!({"line": p.line, "source": p.source, "reference": p.target, "translation": h}))
        .collect();
    let direction = if r.opts.reverse {
        "target-source"
    } else {
        "source-target"
    };
    Ok(Evaluation {
        metrics: metrics(
            json!({"bleu": b.score, "precisions": b.precisions, "bp": b.bp,
                                "sys_len": b.stats.sys_len, "ref_len": b.stats.ref_len, "count": hyps.len(),
                                "shots": r.opts.shots, "direction": direction}),
        ),
        predictions,
    })
}

fn zero_shot_qa(r: Run<'_, '_>) -> Result<Evaluation> {
    let items = r
        .opts
        .select(qa_items(&read_qa(r.data)?, r.opts.shots), r.keep, |it| {
            [it.document.as_str(), it.question.as_str()]
                .into_iter()
                .chain(it.golds.iter().map(String::as_str))
                .collect()
        });
    let (s, answers) = eval_qa(
        r.engine,
        r.tok,
        &items,
        r.opts.max_new_tokens,
        r.opts.decode_batch(),
        r.progress,
    )?;
    let predictions = items
        .iter()
        .zip(&answers)
        .map(|(it, x)| {
            json!({"line": it.line, "turn": it.turn, "question": it.question, "answer": x.answer,
                             "golds": it.golds, "exact_match": x.exact_match, "f1": x.f1})
        })
        .collect();
    Ok(Evaluation {
        metrics: metrics(
            json!({"exact_match": s.exact_match, "f1": s.f1, "count": s.total, "shots": r.opts.shots}),
        ),
        predictions,
    })
}
