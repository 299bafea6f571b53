//! Where a piece can be cut so that BPE of the piece is BPE of its parts.
//!
//! Every token the merge loop makes joins two of its tokens, so where no
//! merge can join the tokens on either side of a point of the piece, no
//! token ever spans it, and BPE of the piece is BPE of each side (merges on
//! one side never change the other side's pairs). A merge `(l, r)` can
//! join there only if `l` ends with the bytes before the point and `r`
//! starts with those after it, as far as either goes.
//!
//! Two tests, the second asked only where the first cannot cut:
//! - the byte pair: some merge's `l` ends with the byte before and its `r`
//!   starts with the byte after (a 64 Kib table);
//! - up to three bytes each side: some merge's last `min(3, |l|)` bytes and
//!   first `min(3, |r|)` bytes are those of the text (nine lengths to ask,
//!   in a bit table of hashed keys; a collision only loses a cut). In runs
//!   of CJK text almost every byte pair of two characters is some merge's,
//!   so the first test hardly cuts (o200k_base: 8.5k pieces of over 16
//!   bytes in the books corpus became 11k parts), where the second leaves
//!   parts of a few characters that repeat (69k parts, 4.6k distinct) and
//!   the word cache holds. Asked only of pieces the word cache cannot hold
//!   whole (over 16 bytes), at points next to a non-ASCII character, and
//!   only under vocabularies whose byte pairs join much of CJK text
//!   (o200k, cl100k: yes; GPT-2, whose byte pairs cut CJK runs already:
//!   no, where the test cost more than it saved).

/// The tables of both tests, built from the merges' token bytes.
#[derive(Debug, Clone)]
pub(crate) struct Joins {
    /// Bit `a << 8 | b`: some merge joins a left token ending in byte `a`
    /// to a right one starting with `b`.
    pairs: Box<[u64; 1024]>,
    /// Bits at [`Self::slot`] of each merge's [`key`]; empty when the
    /// context is not asked (see [`Joins::has_context`]).
    context: Box<[u64]>,
    shift: u32,
    /// Per byte pair `a << 8 | b` (with `context`): bit `3 (i - 1) + j - 1`
    /// set when some merge's `l` ends in `a` and has `min(3, |l|) = i`
    /// bytes asked, its `r` starts with `b` and has `min(3, |r|) = j`: the
    /// context keys worth a probe (between two CJK characters mostly the
    /// whole characters', one of nine).
    lengths: Box<[u16]>,
}

/// The key of a merge whose left token ends with `left` and right one
/// starts with `right` (1 to 3 bytes each): the bytes and both lengths.
#[inline(always)]
fn key(left: &[u8], right: &[u8]) -> u64 {
    let pack = |b: &[u8]| b.iter().rev().fold(0u64, |acc, &x| acc << 8 | x as u64);
    pack(left) | pack(right) << 24 | (left.len() as u64) << 48 | (right.len() as u64) << 52
}

impl Joins {
    /// The tables of `merges` (`n` of them), each as the bytes of its left
    /// and right tokens (not empty). The context table (~64 bits per
    /// merge, o200k_base: 4 MiB, so few keys share a bit) only where the
    /// byte pairs of CJK text mostly join (see [`Self::has_context`]).
    pub(crate) fn new<'a>(
        n: usize,
        merges: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    ) -> Self {
        Self::build(n, merges, false)
    }

    fn build<'a>(
        n: usize,
        merges: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
        force_context: bool,
    ) -> Self {
        let mut joins = Joins {
            pairs: Box::new([0; 1024]),
            context: Box::new([]),
            shift: 0,
            lengths: Box::new([]),
        };
        for (l, r) in merges.clone() {
            if let (Some(&a), Some(&b)) = (l.last(), r.first()) {
                let pair = (a as usize) << 8 | b as usize;
                joins.pairs[pair >> 6] |= 1 << (pair & 63);
            }
        }
        // The end of a character (a continuation byte) before the start of
        // a three-byte one (CJK): joinable in 754 of these 1024 pairs under
        // o200k_base and 279 under cl100k_base, where the context test
        // paid (+8% and +6% encoding the books corpus), 45 under r50k_base
        // / GPT-2, where the pairs cut CJK runs already and the test cost
        // ~5%.
        let cjk_pairs = (0x80..0xC0u8)
            .flat_map(|a| (0xE0..0xF0u8).map(move |b| (a, b)))
            .filter(|&(a, b)| joins.pair_may_join(a, b))
            .count();
        if cjk_pairs < 256 && !force_context {
            return joins;
        }
        let bits = (n.max(1) * 64)
            .next_power_of_two()
            .trailing_zeros()
            .clamp(12, 26);
        joins.context = vec![0u64; 1 << (bits - 6)].into_boxed_slice();
        joins.shift = 64 - bits;
        joins.lengths = vec![0u16; 1 << 16].into_boxed_slice();
        for (l, r) in merges {
            if let (Some(&a), Some(&b)) = (l.last(), r.first()) {
                let (left, right) = (&l[l.len().saturating_sub(3)..], &r[..r.len().min(3)]);
                let k = joins.slot(key(left, right));
                joins.context[k >> 6] |= 1 << (k & 63);
                let bit = 3 * (left.len() - 1) + right.len() - 1;
                joins.lengths[(a as usize) << 8 | b as usize] |= 1 << bit;
            }
        }
        joins
    }

    /// Whether [`Self::may_join`] asks the context too (o200k_base,
    /// cl100k_base: yes; r50k_base, GPT-2: the byte pairs alone).
    pub(crate) fn has_context(&self) -> bool {
        !self.context.is_empty()
    }

    /// The byte-pair test alone (`false` is certain, as
    /// [`Self::may_join`]'s): some merge joins a left token ending in `a`
    /// to a right one starting with `b`.
    #[inline(always)]
    pub(crate) fn pair_may_join(&self, a: u8, b: u8) -> bool {
        let pair = (a as usize) << 8 | b as usize;
        self.pairs[pair >> 6] >> (pair & 63) & 1 != 0
    }

    #[inline(always)]
    fn slot(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// Whether some merge may join the tokens on either side of the point
    /// between `piece[at - 1]` and `piece[at]` (`0 < at < piece.len()`).
    /// `false` is certain: BPE of the piece is that of both sides. Inside
    /// a UTF-8 character and between two ASCII bytes only the byte pair is
    /// asked: the longer test would hardly ever cut there (tokens seldom
    /// end inside a character; English letters join in most contexts), and
    /// asked between the letters of GPT-2's long pieces it cost 13% of
    /// encoding the books corpus.
    #[inline(always)]
    pub(crate) fn may_join(&self, piece: &[u8], at: usize) -> bool {
        let (a, b) = (piece[at - 1], piece[at]);
        if !self.pair_may_join(a, b) {
            return false;
        }
        if !self.has_context() || b & 0xC0 == 0x80 || (a | b) < 0x80 {
            return true;
        }
        self.context_may_join(piece, at)
    }

    /// The context test of [`Self::may_join`].
    fn context_may_join(&self, piece: &[u8], at: usize) -> bool {
        let before = &piece[at.saturating_sub(3)..at];
        let after = &piece[at..piece.len().min(at + 3)];
        let mut lengths = self.lengths[(piece[at - 1] as usize) << 8 | piece[at] as usize];
        while lengths != 0 {
            let bit = lengths.trailing_zeros() as usize;
            lengths &= lengths - 1;
            let (i, j) = (bit / 3 + 1, bit % 3 + 1);
            if i > before.len() || j > after.len() {
                continue;
            }
            let k = self.slot(key(&before[before.len() - i..], &after[..j]));
            if self.context[k >> 6] >> (k & 63) & 1 != 0 {
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_tell_bytes_and_lengths_apart() {
        let keys = [
            key(b"a", b"b"),
            key(b"b", b"a"),
            key(b"\0a", b"b"),
            key(b"a", b"b\0"),
            key(b"\0\0a", b"b"),
            key(b"abc", b"def"),
            key(b"ab", b"c"),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    /// One merge (`a字` + `漢`): the point before `漢` may join only where
    /// the text before ends with `字` (the left token's last 3 bytes) and
    /// the text after starts with all of `漢`; any other point is cut.
    fn at<'a>(s: &'a str, before: &str) -> (&'a [u8], usize) {
        (s.as_bytes(), before.len())
    }

    #[test]
    fn joins_only_where_a_merge_fits() {
        let merges = [("a字".as_bytes(), "漢".as_bytes())];
        assert!(
            !Joins::new(1, merges.into_iter()).has_context(),
            "no CJK pairs"
        );
        let joins = Joins::build(1, merges.into_iter(), true);
        for (piece, i) in [at("a字漢", "a字"), at("b字漢x", "b字"), at("字漢", "字")] {
            assert!(joins.may_join(piece, i), "{:?}", std::str::from_utf8(piece));
        }
        let (piece, i) = at("a字漢", "a");
        assert!(!joins.may_join(piece, i), "no merge's left token ends in a");
        // U+0117 ends in 字's last byte: the byte pair fits, the context not.
        let (piece, i) = at("ė漢", "ė");
        assert!(!joins.may_join(piece, i));
        let piece = &"字漢".as_bytes()[..4];
        assert!(
            !joins.may_join(piece, 3),
            "the text after is shorter than 漢"
        );
        let pairs_only = Joins::new(1, merges.into_iter());
        let (piece, i) = at("ė漢", "ė");
        assert!(pairs_only.may_join(piece, i));
    }
}
