//! `lmkit.pretrain`, `lmkit.finetune` and `lmkit.evaluate`: keyword arguments → the
//! library's option structs (`PretrainOptions`, `FinetuneOptions`, `EvalOptions`: the
//! types the CLI fills from its flags, read by field name) → the library's
//! entry points. Progress goes to stderr as the CLI prints it in a log;
//! Ctrl-C finishes the step, saves a checkpoint, then raises
//! `KeyboardInterrupt` (as `lmkit` exits 130).

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lmkit::eval::benchmark::EvalOptions;
use lmkit::recipes::finetune::{finetune, FinetuneEvent, FinetuneOptions, StopRequest};
use lmkit::recipes::pretrain::{pretrain, PretrainEvent, PretrainOptions};
use lmkit::tasks::{evaluate, EvalTarget, TaskKind};
use pyo3::prelude::*;
use serde_json::{json, Map, Value};

use crate::convert::json_to_py;
use crate::errors::{value_error, PyResultExt};

/// Shortest interval between two progress lines (the CLI's log mode).
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Reports events: to a Python callback (a dict per event) and, with
/// `progress`, as timestamped lines on stderr.
struct Reporter {
    callback: Option<Py<PyAny>>,
    progress: bool,
    start: Instant,
    last: Option<Instant>,
    /// The first error the callback raised: the run stops, then it is raised.
    error: Arc<Mutex<Option<PyErr>>>,
}

impl Reporter {
    fn line(&self, msg: &str) {
        if self.progress {
            let s = self.start.elapsed().as_secs();
            let mut err = std::io::stderr().lock();
            let _ = writeln!(
                err,
                "[{:02}:{:02}:{:02}] {msg}",
                s / 3600,
                s / 60 % 60,
                s % 60
            );
        }
    }

    /// A step line at most every [`LOG_EVERY`].
    fn step_line(&mut self, msg: impl FnOnce() -> String) {
        let now = Instant::now();
        if now - self.last.unwrap_or(self.start) >= LOG_EVERY {
            self.last = Some(now);
            self.line(&msg());
        }
    }

    fn send(&self, event: Value) {
        let Some(cb) = &self.callback else { return };
        Python::attach(|py| {
            let r = json_to_py(py, &event).and_then(|d| cb.call1(py, (d,)).map(drop));
            if let Err(e) = r {
                let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
                slot.get_or_insert(e);
            }
        });
    }
}

fn num(row: &Map<String, Value>, k: &str) -> f64 {
    row.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

/// A stop request that polls Python's signal handlers (Ctrl-C raises
/// `KeyboardInterrupt` there) and the callback's error; the first error is
/// kept to be raised when the run has saved its checkpoint.
fn stop_poll(error: Arc<Mutex<Option<PyErr>>>) -> impl Fn() -> bool + Send + Sync + 'static {
    move || {
        let mut slot = error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_some() {
            return true;
        }
        if let Err(e) = Python::attach(|py| py.check_signals()) {
            *slot = Some(e);
            return true;
        }
        false
    }
}

fn finish(py: Python<'_>, summary: Value, error: &Mutex<Option<PyErr>>) -> PyResult<Py<PyAny>> {
    if let Some(e) = error.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Err(e);
    }
    json_to_py(py, &summary)
}

/// `lmkit.keep_freed_memory()`: the CLI's malloc policy
/// ([`lmkit::util::alloc::keep_freed_memory`]) for this process, so that
/// training's large per-call buffers are reused instead of mapped and
/// faulted in anew every step. It changes the allocator of the whole
/// process (torch's and numpy's too), which is why importing the package
/// does not. A no-op off glibc.
#[pyfunction]
pub fn keep_freed_memory() {
    lmkit::util::alloc::keep_freed_memory()
}

/// `lmkit.pretrain(**options)`: `options_json` holds `PretrainOptions`'
/// fields (the Python wrapper builds it from keyword arguments).
#[pyfunction]
#[pyo3(signature = (options_json, *, callback = None, progress = true))]
pub fn _pretrain(
    py: Python<'_>,
    options_json: &str,
    callback: Option<Py<PyAny>>,
    progress: bool,
) -> PyResult<Py<PyAny>> {
    let mut opts: PretrainOptions = serde_json::from_str(options_json)
        .map_err(|e| value_error(format!("pretrain options: {e}")))?;
    if let Some(init) = &opts.init_from {
        let name = init.to_string_lossy().into_owned();
        opts.init_from = Some(lmkit::checkpoint::resolve_model_dir(&name).py()?);
    }
    let error = Arc::new(Mutex::new(None));
    let mut rep = Reporter {
        callback,
        progress,
        start: Instant::now(),
        last: None,
        error: error.clone(),
    };
    let poll = StopRequest::new(stop_poll(error.clone()));
    let result = py.detach(|| {
        let mut on_event = |e: PretrainEvent| {
            let event = match e {
                PretrainEvent::Tokenizing { done, total } => {
                    rep.step_line(|| format!("tokenizing {done}/{total} bytes"));
                    json!({"event": "tokenizing", "done": done, "total": total})
                }
                PretrainEvent::Start {
                    message,
                    start_step,
                    max_steps,
                } => {
                    rep.line(&message);
                    if start_step > 0 {
                        rep.line(&format!("resuming at step {start_step}"));
                    }
                    json!({"event": "start", "message": message, "start_step": start_step, "max_steps": max_steps})
                }
                PretrainEvent::Step { row } => {
                    rep.step_line(|| {
                        format!(
                            "step {} | loss {:.4} | lr {:.2e} | {:.0} tok/s",
                            row.get("step").and_then(Value::as_u64).unwrap_or(0),
                            num(row, "loss"),
                            num(row, "lr"),
                            num(row, "tokens_per_s")
                        )
                    });
                    json!({"event": "step", "row": row})
                }
                PretrainEvent::Eval { row } => {
                    rep.line(&format!(
                        "step {}: val loss {:.4}",
                        row.get("step").and_then(Value::as_u64).unwrap_or(0),
                        num(row, "val_loss")
                    ));
                    json!({"event": "eval", "row": row})
                }
                PretrainEvent::Sample { step, text } => {
                    rep.line(&format!("step {step} sample: {}", text.replace('\n', " / ")));
                    json!({"event": "sample", "step": step, "text": text})
                }
                PretrainEvent::Saved { path } => {
                    rep.line(&format!("saved {}", path.display()));
                    json!({"event": "saved", "path": path})
                }
                PretrainEvent::Note(n) => {
                    rep.line(&n);
                    json!({"event": "note", "message": n})
                }
            };
            rep.send(event);
        };
        pretrain(&opts, &mut on_event, &poll)
    });
    let summary = result.py()?;
    finish(py, json!(summary), &error)
}

/// `lmkit.finetune(task, model, train, output, eval=None, **options)`.
#[pyfunction]
#[pyo3(signature = (task, model, train, output, eval = None, *, options_json = "{}", callback = None, progress = true))]
#[allow(clippy::too_many_arguments)]
pub fn _finetune(
    py: Python<'_>,
    task: &str,
    model: &str,
    train: PathBuf,
    output: PathBuf,
    eval: Option<PathBuf>,
    options_json: &str,
    callback: Option<Py<PyAny>>,
    progress: bool,
) -> PyResult<Py<PyAny>> {
    let task: TaskKind = task.parse().map_err(value_error)?;
    let given: Map<String, Value> = serde_json::from_str(options_json)
        .map_err(|e| value_error(format!("finetune options: {e}")))?;
    let has_len = given.contains_key("max_seq_len");
    let mut opts: FinetuneOptions = serde_json::from_value(Value::Object(given))
        .map_err(|e| value_error(format!("finetune options: {e}")))?;
    if !has_len {
        opts.max_seq_len = task.default_max_seq_len();
    }
    let error = Arc::new(Mutex::new(None));
    opts.stop = StopRequest::new(stop_poll(error.clone()));
    let dir = py
        .detach(|| lmkit::checkpoint::resolve_model_dir(model))
        .py()?;
    let mut rep = Reporter {
        callback,
        progress,
        start: Instant::now(),
        last: None,
        error: error.clone(),
    };
    let result = py.detach(|| {
        let mut on_event = |e: FinetuneEvent| {
            if let FinetuneEvent::Step { stats, .. } = &e {
                // Formatted only when a line is due.
                rep.step_line(|| {
                    format!(
                        "step {} | {}",
                        stats.step,
                        e.step_text().unwrap_or_default()
                    )
                });
            }
            for line in e.lines() {
                rep.line(&line);
            }
            rep.send(e.to_json());
        };
        finetune(
            task,
            &dir,
            &train,
            eval.as_deref(),
            &output,
            &opts,
            &mut on_event,
        )
    });
    let summary = result.py()?;
    finish(py, summary.to_json(), &error)
}

/// `lmkit.evaluate(task, model, data, **options)`: `lmkit eval` — a
/// fine-tuned model on its task or a GPT-2 on a benchmark — returning the
/// metrics `lmkit eval --json` prints and, with `predictions`, the
/// per-item rows `--predictions` writes.
#[pyfunction]
#[pyo3(signature = (task, model, data, *, options_json = "{}", predictions = false))]
pub fn _evaluate(
    py: Python<'_>,
    task: &str,
    model: &str,
    data: PathBuf,
    options_json: &str,
    predictions: bool,
) -> PyResult<Py<PyAny>> {
    let target: EvalTarget = task.parse().map_err(value_error)?;
    let opts: EvalOptions = serde_json::from_str(options_json)
        .map_err(|e| value_error(format!("evaluate options: {e}")))?;
    let r = py
        .detach(|| -> Result<_, lmkit::recipes::RecipeError> {
            let dir = lmkit::checkpoint::resolve_model_dir(model)?;
            evaluate(target, &dir, &data, &opts, None, &mut |_, _| {})
        })
        .py()?;
    let metrics = Value::Object(r.metrics);
    if predictions {
        json_to_py(py, &json!([metrics, r.predictions]))
    } else {
        json_to_py(py, &metrics)
    }
}
