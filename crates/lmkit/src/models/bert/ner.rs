//! Token classification on raw text, as HF's `token-classification`
//! pipeline with `aggregation_strategy="simple"`: each non-special token
//! takes its argmax tag (softmax score); consecutive tokens of one type join
//! while the next is not a `B-` (a tag without `B-`/`I-` continues); groups
//! of type `O` are dropped. A group's score is the mean of its tokens', its
//! word the tokens joined (`##` pieces glued, an `[UNK]` token shown as its
//! text) and `start`/`end` character offsets into the text.

/// One entity, with the HF pipeline's JSON keys.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NerEntity {
    pub entity_group: String,
    pub score: f32,
    pub word: String,
    /// Character (not byte) offsets into the text: `text[start..end]`.
    pub start: usize,
    pub end: usize,
}

/// One tagged token before grouping.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenTag {
    pub tag: String,
    pub score: f32,
    /// The token's text (`##ing`), or the text it covers for `[UNK]`.
    pub word: String,
    pub start: usize,
    pub end: usize,
}

/// `(B or I, type)` as HF's `get_tag`.
fn split(tag: &str) -> (bool, &str) {
    if let Some(t) = tag.strip_prefix("B-") {
        (true, t)
    } else if let Some(t) = tag.strip_prefix("I-") {
        (false, t)
    } else {
        (false, tag)
    }
}

fn group(tokens: &[TokenTag]) -> NerEntity {
    let first = &tokens[0];
    let kind = first
        .tag
        .split_once('-')
        .map_or(first.tag.as_str(), |(_, t)| t);
    let mean = tokens.iter().map(|t| t.score as f64).sum::<f64>() / tokens.len() as f64;
    let joined: Vec<&str> = tokens.iter().map(|t| t.word.as_str()).collect();
    NerEntity {
        entity_group: kind.to_string(),
        score: mean as f32,
        word: joined.join(" ").replace(" ##", ""),
        start: first.start,
        end: tokens[tokens.len() - 1].end,
    }
}

/// HF's `group_entities`, then groups of type `O` removed.
pub fn group_entities(tokens: &[TokenTag]) -> Vec<NerEntity> {
    let mut out = Vec::new();
    let mut cur: Vec<TokenTag> = Vec::new();
    for t in tokens {
        if let Some(last) = cur.last() {
            let (b, kind) = split(&t.tag);
            let (_, last_kind) = split(&last.tag);
            if kind != last_kind || b {
                out.push(group(&cur));
                cur.clear();
            }
        }
        cur.push(t.clone());
    }
    if !cur.is_empty() {
        out.push(group(&cur));
    }
    out.retain(|e| e.entity_group != "O");
    out
}
