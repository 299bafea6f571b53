//! Entity-level precision / recall / F1 as `seqeval` computes them in its
//! default mode (conlleval-like: IOB1, IOB2 and IOBES read alike, an `I-`
//! without a `B-` starts an entity, a change of type ends one), micro
//! averaged, with `zero_division=0`, plus the per-type report.
//!
//! Chunking is seqeval's `get_entities`: the sentences are joined with an
//! `O` after each; a tag's first character is its prefix (`B`, `I`, `E`,
//! `S`, `O`, anything else) and its type is what follows the first `-`
//! after that character (`_` when empty).

use std::collections::{BTreeMap, HashSet};

/// Scores of one entity type (seqeval's `classification_report` row).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct TypeScores {
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
    /// Gold entities of the type.
    pub support: usize,
}

/// Micro-averaged entity scores, token accuracy and the per-type report.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SeqevalScores {
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
    /// Token-level accuracy; `None` without tokens.
    pub accuracy: Option<f64>,
    pub per_type: BTreeMap<String, TypeScores>,
}

/// An entity: (type, first token, last token) over the joined sentences.
pub type Entity = (String, usize, usize);

fn split_tag(tag: &str) -> (char, String) {
    let mut chars = tag.chars();
    let prefix = chars.next().unwrap_or('O');
    let rest = chars.as_str();
    let kind = match rest.split_once('-') {
        Some((_, after)) => after,
        None => rest,
    };
    let kind = if kind.is_empty() { "_" } else { kind };
    (prefix, kind.to_string())
}

fn end_of_chunk(prev: char, tag: char, prev_type: &str, kind: &str) -> bool {
    matches!(prev, 'E' | 'S')
        || (matches!(prev, 'B' | 'I') && matches!(tag, 'B' | 'S' | 'O'))
        || (prev != 'O' && prev != '.' && prev_type != kind)
}

fn start_of_chunk(prev: char, tag: char, prev_type: &str, kind: &str) -> bool {
    matches!(tag, 'B' | 'S')
        || (matches!(prev, 'E' | 'S' | 'O') && matches!(tag, 'E' | 'I'))
        || (tag != 'O' && tag != '.' && prev_type != kind)
}

/// seqeval's `get_entities` over sentences (joined with an `O` after each).
pub fn get_entities<S: AsRef<str>>(sentences: &[Vec<S>]) -> Vec<Entity> {
    let flat = sentences
        .iter()
        .flat_map(|s| s.iter().map(|t| t.as_ref()).chain(std::iter::once("O")));
    let mut chunks = Vec::new();
    let (mut prev, mut prev_type) = ('O', String::new());
    let mut begin = 0;
    for (i, tag) in flat.chain(std::iter::once("O")).enumerate() {
        let (t, kind) = split_tag(tag);
        if end_of_chunk(prev, t, &prev_type, &kind) && i > 0 {
            chunks.push((prev_type.clone(), begin, i - 1));
        }
        if start_of_chunk(prev, t, &prev_type, &kind) {
            begin = i;
        }
        prev = t;
        prev_type = kind;
    }
    chunks
}

fn divide(a: usize, b: usize) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

fn f1(p: f64, r: f64) -> f64 {
    if p + r == 0.0 {
        0.0
    } else {
        2.0 * p * r / (p + r)
    }
}

/// Scores `pred` against `gold` (sentences of tags); `None` when the two
/// differ in the number of sentences or of tags in a sentence.
pub fn seqeval_scores<S: AsRef<str>, P: AsRef<str>>(
    gold: &[Vec<S>],
    pred: &[Vec<P>],
) -> Option<SeqevalScores> {
    if gold.len() != pred.len() || gold.iter().zip(pred).any(|(g, p)| g.len() != p.len()) {
        return None;
    }
    let by_type = |ents: Vec<Entity>| {
        let mut m: BTreeMap<String, HashSet<(usize, usize)>> = BTreeMap::new();
        for (k, s, e) in ents {
            m.entry(k).or_default().insert((s, e));
        }
        m
    };
    let g = by_type(get_entities(gold));
    let p = by_type(get_entities(pred));
    let kinds: std::collections::BTreeSet<&String> = g.keys().chain(p.keys()).collect();
    let empty = HashSet::new();
    let (mut tp, mut np, mut ng) = (0, 0, 0);
    let mut per_type = BTreeMap::new();
    for k in kinds {
        let (gs, ps) = (g.get(k).unwrap_or(&empty), p.get(k).unwrap_or(&empty));
        let hits = gs.intersection(ps).count();
        tp += hits;
        np += ps.len();
        ng += gs.len();
        let (pr, rc) = (divide(hits, ps.len()), divide(hits, gs.len()));
        per_type.insert(
            k.clone(),
            TypeScores {
                precision: pr,
                recall: rc,
                f1: f1(pr, rc),
                support: gs.len(),
            },
        );
    }
    let tokens: usize = gold.iter().map(Vec::len).sum();
    let right = gold
        .iter()
        .zip(pred)
        .flat_map(|(g, p)| g.iter().zip(p))
        .filter(|(a, b)| a.as_ref() == b.as_ref())
        .count();
    let (precision, recall) = (divide(tp, np), divide(tp, ng));
    Some(SeqevalScores {
        precision,
        recall,
        f1: f1(precision, recall),
        accuracy: (tokens > 0).then(|| right as f64 / tokens as f64),
        per_type,
    })
}
