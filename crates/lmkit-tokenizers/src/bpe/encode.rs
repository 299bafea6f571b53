//! Encoding ordinary text: pre-tokenized pieces, each one token looked up
//! whole, ids from the word cache, or the merge loop's.

use super::model::{key_at, Piece};
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
        cache: Option<&mut cache::WordCache>,
    ) {
        let byte_ids = &self.model.index.byte_ids;
        let Some(c) = cache else {
            for range in pieces {
                match range.len() {
                    1 => out.push(byte_ids[text[range.start] as usize]),
                    _ => self.encode_missed(text, range, out, None),
                }
            }
            return;
        };
        c.claim_hot(self.owner);
        // Ids gather here, then go to `out` a few hundred at a time: the
        // vector's length and capacity, read and written per id, were ~8%
        // of encoding's instructions.
        const STAGE: usize = 256;
        let mut stage = [0u32; STAGE];
        let mut n = 0;
        for range in pieces {
            if n > STAGE - cache::LONG_IDS {
                out.extend_from_slice(&stage[..n]);
                n = 0;
            }
            // Pieces are not empty.
            let (s, e) = (range.start, range.end);
            if e - s == 1 {
                stage[n] = byte_ids[text[s] as usize];
                n += 1;
                continue;
            }
            if e - s <= cache::HOT_MAX {
                let hot = key_at(text, s, e - s).and_then(|(lo, hi)| c.get_hot_key(lo, hi, e - s));
                if let Some(id) = hot {
                    stage[n] = id;
                    n += 1;
                    continue;
                }
            }
            let piece = Piece::at(text, s, e);
            // Whole pieces there are not one token (parts of cut pieces
            // are under another tag): asked before the vocabulary, a hit
            // skips its miss (o200k: ~100k a pass over the books, each a
            // cache miss in an 8 MiB table).
            let dst = (&mut stage[n..n + cache::LONG_IDS])
                .try_into()
                .expect("room");
            let got = self.word_cache_ids(c, false, &piece, dst);
            if got > 0 {
                n += got;
                continue;
            }
            out.extend_from_slice(&stage[..n]);
            n = 0;
            self.encode_missed(text, range, out, Some(c));
        }
        out.extend_from_slice(&stage[..n]);
    }

    /// [`Self::encode_piece`] on a whole piece the caches do not hold, out
    /// of the loop above: its key is made again here, so that the loop's
    /// stays in registers (passed on, it was stored for every piece).
    #[inline(never)]
    fn encode_missed(
        &self,
        text: &[u8],
        range: std::ops::Range<usize>,
        out: &mut Vec<u32>,
        cache: Option<&mut cache::WordCache>,
    ) {
        self.encode_piece(&Piece::at(text, range.start, range.end), out, cache, true);
    }

    /// Appends the ids of a piece of 2+ bytes that the cache (if any) does
    /// not hold: its own when it is one token (a short whole piece is then
    /// remembered in the hot table), else those of its parts where it can
    /// be cut (`split`, a whole piece: see [`Self::encode_long`]) or the
    /// merge loop's, then cached (pieces of up to [`cache::MAX_KEY`] bytes;
    /// a part marked as one).
    #[inline(always)]
    fn encode_piece(
        &self,
        piece: &Piece,
        out: &mut Vec<u32>,
        mut cache: Option<&mut cache::WordCache>,
        split: bool,
    ) {
        // `split`: a whole piece, which tiktoken's rule takes as it is.
        let whole = if split && self.model.piece_is_token {
            self.model.lookup_token(piece)
        } else {
            self.model.lookup_whole(piece)
        };
        // Parts are cached under a tag of their own where they are keyed
        // apart (see `parts_apart`), and never in the hot table then.
        let part = !split && self.parts_apart();
        if let Some(id) = whole {
            if let Some(c) = cache {
                // In the hot table when short enough, and behind it in the
                // word cache (tokens of 13 to 16 bytes, those the hot table
                // evicted, and the parts that are one token: ~66k
                // vocabulary lookups a pass over the books corpus under
                // GPT-2 unless cached).
                if !part && piece.len() <= cache::HOT_MAX {
                    c.insert_hot(piece, id);
                }
                c.insert(self.owner, part, piece, &[id]);
            }
            out.push(id);
            return;
        }
        let at = out.len();
        if split {
            self.encode_long(piece.bytes, out, cache.as_deref_mut());
        } else {
            self.merge(piece.bytes, out, cache.as_deref_mut());
        }
        if let Some(c) = cache {
            c.insert(self.owner, part, piece, &out[at..]);
        }
    }

    /// Whether the caches key the parts of cut pieces apart from whole
    /// pieces: under tiktoken's rule a whole piece that is a token is that
    /// token, which the merge loop on its bytes (a part's ids) may not
    /// give. Elsewhere (GPT-2's files) both are the merge loop's, and a
    /// part, mostly one CJK character, is found in the hot table.
    #[inline(always)]
    fn parts_apart(&self) -> bool {
        self.model.piece_is_token
    }

    /// The word cache's ids of `piece` (`part`: under the parts' tag) in
    /// `dst`, and how many (0: none). One id not under the parts' tag is
    /// the token the piece spells: it goes back into the hot table, in the
    /// place of the one that evicted it (left in the word cache only, a
    /// token that had lost its slot missed the hot table for good: ~30% of
    /// GPT-2's whole-token pieces of the books corpus, a pass).
    #[inline(always)]
    fn word_cache_ids(
        &self,
        c: &mut cache::WordCache,
        part: bool,
        piece: &Piece,
        dst: &mut [u32; cache::LONG_IDS],
    ) -> usize {
        let got = c.get_into(self.owner, part, piece, dst);
        if got == 1 && !part && piece.len() <= cache::HOT_MAX {
            c.insert_hot(piece, dst[0]);
        }
        got
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

    /// A piece that is not one token, cut wherever no merge can join the
    /// tokens either side: BPE of the piece is BPE of its parts (see
    /// [`super::joins`]). In long pieces (runs of CJK
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
        if let Some(c) = cache.as_deref_mut() {
            c.claim_hot(self.owner); // the parts' hot tokens are this tokenizer's
        }
        let joins = self.model.joins();
        // The context test where the parts gain: a piece the cache cannot
        // hold whole (a short one is merged once, then cached; the test
        // would cost more than the merge loop it saves).
        if piece.len() > cache::MAX_KEY && joins.has_context() {
            self.encode_parts(piece, out, cache, |at| joins.may_join(piece, at))
        } else {
            self.encode_parts(piece, out, cache, |at| {
                joins.pair_may_join(piece[at - 1], piece[at])
            })
        }
    }

    /// [`Self::encode_long`] with `may_join(at)` telling whether a merge
    /// may join the tokens either side of the point before `piece[at]`.
    #[inline(always)]
    fn encode_parts(
        &self,
        piece: &[u8],
        out: &mut Vec<u32>,
        mut cache: Option<&mut cache::WordCache>,
        may_join: impl Fn(usize) -> bool,
    ) {
        let cut_after = |i: usize| !may_join(i + 1);
        let Some(first) = (0..piece.len().saturating_sub(1)).find(|&i| cut_after(i)) else {
            return self.merge(piece, out, cache);
        };
        let mut start = 0;
        for i in first..piece.len() {
            if i + 1 < piece.len() && !cut_after(i) {
                continue;
            }
            let part = Piece::at(piece, start, i + 1);
            start = i + 1;
            if part.len() == 1 {
                out.push(self.model.index.byte_ids[part.bytes[0] as usize]);
                continue;
            }
            if let Some(c) = cache.as_deref_mut() {
                let tag = self.parts_apart();
                if !tag && part.len() <= cache::HOT_MAX {
                    if let Some(id) = c.get_hot(&part) {
                        out.push(id);
                        continue;
                    }
                }
                let mut ids = [0; cache::LONG_IDS];
                let n = self.word_cache_ids(c, tag, &part, &mut ids);
                if n > 0 {
                    out.extend_from_slice(&ids[..n]);
                    continue;
                }
            }
            self.encode_piece(&part, out, cache.as_deref_mut(), false);
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

    fn o200k() -> &'static BpeTokenizer {
        static TOK: std::sync::OnceLock<BpeTokenizer> = std::sync::OnceLock::new();
        TOK.get_or_init(|| crate::openai::encoding("o200k_base").unwrap())
    }

    /// The cut piece's ids against the merge loop on the whole piece, with
    /// and without the word cache (GPT-2's merges).
    fn check(piece: &[u8]) -> Result<(), TestCaseError> {
        check_with(gpt2(), piece)
    }

    fn check_with(t: &BpeTokenizer, piece: &[u8]) -> Result<(), TestCaseError> {
        let mut whole = Vec::new();
        t.model.merge_piece(piece, &mut whole);
        let mut cut = Vec::new();
        t.encode_long(piece, &mut cut, None);
        prop_assert_eq!(&cut, &whole, "{:?}", String::from_utf8_lossy(piece));
        cut.clear();
        cache::with_cache(|c| {
            let c = c.unwrap();
            // The thread's hot table first holds another tokenizer's ids
            // (here id 0) for the piece's short parts.
            let other = if std::ptr::eq(t, gpt2()) {
                o200k()
            } else {
                gpt2()
            };
            c.claim_hot(other.owner);
            for len in 2..=4 {
                for w in piece.windows(len) {
                    c.insert_hot(&Piece::new(w), 0);
                }
            }
            t.encode_long(piece, &mut cut, Some(c))
        });
        prop_assert_eq!(&cut, &whole);
        Ok(())
    }

    /// A part of a cut piece is cached with the merge loop's ids, and a
    /// whole piece spelled alike is still the one token it spells
    /// (tiktoken's rule): parts and whole pieces have their own tags. (No
    /// OpenAI vocabulary has such a token; `abc` here is one, with neither
    /// `ab` nor `bc` a token.)
    #[test]
    fn cached_parts_never_answer_for_whole_pieces() {
        let mut ranks: Vec<(Vec<u8>, u32)> = (0..=255u8).map(|b| (vec![b], b as u32)).collect();
        ranks.push((b"abc".to_vec(), 256));
        let path = std::path::Path::new("test");
        let t = BpeTokenizer::from_tiktoken_ranks(
            path,
            &ranks,
            &[],
            crate::pretokenize::Pattern::O200k,
        )
        .unwrap();
        let piece = Piece::new(b"abc");
        cache::with_cache(|mut c| {
            c.as_deref_mut().unwrap().claim_hot(t.owner);
            let mut out = Vec::new();
            t.encode_piece(&piece, &mut out, c.as_deref_mut(), false);
            assert_eq!(out, [97, 98, 99], "the part");
            out.clear();
            t.encode_pieces_of(b"abc", std::iter::once(0..3), &mut out, c);
            assert_eq!(out, [256], "the whole piece");
        });
    }

    /// A whole token that lost its hot slot to another is put back when
    /// the word cache answers for it, so the two take turns in the slot
    /// instead of one missing the hot table for good.
    #[test]
    fn evicted_hot_tokens_come_back() {
        let t = gpt2();
        // Two pieces of ` a`..` zzz` that are tokens and share a slot.
        let words = (b'a'..=b'z').flat_map(|a| {
            (b'a'..=b'z').flat_map(move |b| (b'a'..=b'z').map(move |c| vec![b' ', a, b, c]))
        });
        let mut by_slot = std::collections::HashMap::new();
        let (x, y) = words
            .filter(|w| t.model.lookup_token(&Piece::new(w)).is_some())
            .find_map(|w| {
                let p = Piece::new(&w);
                let slot = cache::WordCache::hot_index(p.lo, p.hi);
                by_slot.insert(slot, w.clone()).map(|x| (x, w))
            })
            .expect("two tokens of one hot slot");
        let text = [&x[..], &y, &x].concat();
        let want = [t.encode_ordinary(&x), t.encode_ordinary(&y)].concat();
        cache::with_cache(|c| {
            let c = c.unwrap();
            let mut out = Vec::new();
            t.encode_pieces_of(&text, [0..4, 4..8, 8..12].into_iter(), &mut out, Some(c));
            assert_eq!(out[..2], want[..]);
            assert_eq!(out[2], want[0]);
            assert_eq!(c.get_hot(&Piece::new(&x)), Some(want[0]), "{x:?} is back");
            assert_eq!(c.get_hot(&Piece::new(&y)), None, "{y:?} gave way");
        });
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

    /// o200k_base and cl100k_base (tiktoken's ranks) on the corpus'
    /// pieces: their runs of CJK text are cut (the context test of
    /// [`super::super::joins`]: several parts per long piece, where the
    /// byte pairs alone cut ~1.3 under o200k_base) and their parts' ids are
    /// the merge loop's on the whole piece.
    #[test]
    fn openai_cut_pieces_equal_the_merge_loop_on_the_corpus() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../assets/books/corpus.txt");
        let text = std::fs::read(path).expect("assets/books: run scripts/fetch-assets.sh");
        let cl100k = crate::openai::encoding("cl100k_base").unwrap();
        for (t, min_parts) in [(o200k(), 4), (&cl100k, 2)] {
            assert!(t.model.joins().has_context());
            use crate::pretokenize::{split_cl100k, split_o200k, Pattern};
            let ranges: Vec<_> = match t.pattern {
                Pattern::O200k => split_o200k(&text).collect(),
                Pattern::Cl100k => split_cl100k(&text).collect(),
                _ => unreachable!("an o200k or cl100k pattern"),
            };
            let pieces: std::collections::HashSet<&[u8]> = ranges
                .into_iter()
                .filter(|r| r.len() > 1)
                .map(|r| &text[r])
                .collect();
            let (mut long, mut parts) = (0, 0);
            for piece in &pieces {
                check_with(t, piece).unwrap();
                if piece.len() > cache::MAX_KEY {
                    long += 1;
                    parts += 1
                        + (1..piece.len())
                            .filter(|&at| !t.model.joins().may_join(piece, at))
                            .count();
                }
            }
            assert!(long > 1000, "{long} long pieces");
            assert!(
                parts > min_parts * long,
                "{parts} parts of {long} long pieces"
            );
        }
        assert!(
            !gpt2().model.joins().has_context(),
            "GPT-2: byte pairs alone"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// o200k_base on runs of CJK, kana, Hangul and other characters
        /// (its merges join most of their byte pairs), and on any bytes.
        #[test]
        fn o200k_cut_pieces_equal_the_merge_loop(
            bytes in prop::collection::vec(any::<u8>(), 2..120),
            chars in prop::collection::vec(
                prop::sample::select(vec![
                    "漢", "字", "中", "国", "人", "の", "は", "ー", "カ", "한", "국", "어",
                    "é", " ", "a", "ing", "-", "═", "😀", "ل", "ع", "я", "\u{301}",
                ]),
                2..60,
            ),
        ) {
            check_with(o200k(), &bytes)?;
            check_with(o200k(), chars.concat().as_bytes())?;
        }

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
