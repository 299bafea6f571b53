//! `lmkit eval`: score a model on an evaluation file.
//!
//! - `perplexity` (GPT-2, text file): sliding-window perplexity, every token
//!   after the first scored once.
//! - `lambada` (GPT-2, LAMBADA JSONL `{"text"}`): last-word accuracy (the
//!   whole word must be the greedy continuation) and per-word perplexity.
//! - `summarize` (GPT-2, JSONL `{"article", "summary"}`): zero-shot
//!   "TL;DR:" summaries (top-k 2 sampling as in the GPT-2 paper, or
//!   `--greedy`), first 3 sentences, ROUGE-1/2/L F1 (×100).
//! - `cbt` (GPT-2, the Children's Book Test's original text format:
//!   numbered context lines, then `N query<TAB>answer<TAB><TAB>c1|…|c10`
//!   with `XXXXX` in the query): each candidate scored by log p(query with
//!   the candidate | context), batched over the candidates; accuracy.
//! - `translate` (GPT-2, JSONL `{"source", "target"}`, or `--data` plain
//!   text with `--targets` the aligned translations): the first `--shots`
//!   pairs are the prompt's examples `source = target`, the rest are
//!   translated greedily up to the first newline; corpus BLEU (sacreBLEU's
//!   defaults). `--reverse` translates targets into sources.
//! - `qa` (GPT-2, JSONL: CoQA-style `{"story", "questions", "answers"}` or
//!   NQ-style `{"question", "answers": [...]}`, the first `--shots` of which
//!   are the prompt's `Q: … A: …` examples): greedy answers after `A:` up to
//!   the first newline; SQuAD exact match and F1.
//! - `classify` (BertForSequenceClassification or GPT2ForSequenceClassification, JSONL `{"text", "text_pair"?,
//!   "label"}`): accuracy and macro-F1; labels must be the model's.
//! - `regression` (a one-output BertForSequenceClassification, `problem_type`
//!   regression; JSONL `{"text", "text_pair"?, "label": number}`): Pearson,
//!   Spearman (as HF run_glue scores STS-B) and the MSE loss.
//! - `squad` (BertForQuestionAnswering, SQuAD v1.1 JSON): exact match and F1
//!   with the official answer normalisation.
//! - `token-classify` (BertForTokenClassification, CoNLL-style columns or
//!   JSONL `{"tokens", "tags"}`): seqeval's entity precision / recall / F1
//!   (micro, and per type) and token accuracy on the first piece of each word.
//! - `multiple-choice` (BertForMultipleChoice or GPT2DoubleHeadsModel, JSONL
//!   `{"context", "question"?, "choices", "label"}` or SWAG's columns): each
//!   choice scored as fine-tuning encodes it; accuracy and the mean
//!   cross-entropy of the right choice.

use std::path::{Path, PathBuf};

use crate::progress::Progress;
use anyhow::{bail, Context, Result};
use lmkit::checkpoint::resolve_model_dir;
use lmkit::data::classify_data::{read_classify_jsonl, read_regression_jsonl, LabelMap};
use lmkit::data::multiple_choice::read_multiple_choice;
use lmkit::data::overlap::{read_eval_documents, BloomFilter};
use lmkit::data::squad::read_squad;
use lmkit::data::tagging::{encode_sentences, read_tagging};
use lmkit::eval::run::{
    encode_classify, eval_cbt, eval_classify, eval_lambada, eval_multiple_choice_dir, eval_qa,
    eval_regression, eval_squad, eval_summarize, eval_token_classify, eval_translate,
    SummarizeOptions, GPT2_EVAL_BATCH,
};
use lmkit::eval::{
    qa_items, read_cbt, read_lambada, read_qa, read_summarize, read_translation_jsonl,
    read_translation_texts, reverse,
};
use lmkit::models::bert::Bert;
use lmkit::models::bert::QaOptions;
use lmkit::models::gpt2::{Gpt2Engine, WeightDtype};
use lmkit::spec::AnyConfig;
use lmkit_tokenizers::wordpiece::WordPieceTokenizer;
use lmkit_tokenizers::BpeTokenizer;
use serde_json::{json, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EvalTask {
    Perplexity,
    Lambada,
    Summarize,
    Cbt,
    Translate,
    Qa,
    Classify,
    Squad,
    TokenClassify,
    Regression,
    MultipleChoice,
}

#[derive(clap::Args, Debug)]
pub struct Args {
    #[arg(long, value_enum)]
    pub task: EvalTask,
    /// Model directory (HF layout) or a name in the local HF hub cache.
    #[arg(long)]
    pub model: String,
    /// Evaluation file (format per task, see `lmkit eval --help`).
    #[arg(long)]
    pub data: PathBuf,
    /// Score only the first N items.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Sequences per batch: per forward pass for BERT tasks, classify and
    /// multiple-choice (examples) [default: 64] and lambada (passages); decoding together
    /// for summarize, translate and qa [default: 8]. Scores do not depend on it.
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// classify, multiple-choice: longest input; squad: window length [default: 128 / 384,
    /// at most the model's max_position_embeddings].
    #[arg(long)]
    pub max_seq_len: Option<usize>,
    /// squad: overlap between windows [default: 128, at most half the window].
    #[arg(long)]
    pub doc_stride: Option<usize>,
    /// squad: longest answer in tokens.
    #[arg(long, default_value_t = 30)]
    pub max_answer_len: usize,
    /// squad: answers kept per question in --predictions.
    #[arg(long, default_value_t = 20)]
    pub n_best: usize,
    /// perplexity: window length (default: n_positions).
    #[arg(long)]
    pub context: Option<usize>,
    /// perplexity: tokens between window starts (default: half the window).
    #[arg(long)]
    pub stride: Option<usize>,
    /// summarize: greedy decoding instead of top-k sampling.
    #[arg(long)]
    pub greedy: bool,
    /// summarize: k of top-k sampling.
    #[arg(long, default_value_t = 2)]
    pub top_k: usize,
    /// summarize: tokens generated after "TL;DR:"; translate, qa: most
    /// tokens of a translation or an answer.
    #[arg(long, default_value_t = 100)]
    pub max_new_tokens: usize,
    /// translate, qa (NQ-style rows): example pairs in every prompt, taken
    /// from the front of the data and not scored.
    #[arg(long, default_value_t = 3)]
    pub shots: usize,
    /// translate: translate the targets into the sources.
    #[arg(long)]
    pub reverse: bool,
    /// translate: plain-text translations aligned line by line with the
    /// plain-text --data (instead of JSONL).
    #[arg(long)]
    pub targets: Option<PathBuf>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write per-item predictions to this JSONL file.
    #[arg(long)]
    pub predictions: Option<PathBuf>,
    /// Print one JSON object with the metrics.
    #[arg(long)]
    pub json: bool,
    /// A training-text filter (`lmkit overlap --save-filter`, `pretrain
    /// --overlap-filter`): also score the items that do not overlap the
    /// training text, side by side with all items.
    #[arg(long)]
    pub overlap: Option<PathBuf>,
    /// With --overlap: an item overlaps when more than this share of its
    /// n-grams is in the training text [default: 0, any].
    #[arg(long, default_value_t = 0.0, requires = "overlap")]
    pub overlap_threshold: f64,
}

/// Which items to score: `None` all, else those `keep` accepts (given the
/// item's text segments).
type Keep<'a> = Option<&'a dyn Fn(&[&str]) -> bool>;

fn keep_items<T>(items: Vec<T>, keep: Keep<'_>, segments: impl Fn(&T) -> Vec<&str>) -> Vec<T> {
    match keep {
        None => items,
        Some(k) => items.into_iter().filter(|it| k(&segments(it))).collect(),
    }
}

fn limit<T>(mut v: Vec<T>, n: Option<usize>) -> Vec<T> {
    if let Some(n) = n {
        v.truncate(n);
    }
    v
}

/// `--batch-size` of the forward-pass tasks (BERT, classify, multiple-choice).
fn batch(a: &Args) -> usize {
    a.batch_size.unwrap_or(64)
}

/// `--batch-size` of the GPT-2 evaluations (LAMBADA, TL;DR, translation, QA).
fn gpt2_batch(a: &Args) -> usize {
    a.batch_size.unwrap_or(GPT2_EVAL_BATCH)
}

fn bar(len: usize, what: &str) -> Progress {
    let pb = Progress::new(&format!("{{bar:40}} {{pos}}/{{len}} {what} ({{eta}} left)"));
    pb.set_length(len as u64);
    pb
}

/// The family the task needs, checked before loading anything heavy.
fn check_family(dir: &Path, task: EvalTask) -> Result<()> {
    let cfg = AnyConfig::from_file(dir.join("config.json"))?;
    let (want_bert, what) = match task {
        EvalTask::Classify => (
            true,
            "a BERT sequence classifier (BertForSequenceClassification)",
        ),
        EvalTask::Squad => (true, "a BERT QA model (BertForQuestionAnswering)"),
        EvalTask::TokenClassify => (true, "a BERT token classifier (BertForTokenClassification)"),
        EvalTask::Regression => (
            true,
            "a one-output BERT regression model (BertForSequenceClassification)",
        ),
        _ => (false, "a GPT-2 model"),
    };
    let is_bert = matches!(cfg, AnyConfig::Bert(_));
    // classify and multiple-choice run both families.
    if is_bert != want_bert && !matches!(task, EvalTask::Classify | EvalTask::MultipleChoice) {
        bail!(
            "--task {task:?} needs {what}, but {} is {} ({})",
            dir.display(),
            if is_bert {
                "a BERT model"
            } else {
                "a GPT-2 model"
            },
            cfg.architectures().join(", ")
        );
    }
    Ok(())
}

/// Writes the predictions, a JSON row per item, to a new file or stdout (`-`).
fn write_predictions(path: &Path, rows: &[Value]) -> Result<()> {
    super::write_output(path, false, |w| {
        for r in rows {
            writeln!(w, "{r}")?;
        }
        Ok(())
    })
}

/// Prints a metrics line: on stdout, or on stderr when the predictions
/// take stdout (`--predictions -`).
fn print_metrics(a: &Args, line: &str) {
    if a.predictions
        .as_deref()
        .is_some_and(|p| p.as_os_str() == "-")
    {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}

pub fn run(a: Args) -> Result<()> {
    // Refused before the evaluation runs, not after.
    if let Some(p) = &a.predictions {
        super::check_new_output(p)?;
    }
    let dir = resolve_model_dir(&a.model)?;
    check_family(&dir, a.task)?;
    let Some(fpath) = &a.overlap else {
        let (metrics, preds) = score(&a, &dir, None)?;
        return report(&a, metrics, &preds);
    };
    if !(0.0..1.0).contains(&a.overlap_threshold) {
        bail!(
            "--overlap-threshold {} must be in [0, 1)",
            a.overlap_threshold
        );
    }
    let filter = BloomFilter::load(fpath)
        .with_context(|| format!("reading the overlap filter {}", fpath.display()))?;
    let t = a.overlap_threshold;
    let seen = std::cell::Cell::new((0usize, 0usize)); // (items, overlapping)
    let clean = |segs: &[&str]| {
        let over = filter.doc_overlap(segs).share() > t;
        let (n, o) = seen.get();
        seen.set((n + 1, o + usize::from(over)));
        !over
    };
    let (all, preds) = score(&a, &dir, None)?;
    let (kept, _) = score(&a, &dir, Some(&clean))?;
    let (items, overlapping) = seen.get();
    let metrics = json!({
        "task": all["task"],
        "all": all,
        "clean": kept,
        "overlap": {"filter": fpath.display().to_string(), "n": filter.n(), "threshold": t,
                    "items": items, "overlapping": overlapping},
    });
    if a.json {
        if let Some(p) = &a.predictions {
            write_predictions(p, &preds)?;
        }
        print_metrics(&a, &metrics.to_string());
        return Ok(());
    }
    report(&a, all, &preds)?;
    print_metrics(
        &a,
        &format!(
            "without the {overlapping} of {items} items that overlap the training text (share > {:.0}%):",
            100.0 * t
        ),
    );
    print_metrics(&a, &metrics_line(&a, &kept));
    Ok(())
}

/// Prints the metrics (and writes the predictions).
fn report(a: &Args, metrics: Value, preds: &[Value]) -> Result<()> {
    if let Some(p) = &a.predictions {
        write_predictions(p, preds)?;
    }
    print_metrics(a, &metrics_line(a, &metrics));
    Ok(())
}

/// The metrics as JSON (`--json`) or `key value, ...`.
fn metrics_line(a: &Args, metrics: &Value) -> String {
    match metrics {
        Value::Object(m) if !a.json => m
            .iter()
            .filter(|(k, _)| k.as_str() != "task")
            .map(|(k, v)| match v.as_f64() {
                Some(x) if v.is_f64() => format!("{k} {x:.4}"),
                _ => format!("{k} {v}"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        _ => metrics.to_string(),
    }
}

/// Scores the task on the items `keep` accepts: its metrics and per-item predictions.
fn score(a: &Args, dir: &Path, keep: Keep<'_>) -> Result<(Value, Vec<Value>)> {
    let dir = dir.to_path_buf();
    Ok(match a.task {
        EvalTask::Perplexity => {
            let tok = BpeTokenizer::from_dir(&dir)?;
            let mut text =
                std::fs::read(&a.data).with_context(|| format!("reading {}", a.data.display()))?;
            if keep.is_some() {
                // Documents are blocks between blank lines; the kept ones rejoined.
                let docs = read_eval_documents(std::slice::from_ref(&a.data))?;
                let kept = keep_items(docs, keep, |d| {
                    d.segments.iter().map(String::as_str).collect()
                });
                text = kept
                    .iter()
                    .map(|d| d.raw.as_str())
                    .collect::<Vec<_>>()
                    .join("\n\n")
                    .into_bytes();
            }
            let ids = tok.encode_ordinary(&text);
            let mut engine = Gpt2Engine::load(&dir, WeightDtype::F32)?;
            let context = a.context.unwrap_or(engine.config().n_positions);
            let stride = a.stride.unwrap_or((context / 2).max(1));
            let pb = bar(ids.len().saturating_sub(1), "tokens");
            let r = engine.perplexity(&ids, context, stride, |d, _| {
                pb.update(d as u64, String::new)
            })?;
            pb.finish();
            (
                json!({"task": "perplexity", "tokens": r.tokens, "nll": r.mean_nll, "perplexity": r.perplexity}),
                vec![],
            )
        }
        EvalTask::Lambada => {
            let tok = BpeTokenizer::from_dir(&dir)?;
            let items = limit(read_lambada(&a.data)?, a.limit);
            let items = keep_items(items, keep, |it| {
                vec![it.context.as_str(), it.word.as_str()]
            });
            let mut engine = Gpt2Engine::load(&dir, WeightDtype::F32)?;
            let pb = bar(items.len(), "passages");
            let (s, outs) = eval_lambada(&mut engine, &tok, &items, gpt2_batch(a), |d, _| {
                pb.update(d as u64, String::new)
            })?;
            pb.finish();
            let preds = items
                .iter()
                .zip(&outs)
                .map(|(it, o)| json!({"line": it.line, "word": it.word, "logprob": o.logprob, "correct": o.greedy_correct}))
                .collect();
            (
                json!({"task": "lambada", "accuracy": s.accuracy, "perplexity": s.perplexity, "count": s.count}),
                preds,
            )
        }
        EvalTask::Summarize => {
            let tok = BpeTokenizer::from_dir(&dir)?;
            let items = limit(read_summarize(&a.data)?, a.limit);
            let items = keep_items(items, keep, |it| {
                vec![it.article.as_str(), it.summary.as_str()]
            });
            let mut engine = Gpt2Engine::load(&dir, WeightDtype::F32)?;
            let opts = SummarizeOptions {
                max_new_tokens: a.max_new_tokens,
                top_k: if a.greedy { 0 } else { a.top_k.max(1) },
                seed: a.seed,
                sentences: 3,
                batch_size: gpt2_batch(a),
            };
            let pb = bar(items.len(), "articles");
            let (m, outs) = eval_summarize(&mut engine, &tok, &items, &opts, |d, _| {
                pb.update(d as u64, String::new)
            })?;
            pb.finish();
            let preds = items
                .iter()
                .zip(&outs)
                .map(|(it, (s, r))| json!({"line": it.line, "summary": s, "rouge": r}))
                .collect();
            (
                json!({"task": "summarize", "rouge1": m.rouge1, "rouge2": m.rouge2, "rougeL": m.rouge_l,
                       "count": m.count, "decoding": if a.greedy { "greedy".to_string() } else { format!("top-k {}", opts.top_k) }}),
                preds,
            )
        }
        EvalTask::Classify
            if matches!(
                AnyConfig::from_file(dir.join("config.json"))?,
                AnyConfig::Gpt2(_)
            ) =>
        {
            let mut c = lmkit::models::gpt2::Gpt2Classifier::from_dir(&dir)?;
            let mut data = read_classify_jsonl(&a.data)?;
            data.examples = keep_items(limit(data.examples, a.limit), keep, |e| {
                std::iter::once(e.text.as_str())
                    .chain(e.text_pair.as_deref())
                    .collect()
            });
            let labels = LabelMap::from_names(c.model.config.id2label.clone())?;
            let gold = labels.ids(&data)?;
            let max_len = a.max_seq_len.unwrap_or(128).min(c.model.config.n_positions);
            let eos = c
                .tokenizer
                .endoftext_id()
                .context("the tokenizer has no <|endoftext|> token")?;
            let rows = lmkit::eval::run::encode_gpt2_classify(&c.tokenizer, &data, max_len, eos);
            let r = lmkit::eval::run::eval_gpt2_classify(&mut c.model, &rows, &gold, batch(a))?;
            let preds = data
                .examples
                .iter()
                .zip(&r.predictions)
                .map(|(e, &p)| json!({"line": e.line, "label": labels.name(p)}))
                .collect();
            (
                json!({"task": "classify", "accuracy": r.scores.accuracy, "f1": r.scores.f1, "loss": r.loss, "count": r.scores.count}),
                preds,
            )
        }
        EvalTask::Cbt => {
            let tok = BpeTokenizer::from_dir(&dir)?;
            let items = limit(read_cbt(&a.data)?, a.limit);
            let items = keep_items(items, keep, |it| {
                it.context
                    .iter()
                    .map(String::as_str)
                    .chain([it.query.as_str()])
                    .collect()
            });
            let mut engine = Gpt2Engine::load(&dir, WeightDtype::F32)?;
            let pb = bar(items.len(), "questions");
            let (s, outs) = eval_cbt(&mut engine, &tok, &items, |d, _| {
                pb.update(d as u64, String::new)
            })?;
            pb.finish();
            let preds = items
                .iter()
                .zip(&outs)
                .map(|(it, o)| json!({"line": it.line, "answer": it.answer, "choice": it.candidates[o.choice],
                                     "correct": o.correct, "scores": o.scores, "truncated_tokens": o.truncated_tokens}))
                .collect();
            (
                json!({"task": "cbt", "accuracy": s.accuracy, "correct": s.correct, "count": s.count}),
                preds,
            )
        }
        EvalTask::Translate => {
            let tok = BpeTokenizer::from_dir(&dir)?;
            let pairs = match &a.targets {
                Some(t) => read_translation_texts(&a.data, t)?,
                None => read_translation_jsonl(&a.data)?,
            };
            let pairs = if a.reverse { reverse(pairs) } else { pairs };
            // --limit counts translated pairs; the examples come first.
            let pairs = limit(pairs, a.limit.map(|n| n.saturating_add(a.shots)));
            let (examples, rest) = pairs.split_at(a.shots.min(pairs.len()));
            let rest = keep_items(rest.to_vec(), keep, |p| {
                vec![p.source.as_str(), p.target.as_str()]
            });
            let pairs: Vec<_> = examples.iter().cloned().chain(rest).collect();
            let mut engine = Gpt2Engine::load(&dir, WeightDtype::F32)?;
            let pb = bar(pairs.len().saturating_sub(a.shots), "sentences");
            let (b, hyps) = eval_translate(
                &mut engine,
                &tok,
                &pairs,
                a.shots,
                a.max_new_tokens,
                gpt2_batch(a),
                |d, _| pb.update(d as u64, String::new),
            )?;
            pb.finish();
            let preds = pairs[a.shots..]
                .iter()
                .zip(&hyps)
                .map(|(p, h)| json!({"line": p.line, "source": p.source, "reference": p.target, "translation": h}))
                .collect();
            (
                json!({"task": "translate", "bleu": b.score, "precisions": b.precisions, "bp": b.bp,
                       "sys_len": b.stats.sys_len, "ref_len": b.stats.ref_len, "count": hyps.len(),
                       "shots": a.shots, "direction": if a.reverse { "target-source" } else { "source-target" }}),
                preds,
            )
        }
        EvalTask::Qa => {
            let tok = BpeTokenizer::from_dir(&dir)?;
            let items = limit(qa_items(&read_qa(&a.data)?, a.shots), a.limit);
            let items = keep_items(items, keep, |it| {
                [it.document.as_str(), it.question.as_str()]
                    .into_iter()
                    .chain(it.golds.iter().map(String::as_str))
                    .collect()
            });
            let mut engine = Gpt2Engine::load(&dir, WeightDtype::F32)?;
            let pb = bar(items.len(), "questions");
            let (s, answers) = eval_qa(
                &mut engine,
                &tok,
                &items,
                a.max_new_tokens,
                gpt2_batch(a),
                |d, _| pb.update(d as u64, String::new),
            )?;
            pb.finish();
            let preds = items
                .iter()
                .zip(&answers)
                .map(|(it, x)| json!({"line": it.line, "turn": it.turn, "question": it.question, "answer": x.answer,
                                     "golds": it.golds, "exact_match": x.exact_match, "f1": x.f1}))
                .collect();
            (
                json!({"task": "qa", "exact_match": s.exact_match, "f1": s.f1, "count": s.total, "shots": a.shots}),
                preds,
            )
        }
        EvalTask::Classify => {
            let model = Bert::from_dir(&dir)?;
            model.require(lmkit::models::bert::HeadKind::Classifier)?;
            let tok = WordPieceTokenizer::from_dir(&dir)?;
            let mut data = read_classify_jsonl(&a.data)?;
            data.examples = keep_items(limit(data.examples, a.limit), keep, |e| {
                std::iter::once(e.text.as_str())
                    .chain(e.text_pair.as_deref())
                    .collect()
            });
            let labels = LabelMap::from_names(model.config.id2label.clone())?;
            let gold = labels.ids(&data)?;
            let max_len = a
                .max_seq_len
                .unwrap_or(128)
                .min(model.config.max_position_embeddings);
            let encs = encode_classify(&tok, &data, max_len)?;
            let r = eval_classify(&model, tok.pad_id(), &encs, &gold, batch(a))?;
            let preds = data
                .examples
                .iter()
                .zip(&r.predictions)
                .map(|(e, &p)| json!({"line": e.line, "label": labels.name(p)}))
                .collect();
            (
                json!({"task": "classify", "accuracy": r.scores.accuracy, "f1": r.scores.f1, "loss": r.loss, "count": r.scores.count}),
                preds,
            )
        }
        EvalTask::Regression => {
            let model = Bert::from_dir(&dir)?;
            model.require(lmkit::models::bert::HeadKind::Classifier)?;
            if model.config.problem_type.as_deref() != Some("regression") {
                bail!(
                    "--task regression needs a regression model (problem_type \"regression\"), \
                     but {} has problem_type {} and {} labels: score it with --task classify",
                    dir.display(),
                    model
                        .config
                        .problem_type
                        .as_deref()
                        .map_or("unset".into(), |p| format!("{p:?}")),
                    model.config.num_labels()
                );
            }
            let tok = WordPieceTokenizer::from_dir(&dir)?;
            let mut data = read_regression_jsonl(&a.data)?;
            data.examples = keep_items(limit(data.examples, a.limit), keep, |e| {
                std::iter::once(e.text.as_str())
                    .chain(e.text_pair.as_deref())
                    .collect()
            });
            let gold: Vec<f32> = data.examples.iter().map(|e| e.label).collect();
            let max_len = a
                .max_seq_len
                .unwrap_or(128)
                .min(model.config.max_position_embeddings);
            let encs = encode_classify(&tok, &data, max_len)?;
            let r = eval_regression(&model, tok.pad_id(), &encs, &gold, batch(a))?;
            let preds = data
                .examples
                .iter()
                .zip(&r.predictions)
                .map(|(e, &p)| json!({"line": e.line, "score": p, "label": e.label}))
                .collect();
            (
                json!({"task": "regression", "pearson": r.scores.pearson, "spearmanr": r.scores.spearmanr, "loss": r.loss, "count": r.scores.count}),
                preds,
            )
        }
        EvalTask::TokenClassify => {
            let model = Bert::from_dir(&dir)?;
            model.require(lmkit::models::bert::HeadKind::TokenClassifier)?;
            let tok = WordPieceTokenizer::from_dir(&dir)?;
            let mut data = read_tagging(&a.data)?;
            data.sentences = keep_items(limit(data.sentences, a.limit), keep, |s| {
                s.words.iter().map(String::as_str).collect()
            });
            let labels = LabelMap::from_names(model.config.id2label.clone())?;
            let max_len = a
                .max_seq_len
                .unwrap_or(128)
                .min(model.config.max_position_embeddings);
            let encs = encode_sentences(&tok, &data, &labels, max_len)?;
            let r = eval_token_classify(&model, tok.pad_id(), &encs, batch(a))?;
            let preds = data
                .sentences
                .iter()
                .zip(&r.predictions)
                .map(|(s, p)| json!({"line": s.line, "tags": p}))
                .collect();
            (
                json!({"task": "token-classify", "precision": r.scores.precision,
                       "recall": r.scores.recall, "f1": r.scores.f1,
                       "accuracy": r.scores.accuracy, "loss": r.loss,
                       "count": data.sentences.len(), "per_type": r.scores.per_type}),
                preds,
            )
        }
        EvalTask::MultipleChoice => {
            let mut data = read_multiple_choice(&a.data)?;
            data.examples = keep_items(limit(data.examples, a.limit), keep, |e| {
                std::iter::once(e.context.as_str())
                    .chain(e.question.as_deref())
                    .chain(e.choices.iter().map(String::as_str))
                    .collect()
            });
            let max_len = a.max_seq_len.unwrap_or(128);
            let r = eval_multiple_choice_dir(&dir, &data, max_len, batch(a))?;
            let preds = data
                .examples
                .iter()
                .zip(r.predictions.iter().zip(&r.scores))
                .map(|(e, (&p, s))| json!({"line": e.line, "choice": p, "label": e.label, "scores": s}))
                .collect();
            (
                json!({"task": "multiple-choice", "accuracy": r.accuracy, "loss": r.loss, "count": r.count}),
                preds,
            )
        }
        EvalTask::Squad => {
            let model = Bert::from_dir(&dir)?;
            model.require(lmkit::models::bert::HeadKind::QuestionAnswering)?;
            let tok = WordPieceTokenizer::from_dir(&dir)?;
            let ex = keep_items(limit(read_squad(&a.data)?, a.limit), keep, |e| {
                vec![&*e.context, e.question.as_str()]
            });
            let (max_len, stride) = lmkit::models::bert::qa_windows(
                a.max_seq_len,
                a.doc_stride,
                model.config.max_position_embeddings,
            )?;
            let opts = QaOptions {
                top_k: a.n_best.max(1),
                max_answer_len: a.max_answer_len.max(1),
                handle_impossible_answer: false,
            };
            let r = eval_squad(&model, &tok, &ex, max_len, stride, opts, batch(a))?;
            let preds = r
                .predictions
                .iter()
                .map(|(id, ans)| {
                    let best: Vec<Value> = ans.iter().map(|x| json!({"text": x.answer, "score": x.score})).collect();
                    json!({"id": id, "prediction": ans.first().map_or("", |x| x.answer.as_str()), "n_best": best})
                })
                .collect();
            (
                json!({"task": "squad", "exact_match": r.scores.exact_match, "f1": r.scores.f1, "count": r.scores.total}),
                preds,
            )
        }
    })
}
