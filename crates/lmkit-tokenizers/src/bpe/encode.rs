//! Encoding ordinary text: pre-tokenized pieces, each one token looked up
//! whole, ids from the word cache, or the merge loop's.

use super::model::Piece;
use super::{cache, BpeTokenizer};

impl BpeTokenizer {
    pub(super) fn encode_ordinary_into(&self, text: &[u8], out: &mut Vec<u32>) {
        if !self.word_cache {
            return self.encode_pieces(text, out, None);
        }
        cache::with_cache(|c| self.encode_pieces(text, out, c))
    }

    /// The pieces of this tokenizer's pattern (a loop per scanner, so
    /// that each is inlined in its own).
    fn encode_pieces(&self, text: &[u8], out: &mut Vec<u32>, cache: Option<&mut cache::WordCache>) {
        use crate::pretokenize::{split_cl100k, split_gpt2, split_o200k, Pattern};
        match &self.pattern {
            Pattern::Gpt2 => self.encode_pieces_of(text, split_gpt2(text), out, cache),
            Pattern::Cl100k => self.encode_pieces_of(text, split_cl100k(text), out, cache),
            Pattern::O200k => self.encode_pieces_of(text, split_o200k(text), out, cache),
            Pattern::Custom(p) => {
                self.encode_pieces_of(text, p.pieces(text).into_iter(), out, cache)
            }
        }
    }

    #[inline(always)]
    fn encode_pieces_of(
        &self,
        text: &[u8],
        pieces: impl Iterator<Item = std::ops::Range<usize>>,
        out: &mut Vec<u32>,
        mut cache: Option<&mut cache::WordCache>,
    ) {
        if let Some(c) = cache.as_deref_mut() {
            c.claim_hot(self.owner);
        }
        let piece_is_token = self.model.piece_is_token;
        for range in pieces {
            if range.len() == 1 {
                out.push(self.model.index.byte_ids[text[range.start] as usize]);
                continue;
            }
            let piece = Piece::at(text, range.start, range.end);
            if piece.len() <= cache::HOT_MAX {
                if let Some(c) = cache.as_deref_mut() {
                    if let Some(id) = c.get_hot(&piece) {
                        out.push(id);
                        continue;
                    }
                    // Before the word cache, which may hold the merge
                    // loop's ids for a part of a longer piece spelled alike.
                    if piece_is_token {
                        if let Some(id) = self.model.lookup_token(&piece) {
                            c.insert_hot(&piece, id);
                            out.push(id);
                            continue;
                        }
                    }
                    // The word cache holds only pieces that are not one
                    // token: asked first, a hit skips the vocabulary's miss.
                    if let Some(ids) = c.get(self.owner, &piece) {
                        out.extend_from_slice(ids);
                        continue;
                    }
                    if let Some(id) = self.model.lookup_whole(&piece) {
                        c.insert_hot(&piece, id);
                        out.push(id);
                        continue;
                    }
                }
            }
            self.encode_piece(&piece, out, cache.as_deref_mut(), true);
        }
    }

    /// Appends the ids of a piece of 2+ bytes: its own when it is one
    /// token, else those cached for it (pieces of up to [`cache::MAX_KEY`]
    /// bytes, when there is a `cache`), else those of its parts where it
    /// can be cut (`split`, see [`Self::encode_long`]) or the merge loop's.
    #[inline(always)]
    fn encode_piece(
        &self,
        piece: &Piece,
        out: &mut Vec<u32>,
        cache: Option<&mut cache::WordCache>,
        split: bool,
    ) {
        // `split`: a whole piece, which tiktoken's rule takes as it is.
        let whole = if split && self.model.piece_is_token {
            self.model.lookup_token(piece)
        } else {
            self.model.lookup_whole(piece)
        };
        if let Some(id) = whole {
            out.push(id);
            return;
        }
        // A piece too long to cache still passes the cache on: its parts
        // and its merges may be cached.
        let mut cache = cache;
        if let Some(c) = cache.as_deref() {
            if let Some(ids) = c.get(self.owner, piece) {
                out.extend_from_slice(ids);
                return;
            }
        }
        let at = out.len();
        if split {
            self.encode_long(piece.bytes, out, cache.as_deref_mut());
        } else {
            self.merge(piece.bytes, out, cache.as_deref_mut());
        }
        if let Some(c) = cache {
            c.insert(self.owner, piece, &out[at..]);
        }
    }

    /// The merge loop on `piece`, with the thread's pair cache when there is one.
    fn merge(&self, piece: &[u8], out: &mut Vec<u32>, cache: Option<&mut cache::WordCache>) {
        match cache {
            Some(c) => self
                .model
                .merge_piece_cached(piece, out, c.pairs(self.owner)),
            None => self.model.merge_piece(piece, out),
        }
    }

    /// A piece that is not one token, cut between every two bytes that no
    /// merge joins: BPE of the piece is BPE of its parts (see
    /// [`super::model::BpeModel::junctions`]). In long pieces (runs of CJK
    /// text, mostly, where the merge loop's cost grows with the square of
    /// the length) and in those whose ids are too many to cache, the parts
    /// are short and repeat, so most are found whole or cached.
    #[cold]
    fn encode_long(
        &self,
        piece: &[u8],
        out: &mut Vec<u32>,
        mut cache: Option<&mut cache::WordCache>,
    ) {
        let joins = self.model.junctions();
        let cut_after = |i: usize| {
            let pair = (piece[i] as usize) << 8 | piece[i + 1] as usize;
            joins[pair >> 6] >> (pair & 63) & 1 == 0
        };
        let Some(first) = (0..piece.len().saturating_sub(1)).find(|&i| cut_after(i)) else {
            return self.merge(piece, out, cache);
        };
        let mut start = 0;
        for i in first..piece.len() {
            if i + 1 < piece.len() && !cut_after(i) {
                continue;
            }
            let part = &piece[start..=i];
            if part.len() == 1 {
                out.push(self.model.index.byte_ids[part[0] as usize]);
            } else {
                self.encode_piece(&Piece::new(part), out, cache.as_deref_mut(), false);
            }
            start = i + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn gpt2() -> &'static BpeTokenizer {
        static TOK: std::sync::OnceLock<BpeTokenizer> = std::sync::OnceLock::new();
        TOK.get_or_init(|| {
            let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../assets/gpt2");
            BpeTokenizer::from_dir(dir).expect("assets/gpt2: run scripts/fetch-assets.sh")
        })
    }

    /// The cut piece's ids against the merge loop on the whole piece, with
    /// and without the word cache.
    fn check(piece: &[u8]) -> Result<(), TestCaseError> {
        let t = gpt2();
        let mut whole = Vec::new();
        t.model.merge_piece(piece, &mut whole);
        let mut cut = Vec::new();
        t.encode_long(piece, &mut cut, None);
        prop_assert_eq!(&cut, &whole, "{:?}", String::from_utf8_lossy(piece));
        cut.clear();
        cache::with_cache(|c| t.encode_long(piece, &mut cut, c));
        prop_assert_eq!(&cut, &whole);
        Ok(())
    }

    /// Every distinct piece of 2+ bytes of the books corpus (CJK runs,
    /// rules, words whose ids are too many to cache).
    #[test]
    fn cut_pieces_equal_the_merge_loop_on_the_corpus() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../assets/books/corpus.txt");
        let text = std::fs::read(path).expect("assets/books: run scripts/fetch-assets.sh");
        let pieces: std::collections::HashSet<&[u8]> = crate::pretokenize::split_gpt2(&text)
            .filter(|r| r.len() > 1)
            .map(|r| &text[r])
            .collect();
        for piece in &pieces {
            check(piece).unwrap();
        }
        let long = pieces.iter().filter(|p| p.len() > cache::MAX_KEY).count();
        assert!(long > 1000, "{long} long pieces");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any bytes, and runs of characters whose bytes many merges join.
        #[test]
        fn cut_pieces_equal_the_merge_loop(
            bytes in prop::collection::vec(any::<u8>(), 2..200),
            chars in prop::collection::vec(
                prop::sample::select(vec!["漢", "字", "の", "ー", "한", "국", "é", " ", "a", "-", "═", "😀"]),
                2..80,
            ),
        ) {
            check(&bytes)?;
            check(chars.concat().as_bytes())?;
        }
    }
}
