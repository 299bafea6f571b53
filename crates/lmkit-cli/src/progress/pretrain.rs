//! What `lmkit pretrain` shows of a run's events: a tokenizing bar, then a
//! step bar with the latest losses, with evaluations, samples and saved
//! checkpoints as lines above it.

use lmkit::recipes::pretrain::PretrainEvent;

use super::Progress;

/// The two bars of a pretraining run.
pub struct PretrainView {
    tok_bar: Progress,
    pb: Progress,
    /// BERT's rows (MLM and NSP heads), else GPT-2's.
    bert: bool,
}

/// `row[k]` as a number, NaN when absent.
fn f(row: &serde_json::Map<String, serde_json::Value>, k: &str) -> f64 {
    row.get(k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN)
}

impl PretrainView {
    pub fn new(bert: bool) -> Self {
        PretrainView {
            tok_bar: Progress::new(
                "tokenizing {bar:30} {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
            ),
            pb: Progress::new("{bar:30} {pos}/{len} {msg} [{elapsed_precise} < {eta_precise}]"),
            bert,
        }
    }

    /// Shows one event of the run.
    pub fn show(&self, e: PretrainEvent) {
        let (tok_bar, pb, bert) = (&self.tok_bar, &self.pb, self.bert);
        match e {
            PretrainEvent::Tokenizing { done, total } => {
                tok_bar.set_length(total);
                tok_bar.update(done, || "bytes tokenized".into());
            }
            PretrainEvent::Start {
                message,
                start_step,
                max_steps,
            } => {
                tok_bar.finish();
                pb.line(&message);
                if start_step > 0 {
                    pb.line(&format!("resuming at step {start_step}"));
                }
                pb.set_length(max_steps);
                pb.update(start_step, String::new);
            }
            PretrainEvent::Step { row } => {
                let step = row.get("step").and_then(|v| v.as_u64()).unwrap_or(0);
                pb.update(step, || {
                    if bert {
                        format!(
                        "loss {:.4} (mlm {:.4}, nsp {:.4}, nsp acc {:.2}) | lr {:.2e} | {:.0} tok/s",
                        f(row, "loss"),
                        f(row, "mlm_loss"),
                        f(row, "nsp_loss"),
                        f(row, "nsp_accuracy"),
                        f(row, "lr"),
                        f(row, "tokens_per_s")
                    )
                    } else {
                        format!(
                            "loss {:.4} | lr {:.2e} | {:.0} tok/s",
                            f(row, "loss"),
                            f(row, "lr"),
                            f(row, "tokens_per_s")
                        )
                    }
                });
            }
            PretrainEvent::Eval { row } => {
                let step = row.get("step").and_then(|v| v.as_u64()).unwrap_or(0);
                pb.line(&if bert {
                    format!(
                        "step {step}: val loss {:.4} (mlm {:.4}, nsp {:.4}, nsp accuracy {:.3})",
                        f(row, "val_loss"),
                        f(row, "val_mlm_loss"),
                        f(row, "val_nsp_loss"),
                        f(row, "val_nsp_accuracy")
                    )
                } else {
                    format!(
                        "step {step}: val loss {:.4}, perplexity {:.2}",
                        f(row, "val_loss"),
                        f(row, "val_ppl")
                    )
                });
            }
            PretrainEvent::Sample { step, text } => pb.line(&format!(
                "step {step} sample: {}",
                text.replace('\n', " / ")
            )),
            PretrainEvent::Saved { path } => pb.line(&format!("saved {}", path.display())),
            // Notes before the run starts belong above the tokenizing bar.
            PretrainEvent::Note(n) => tok_bar.line(&n),
        }
    }

    /// Ends both bars.
    pub fn finish(&self) {
        self.tok_bar.finish();
        self.pb.finish();
    }
}
