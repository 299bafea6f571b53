//! `metrics.jsonl`: one JSON object per logged step.
//!
//! Training rows carry `step`, `loss`, `lr`, `grad_norm`, `tokens_per_s`
//! (plus `tokens`, `elapsed_s`, and on data-parallel runs `comm_s`, the
//! seconds in collectives, and `comm_wait_s`, the part the step waited
//! for). Profiled runs ([`super::RunConfig::profile`]) add `step_ms` and
//! `phase_ms`, the step's milliseconds per
//! [`Phase`](crate::util::profile::Phase). Validation rows carry `step`,
//! `val_loss`, `val_ppl`. Every row is flushed as written, so a killed run
//! keeps its curve.

use serde_json::{Map, Value};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

pub struct MetricsWriter {
    path: PathBuf,
    file: File,
}

impl MetricsWriter {
    /// Opens `path` for appending. When resuming from `resume_step`, rows with
    /// `step > resume_step` (written after that checkpoint by the run that
    /// died) are dropped first, so the file holds one curve without repeats.
    pub fn open(path: &Path, resume_step: Option<u64>) -> std::io::Result<Self> {
        match resume_step {
            Some(step) if path.exists() => {
                let kept: Vec<String> = BufReader::new(File::open(path)?)
                    .lines()
                    .collect::<std::io::Result<Vec<_>>>()?
                    .into_iter()
                    .filter(|line| {
                        serde_json::from_str::<Value>(line)
                            .ok()
                            .and_then(|v| v.get("step").and_then(Value::as_u64))
                            .is_some_and(|s| s <= step)
                    })
                    .collect();
                let mut text = kept.join("\n");
                if !text.is_empty() {
                    text.push('\n');
                }
                std::fs::write(path, text)?;
            }
            None => {
                // A fresh run starts a fresh curve.
                File::create(path)?;
            }
            _ => {}
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(MetricsWriter {
            path: path.to_path_buf(),
            file,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one row; non-finite floats are written as `null` by serde_json.
    pub fn write(&mut self, row: &Map<String, Value>) -> std::io::Result<()> {
        let mut line = serde_json::to_string(row).map_err(std::io::Error::other)?;
        line.push('\n');
        self.file.write_all(line.as_bytes())?;
        self.file.flush()
    }
}

/// Reads every row of a `metrics.jsonl`; malformed lines are an error naming
/// the line.
pub fn read_metrics(path: &Path) -> Result<Vec<Map<String, Value>>, String> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut rows = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| format!("{}: {e}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(&line) {
            Ok(Value::Object(map)) => rows.push(map),
            Ok(_) => return Err(format!("{}:{}: not a JSON object", path.display(), i + 1)),
            Err(e) => return Err(format!("{}:{}: {e}", path.display(), i + 1)),
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn resume_drops_rows_after_checkpoint() {
        let dir = std::env::temp_dir().join(format!("lmkit-metrics-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("metrics.jsonl");
        let mut w = MetricsWriter::open(&path, None).unwrap();
        for step in 1..=5 {
            w.write(&row(json!({"step": step, "loss": 1.0}))).unwrap();
        }
        drop(w);
        let mut w = MetricsWriter::open(&path, Some(3)).unwrap();
        w.write(&row(json!({"step": 4, "loss": 0.5}))).unwrap();
        let rows = read_metrics(&path).unwrap();
        let steps: Vec<u64> = rows.iter().map(|r| r["step"].as_u64().unwrap()).collect();
        assert_eq!(steps, vec![1, 2, 3, 4]);
        assert_eq!(rows[3]["loss"], json!(0.5));
        std::fs::write(&path, "{\"step\":1}\nnot json\n").unwrap();
        let err = read_metrics(&path).unwrap_err();
        assert!(err.contains(":2:"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
