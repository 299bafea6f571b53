//! A [`Figure`] of training runs' curves (`RUN/metrics.jsonl`), as `lmkit
//! plot` draws them: one panel per metric group (losses, MLM/NSP heads, eval
//! scores, learning rate, gradient norm, throughput), several runs compared
//! on one chart.

use super::{colour, ema, Figure, Line, Panel};
use anyhow::{bail, Result};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A panel kind: which keys it draws, in legend order.
struct Group {
    name: &'static str,
    title: &'static str,
    keys: &'static [&'static str],
    /// `--log-y` applies.
    log: bool,
}

const GROUPS: &[Group] = &[
    Group {
        name: "loss",
        title: "loss",
        keys: &["loss", "val_loss", "eval_loss"],
        log: true,
    },
    // BERT's heads apart: MLM loss starts near ln(vocab), NSP near ln 2.
    Group {
        name: "mlm",
        title: "MLM loss",
        keys: &["mlm_loss", "val_mlm_loss"],
        log: true,
    },
    Group {
        name: "nsp",
        title: "NSP loss",
        keys: &["nsp_loss", "val_nsp_loss"],
        log: true,
    },
    Group {
        name: "accuracy",
        title: "accuracy / F1",
        keys: &[
            "eval_accuracy",
            "eval_f1",
            "nsp_accuracy",
            "val_nsp_accuracy",
        ],
        log: false,
    },
    Group {
        name: "qa",
        title: "exact match / F1 (%)",
        // `exact_match` / `f1`: QA rows of runs from before the `eval_` prefix.
        keys: &["eval_exact_match", "exact_match", "f1"],
        log: false,
    },
    Group {
        name: "ppl",
        title: "perplexity",
        keys: &["val_ppl", "eval_perplexity", "eval_ppl"],
        log: true,
    },
    Group {
        name: "lr",
        title: "learning rate",
        keys: &["lr"],
        log: false,
    },
    Group {
        name: "grad_norm",
        title: "gradient norm",
        keys: &["grad_norm"],
        log: false,
    },
    Group {
        name: "tokens_per_s",
        title: "tokens / s",
        keys: &["tokens_per_s"],
        log: false,
    },
    Group {
        name: "examples_per_s",
        title: "examples / s",
        keys: &["examples_per_s"],
        log: false,
    },
];

/// Left out unless asked for by `--metrics`: perplexity is exp(loss).
const NOT_BY_DEFAULT: &[&str] = &["ppl"];

/// Row fields that are positions or counts, not curves.
const NOT_METRICS: &[&str] = &[
    "step",
    "epoch",
    "tokens",
    "elapsed_s",
    "eval_examples",
    "eval_tokens",
];

/// Evaluation metrics: sparse points (dots, dashed when runs share a panel),
/// never smoothed.
fn is_eval(key: &str) -> bool {
    key.starts_with("val_") || key.starts_with("eval_") || key == "exact_match" || key == "f1"
}

/// One run's curves: metric key → (x, value), in file order.
pub struct Run {
    pub label: String,
    /// Rows of the metrics file.
    pub rows: usize,
    pub series: BTreeMap<String, Vec<(f64, f64)>>,
    pub last_step: Option<f64>,
}

/// `RUN/metrics.jsonl` for a folder, else the path itself.
pub fn metrics_file(run: &Path) -> PathBuf {
    if run.is_dir() {
        run.join("metrics.jsonl")
    } else {
        run.to_path_buf()
    }
}

/// The run folder's name (or the file's stem when it is not `metrics.jsonl`).
pub fn run_name(file: &Path) -> String {
    let named_by_folder = file.file_name().is_some_and(|n| n == "metrics.jsonl");
    let name = if named_by_folder {
        file.parent()
            .and_then(|p| std::fs::canonicalize(p).ok())
            .and_then(|p| p.file_name().map(|n| n.to_os_string()))
    } else {
        file.file_stem().map(|n| n.to_os_string())
    };
    name.map_or_else(|| "run".into(), |n| n.to_string_lossy().into_owned())
}

pub fn load_run(file: &Path, label: String) -> Result<Run> {
    let rows = lmkit::train::read_metrics(file).map_err(anyhow::Error::msg)?;
    let run = curves(&rows, label);
    if run.series.is_empty() {
        bail!(
            "{}: no metrics to plot ({} rows; expected rows like {{\"step\": 1, \"loss\": 2.5}})",
            file.display(),
            rows.len()
        );
    }
    Ok(run)
}

/// The curves of `rows`; x is `step`, or `epoch` when no row has a step.
/// Missing, non-numeric and non-finite values are skipped.
fn curves(rows: &[Map<String, Value>], label: String) -> Run {
    let num = |r: &Map<String, Value>, k: &str| {
        r.get(k).and_then(Value::as_f64).filter(|v| v.is_finite())
    };
    let x_key = if rows.iter().any(|r| num(r, "step").is_some()) {
        "step"
    } else {
        "epoch"
    };
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut last_step = None;
    for r in rows {
        let Some(x) = num(r, x_key) else { continue };
        last_step = Some(x);
        for (k, v) in r {
            if NOT_METRICS.contains(&k.as_str()) {
                continue;
            }
            if let Some(v) = v.as_f64().filter(|v| v.is_finite()) {
                series.entry(k.clone()).or_default().push((x, v));
            }
        }
    }
    for s in series.values_mut() {
        // Stable: equal steps keep file order.
        s.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    Run {
        label,
        rows: rows.len(),
        series,
        last_step: (x_key == "step").then_some(last_step).flatten(),
    }
}

/// One panel's keys and whether `--log-y` applies.
struct PanelSpec {
    title: String,
    keys: Vec<String>,
    log: bool,
}

/// The panels to draw: the `--metrics` selection (group names or keys), or
/// every group with data in some run, then each other key on its own.
fn select(runs: &[Run], wanted: &[String]) -> Result<Vec<PanelSpec>> {
    let present = |k: &str| runs.iter().any(|r| r.series.contains_key(k));
    let of_group = |g: &Group| PanelSpec {
        title: g.title.into(),
        keys: g.keys.iter().map(|k| k.to_string()).collect(),
        log: g.log,
    };
    let own = |k: &str| PanelSpec {
        title: k.into(),
        keys: vec![k.into()],
        log: k.contains("loss") || k.contains("ppl"),
    };
    let mut specs = Vec::new();
    if wanted.is_empty() {
        for g in GROUPS {
            if !NOT_BY_DEFAULT.contains(&g.name) && g.keys.iter().any(|k| present(k)) {
                specs.push(of_group(g));
            }
        }
        let grouped = |k: &str| GROUPS.iter().any(|g| g.keys.contains(&k));
        let mut others: Vec<&str> = runs
            .iter()
            .flat_map(|r| r.series.keys())
            .map(String::as_str)
            .filter(|k| !grouped(k))
            .collect();
        others.sort_unstable();
        others.dedup();
        specs.extend(others.into_iter().map(own));
        return Ok(specs);
    }
    for w in wanted {
        let w = w.trim();
        let groups: Vec<&Group> = match w {
            "throughput" => GROUPS
                .iter()
                .filter(|g| g.name.ends_with("_per_s"))
                .collect(),
            "heads" => GROUPS
                .iter()
                .filter(|g| g.name == "mlm" || g.name == "nsp")
                .collect(),
            _ => GROUPS.iter().filter(|g| g.name == w).collect(),
        };
        let before = specs.len();
        for g in groups {
            if g.keys.iter().any(|k| present(k)) {
                specs.push(of_group(g));
            }
        }
        if specs.len() == before {
            if present(w) {
                specs.push(own(w));
            } else {
                let mut keys: Vec<&str> = runs
                    .iter()
                    .flat_map(|r| r.series.keys())
                    .map(String::as_str)
                    .collect();
                keys.sort_unstable();
                keys.dedup();
                bail!(
                    "--metrics {w}: no such curve in the run(s); groups: {}, heads, throughput; keys present: {}",
                    GROUPS.iter().map(|g| g.name).collect::<Vec<_>>().join(", "),
                    keys.join(", ")
                );
            }
        }
    }
    Ok(specs)
}

/// The panels of `runs` (see [`select`]), each run's curves in them.
pub fn figure(runs: &[Run], wanted: &[String], smooth: f64, log_y: bool) -> Result<Figure> {
    let specs = select(runs, wanted)?;
    let several = runs.len() > 1;
    let mut panels = Vec::new();
    for spec in specs {
        let mut lines = Vec::new();
        for (ri, run) in runs.iter().enumerate() {
            for key in &spec.keys {
                let Some(points) = run.series.get(key) else {
                    continue;
                };
                let ki = lines.len();
                let eval = is_eval(key);
                let smoothed = (smooth > 0.0 && !eval && key != "lr" && points.len() > 1)
                    .then(|| ema(points, smooth));
                lines.push(Line {
                    label: if several {
                        format!("{}: {key}", run.label)
                    } else {
                        key.clone()
                    },
                    points: points.clone(),
                    // One colour per run when runs are compared, else per curve.
                    colour: colour(if several { ri } else { ki }),
                    dashed: several && eval,
                    markers: eval,
                    smoothed,
                });
            }
        }
        panels.push(Panel {
            title: spec.title,
            log_y: log_y && spec.log,
            lines,
        });
    }
    let x_label = if runs.iter().all(|r| r.last_step.is_some()) {
        "step"
    } else {
        "epoch"
    };
    Ok(Figure {
        title: title(runs),
        x_label: x_label.into(),
        panels,
    })
}

/// One run: its name, last step and last losses; several: their names.
fn title(runs: &[Run]) -> String {
    if let [run] = runs {
        let mut parts = vec![run.label.clone()];
        if let Some(s) = run.last_step {
            parts.push(format!("step {s}"));
        }
        for k in ["loss", "val_loss", "eval_loss", "eval_accuracy", "f1"] {
            if let Some(&(_, v)) = run.series.get(k).and_then(|s| s.last()) {
                parts.push(format!("{k} {v:.4}"));
            }
        }
        return parts.join("  ·  ");
    }
    runs.iter()
        .map(|r| r.label.as_str())
        .collect::<Vec<_>>()
        .join("  vs  ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rows(v: Value) -> Vec<Map<String, Value>> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_object().cloned().unwrap())
            .collect()
    }

    #[test]
    fn curves_skip_missing_and_non_finite() {
        let r = rows(json!([
            {"step": 1, "loss": 3.0, "lr": 1e-4, "tokens": 64},
            {"step": 2, "loss": null, "lr": 2e-4},
            {"step": 2, "val_loss": 2.5, "val_ppl": 12.2},
            {"loss": 1.0},
            {"step": 3, "loss": "x", "eval_loss": 2.0},
        ]));
        let run = curves(&r, "a".into());
        assert_eq!(run.series["loss"], vec![(1.0, 3.0)]);
        assert_eq!(run.series["lr"], vec![(1.0, 1e-4), (2.0, 2e-4)]);
        assert_eq!(run.series["val_loss"], vec![(2.0, 2.5)]);
        assert_eq!(run.series["eval_loss"], vec![(3.0, 2.0)]);
        assert!(!run.series.contains_key("tokens"));
        assert_eq!(run.last_step, Some(3.0));
        // Default panels: loss (with eval_loss), lr; ppl only when asked.
        let titles = |s: Vec<PanelSpec>| s.into_iter().map(|p| p.title).collect::<Vec<_>>();
        assert_eq!(
            titles(select(&[run], &[]).unwrap()),
            ["loss", "learning rate"]
        );
    }

    #[test]
    fn epoch_axis_and_selection() {
        let r = rows(json!([
            {"epoch": 0, "eval_accuracy": 0.5},
            {"epoch": 1, "eval_accuracy": 0.8, "custom": 4.0},
        ]));
        let run = curves(&r, "a".into());
        assert_eq!(run.series["eval_accuracy"], vec![(0.0, 0.5), (1.0, 0.8)]);
        assert_eq!(run.last_step, None);
        let runs = [run];
        let specs = select(&runs, &["custom".into(), "accuracy".into()]).unwrap();
        assert_eq!(specs[0].keys, ["custom"]);
        assert_eq!(specs[1].title, "accuracy / F1");
        let err = select(&runs, &["lr".into()]).err().unwrap().to_string();
        assert!(err.contains("keys present: custom, eval_accuracy"), "{err}");
        let fig = figure(&runs, &[], 0.9, true).unwrap();
        assert_eq!(fig.x_label, "epoch");
        // Eval points are never smoothed.
        assert!(fig.panels[0].lines[0].smoothed.is_none());
    }
}
