//! SQuAD v1.1 exact match and F1, as the official `evaluate-v1.1.py` computes them.
//!
//! Normalisation (`normalize_answer`): lower-case, delete every ASCII
//! punctuation character (Python's `string.punctuation`), replace the whole
//! words `a`, `an`, `the` by a space (the regex `\b(a|an|the)\b`), then
//! collapse whitespace. Exact match compares normalised strings; F1 is the
//! bag-of-tokens overlap of the normalised strings split on whitespace. A
//! prediction scores the maximum over the gold answers; the dataset figures
//! are means in percent (0..100), like the official script.
//!
//! "Word character" for `\b` is `char::is_alphanumeric() || '_'`, the same
//! as Python's `\w` for every character we know of except a few combining
//! marks that Rust counts as alphabetic.

use std::collections::HashMap;

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The official SQuAD answer normalisation (see the module docs).
pub fn normalize_answer(s: &str) -> String {
    let lower = s.to_lowercase();
    let no_punct: String = lower
        .chars()
        .filter(|c| !c.is_ascii_punctuation())
        .collect();
    // `\b(a|an|the)\b` matches exactly the maximal runs of word characters
    // that equal one of the articles.
    let mut no_articles = String::with_capacity(no_punct.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if matches!(word.as_str(), "a" | "an" | "the") {
            out.push(' ');
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in no_punct.chars() {
        if is_word_char(c) {
            word.push(c);
        } else {
            flush(&mut word, &mut no_articles);
            no_articles.push(c);
        }
    }
    flush(&mut word, &mut no_articles);
    // Python's `str.split()` splits on Unicode whitespace, as `split_whitespace` does.
    no_articles.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// 1.0 when the normalised strings are equal, else 0.0.
pub fn exact_match(prediction: &str, gold: &str) -> f64 {
    if normalize_answer(prediction) == normalize_answer(gold) {
        1.0
    } else {
        0.0
    }
}

/// Token-overlap F1 of the normalised strings (0 when nothing overlaps,
/// including when either side normalises to nothing).
pub fn f1_score(prediction: &str, gold: &str) -> f64 {
    let p = normalize_answer(prediction);
    let g = normalize_answer(gold);
    let pred: Vec<&str> = p.split_whitespace().collect();
    let gold: Vec<&str> = g.split_whitespace().collect();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for t in &gold {
        *counts.entry(t).or_default() += 1;
    }
    let mut same = 0usize;
    for t in &pred {
        if let Some(c) = counts.get_mut(t) {
            if *c > 0 {
                *c -= 1;
                same += 1;
            }
        }
    }
    if same == 0 {
        return 0.0;
    }
    let precision = same as f64 / pred.len() as f64;
    let recall = same as f64 / gold.len() as f64;
    2.0 * precision * recall / (precision + recall)
}

/// `max` of `metric(prediction, g)` over the gold answers (0 when there are none).
pub fn max_over_gold(metric: fn(&str, &str) -> f64, prediction: &str, golds: &[String]) -> f64 {
    golds
        .iter()
        .map(|g| metric(prediction, g))
        .fold(0.0, f64::max)
}

/// Dataset-level SQuAD figures, in percent.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct SquadScores {
    pub exact_match: f64,
    pub f1: f64,
    /// Number of questions scored.
    pub total: usize,
}

/// Scores `(prediction, gold answers)` pairs: the mean over questions of the
/// best EM and best F1 against that question's gold answers, ×100.
pub fn squad_scores<'a, I>(items: I) -> SquadScores
where
    I: IntoIterator<Item = (&'a str, &'a [String])>,
{
    let (mut em, mut f1, mut n) = (0.0, 0.0, 0usize);
    for (pred, golds) in items {
        em += max_over_gold(exact_match, pred, golds);
        f1 += max_over_gold(f1_score, pred, golds);
        n += 1;
    }
    let scale = if n == 0 { 0.0 } else { 100.0 / n as f64 };
    SquadScores {
        exact_match: em * scale,
        f1: f1 * scale,
        total: n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_follows_the_official_script() {
        assert_eq!(normalize_answer("The  Cat, sat!"), "cat sat");
        // Articles only as whole words; "theory" and "an-" (hyphen removed first) differ.
        assert_eq!(normalize_answer("A theory of an apple"), "theory of apple");
        assert_eq!(normalize_answer("an-apple"), "anapple");
        // Non-ASCII punctuation is kept, and is a word boundary.
        assert_eq!(normalize_answer("the—cat"), "—cat");
        assert_eq!(normalize_answer("  \t\n "), "");
        assert_eq!(normalize_answer("Ünïcode THE"), "ünïcode");
    }

    #[test]
    fn em_and_f1_by_hand() {
        assert_eq!(exact_match("the Eiffel Tower", "Eiffel tower."), 1.0);
        assert_eq!(exact_match("Eiffel", "Eiffel tower"), 0.0);
        // pred {eiffel}, gold {eiffel, tower}: P = 1, R = 1/2, F1 = 2/3.
        assert!((f1_score("Eiffel", "the Eiffel tower") - 2.0 / 3.0).abs() < 1e-12);
        // Repeated tokens count as many times as they occur on both sides:
        // pred "a b b c" → [b, b, c], gold "b c c" → common = {b:1, c:1} = 2,
        // P = 2/3, R = 2/3, F1 = 2/3.
        assert!((f1_score("a b b c", "b c c") - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(f1_score("the", "a"), 0.0);
        assert_eq!(f1_score("", "paris"), 0.0);
    }

    #[test]
    fn dataset_scores_take_the_best_gold() {
        let g1 = vec!["Denver Broncos".to_string(), "the Broncos".to_string()];
        let g2 = vec!["Santa Clara, California".to_string()];
        let s = squad_scores([("Broncos", g1.as_slice()), ("Santa Clara", g2.as_slice())]);
        // Q1: EM with "the Broncos" = 1, F1 = 1. Q2: EM 0; F1 = 2·1·(2/3)/(1+2/3) = 0.8.
        assert!((s.exact_match - 50.0).abs() < 1e-9);
        assert!((s.f1 - 90.0).abs() < 1e-9);
        assert_eq!(s.total, 2);
    }
}
