//! What [`super::BertPipeline::embed`] does with a text longer than the
//! model takes: truncate it (sentence-transformers, TEI's `truncate: true`),
//! refuse it with an error naming the limit (TEI's default), or — lmkit's own
//! extension — embed it whole in windows of its tokens, pooled together
//! weighted by their tokens ([`Chunking`]).
//!
//! The same options serve `lmkit embed`, `lmkit serve` and Python's
//! `Bert.embed`: [`Chunking`] is the JSON object `"chunking": {"max_tokens":
//! N, "overlap": K}` of the server's requests.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Windows of a long text: each `max_tokens` long (`[CLS]` and `[SEP]`
/// included; default the model's length), consecutive windows sharing
/// `overlap` tokens of the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Chunking {
    #[serde(default)]
    pub max_tokens: Option<usize>,
    #[serde(default)]
    pub overlap: usize,
}

/// How texts longer than the model's length are embedded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LongInputs {
    /// Keep the first tokens (sentence-transformers' behaviour).
    #[default]
    Truncate,
    /// An error ([`Error::ContextTooLong`]) naming the text's length and the limit.
    Refuse,
    /// Embed windows of the text and pool them (see [`Chunking`]).
    Chunk(Chunking),
}

impl LongInputs {
    /// From TEI's `truncate` flag and lmkit's `chunking`; `truncate` absent
    /// means `default_truncate`. `chunking` with `truncate: true` is an error
    /// (a chunked text is not truncated).
    pub fn from_flags(
        truncate: Option<bool>,
        chunking: Option<Chunking>,
        default_truncate: bool,
    ) -> Result<LongInputs> {
        match (truncate, chunking) {
            (Some(true), Some(_)) => Err(Error::InvalidInput(
                "`truncate: true` and `chunking` ask for two things: give one".into(),
            )),
            (_, Some(c)) => Ok(LongInputs::Chunk(c)),
            (t, None) if t.unwrap_or(default_truncate) => Ok(LongInputs::Truncate),
            _ => Ok(LongInputs::Refuse),
        }
    }
}

impl Chunking {
    /// Text tokens per window and between window starts, for a model whose
    /// inputs hold at most `max_len` tokens (specials included).
    pub fn room_and_stride(&self, max_len: usize) -> Result<(usize, usize)> {
        let n = self.max_tokens.unwrap_or(max_len);
        if !(3..=max_len).contains(&n) {
            return Err(Error::InvalidInput(format!(
                "`chunking.max_tokens` {n}: a window holds 3 to {max_len} tokens ([CLS] and [SEP] \
                 included) for this model"
            )));
        }
        let room = n - 2;
        if self.overlap >= room {
            return Err(Error::InvalidInput(format!(
                "`chunking.overlap` {} must be less than the {room} text tokens of a window \
                 (`chunking.max_tokens` {n} less [CLS] and [SEP])",
                self.overlap
            )));
        }
        Ok((room, room - self.overlap))
    }
}

/// The `[start, end)` token ranges of the windows over `len` tokens: `room`
/// long, `stride` apart, the last ending at `len`; one empty window for
/// an empty text.
pub fn windows(len: usize, room: usize, stride: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    loop {
        let end = (start + room).min(len);
        out.push((start, end));
        if end >= len || stride == 0 {
            return out;
        }
        start += stride;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cover_the_text_with_the_overlap() {
        assert_eq!(windows(0, 4, 4), vec![(0, 0)]);
        assert_eq!(windows(3, 4, 4), vec![(0, 3)]);
        assert_eq!(windows(8, 4, 4), vec![(0, 4), (4, 8)]);
        assert_eq!(windows(9, 4, 3), vec![(0, 4), (3, 7), (6, 9)]);
        for (len, room, stride) in [(100, 10, 7), (5000, 254, 200), (11, 3, 1)] {
            let w = windows(len, room, stride);
            assert_eq!(w[0].0, 0);
            assert_eq!(w.last().unwrap().1, len);
            for p in w.windows(2) {
                assert_eq!(p[1].0 - p[0].0, stride);
                assert!(p[0].1 > p[1].0, "windows overlap or touch");
            }
        }
    }

    #[test]
    fn flags_and_limits_are_checked() {
        let c = Chunking {
            max_tokens: Some(64),
            overlap: 8,
        };
        assert_eq!(c.room_and_stride(128).unwrap(), (62, 54));
        assert!(c
            .room_and_stride(32)
            .unwrap_err()
            .to_string()
            .contains("max_tokens"));
        let over = Chunking {
            max_tokens: Some(10),
            overlap: 8,
        };
        assert!(over
            .room_and_stride(128)
            .unwrap_err()
            .to_string()
            .contains("overlap"));
        assert_eq!(
            LongInputs::from_flags(None, None, false).unwrap(),
            LongInputs::Refuse
        );
        assert_eq!(
            LongInputs::from_flags(None, None, true).unwrap(),
            LongInputs::Truncate
        );
        assert_eq!(
            LongInputs::from_flags(Some(false), Some(c), true).unwrap(),
            LongInputs::Chunk(c)
        );
        assert!(LongInputs::from_flags(Some(true), Some(c), true).is_err());
        let e = serde_json::from_str::<Chunking>(r#"{"max_tokens": 5, "overlap": 1, "x": 2}"#);
        assert!(e.is_err(), "unknown fields are refused");
    }
}
