//! A per-thread cache of frequent pieces that BPE splits into several
//! tokens (` tokenizer` -> ` token`, `izer`): a hit copies the ids instead of
//! running the merge loop. It lives across calls, so `encode_batch` over many
//! short texts profits as much as one long text, and it never allocates after
//! the thread's first use.
//!
//! Two-way set-associative, keyed by the piece's bytes (up to 16, as two
//! words), its length and a tag: the tokenizer's (a small number per thread,
//! see [`WordCache::tag_of`]), with a bit set for the parts of a piece cut
//! by `encode_long` (the merge loop's ids, where a whole piece spelled alike
//! may be one token by tiktoken's rule). Tokenizers sharing a thread never
//! see each other's entries, and a hit is an exact key match, so the cache
//! never changes ids.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use super::model::Piece;

/// Longest piece (bytes) that is cached.
pub(crate) const MAX_KEY: usize = 16;
/// Most ids of an entry in one slot; up to [`LONG_IDS`] take both slots of
/// a bucket (a 16-byte piece has at most 16 ids, so every piece the cache
/// keys fits: Korean words of 10 to 16 ids missed a 5-id cache every time,
/// ~21k pieces a pass over the books corpus under GPT-2).
const SHORT_IDS: usize = 5;
/// Most ids of an entry.
pub(crate) const LONG_IDS: usize = SHORT_IDS + 12;
/// Bits of a packed id: ids are below [`crate::MAX_VOCAB_SIZE`].
const ID_BITS: u32 = 21;
const ID_MASK: u64 = (1 << ID_BITS) - 1;
const _: () = assert!(crate::MAX_VOCAB_SIZE <= 1 << ID_BITS);
/// log2 of the buckets per thread: 65536 × 64 bytes = 4 MiB, two slots
/// each. Direct-mapped, 65536 slots of 48 bytes (3 MiB) missed ~14k
/// pieces of the books corpus a pass under GPT-2 (each evicted between two
/// of its uses, mostly by the parts of runs of CJK text), and those merges
/// were ~10% of encoding on one Zen 3 core; 32768 buckets missed ~13k,
/// 65536 ~7k.
const BUCKET_BITS: u32 = 16;
/// log2 of the hot-token slots per thread: 32768 × 16 bytes = 512 KiB
/// (4096: no gain; direct-mapped beat 2-way).
const HOT_BITS: u32 = 15;
/// Longest piece (bytes) the hot-token table holds.
pub(crate) const HOT_MAX: usize = 12;
/// log2 of the merge-pair slots per thread: 8192 × 16 bytes = 128 KiB.
const PAIR_BITS: u32 = 13;
/// An empty [`PairCache`] slot (ids are below 2^24, so no pair's key).
const NO_PAIR: u64 = u64::MAX;
/// Tokenizers a thread's cache tells apart before it starts afresh (tags
/// `1..TAGS`; 0 marks an empty slot).
const TAGS: usize = 128;

/// A fresh owner id for each tokenizer built (0: none).
pub(crate) fn new_owner() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// One cache line, two slots of four words. A slot: the key's two words,
/// then ids 0..3 (21 bits each) and ids 3..5 with the entry's meta in bits
/// 42..64 of the fourth word: `n` (ids, 5 bits), then the key's length,
/// part bit and tag ([`key_meta`], from bit 47). An entry of more than
/// [`SHORT_IDS`] ids keeps ids 5.. in the second slot's four words, three
/// a word (so that slot is no key).
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct Bucket([u64; 8]);

/// The meta bits of a key: length (5 bits), part (1), tag (7); never 0
/// (tags start at 1), so an empty slot matches no key.
#[inline(always)]
fn key_meta(len: usize, part: bool, tag: u8) -> u64 {
    len as u64 | (part as u64) << 5 | (tag as u64) << 6
}

const META_SHIFT: u32 = 47;
const N_SHIFT: u32 = 42;

/// Fills `dst` with ids read three a word from `words`.
#[inline(always)]
fn unpack(words: &[u64], dst: &mut [u32]) {
    for (k, id) in dst.iter_mut().enumerate() {
        *id = ((words[k / 3] >> (ID_BITS * (k % 3) as u32)) & ID_MASK) as u32;
    }
}

/// `ids` (at most three a word) into `words`, zero elsewhere.
fn pack(ids: &[u32], words: &mut [u64]) {
    words.fill(0);
    for (k, &id) in ids.iter().enumerate() {
        words[k / 3] |= (id as u64 & ID_MASK) << (ID_BITS * (k % 3) as u32);
    }
}

/// A piece that is one whole token: key bytes 0..8, then bytes 8..12 in
/// bits 0..32 of `rest`, the length in bits 32..40 and the id above (0
/// when empty; pieces here have 2+ bytes). One compare of each word, under
/// a mask, tells a hit.
#[derive(Clone, Copy, Default)]
struct HotSlot {
    lo: u64,
    rest: u64,
}

/// The bits of [`HotSlot::rest`] that are key: bytes 8..12 and the length.
const HOT_KEY: u64 = (1 << 40) - 1;

pub(crate) struct WordCache {
    buckets: Box<[Bucket]>,
    /// Buckets - 1.
    mask: usize,
    /// The owner of each tag (index; 0 unused), and how many are given.
    owners: [u64; TAGS],
    tags: usize,
    /// The last owner asked about and its tag.
    last: (u64, u8),
    /// Frequent whole-token pieces (` the`, ` and`): a table small enough to
    /// stay in L1/L2, in front of the vocabulary's (GPT-2: 2 MiB), whose
    /// first read per piece was the costliest stall of encoding.
    hot: Box<[HotSlot; 1 << HOT_BITS]>,
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
    /// A cache of `2^bits` buckets (`bits` up to 24).
    pub(crate) fn new(bits: u32) -> Self {
        assert!(bits <= 24);
        WordCache {
            buckets: vec![Bucket::default(); 1 << bits].into_boxed_slice(),
            mask: (1 << bits) - 1,
            owners: [0; TAGS],
            tags: 1,
            last: (0, 0),
            hot: vec![HotSlot::default(); 1 << HOT_BITS]
                .into_boxed_slice()
                .try_into()
                .unwrap_or_else(|_| unreachable!("2^HOT_BITS slots")),
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

    /// The tag of `owner`'s entries: given on first sight; when all
    /// [`TAGS`] are given, the cache starts afresh (a thread that has used
    /// that many tokenizers: tests, mostly).
    #[inline(always)]
    fn tag_of(&mut self, owner: u64) -> u8 {
        if self.last.0 == owner {
            return self.last.1;
        }
        self.new_tag(owner)
    }

    #[cold]
    fn new_tag(&mut self, owner: u64) -> u8 {
        let tag = match self.owners[1..self.tags].iter().position(|&o| o == owner) {
            Some(i) => i + 1,
            None => {
                if self.tags == TAGS {
                    self.buckets.fill(Bucket::default());
                    self.tags = 1;
                }
                self.owners[self.tags] = owner;
                self.tags += 1;
                self.tags - 1
            }
        };
        self.last = (owner, tag as u8);
        tag as u8
    }

    /// The hot-table slot of a key (tests find two keys sharing one).
    #[inline(always)]
    pub(super) fn hot_index(lo: u64, hi: u64) -> usize {
        let h = (lo ^ hi.rotate_left(31)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> (64 - HOT_BITS)) as usize
    }

    /// The token `piece` (2..=[`HOT_MAX`] bytes) is, if the hot table holds
    /// it (for the tokenizer last given to [`Self::claim_hot`]).
    #[inline(always)]
    pub(crate) fn get_hot(&self, piece: &Piece) -> Option<u32> {
        self.get_hot_key(piece.lo, piece.hi, piece.len())
    }

    /// [`Self::get_hot`] of the piece of `len` (2..=[`HOT_MAX`]) bytes
    /// whose key is `lo, hi`.
    #[inline(always)]
    pub(crate) fn get_hot_key(&self, lo: u64, hi: u64, len: usize) -> Option<u32> {
        debug_assert!((2..=HOT_MAX).contains(&len) && hi >> 32 == 0);
        let s = &self.hot[Self::hot_index(lo, hi)];
        let want = hi | (len as u64) << 32;
        ((s.lo ^ lo) | ((s.rest ^ want) & HOT_KEY) == 0).then_some((s.rest >> 40) as u32)
    }

    /// Remembers that `piece` (2..=[`HOT_MAX`] bytes) is the whole token
    /// `id` (under 2^24), replacing whatever held the slot.
    #[inline(always)]
    pub(crate) fn insert_hot(&mut self, piece: &Piece, id: u32) {
        debug_assert!((2..=HOT_MAX).contains(&piece.len()) && id < 1 << 24);
        self.hot[Self::hot_index(piece.lo, piece.hi)] = HotSlot {
            lo: piece.lo,
            rest: piece.hi | (piece.len() as u64) << 32 | (id as u64) << 40,
        };
    }

    #[inline(always)]
    fn index(&self, meta: u64, lo: u64, hi: u64) -> usize {
        let h =
            (lo ^ hi.rotate_left(29) ^ meta.rotate_left(51)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        // The product's top 24 bits, the best mixed.
        (h >> 40) as usize & self.mask
    }

    /// Writes the ids cached for `piece` under `owner` (a tokenizer's id;
    /// `part`: a part of a cut piece) to the start of `dst` and says how
    /// many; 0 when none are (never for pieces over [`MAX_KEY`] bytes).
    #[inline(always)]
    pub(crate) fn get_into(
        &mut self,
        owner: u64,
        part: bool,
        piece: &Piece,
        dst: &mut [u32; LONG_IDS],
    ) -> usize {
        if piece.len() > MAX_KEY {
            return 0;
        }
        let meta = key_meta(piece.len(), part, self.tag_of(owner));
        let (lo, hi) = (piece.lo, piece.hi);
        let w = &self.buckets[self.index(meta, lo, hi)].0;
        let n = ((w[3] >> N_SHIFT) & 31) as usize;
        if w[0] == lo && w[1] == hi && w[3] >> META_SHIFT == meta {
            unpack(&w[2..4], &mut dst[..n.min(SHORT_IDS)]);
            if n > SHORT_IDS {
                unpack(&w[4..8], &mut dst[SHORT_IDS..n.min(LONG_IDS)]);
            }
            return n;
        }
        // The second slot is a key unless the first entry's ids fill it.
        if n <= SHORT_IDS && w[4] == lo && w[5] == hi && w[7] >> META_SHIFT == meta {
            let n = ((w[7] >> N_SHIFT) & 31) as usize;
            unpack(&w[6..8], &mut dst[..n.min(SHORT_IDS)]);
            return n;
        }
        0
    }

    /// Remembers `ids` for `piece` (ignored when there are more than
    /// [`LONG_IDS`]), first in its bucket: the entry there before moves
    /// second, the one second (or one of many ids there) is dropped.
    #[inline]
    pub(crate) fn insert(&mut self, owner: u64, part: bool, piece: &Piece, ids: &[u32]) {
        let too_large = |&id: &u32| id as u64 > ID_MASK;
        if piece.len() > MAX_KEY
            || ids.is_empty()
            || ids.len() > LONG_IDS
            || ids.iter().any(too_large)
        {
            return;
        }
        let meta = key_meta(piece.len(), part, self.tag_of(owner));
        let i = self.index(meta, piece.lo, piece.hi);
        let w = &mut self.buckets[i].0;
        let short = ids.len().min(SHORT_IDS);
        if ids.len() > SHORT_IDS {
            pack(&ids[SHORT_IDS..], &mut w[4..8]);
        } else if ((w[3] >> N_SHIFT) & 31) as usize <= SHORT_IDS {
            w.copy_within(0..4, 4);
        } else {
            w[4..8].fill(0);
        }
        w[0] = piece.lo;
        w[1] = piece.hi;
        pack(&ids[..short], &mut w[2..4]);
        w[3] |= (ids.len() as u64) << N_SHIFT | meta << META_SHIFT;
    }
}

thread_local! {
    static CACHE: RefCell<WordCache> = RefCell::new(WordCache::new(BUCKET_BITS));
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

    fn get(c: &mut WordCache, owner: u64, part: bool, word: &[u8]) -> Option<Vec<u32>> {
        let mut dst = [u32::MAX; LONG_IDS];
        let n = c.get_into(owner, part, &Piece::new(word), &mut dst);
        assert!(
            dst[n..].iter().all(|&id| id == u32::MAX),
            "written past the ids"
        );
        (n > 0).then(|| dst[..n].to_vec())
    }

    #[test]
    fn exact_keys_owners_and_collisions() {
        // One bucket: every key collides with others, and a hit must still be exact.
        let mut c = WordCache::new(0);
        c.insert(1, false, &Piece::new(b"ab"), &[7, 8]);
        assert_eq!(get(&mut c, 1, false, b"ab"), Some(vec![7, 8]));
        assert_eq!(
            get(&mut c, 2, false, b"ab"),
            None,
            "another tokenizer's entry"
        );
        assert_eq!(get(&mut c, 1, true, b"ab"), None, "a part's entry");
        assert_eq!(
            get(&mut c, 1, false, b"ab\0"),
            None,
            "a longer key, same words"
        );
        assert_eq!(get(&mut c, 1, false, b"ba"), None);
        let words = [&b"hello"[..], b"sixteen bytes!!!", b"xy", b"tokenizer"];
        for (k, word) in words.iter().enumerate() {
            let ids: Vec<u32> = (0..=k as u32).map(|i| (1 << 21) - 1 - i).collect();
            c.insert(1, false, &Piece::new(word), &ids);
            assert_eq!(get(&mut c, 1, false, word), Some(ids));
        }
        // Too long a key, too many ids or too large an id: not cached.
        c.insert(1, false, &Piece::new(b"seventeen bytes!!"), &[1]);
        assert_eq!(get(&mut c, 1, false, b"seventeen bytes!!"), None);
        c.insert(1, false, &Piece::new(b"qq"), &[1; LONG_IDS + 1]);
        c.insert(1, false, &Piece::new(b"qr"), &[1 << 21]);
        assert_eq!(get(&mut c, 1, false, b"qq"), None);
        assert_eq!(get(&mut c, 1, false, b"qr"), None);
    }

    /// Two entries share a bucket; one of many ids fills it, and its ids
    /// are never read as a key.
    #[test]
    fn two_ways_and_long_entries() {
        let mut c = WordCache::new(0);
        c.insert(1, false, &Piece::new(b"one"), &[1, 2]);
        c.insert(1, true, &Piece::new(b"two"), &[3, 4, 5, 6, 7]);
        assert_eq!(
            get(&mut c, 1, false, b"one"),
            Some(vec![1, 2]),
            "moved second"
        );
        assert_eq!(get(&mut c, 1, true, b"two"), Some(vec![3, 4, 5, 6, 7]));
        c.insert(1, false, &Piece::new(b"three"), &[8]);
        assert_eq!(get(&mut c, 1, false, b"one"), None, "dropped");
        assert_eq!(get(&mut c, 1, true, b"two"), Some(vec![3, 4, 5, 6, 7]));
        for n in SHORT_IDS + 1..=LONG_IDS {
            let ids: Vec<u32> = (0..n as u32).map(|i| i * 123_457 % (1 << 21)).collect();
            c.insert(1, false, &Piece::new(b"korean word"), &ids);
            assert_eq!(get(&mut c, 1, false, b"korean word"), Some(ids));
            assert_eq!(get(&mut c, 1, false, b"three"), None, "both slots taken");
        }
        // A key spelled as the long entry's second slot: no hit.
        let w = c.buckets[0].0;
        let (lo, hi) = (w[4].to_le_bytes(), w[5].to_le_bytes());
        let mut fake = lo.to_vec();
        fake.extend_from_slice(&hi);
        let len = (((w[7] >> META_SHIFT) & 31) as usize).clamp(2, 16);
        assert_eq!(get(&mut c, 1, false, &fake[..len]), None);
        // A short entry after a long one: the long one is gone, not half read.
        c.insert(1, false, &Piece::new(b"four"), &[9, 10]);
        assert_eq!(get(&mut c, 1, false, b"korean word"), None);
        assert_eq!(get(&mut c, 1, false, b"four"), Some(vec![9, 10]));
        c.insert(1, false, &Piece::new(b"five"), &[11]);
        assert_eq!(get(&mut c, 1, false, b"four"), Some(vec![9, 10]));
        assert_eq!(get(&mut c, 1, false, b"five"), Some(vec![11]));
    }

    /// Owners get tags as they come; past [`TAGS`] - 1 the cache starts
    /// afresh and never answers for an owner with another's entries.
    #[test]
    fn owner_tags_run_out_safely() {
        let mut c = WordCache::new(2);
        for owner in 1..=3 * TAGS as u64 {
            c.insert(owner, false, &Piece::new(b"same"), &[owner as u32]);
            assert_eq!(get(&mut c, owner, false, b"same"), Some(vec![owner as u32]));
            for other in owner.saturating_sub(5)..owner {
                let got = get(&mut c, other.max(1), false, b"same");
                assert!(got.is_none() || got == Some(vec![other.max(1) as u32]));
            }
        }
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
