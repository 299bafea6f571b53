//! What a run records of itself in its checkpoints, and how `resume`
//! compares it with what the command asks for: one comparison for GPT-2
//! pretraining, BERT pretraining and fine-tuning. Each recipe keeps its
//! settings in a serde struct (`Gpt2RunConfig`, `BertRunConfig`, the
//! fine-tuning `RunRecord`) in the trainer state's `extra`; on resume the
//! command's settings and the checkpoint's are compared field by field, and
//! the first that differs (and may not change between the legs of a run) is
//! an error naming it.

use serde::Serialize;
use serde_json::Value;

use super::{invalid, Result};

/// Checks that `given` (this command's settings) and `saved` (the
/// checkpoint's) agree on every field except those in `may_change` (which
/// a resumed run may alter: `max_steps`, how often it logs, evaluates or
/// saves...): the first field that differs is an error naming it, as the
/// option that sets it (`` `seq_len` 64 differs from the checkpoint's 48 ``).
pub(crate) fn check_same_run<T: Serialize>(
    given: &T,
    saved: &T,
    may_change: &[&str],
) -> Result<()> {
    let (Value::Object(g), Value::Object(s)) = (to_value(given)?, to_value(saved)?) else {
        return Err(invalid("a run record is not a JSON object"));
    };
    for (field, gv) in &g {
        if may_change.contains(&field.as_str()) {
            continue;
        }
        let sv = s.get(field).unwrap_or(&Value::Null);
        if gv != sv {
            return Err(invalid(format!(
                "`{field}` {} differs from the checkpoint's {}; an exact resume needs the same {}",
                shown(gv),
                shown(sv),
                kept(field)
            )));
        }
    }
    Ok(())
}

/// The global batch (per-rank `batch_size` × ranks) is what an exact resume
/// keeps; the number of ranks may change.
pub(crate) fn check_global_batch(given: (usize, usize), saved: (usize, usize)) -> Result<()> {
    let ((gb, gr), (sb, sr)) = (given, (saved.0, saved.1.max(1)));
    if gb * gr != sb * sr {
        let was = if sr > 1 {
            format!("{} = {sb} x {sr} ranks", sb * sr)
        } else {
            sb.to_string()
        };
        return Err(invalid(format!(
            "`batch_size` {gb} on {gr} rank(s) is a global batch of {}, the checkpoint's is {was}; \
             an exact resume keeps the global batch",
            gb * gr
        )));
    }
    Ok(())
}

fn to_value<T: Serialize>(v: &T) -> Result<Value> {
    serde_json::to_value(v).map_err(|e| invalid(format!("a run record: {e}")))
}

/// A value as the option that sets it reads: text without quotes, an
/// `f32` option as the `f32` it is (JSON holds it widened to f64).
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "(none)".into(),
        Value::Number(n) if n.is_f64() => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if f64::from(x as f32) == x {
                (x as f32).to_string()
            } else {
                x.to_string()
            }
        }
        other => other.to_string(),
    }
}

/// What an exact resume keeps when `field` must not change.
fn kept(field: &str) -> &'static str {
    match field {
        "whole_word_masking" => "masking",
        "val_fraction" | "short_seq_prob" => "data split",
        _ => "value",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct R {
        seq_len: usize,
        lr: f32,
        dtype: String,
        keep: usize,
        doc_stride: Option<usize>,
    }

    fn r(seq_len: usize, lr: f32, keep: usize, doc_stride: Option<usize>) -> R {
        R {
            seq_len,
            lr,
            dtype: "f32".into(),
            keep,
            doc_stride,
        }
    }

    #[test]
    fn each_field_is_compared_and_named() {
        let saved = r(48, 0.003, 2, Some(8));
        check_same_run(&r(48, 0.003, 5, Some(8)), &saved, &["keep"]).unwrap();
        let e = check_same_run(&r(64, 0.003, 2, Some(8)), &saved, &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`seq_len` 64 differs from the checkpoint's 48; an exact resume needs the same value"
        );
        let e = check_same_run(&r(48, 0.001, 2, Some(8)), &saved, &[]).unwrap_err();
        assert!(e
            .to_string()
            .starts_with("`lr` 0.001 differs from the checkpoint's 0.003"));
        let e = check_same_run(&r(48, 0.003, 5, Some(8)), &saved, &[]).unwrap_err();
        assert!(e.to_string().starts_with("`keep` 5"), "{e}");
        let e = check_same_run(&r(48, 0.003, 2, None), &saved, &[]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("`doc_stride` (none) differs from the checkpoint's 8"),
            "{e}"
        );
        check_global_batch((4, 2), (8, 1)).unwrap();
        let e = check_global_batch((4, 1), (8, 1)).unwrap_err().to_string();
        assert!(
            e.contains("global batch of 4, the checkpoint's is 8;"),
            "{e}"
        );
        let e = check_global_batch((4, 1), (4, 2)).unwrap_err().to_string();
        assert!(e.contains("the checkpoint's is 8 = 4 x 2 ranks"), "{e}");
    }
}
