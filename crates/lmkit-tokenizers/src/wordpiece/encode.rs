//! Encoding: special tokens cut out of the text, the rest normalized and
//! split into word pieces, truncated and put in the template.

use super::normalizer::WordBuf;
use super::post::{self, Seq, Truncation, Window};
use super::{AddedToken, WordPieceTokenizer};
use crate::{Encoding, Error, Result};

impl WordPieceTokenizer {
    /// The kept (first) window after `truncation`, unpadded.
    pub(super) fn encode_main(
        &self,
        a: &str,
        b: Option<&str>,
        add_special_tokens: bool,
        truncation: Option<&Truncation>,
    ) -> Result<Encoding> {
        if truncation.is_none() {
            // The common case, kept free of intermediate allocations.
            return Ok(SCRATCH.with(|scratch| {
                let mut scratch = scratch.borrow_mut();
                let (buf, sa, sb) = &mut *scratch;
                sa.ids.clear();
                sa.offsets.clear();
                self.tokenize_into(a, buf, sa);
                let sb = match b {
                    Some(b) => {
                        sb.ids.clear();
                        sb.offsets.clear();
                        self.tokenize_into(b, buf, sb);
                        Some(&*sb)
                    }
                    None => None,
                };
                let n =
                    sa.len() + sb.map_or(0, Seq::len) + self.template.added_tokens(sb.is_some());
                let mut enc = Encoding {
                    ids: Vec::with_capacity(n),
                    type_ids: Vec::with_capacity(n),
                    offsets: Vec::with_capacity(n),
                    special_tokens_mask: Vec::with_capacity(n),
                    attention_mask: Vec::with_capacity(n),
                };
                self.template
                    .apply(sa, sb, add_special_tokens, &mut enc, None);
                enc
            }));
        }
        let all = self.encode_all(a, b, add_special_tokens, truncation, false, false)?;
        // Without `overflow`, `encode_all` returns exactly the kept window.
        Ok(all
            .into_iter()
            .next()
            .map(|w| w.encoding)
            .unwrap_or_default())
    }

    /// Tokenizes, truncates (keeping the overflowing windows when
    /// `overflow`), applies the template. Unpadded.
    pub(super) fn encode_all(
        &self,
        a: &str,
        b: Option<&str>,
        add_special_tokens: bool,
        trunc: Option<&Truncation>,
        overflow: bool,
        with_seq_ids: bool,
    ) -> Result<Vec<Window>> {
        let mut sa = Seq::default();
        let mut buf = WordBuf::default();
        self.tokenize_into(a, &mut buf, &mut sa);
        let sb = b.map(|b| {
            let mut sb = Seq::default();
            self.tokenize_into(b, &mut buf, &mut sb);
            sb
        });
        let (wa, wb) = match trunc {
            None => (vec![sa], sb.map(|s| vec![s])),
            Some(t) => {
                let added = if add_special_tokens {
                    self.template.added_tokens(sb.is_some())
                } else {
                    0
                };
                let max_length = t.max_length.checked_sub(added).ok_or_else(|| {
                    Error::InvalidOption(format!(
                        "truncation max_length {} is less than the {added} special tokens",
                        t.max_length
                    ))
                })?;
                post::truncate_pair(sa, sb, max_length, t)?
            }
        };
        let combos = if overflow {
            post::window_combinations(wa.len(), wb.as_ref().map(Vec::len))
        } else {
            vec![(0, wb.as_ref().map(|_| 0))]
        };
        let mut out = Vec::with_capacity(combos.len());
        for (i, j) in combos {
            let sa = &wa[i];
            let sb = match (&wb, j) {
                (Some(wb), Some(j)) => Some(&wb[j]),
                _ => None,
            };
            let n = sa.len() + sb.map_or(0, Seq::len) + 3;
            let mut enc = Encoding {
                ids: Vec::with_capacity(n),
                type_ids: Vec::with_capacity(n),
                offsets: Vec::with_capacity(n),
                special_tokens_mask: Vec::with_capacity(n),
                attention_mask: Vec::with_capacity(n),
            };
            let mut seq_ids = Vec::new();
            self.template.apply(
                sa,
                sb,
                add_special_tokens,
                &mut enc,
                with_seq_ids.then_some(&mut seq_ids),
            );
            out.push(Window {
                encoding: enc,
                sequence_ids: seq_ids,
            });
        }
        Ok(out)
    }

    /// Appends the tokens of `text` (special tokens found verbatim, the rest
    /// normalized and split into word pieces) to `seq`.
    fn tokenize_into(&self, text: &str, buf: &mut WordBuf, seq: &mut Seq) {
        let bytes = text.as_bytes();
        let mut seg_start = 0;
        let mut i = 0;
        if !self.added.is_empty() {
            while i < bytes.len() {
                if !self.added_first_byte[bytes[i] as usize] {
                    i += 1;
                    continue;
                }
                let Some((tok, end)) = self.match_added(text, i) else {
                    i += 1;
                    continue;
                };
                if tok.single_word && !is_single_word(text, i, end) {
                    // HF drops the match and resumes the search after it.
                    i = end;
                    continue;
                }
                let mut start = i;
                let mut stop = end;
                if tok.lstrip {
                    let trimmed = text[seg_start..start].trim_end_matches(char::is_whitespace);
                    start = seg_start + trimmed.len();
                }
                if tok.rstrip {
                    let rest = &text[stop..];
                    stop += rest.len() - rest.trim_start_matches(char::is_whitespace).len();
                }
                self.tokenize_plain(&text[seg_start..start], seg_start, buf, seq);
                seq.ids.push(tok.id);
                seq.offsets.push((start, stop));
                seg_start = stop;
                i = end.max(stop);
            }
        }
        self.tokenize_plain(&text[seg_start..], seg_start, buf, seq);
    }

    /// The longest added token starting at byte `i`, with its end.
    fn match_added(&self, text: &str, i: usize) -> Option<(&AddedToken, usize)> {
        let rest = &text.as_bytes()[i..];
        self.added
            .iter()
            .filter(|a| rest.starts_with(a.content.as_bytes()))
            .max_by_key(|a| a.content.len())
            .map(|a| (a, i + a.content.len()))
    }

    fn tokenize_plain(&self, text: &str, base: usize, buf: &mut WordBuf, seq: &mut Seq) {
        if text.is_empty() {
            return;
        }
        self.normalizer
            .for_each_word(text, base, buf, |word, align| {
                self.word_pieces(word, align, seq)
            });
    }

    /// HF `WordPiece::tokenize` on one pre-tokenized word.
    fn word_pieces(&self, word: &str, align: &[(usize, usize)], seq: &mut Seq) {
        let n = word.len();
        let whole = (align[0].0, align[n - 1].1);
        let max_chars = self.options.max_input_chars_per_word;
        if n > max_chars && word.chars().count() > max_chars {
            seq.ids.push(self.unk_id);
            seq.offsets.push(whole);
            return;
        }
        if let Some(id) = self.words.get(word.as_bytes()) {
            seq.ids.push(id);
            seq.offsets.push(whole);
            return;
        }
        // Greedy longest-match-first: the longest vocabulary piece at each
        // position, continuation pieces after the first.
        let bytes = word.as_bytes();
        let mark = seq.len();
        let mut start = 0;
        while start < n {
            let trie = if start == 0 {
                &self.initial
            } else {
                &self.continuation
            };
            let Some((id, len)) = trie.longest_prefix(&bytes[start..]) else {
                seq.ids.truncate(mark);
                seq.offsets.truncate(mark);
                seq.ids.push(self.unk_id);
                seq.offsets.push(whole);
                return;
            };
            seq.ids.push(id);
            seq.offsets.push((align[start].0, align[start + len - 1].1));
            start += len;
        }
    }
}

thread_local! {
    /// Per-thread buffers reused by `encode` (word buffer, first and second sequence).
    static SCRATCH: std::cell::RefCell<(WordBuf, Seq, Seq)> = Default::default();
}

/// HF `single_word`: the match is not glued to word characters on either side.
fn is_single_word(text: &str, start: usize, end: usize) -> bool {
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let before = text[..start]
        .chars()
        .next_back()
        .is_none_or(|c| !is_word(c));
    let after = text[end..].chars().next().is_none_or(|c| !is_word(c));
    before && after
}
