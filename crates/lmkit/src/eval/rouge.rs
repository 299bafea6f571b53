//! ROUGE-1, ROUGE-2 and ROUGE-L (F-measure), as Google's `rouge-score`
//! package computes them with `use_stemmer=False`.
//!
//! Tokenisation (`rouge_score.tokenize`): lower-case, replace every run of
//! characters outside `[a-z0-9]` by a space, split on whitespace. So
//! punctuation and non-ASCII letters (after lower-casing) separate tokens and
//! are dropped. No stemming: "cats" and "cat" differ.
//!
//! ROUGE-N: clipped n-gram overlap, precision = overlap / prediction n-grams,
//! recall = overlap / reference n-grams. ROUGE-L: longest common
//! subsequence of the token lists (summary-level `rougeLsum` is not
//! implemented). F = 2PR / (P + R), 0 when P + R = 0.

use std::collections::HashMap;

/// Precision, recall and F-measure, each in 0..=1.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct RougeScore {
    pub precision: f64,
    pub recall: f64,
    pub fmeasure: f64,
}

impl RougeScore {
    fn from_counts(overlap: usize, pred_total: usize, ref_total: usize) -> Self {
        let precision = overlap as f64 / pred_total.max(1) as f64;
        let recall = overlap as f64 / ref_total.max(1) as f64;
        let fmeasure = if precision + recall > 0.0 {
            2.0 * precision * recall / (precision + recall)
        } else {
            0.0
        };
        RougeScore {
            precision,
            recall,
            fmeasure,
        }
    }
}

/// ROUGE-1, ROUGE-2 and ROUGE-L of one prediction against one reference.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct Rouge {
    pub rouge1: RougeScore,
    pub rouge2: RougeScore,
    #[serde(rename = "rougeL")]
    pub rouge_l: RougeScore,
}

/// `rouge_score.tokenize.tokenize(text, stemmer=None)`.
pub fn tokenize(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let mut tokens = Vec::new();
    let mut cur = String::new();
    for c in lower.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            cur.push(c);
        } else if !cur.is_empty() {
            tokens.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        tokens.push(cur);
    }
    tokens
}

fn ngram_counts(tokens: &[String], n: usize) -> HashMap<&[String], usize> {
    let mut counts = HashMap::new();
    if tokens.len() >= n {
        for w in tokens.windows(n) {
            *counts.entry(w).or_default() += 1;
        }
    }
    counts
}

/// ROUGE-N over token lists.
pub fn rouge_n(prediction: &[String], reference: &[String], n: usize) -> RougeScore {
    let p = ngram_counts(prediction, n);
    let r = ngram_counts(reference, n);
    let overlap: usize = r
        .iter()
        .map(|(g, &c)| c.min(p.get(g).copied().unwrap_or(0)))
        .sum();
    RougeScore::from_counts(overlap, p.values().sum(), r.values().sum())
}

/// Length of the longest common subsequence (O(|a|·|b|) time, O(|b|) memory).
pub fn lcs_len<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    let mut prev = vec![0usize; b.len() + 1];
    let mut cur = vec![0usize; b.len() + 1];
    for x in a {
        for (j, y) in b.iter().enumerate() {
            cur[j + 1] = if x == y {
                prev[j] + 1
            } else {
                cur[j].max(prev[j + 1])
            };
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// ROUGE-L over token lists (all zero when either is empty).
pub fn rouge_l(prediction: &[String], reference: &[String]) -> RougeScore {
    if prediction.is_empty() || reference.is_empty() {
        return RougeScore::default();
    }
    RougeScore::from_counts(
        lcs_len(prediction, reference),
        prediction.len(),
        reference.len(),
    )
}

/// All three scores of `prediction` against `reference` (raw text).
pub fn rouge(prediction: &str, reference: &str) -> Rouge {
    let p = tokenize(prediction);
    let r = tokenize(reference);
    Rouge {
        rouge1: rouge_n(&p, &r, 1),
        rouge2: rouge_n(&p, &r, 2),
        rouge_l: rouge_l(&p, &r),
    }
}

/// Mean F-measures over a corpus, in percent (what summarisation papers report).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct RougeMeans {
    pub rouge1: f64,
    pub rouge2: f64,
    #[serde(rename = "rougeL")]
    pub rouge_l: f64,
    pub count: usize,
}

/// Mean of the per-example F-measures ×100.
pub fn rouge_means(scores: &[Rouge]) -> RougeMeans {
    let n = scores.len();
    if n == 0 {
        return RougeMeans::default();
    }
    let mean = |f: fn(&Rouge) -> f64| 100.0 * scores.iter().map(f).sum::<f64>() / n as f64;
    RougeMeans {
        rouge1: mean(|s| s.rouge1.fmeasure),
        rouge2: mean(|s| s.rouge2.fmeasure),
        rouge_l: mean(|s| s.rouge_l.fmeasure),
        count: n,
    }
}
