//! A per-thread cache of frequent pieces that BPE splits into several
//! tokens (` tokenizer` -> ` token`, `izer`): a hit copies the ids instead of
//! running the merge loop. It lives across calls, so `encode_batch` over many
//! short texts profits as much as one long text, and it never allocates after
//! the thread's first use.
//!
//! Direct-mapped, keyed by the piece's bytes (up to 16, as two words) and a
//! tag: the tokenizer's unique id, with [`PART`] set for the parts of a
//! piece cut by `encode_long` (the merge loop's ids, where a whole piece
//! spelled alike may be one token by tiktoken's rule). Tokenizers sharing a
//! thread never see each other's entries, and a hit is an exact key match,
//! so the cache never changes ids.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use super::model::Piece;

/// Longest piece (bytes) that is cached.
pub(crate) const MAX_KEY: usize = 16;
/// Most ids a cached piece may have.
const MAX_IDS: usize = 5;
/// log2 of the slots per thread: 65536 × 48 bytes = 3 MiB. 16384 held too
/// few of the ~26k pieces of several tokens in the books corpus under
/// o200k: the merge loop ran again for those evicted between two uses; at
/// 32768 slots, ~30k keys (with the parts of cut CJK runs) still shared
/// many a direct-mapped slot (65536: +3% GPT-2, +5% o200k_base encoding
/// the corpus on one Zen 5 core).
const SLOT_BITS: u32 = 16;
/// log2 of the hot-token slots per thread: 32768 × 16 bytes = 512 KiB
/// (4096: no gain; direct-mapped beat 2-way).
const HOT_BITS: u32 = 15;
/// Longest piece (bytes) the hot-token table holds.
pub(crate) const HOT_MAX: usize = 12;
/// Tag bit of the entries of parts of a cut piece (owners stay below it).
pub(crate) const PART: u64 = 1 << 63;
/// log2 of the merge-pair slots per thread: 8192 × 16 bytes = 128 KiB.
const PAIR_BITS: u32 = 13;
/// An empty [`PairCache`] slot (ids are below 2^24, so no pair's key).
const NO_PAIR: u64 = u64::MAX;

/// A fresh owner id for each tokenizer built (0 marks an empty slot; ids
/// stay far below [`PART`]).
pub(crate) fn new_owner() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[derive(Clone, Copy, Default)]
struct Slot {
    owner: u64,
    lo: u64,
    hi: u64,
    len: u8,
    n: u8,
    ids: [u32; MAX_IDS],
}

/// A piece that is one whole token: key bytes 0..8 and 8..12, `len << 24 | id`
/// (0 when empty; pieces here have 2+ bytes).
#[derive(Clone, Copy, Default)]
struct HotSlot {
    lo: u64,
    hi: u32,
    meta: u32,
}

pub(crate) struct WordCache {
    slots: Box<[Slot]>,
    shift: u32,
    /// Frequent whole-token pieces (` the`, ` and`): a table small enough to
    /// stay in L1/L2, in front of the vocabulary's (GPT-2: 2 MiB), whose
    /// first read per piece was the costliest stall of encoding.
    hot: Box<[HotSlot]>,
    /// The tokenizer whose tokens `hot` and merges `pairs` hold (0: none yet).
    hot_owner: u64,
    pairs: PairCache,
}

/// The merges of pairs of ids the merge loop asked about lately, direct
/// mapped: `left << 32 | right` -> the model's `rank << 32 | merged id` (or
/// its "no merge"). The merge table of a tiktoken vocabulary (every cut of
/// every token: o200k's is tens of MiB) is far larger than the CPU's
/// caches, and its lookups, each waiting on the one before, were most of
/// the merge loop's time; the pairs of the words that reach it repeat.
pub(crate) struct PairCache {
    slots: Box<[(u64, u64)]>,
}

impl PairCache {
    fn new() -> Self {
        PairCache {
            slots: vec![(NO_PAIR, 0); 1 << PAIR_BITS].into_boxed_slice(),
        }
    }

    /// The value of `key` held, else `lookup()`'s, then held.
    #[inline(always)]
    pub(crate) fn get_or(&mut self, key: u64, lookup: impl FnOnce() -> u64) -> u64 {
        let i = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - PAIR_BITS)) as usize;
        let s = &mut self.slots[i];
        if s.0 != key {
            *s = (key, lookup());
        }
        s.1
    }
}

impl WordCache {
    pub(crate) fn new(bits: u32) -> Self {
        WordCache {
            slots: vec![Slot::default(); 1 << bits].into_boxed_slice(),
            shift: 64 - bits,
            hot: vec![HotSlot::default(); 1 << HOT_BITS].into_boxed_slice(),
            hot_owner: 0,
            pairs: PairCache::new(),
        }
    }

    /// Makes the hot-token table and the pair cache `owner`'s, emptying
    /// them when they held another tokenizer's (once per encode call, not
    /// per piece; a thread alternating tokenizers pays a 640 KiB fill per
    /// switch, which an owner tag per slot would avoid at the cost of a
    /// larger slot).
    #[inline]
    pub(crate) fn claim_hot(&mut self, owner: u64) {
        if self.hot_owner != owner {
            self.hot.fill(HotSlot::default());
            self.pairs.slots.fill((NO_PAIR, 0));
            self.hot_owner = owner;
        }
    }

    /// The pair cache, made `owner`'s (see [`Self::claim_hot`]).
    #[inline]
    pub(crate) fn pairs(&mut self, owner: u64) -> &mut PairCache {
        self.claim_hot(owner);
        &mut self.pairs
    }

    #[inline(always)]
    fn hot_index(lo: u64, hi: u64) -> usize {
        let h = (lo ^ hi.rotate_left(31)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> (64 - HOT_BITS)) as usize
    }

    /// The token `piece` (2..=[`HOT_MAX`] bytes) is, if the hot table holds
    /// it (for the tokenizer last given to [`Self::claim_hot`]).
    #[inline(always)]
    pub(crate) fn get_hot(&self, piece: &Piece) -> Option<u32> {
        debug_assert!((2..=HOT_MAX).contains(&piece.len()));
        let s = &self.hot[Self::hot_index(piece.lo, piece.hi)];
        (s.lo == piece.lo && s.hi as u64 == piece.hi && (s.meta >> 24) as usize == piece.len())
            .then_some(s.meta & 0x00FF_FFFF)
    }

    /// Remembers that `piece` (2..=[`HOT_MAX`] bytes) is the whole token
    /// `id` (under 2^24), replacing whatever held the slot.
    #[inline(always)]
    pub(crate) fn insert_hot(&mut self, piece: &Piece, id: u32) {
        debug_assert!((2..=HOT_MAX).contains(&piece.len()) && id < 1 << 24);
        self.hot[Self::hot_index(piece.lo, piece.hi)] = HotSlot {
            lo: piece.lo,
            hi: piece.hi as u32,
            meta: (piece.len() as u32) << 24 | id,
        };
    }

    #[inline(always)]
    fn index(&self, owner: u64, lo: u64, hi: u64, len: usize) -> usize {
        let h = (lo ^ hi.rotate_left(29) ^ owner.rotate_left(47) ^ ((len as u64) << 58))
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> self.shift) as usize
    }

    /// The ids cached for `piece` under `owner` (a tokenizer's id, with
    /// [`PART`] for parts of a cut piece; none for pieces over `MAX_KEY` bytes).
    #[inline]
    pub(crate) fn get(&self, owner: u64, piece: &Piece) -> Option<&[u32]> {
        if piece.len() > MAX_KEY {
            return None;
        }
        let (lo, hi) = (piece.lo, piece.hi);
        let s = &self.slots[self.index(owner, lo, hi, piece.len())];
        (s.owner == owner && s.lo == lo && s.hi == hi && s.len as usize == piece.len())
            .then(|| &s.ids[..s.n as usize])
    }

    /// Remembers `ids` for `piece` (ignored when there are too many ids),
    /// replacing whatever held the slot.
    #[inline]
    pub(crate) fn insert(&mut self, owner: u64, piece: &Piece, ids: &[u32]) {
        if piece.len() > MAX_KEY || ids.len() > MAX_IDS {
            return;
        }
        let (lo, hi) = (piece.lo, piece.hi);
        let i = self.index(owner, lo, hi, piece.len());
        let mut slot = Slot {
            owner,
            lo,
            hi,
            len: piece.len() as u8,
            n: ids.len() as u8,
            ids: [0; MAX_IDS],
        };
        slot.ids[..ids.len()].copy_from_slice(ids);
        self.slots[i] = slot;
    }
}

thread_local! {
    static CACHE: RefCell<WordCache> = RefCell::new(WordCache::new(SLOT_BITS));
}

/// Runs `f` with this thread's cache, or with `None` when it is in use
/// further up the stack (never in practice: encoding does not re-enter).
pub(crate) fn with_cache<R>(f: impl FnOnce(Option<&mut WordCache>) -> R) -> R {
    CACHE.with(|c| match c.try_borrow_mut() {
        Ok(mut c) => f(Some(&mut c)),
        Err(_) => f(None),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_keys_owners_and_collisions() {
        // Two slots: every key collides with others, and a hit must still be exact.
        let mut c = WordCache::new(1);
        c.insert(1, &Piece::new(b"ab"), &[7, 8]);
        assert_eq!(c.get(1, &Piece::new(b"ab")), Some(&[7, 8][..]));
        assert_eq!(
            c.get(2, &Piece::new(b"ab")),
            None,
            "another tokenizer's entry"
        );
        assert_eq!(
            c.get(1, &Piece::new(b"ab\0")),
            None,
            "a longer key with the same words"
        );
        assert_eq!(c.get(1, &Piece::new(b"ba")), None);
        for (k, word) in [&b"hello"[..], b"sixteen bytes!!!", b"xy", b"tokenizer"]
            .iter()
            .enumerate()
        {
            c.insert(1, &Piece::new(word), &[k as u32; 3]);
            assert_eq!(c.get(1, &Piece::new(word)), Some(&[k as u32; 3][..]));
        }
        // Too long a key or too many ids: not cached.
        c.insert(1, &Piece::new(b"seventeen bytes!!"), &[1]);
        assert_eq!(c.get(1, &Piece::new(b"seventeen bytes!!")), None);
        c.insert(1, &Piece::new(b"qq"), &[1; MAX_IDS + 1]);
        assert_eq!(c.get(1, &Piece::new(b"qq")), None);
    }

    #[test]
    fn hot_tokens_exact_and_per_owner() {
        let mut c = WordCache::new(1);
        c.claim_hot(1);
        let words: [&[u8]; 5] = [b" the", b" the\0", b"ab", b"twelve bytes", b"\0\0"];
        for (id, w) in words.iter().enumerate() {
            assert_eq!(c.get_hot(&Piece::new(w)), None);
            c.insert_hot(&Piece::new(w), id as u32 + 1);
            assert_eq!(c.get_hot(&Piece::new(w)), Some(id as u32 + 1));
        }
        // Same words, other lengths or bytes: never another piece's id.
        for w in [&b" th"[..], b" the\0\0", b"ba", b"twelve byte!", b"\0\0\0"] {
            assert_eq!(c.get_hot(&Piece::new(w)), None, "{w:?}");
        }
        c.claim_hot(1);
        assert_eq!(c.get_hot(&Piece::new(b"ab")), Some(3), "kept for its owner");
        c.claim_hot(2);
        for w in words {
            assert_eq!(c.get_hot(&Piece::new(w)), None, "emptied for another owner");
        }
    }

    #[test]
    fn pairs_remembered_per_owner() {
        let mut c = WordCache::new(1);
        let calls = std::cell::Cell::new(0);
        let lookup = |v: u64| {
            calls.set(calls.get() + 1);
            v
        };
        assert_eq!(c.pairs(1).get_or(7 << 32 | 9, || lookup(5)), 5);
        assert_eq!(c.pairs(1).get_or(7 << 32 | 9, || lookup(6)), 5, "held");
        assert_eq!(calls.get(), 1);
        assert_eq!(c.pairs(1).get_or(9 << 32 | 7, || lookup(NO_PAIR)), NO_PAIR);
        assert_eq!(c.pairs(2).get_or(7 << 32 | 9, || lookup(8)), 8, "emptied");
        assert_eq!(calls.get(), 3);
    }
}
