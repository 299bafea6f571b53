//! Sequence-classification scores from logits, as HF's text-classification
//! pipeline turns them into probabilities: regression → raw logits;
//! multi-label or a single label → sigmoid; otherwise softmax.
//!
//! Shape legend: L number of labels.

use crate::spec::config::ProblemType;

/// How logits become scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoreFn {
    Softmax,
    Sigmoid,
    Identity,
}

impl ScoreFn {
    /// HF's choice from `problem_type` and the number of labels.
    pub fn for_problem(problem_type: Option<ProblemType>, num_labels: usize) -> ScoreFn {
        match problem_type {
            Some(ProblemType::Regression) => ScoreFn::Identity,
            Some(ProblemType::MultiLabelClassification) => ScoreFn::Sigmoid,
            _ if num_labels == 1 => ScoreFn::Sigmoid,
            _ => ScoreFn::Softmax,
        }
    }

    /// Scores of one row of logits `[L]`.
    pub fn apply(self, logits: &[f32]) -> Vec<f32> {
        match self {
            ScoreFn::Identity => logits.to_vec(),
            ScoreFn::Sigmoid => logits
                .iter()
                .map(|&x| (1.0 / (1.0 + (-(x as f64)).exp())) as f32)
                .collect(),
            ScoreFn::Softmax => {
                let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
                let e: Vec<f64> = logits.iter().map(|&x| (x as f64 - max).exp()).collect();
                let s: f64 = e.iter().sum();
                e.into_iter().map(|v| (v / s) as f32).collect()
            }
        }
    }
}

/// One label with its score.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelScore {
    pub label: String,
    pub score: f32,
}

/// All labels with scores, best first (ties keep label order).
pub fn ranked(logits: &[f32], labels: &[String], f: ScoreFn) -> Vec<LabelScore> {
    let mut v: Vec<LabelScore> = f
        .apply(logits)
        .into_iter()
        .enumerate()
        .map(|(i, score)| LabelScore {
            label: labels
                .get(i)
                .cloned()
                .unwrap_or_else(|| format!("LABEL_{i}")),
            score,
        })
        .collect();
    v.sort_by(|a, b| b.score.total_cmp(&a.score));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hf_score_functions() {
        assert_eq!(ScoreFn::for_problem(None, 2), ScoreFn::Softmax);
        assert_eq!(ScoreFn::for_problem(None, 1), ScoreFn::Sigmoid);
        assert_eq!(
            ScoreFn::for_problem(Some(ProblemType::MultiLabelClassification), 3),
            ScoreFn::Sigmoid
        );
        assert_eq!(
            ScoreFn::for_problem(Some(ProblemType::Regression), 1),
            ScoreFn::Identity
        );
        let s = ScoreFn::Softmax.apply(&[0.0, 2f32.ln()]);
        assert!((s[0] - 1.0 / 3.0).abs() < 1e-7 && (s[1] - 2.0 / 3.0).abs() < 1e-7);
        assert!((ScoreFn::Sigmoid.apply(&[0.0])[0] - 0.5).abs() < 1e-7);
    }

    #[test]
    fn ranks_labels() {
        let labels = vec!["neg".to_string(), "pos".to_string()];
        let r = ranked(&[-1.0, 1.0], &labels, ScoreFn::Softmax);
        assert_eq!(r[0].label, "pos");
        assert!(r[0].score > r[1].score);
    }
}
