//! Token-classification (NER) data: CoNLL-style columns or JSONL
//! `{"tokens": [...], "tags": [...]}`, the tag ↔ id map, and the alignment of
//! word tags to word pieces that training and evaluation share.
//!
//! CoNLL-style: whitespace-separated columns, the token first and the tag
//! last (so two-column files and CoNLL-2003's four columns both read), a
//! blank line between sentences, `-DOCSTART-` lines skipped; any extension
//! (`.gz` / `.zst` are decompressed). A file is JSONL when its name says so
//! (`.jsonl`, `.ndjson`) or its first non-blank character is `{`.
//!
//! Alignment is HF run_ner's with `label_all_tokens=False`: each word is
//! tokenized on its own (HF's `is_split_into_words`), the tag goes on its
//! first word piece and −100 on the others and on `[CLS]` / `[SEP]`;
//! sequences are truncated to `max_len` tokens (words cut off are not
//! scored, as in run_ner).

use std::collections::BTreeSet;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use lmkit_tokenizers::wordpiece::WordPieceTokenizer;
use lmkit_tokenizers::Encoding;
use serde_json::Value;

use super::classify_data::{json_kind, parse_err, read_jsonl_objects, Label, LabelMap};
use super::{io_err, DataError, Result};
use crate::spec::IGNORE_INDEX;

/// One sentence: words and their tags (same length).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaggedSentence {
    pub words: Vec<String>,
    pub tags: Vec<String>,
    /// 1-based line where the sentence starts, for error messages.
    pub line: usize,
}

/// A tagging file: its sentences and where it came from.
#[derive(Debug, Clone)]
pub struct TaggingData {
    pub path: PathBuf,
    pub sentences: Vec<TaggedSentence>,
}

impl TaggingData {
    /// Ids of every tag, per sentence; an unknown tag is an error naming its line.
    pub fn tag_ids(&self, map: &LabelMap) -> Result<Vec<Vec<usize>>> {
        self.sentences
            .iter()
            .map(|s| {
                s.tags
                    .iter()
                    .map(|t| {
                        map.id(&Label::Str(t.clone())).ok_or_else(|| {
                            parse_err(
                                &self.path,
                                s.line,
                                format!(
                                    "unknown tag `{t}` (the model's tags: {})",
                                    map.names().join(", ")
                                ),
                            )
                        })
                    })
                    .collect()
            })
            .collect()
    }
}

/// A fresh tag map from training data: its tags in sorted order (HF
/// run_ner's `get_label_list`).
pub fn tag_map(data: &TaggingData) -> Result<LabelMap> {
    let tags: BTreeSet<&String> = data.sentences.iter().flat_map(|s| &s.tags).collect();
    LabelMap::from_names(tags.into_iter().cloned().collect())
}

/// Reads a CoNLL-style or JSONL tagging file (see the module docs). Empty
/// sentences are skipped; a file without any tagged word is an error.
pub fn read_tagging(path: &Path) -> Result<TaggingData> {
    let sentences = if super::source::is_jsonl(path) || starts_with_brace(path)? {
        read_jsonl_sentences(path)?
    } else {
        let reader = super::source::open_source(path)?;
        parse_conll(reader, path)?
    };
    if sentences.is_empty() {
        return Err(DataError::Invalid(format!(
            "{}: no tagged sentences",
            path.display()
        )));
    }
    Ok(TaggingData {
        path: path.to_path_buf(),
        sentences,
    })
}

fn starts_with_brace(path: &Path) -> Result<bool> {
    let mut reader = super::source::open_source(path)?;
    loop {
        let buf = reader.fill_buf().map_err(io_err(path))?;
        if buf.is_empty() {
            return Ok(false);
        }
        if let Some(&b) = buf.iter().find(|b| !b.is_ascii_whitespace()) {
            return Ok(b == b'{');
        }
        let n = buf.len();
        reader.consume(n);
    }
}

/// CoNLL-style columns from `reader` (`path` names it in errors).
pub fn parse_conll(reader: impl BufRead, path: &Path) -> Result<Vec<TaggedSentence>> {
    let mut out = Vec::new();
    let mut cur = TaggedSentence {
        words: Vec::new(),
        tags: Vec::new(),
        line: 1,
    };
    let flush = |cur: &mut TaggedSentence, out: &mut Vec<TaggedSentence>, next: usize| {
        let done = std::mem::replace(
            cur,
            TaggedSentence {
                words: Vec::new(),
                tags: Vec::new(),
                line: next,
            },
        );
        if !done.words.is_empty() {
            out.push(done);
        }
    };
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => parse_err(path, i + 1, "not UTF-8 text"),
            _ => DataError::Io {
                path: path.to_path_buf(),
                source: e,
            },
        })?;
        let cols: Vec<&str> = line.split_whitespace().collect();
        match cols.as_slice() {
            [] => flush(&mut cur, &mut out, i + 2),
            [first, ..] if *first == "-DOCSTART-" => flush(&mut cur, &mut out, i + 2),
            [_] => {
                return Err(parse_err(
                    path,
                    i + 1,
                    "expected a token and its tag (at least two whitespace-separated columns)",
                ))
            }
            [word, .., tag] => {
                if cur.words.is_empty() {
                    cur.line = i + 1;
                }
                cur.words.push((*word).to_string());
                cur.tags.push((*tag).to_string());
            }
        }
    }
    flush(&mut cur, &mut out, 0);
    Ok(out)
}

fn string_list(v: Option<&Value>, key: &str, path: &Path, line: usize) -> Result<Vec<String>> {
    let Some(v) = v else {
        return Err(parse_err(path, line, format!("missing field `{key}`")));
    };
    let Value::Array(items) = v else {
        return Err(parse_err(
            path,
            line,
            format!("field `{key}` must be an array, found {}", json_kind(v)),
        ));
    };
    items
        .iter()
        .enumerate()
        .map(|(k, x)| match x {
            Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
            Value::String(_) => Err(parse_err(
                path,
                line,
                format!("`{key}`[{k}] is empty or only whitespace"),
            )),
            other => Err(parse_err(
                path,
                line,
                format!("`{key}`[{k}] must be a string, found {}", json_kind(other)),
            )),
        })
        .collect()
}

fn read_jsonl_sentences(path: &Path) -> Result<Vec<TaggedSentence>> {
    let mut out = Vec::new();
    for (line, row) in read_jsonl_objects(path)? {
        let words = string_list(row.get("tokens"), "tokens", path, line)?;
        let tags = string_list(row.get("tags"), "tags", path, line)?;
        if words.len() != tags.len() {
            return Err(parse_err(
                path,
                line,
                format!("{} tokens but {} tags", words.len(), tags.len()),
            ));
        }
        if let Some(t) = tags.iter().find(|t| t.chars().any(char::is_whitespace)) {
            return Err(parse_err(
                path,
                line,
                format!("tag {t:?} contains whitespace"),
            ));
        }
        if !words.is_empty() {
            out.push(TaggedSentence { words, tags, line });
        }
    }
    Ok(out)
}

/// A sentence encoded for the model: `[CLS] pieces [SEP]` with per-token
/// labels and the word each token came from.
#[derive(Debug, Clone, PartialEq)]
pub struct TaggedEncoding {
    pub encoding: Encoding,
    /// `[T]` the word's tag id on its first piece, −100 elsewhere (all −100
    /// when encoded without tags).
    pub labels: Vec<i32>,
    /// `[T]` index of the word each token belongs to (`None` for specials).
    pub word_of_token: Vec<Option<usize>>,
}

/// Encodes pre-split `words` (each tokenized alone, HF's
/// `is_split_into_words`) into at most `max_len` tokens, with `tag_ids`
/// (one per word) on first pieces. `max_len` must leave room for a piece.
/// The tokenizer's own padding and truncation (sentence-transformers'
/// `tokenizer.json` pads every encoding to 128) do not apply to the words:
/// only their real pieces are kept.
pub fn encode_words(
    tok: &WordPieceTokenizer,
    words: &[String],
    tag_ids: Option<&[usize]>,
    max_len: usize,
) -> Result<TaggedEncoding> {
    if max_len < 3 {
        return Err(DataError::Invalid(format!(
            "`max_seq_len` {max_len} leaves no room for a word piece"
        )));
    }
    if let Some(t) = tag_ids {
        if t.len() != words.len() {
            return Err(DataError::Invalid(format!(
                "{} tags for {} words",
                t.len(),
                words.len()
            )));
        }
    }
    let room = max_len - 2;
    let mut enc = Encoding {
        ids: vec![tok.cls_id()],
        type_ids: vec![0],
        offsets: vec![(0, 0)],
        special_tokens_mask: vec![1],
        attention_mask: vec![1],
    };
    let mut labels = vec![IGNORE_INDEX];
    let mut word_of_token = vec![None];
    'words: for (w, word) in words.iter().enumerate() {
        let pieces = tok
            .encode(word, false)
            .map_err(|e| DataError::Invalid(format!("word {word:?}: {e}")))?;
        let real = (0..pieces.ids.len()).filter(|&k| pieces.attention_mask[k] == 1);
        for (first, k) in real.enumerate() {
            let id = pieces.ids[k];
            if enc.ids.len() > room {
                break 'words;
            }
            enc.ids.push(id);
            enc.type_ids.push(0);
            enc.offsets
                .push(pieces.offsets.get(k).copied().unwrap_or((0, 0)));
            enc.special_tokens_mask.push(0);
            enc.attention_mask.push(1);
            labels.push(match (first, tag_ids) {
                (0, Some(t)) => t[w] as i32,
                _ => IGNORE_INDEX,
            });
            word_of_token.push(Some(w));
        }
    }
    enc.ids.push(tok.sep_id());
    enc.type_ids.push(0);
    enc.offsets.push((0, 0));
    enc.special_tokens_mask.push(1);
    enc.attention_mask.push(1);
    labels.push(IGNORE_INDEX);
    word_of_token.push(None);
    Ok(TaggedEncoding {
        encoding: enc,
        labels,
        word_of_token,
    })
}

/// Encodes every sentence of `data` with its tag ids ([`encode_words`]),
/// in `max_len` tokens: the examples of fine-tuning and evaluation alike.
pub fn encode_sentences(
    tok: &WordPieceTokenizer,
    data: &TaggingData,
    labels: &LabelMap,
    max_len: usize,
) -> Result<Vec<TaggedEncoding>> {
    // Words are encoded one by one: without the tokenizer's padding, each
    // would be padded to its fixed length only to be cut back.
    let mut plain = tok.clone();
    plain.set_padding(None);
    plain.set_truncation(None);
    let ids = data.tag_ids(labels)?;
    data.sentences
        .iter()
        .zip(&ids)
        .map(|(s, t)| encode_words(&plain, &s.words, Some(t), max_len))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conll(text: &str) -> Result<Vec<TaggedSentence>> {
        parse_conll(text.as_bytes(), Path::new("t.conll"))
    }

    #[test]
    fn reads_two_and_four_columns_and_skips_docstart() {
        let s = conll(
            "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\n\nPeter B-PER\nBlackburn\tI-PER\n",
        )
        .unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].words, ["EU", "rejects"]);
        assert_eq!(s[0].tags, ["B-ORG", "O"]);
        assert_eq!(s[0].line, 3);
        assert_eq!(s[1].words, ["Peter", "Blackburn"]);
        assert_eq!(s[1].tags, ["B-PER", "I-PER"]);
        assert_eq!(s[1].line, 7);
        let e = conll("a O\nlonely\n").unwrap_err().to_string();
        assert!(e.contains("t.conll:2") && e.contains("two"), "{e}");
    }
}
