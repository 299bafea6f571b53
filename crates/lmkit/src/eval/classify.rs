//! Classification metrics: accuracy and macro-F1.
//!
//! Macro-F1 follows scikit-learn's `f1_score(average="macro")` with its
//! default label set: the mean of the per-class F1 over every class that
//! occurs in the gold labels or the predictions; a class with no true
//! positives scores 0.

/// Accuracy and macro-F1, each in 0..=1.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ClassifyScores {
    pub accuracy: f64,
    pub f1: f64,
    pub count: usize,
}

/// Fraction of positions where `pred == gold` (0 for empty input).
pub fn accuracy(gold: &[usize], pred: &[usize]) -> f64 {
    assert_eq!(
        gold.len(),
        pred.len(),
        "gold and predictions differ in length"
    );
    if gold.is_empty() {
        return 0.0;
    }
    let hits = gold.iter().zip(pred).filter(|(g, p)| g == p).count();
    hits as f64 / gold.len() as f64
}

/// Per-class F1 for classes `0..num_classes` (`None` for a class absent
/// from both gold and predictions).
pub fn per_class_f1(gold: &[usize], pred: &[usize], num_classes: usize) -> Vec<Option<f64>> {
    assert_eq!(
        gold.len(),
        pred.len(),
        "gold and predictions differ in length"
    );
    let n = num_classes.max(gold.iter().chain(pred).map(|&c| c + 1).max().unwrap_or(0));
    let (mut tp, mut fp, mut fneg) = (vec![0usize; n], vec![0usize; n], vec![0usize; n]);
    for (&g, &p) in gold.iter().zip(pred) {
        if g == p {
            tp[g] += 1;
        } else {
            fp[p] += 1;
            fneg[g] += 1;
        }
    }
    (0..n)
        .map(|c| {
            if tp[c] + fp[c] + fneg[c] == 0 {
                None
            } else {
                // F1 = 2TP / (2TP + FP + FN), the same as 2PR/(P+R) with 0/0 := 0.
                Some(2.0 * tp[c] as f64 / (2 * tp[c] + fp[c] + fneg[c]) as f64)
            }
        })
        .collect()
}

/// Macro-F1 over the classes present in gold or predictions.
pub fn macro_f1(gold: &[usize], pred: &[usize], num_classes: usize) -> f64 {
    let present: Vec<f64> = per_class_f1(gold, pred, num_classes)
        .into_iter()
        .flatten()
        .collect();
    if present.is_empty() {
        0.0
    } else {
        present.iter().sum::<f64>() / present.len() as f64
    }
}

/// Accuracy and macro-F1 together.
pub fn classify_scores(gold: &[usize], pred: &[usize], num_classes: usize) -> ClassifyScores {
    ClassifyScores {
        accuracy: accuracy(gold, pred),
        f1: macro_f1(gold, pred, num_classes),
        count: gold.len(),
    }
}
