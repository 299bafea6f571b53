//! Any other pre-tokenization pattern (tiktoken's `Encoding(pat_str=...)`
//! with a pattern no hand-written scanner matches): evaluated by
//! `fancy-regex`, the engine tiktoken itself uses, so the pieces are
//! tiktoken's. Correct but several times slower than the scanners.

use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::sync::Arc;

use crate::{Error, Result};

/// A compiled custom pattern; equal, hashed and shown by its text.
#[derive(Clone)]
pub struct CustomPattern(Arc<(String, fancy_regex::Regex)>);

impl CustomPattern {
    /// `pat` compiled, or an error naming the pattern and the problem.
    pub fn new(pat: &str) -> Result<Self> {
        let re = fancy_regex::Regex::new(pat).map_err(|e| {
            Error::InvalidOption(format!("pre-tokenization pattern {pat:?} is invalid: {e}"))
        })?;
        Ok(CustomPattern(Arc::new((pat.to_string(), re))))
    }

    /// The pattern's text.
    pub fn as_str(&self) -> &str {
        &self.0 .0
    }

    /// The pieces of `text`, as tiktoken finds them: each match of the
    /// pattern, in order; text no match covers is dropped (tiktoken's
    /// `find_iter`), and empty matches are skipped. Invalid UTF-8 (which
    /// tiktoken cannot be given) is cut out: each invalid byte is a piece
    /// of its own, the valid runs between are matched alone. Should the
    /// engine give up on a run (its backtrack limit, where tiktoken
    /// panics), the rest of that run is one piece.
    pub fn pieces(&self, text: &[u8]) -> Vec<Range<usize>> {
        let re = &self.0 .1;
        let mut out = Vec::new();
        let mut base = 0;
        for chunk in text.utf8_chunks() {
            let valid = chunk.valid();
            let mut at = 0;
            for m in re.find_iter(valid) {
                match m {
                    Ok(m) => {
                        if !m.range().is_empty() {
                            out.push(base + m.start()..base + m.end());
                        }
                        at = m.end();
                    }
                    Err(_) => {
                        if at < valid.len() {
                            out.push(base + at..base + valid.len());
                        }
                        break;
                    }
                }
            }
            base += valid.len();
            for _ in chunk.invalid() {
                out.push(base..base + 1);
                base += 1;
            }
        }
        out
    }
}

impl PartialEq for CustomPattern {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for CustomPattern {}

impl Hash for CustomPattern {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl std::fmt::Debug for CustomPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CustomPattern")
            .field(&self.as_str())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split<'a>(pat: &str, text: &'a [u8]) -> Vec<&'a [u8]> {
        let p = CustomPattern::new(pat).unwrap();
        p.pieces(text).into_iter().map(|r| &text[r]).collect()
    }

    #[test]
    fn pieces_are_the_matches() {
        let s: &[&[u8]] = &[b"ab", b"  ", b"c", b"\n"];
        assert_eq!(split(r"\S+|\s+", b"ab  c\n"), s);
        // Text no match covers is dropped, as tiktoken drops it.
        let s: &[&[u8]] = &[b"ab", b"c"];
        assert_eq!(split(r"\w+", b"ab, c!"), s);
        // Empty matches give no piece.
        let s: &[&[u8]] = &[b"aa", b"a"];
        assert_eq!(split(r"a*", b"aab a"), s);
        // Invalid UTF-8: a piece per invalid byte, runs matched alone.
        let s: &[&[u8]] = &[b"a", b"\xff", b"b", b" ", b"c"];
        assert_eq!(split(r"\S+|\s+", b"a\xffb c"), s);
    }

    #[test]
    fn bad_patterns_are_named() {
        let e = CustomPattern::new(r"(\p{L}").unwrap_err().to_string();
        assert!(e.contains(r#""(\\p{L}""#) && e.contains("invalid"), "{e}");
    }
}
