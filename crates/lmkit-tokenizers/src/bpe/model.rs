//! The byte-level BPE model: token bytes, rank-ordered merges, and the merge
//! loop that turns one pre-tokenized piece into token ids.
//!
//! Semantics are HF's / GPT-2's: repeatedly merge the adjacent pair with the
//! lowest merge rank, the leftmost one on ties. Two fast paths keep this cheap:
//! a piece that is itself a token whose own BPE gives that token is looked up
//! whole (checked once per token, the first time a piece spells it, so the
//! shortcut never changes the result and loading does no merging), and long
//! pieces use a heap over a linked list, O(n log n), so a 1 MB word without
//! spaces costs no more per byte than ordinary text.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use super::cache::PairCache;
use super::hash::FastMap;
use super::joins::Joins;

/// Pieces longer than this (in bytes) use the heap merge.
const SMALL_PIECE: usize = 64;
const NO_MERGE: u64 = u64::MAX;

#[derive(Debug, Clone)]
pub(crate) struct BpeModel {
    /// Bytes of token `id` are `bytes[starts[id]..starts[id + 1]]`.
    bytes: Vec<u8>,
    starts: Vec<u32>,
    /// Ordinary tokens by their bytes (the whole-piece lookup); every
    /// single byte has one.
    pub(crate) index: TokenIndex,
    /// `(left << 32 | right)` -> `(rank << 32 | merged id)`.
    merges: FastMap<u64, u64>,
    /// The same for the two single-byte tokens of bytes `a`, `b` at `a << 8 | b`
    /// (every piece starts as bytes: no hashing for the first pairs).
    byte_pairs: Box<[u64]>,
    max_token_len: usize,
    /// Per id: whether BPE of the token's own bytes gives just that token
    /// ([`WHOLE_YES`], [`WHOLE_NO`], or [`WHOLE_UNKNOWN`] until first asked).
    /// A pure function of the model, so racing threads store the same value.
    whole_state: WholeState,
    /// Where a piece can be cut (see [`Self::joins`]).
    joins: OnceLock<Joins>,
    /// tiktoken's rule (ranked merges): a whole pre-tokenized piece that is
    /// a token is that token, whatever the merge loop would make of it.
    pub(crate) piece_is_token: bool,
}

const WHOLE_UNKNOWN: u8 = 0;
const WHOLE_YES: u8 = 1;
const WHOLE_NO: u8 = 2;

#[derive(Debug, Default)]
struct WholeState(Box<[AtomicU8]>);

impl Clone for WholeState {
    fn clone(&self) -> Self {
        WholeState(
            self.0
                .iter()
                .map(|s| AtomicU8::new(s.load(Ordering::Relaxed)))
                .collect(),
        )
    }
}

/// Buffers of the heap merge, kept per thread so that long pieces allocate
/// nothing once the buffers have grown.
#[derive(Default)]
struct LargeScratch {
    ids: Vec<u32>,
    next: Vec<u32>,
    prev: Vec<u32>,
    heap: Vec<Reverse<u64>>,
}

thread_local! {
    static LARGE_SCRATCH: RefCell<LargeScratch> = RefCell::new(LargeScratch::default());
}

impl BpeModel {
    /// Token `id` is `bytes[starts[id]..starts[id + 1]]` (empty for ids
    /// that are not ordinary tokens, e.g. holes or special tokens), `index`
    /// those tokens by their bytes (it must have every single byte); merge
    /// `rank` joins `merges[rank]` into `merged[rank]`; with `ranks`
    /// (tiktoken's rank files), merge `k` has rank `ranks[k]` instead, equal
    /// ranks tie to the leftmost pair, and [`Self::piece_is_token`] is set.
    ///
    /// Linear in the vocabulary and merges, with no allocation per entry.
    pub(crate) fn new(
        bytes: Vec<u8>,
        starts: Vec<u32>,
        index: TokenIndex,
        merges: &[(u32, u32)],
        merged: &[u32],
        ranks: Option<&[u32]>,
    ) -> Self {
        debug_assert_eq!(merges.len(), merged.len());
        let len = |id: usize| (starts[id + 1] - starts[id]) as usize;
        let ids = starts.len() - 1;
        let mut merge_map: FastMap<u64, u64> =
            FastMap::with_capacity_and_hasher(merges.len(), Default::default());
        // Single-byte tokens by id: a table that stays in cache, where
        // reading `starts` for both tokens of every merge would miss.
        let mut byte_of = vec![NO_BYTE; ids];
        for (b, &id) in index.byte_ids.iter().enumerate() {
            if let Some(slot) = byte_of.get_mut(id as usize) {
                *slot = b as u16;
            }
        }
        let mut byte_pairs = vec![NO_MERGE; 1 << 16].into_boxed_slice();
        for (k, (&(l, r), &m)) in merges.iter().zip(merged).enumerate() {
            let rank = ranks.map_or(k as u64, |ranks| ranks[k] as u64);
            let value = (rank << 32) | m as u64;
            // A repeated pair keeps its first (lowest) rank, as in HF.
            merge_map.entry(pair_key(l, r)).or_insert(value);
            let (a, b) = (byte_of[l as usize], byte_of[r as usize]);
            if a != NO_BYTE
                && b != NO_BYTE
                && byte_pairs[(a as usize) << 8 | b as usize] == NO_MERGE
            {
                byte_pairs[(a as usize) << 8 | b as usize] = value;
            }
        }
        debug_assert!(
            !index.byte_ids.contains(&NO_TOKEN),
            "a byte without a token"
        );
        BpeModel {
            max_token_len: (0..ids).map(len).max().unwrap_or(1),
            bytes,
            starts,
            index,
            merges: merge_map,
            byte_pairs,
            whole_state: WholeState((0..ids).map(|_| AtomicU8::new(WHOLE_UNKNOWN)).collect()),
            joins: OnceLock::new(),
            piece_is_token: ranks.is_some(),
        }
    }

    /// Every token's bytes and where each id's start (`bytes`, `starts`
    /// as given to [`Self::new`]).
    pub(crate) fn tables(&self) -> (&[u8], &[u32]) {
        (&self.bytes, &self.starts)
    }

    /// The id the merge of `l` and `r` makes, if they have one.
    pub(crate) fn merged_id(&self, l: u32, r: u32) -> Option<u32> {
        self.merges.get(&pair_key(l, r)).map(|&v| v as u32)
    }

    #[inline]
    pub(crate) fn token_bytes(&self, id: u32) -> &[u8] {
        let id = id as usize;
        &self.bytes[self.starts[id] as usize..self.starts[id + 1] as usize]
    }

    #[inline(always)]
    fn pair(&self, l: u32, r: u32) -> u64 {
        match self.merges.get(&pair_key(l, r)) {
            Some(&v) => v,
            None => NO_MERGE,
        }
    }

    /// Where a merge may join two tokens of a piece, from the merges'
    /// tokens (built on first use: short texts never ask). See [`Joins`].
    pub(crate) fn joins(&self) -> &Joins {
        self.joins.get_or_init(|| {
            let merges = self.merges.keys().map(|&key| {
                let (l, r) = ((key >> 32) as u32, key as u32);
                (self.token_bytes(l), self.token_bytes(r))
            });
            Joins::new(self.merges.len(), merges)
        })
    }

    /// The token a whole piece (2+ bytes) spells, if any (no merge check:
    /// tiktoken's rule, see [`Self::piece_is_token`]).
    #[inline]
    pub(crate) fn lookup_token(&self, piece: &Piece) -> Option<u32> {
        if piece.len() <= SHORT {
            self.index.short.get(piece)
        } else if piece.len() <= self.max_token_len {
            self.index.whole.get(piece.bytes).copied()
        } else {
            None
        }
    }

    /// The token a whole piece (2+ bytes) is, when BPE would give just that token.
    #[inline]
    pub(crate) fn lookup_whole(&self, piece: &Piece) -> Option<u32> {
        let id = if piece.len() <= SHORT {
            self.index.short.get(piece)?
        } else if piece.len() <= self.max_token_len {
            *self.index.whole.get(piece.bytes)?
        } else {
            return None;
        };
        let state = &self.whole_state.0[id as usize];
        match state.load(Ordering::Relaxed) {
            WHOLE_YES => Some(id),
            WHOLE_NO => None,
            _ => self.check_whole(id, piece.bytes, state),
        }
    }

    /// First look at token `id` (spelled `piece`) as a whole piece: run the
    /// merge loop once and remember whether it gives just `id`.
    #[cold]
    fn check_whole(&self, id: u32, piece: &[u8], state: &AtomicU8) -> Option<u32> {
        let single = if piece.len() <= SMALL_PIECE {
            let mut ids = [0u32; SMALL_PIECE];
            self.merge_small_into(piece, &mut ids, &mut |l, r| self.pair(l, r)) == 1 && ids[0] == id
        } else {
            let mut out = Vec::new();
            self.merge_large(piece, &mut out, &mut |l, r| self.pair(l, r));
            out == [id]
        };
        state.store(if single { WHOLE_YES } else { WHOLE_NO }, Ordering::Relaxed);
        single.then_some(id)
    }

    /// The merge loop proper (no whole-piece shortcut).
    pub(crate) fn merge_piece(&self, piece: &[u8], out: &mut Vec<u32>) {
        self.merge_piece_with(piece, out, &mut |l, r| self.pair(l, r))
    }

    /// [`Self::merge_piece`] with the merges of pairs looked up in `pairs`
    /// first (a thread's recent ones: see [`PairCache`]).
    pub(crate) fn merge_piece_cached(
        &self,
        piece: &[u8],
        out: &mut Vec<u32>,
        pairs: &mut PairCache,
    ) {
        self.merge_piece_with(piece, out, &mut |l, r| {
            pairs.get_or(pair_key(l, r), || self.pair(l, r))
        })
    }

    /// The merge loop, `pair(l, r)` giving what [`Self::pair`] does.
    #[inline(always)]
    fn merge_piece_with(
        &self,
        piece: &[u8],
        out: &mut Vec<u32>,
        pair: &mut impl FnMut(u32, u32) -> u64,
    ) {
        if piece.len() <= SMALL_PIECE {
            self.merge_small(piece, out, pair)
        } else {
            self.merge_large(piece, out, pair)
        }
    }

    /// Quadratic in the number of merges, but branch-light and allocation-free:
    /// fastest for word-sized pieces.
    fn merge_small(
        &self,
        piece: &[u8],
        out: &mut Vec<u32>,
        pair: &mut impl FnMut(u32, u32) -> u64,
    ) {
        if piece.len() <= 16 {
            let mut ids = [0u32; 16];
            let len = self.merge_small_into(piece, &mut ids, pair);
            out.extend_from_slice(&ids[..len]);
        } else {
            let mut ids = [0u32; SMALL_PIECE];
            let len = self.merge_small_into(piece, &mut ids, pair);
            out.extend_from_slice(&ids[..len]);
        }
    }

    /// The merge loop of [`Self::merge_small`] on stack arrays of `N`
    /// (`piece.len() <= N`; word-sized pieces use small ones): the ids
    /// become `ids[..len]`, and `len` is returned.
    #[inline]
    fn merge_small_into<const N: usize>(
        &self,
        piece: &[u8],
        ids: &mut [u32; N],
        pair: &mut impl FnMut(u32, u32) -> u64,
    ) -> usize {
        let n = piece.len();
        debug_assert!((1..=N).contains(&n));
        // ranks[i] = rank << 32 | merged id of (ids[i], ids[i + 1]).
        let mut ranks = [NO_MERGE; N];
        for (i, w) in piece.windows(2).enumerate() {
            ranks[i] = self.byte_pairs[(w[0] as usize) << 8 | w[1] as usize];
            ids[i] = self.index.byte_ids[w[0] as usize];
        }
        ids[n - 1] = self.index.byte_ids[piece[n - 1] as usize];
        let mut len = n;
        while len > 1 {
            let mut best = NO_MERGE;
            let mut at = 0;
            for (i, &r) in ranks[..len - 1].iter().enumerate() {
                if r < best {
                    best = r;
                    at = i;
                }
            }
            if best == NO_MERGE {
                break;
            }
            let merged = best as u32;
            for i in at + 1..len - 1 {
                ids[i] = ids[i + 1];
                ranks[i] = ranks[i + 1];
            }
            len -= 1;
            ids[at] = merged;
            ranks[at] = if at + 1 < len {
                pair(merged, ids[at + 1])
            } else {
                NO_MERGE
            };
            if at > 0 {
                ranks[at - 1] = pair(ids[at - 1], merged);
            }
        }
        len
    }

    /// O(n log n): a min-heap of (rank, position) over a linked list of parts,
    /// with stale entries skipped when popped. Its buffers are per thread.
    fn merge_large(
        &self,
        piece: &[u8],
        out: &mut Vec<u32>,
        pair: &mut impl FnMut(u32, u32) -> u64,
    ) {
        LARGE_SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
            Ok(mut s) => self.merge_large_in(piece, out, &mut s, pair),
            Err(_) => self.merge_large_in(piece, out, &mut LargeScratch::default(), pair),
        })
    }

    fn merge_large_in(
        &self,
        piece: &[u8],
        out: &mut Vec<u32>,
        s: &mut LargeScratch,
        pair: &mut impl FnMut(u32, u32) -> u64,
    ) {
        const NONE: u32 = u32::MAX;
        const DEAD: u32 = u32::MAX;
        let n = piece.len();
        let (ids, next, prev) = (&mut s.ids, &mut s.next, &mut s.prev);
        ids.clear();
        ids.extend(piece.iter().map(|&b| self.index.byte_ids[b as usize]));
        next.clear();
        next.extend(1..=n as u32);
        prev.clear();
        prev.extend((0..n as u32).map(|i| i.wrapping_sub(1)));
        let mut storage = std::mem::take(&mut s.heap);
        storage.clear();
        let mut heap = std::collections::BinaryHeap::from(storage);
        heap.extend((0..n - 1).filter_map(|i| {
            let p = self.byte_pairs[(piece[i] as usize) << 8 | piece[i + 1] as usize];
            (p != NO_MERGE).then_some(Reverse((p >> 32) << 32 | i as u64))
        }));
        while let Some(Reverse(entry)) = heap.pop() {
            let rank = entry >> 32;
            let pos = (entry & 0xFFFF_FFFF) as usize;
            if ids[pos] == DEAD {
                continue;
            }
            let nx = next[pos] as usize;
            if nx >= n {
                continue;
            }
            let p = pair(ids[pos], ids[nx]);
            if p == NO_MERGE || p >> 32 != rank {
                continue;
            }
            ids[pos] = p as u32;
            ids[nx] = DEAD;
            let nn = next[nx];
            next[pos] = nn;
            if (nn as usize) < n {
                prev[nn as usize] = pos as u32;
                let q = pair(ids[pos], ids[nn as usize]);
                if q != NO_MERGE {
                    heap.push(Reverse((q >> 32) << 32 | pos as u64));
                }
            }
            let pv = prev[pos];
            if pv != NONE {
                let q = pair(ids[pv as usize], ids[pos]);
                if q != NO_MERGE {
                    heap.push(Reverse((q >> 32) << 32 | pv as u64));
                }
            }
        }
        let mut i = 0;
        while i < n {
            out.push(ids[i]);
            i = next[i] as usize;
        }
        s.heap = heap.into_vec();
    }
}

/// Longest key of [`ShortMap`]: 99% of GPT-2's multi-byte tokens; a key of
/// up to 12 bytes makes a 16-byte slot.
pub(crate) const SHORT: usize = 12;

/// No token for this byte (in [`TokenIndex`]'s table of single bytes).
pub(crate) const NO_TOKEN: u32 = u32::MAX;

/// Ordinary tokens by their bytes. Loading builds it while reading the
/// vocabulary (it finds repeated tokens and resolves the merges' spellings)
/// and the model keeps it as its whole-piece lookup: one table, built once.
#[derive(Debug, Clone)]
pub(crate) struct TokenIndex {
    /// Single-byte tokens, [`NO_TOKEN`] where a byte has none.
    pub(crate) byte_ids: [u32; 256],
    /// Tokens of 2..=[`SHORT`] bytes; longer ones in `whole`.
    short: ShortMap,
    whole: FastMap<Box<[u8]>, u32>,
}

impl TokenIndex {
    /// Room for `n` tokens without growing.
    pub(crate) fn with_capacity(n: usize) -> Self {
        TokenIndex {
            byte_ids: [NO_TOKEN; 256],
            short: ShortMap::with_bits(ShortMap::bits_for(n)),
            whole: FastMap::default(),
        }
    }

    /// Adds token `id` spelled `bytes` (not empty); `Err` holds the id that
    /// already has these bytes. Only tokens longer than [`SHORT`] bytes (a
    /// few in GPT-2) allocate, for their key.
    pub(crate) fn insert(&mut self, bytes: &[u8], id: u32) -> Result<(), u32> {
        debug_assert!(!bytes.is_empty() && id != NO_TOKEN);
        let prior = match bytes {
            [] => None,
            [b] => {
                let slot = &mut self.byte_ids[*b as usize];
                let prior = (*slot != NO_TOKEN).then_some(*slot);
                if prior.is_none() {
                    *slot = id;
                }
                prior
            }
            _ if bytes.len() <= SHORT => self.short.insert(bytes, id),
            _ => match self.whole.entry(Box::from(bytes)) {
                std::collections::hash_map::Entry::Occupied(e) => Some(*e.get()),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(id);
                    None
                }
            },
        };
        prior.map_or(Ok(()), Err)
    }

    /// The table of tokens of 2..=[`SHORT`] bytes as stored by the compiled
    /// form: `bits` (log2 of its slots), then 16 bytes per slot (key bytes
    /// 0..8 and 8..12, `len << 24 | id`, little-endian; zero when empty).
    pub(crate) fn short_table(&self) -> (u32, Vec<u8>) {
        let slots = &self.short.slots;
        let mut out = Vec::with_capacity(16 * slots.len());
        for s in slots {
            out.extend_from_slice(&s.lo.to_le_bytes());
            out.extend_from_slice(&s.hi.to_le_bytes());
            out.extend_from_slice(&s.meta.to_le_bytes());
        }
        (slots.len().trailing_zeros(), out)
    }

    /// An index whose short tokens are the stored `table` (see
    /// [`Self::short_table`]), checked to be exactly the table of the
    /// tokens `bytes[starts[id]..starts[id + 1]]` of 2..=[`SHORT`] bytes
    /// (offsets already checked; ids that are not ordinary tokens have
    /// none): each such token found by a lookup under its own id, no other
    /// slot full, empty slots zero, at most half the slots full. The other
    /// tokens (one byte, or more than [`SHORT`]) are added with
    /// [`Self::insert`]. `Err` says what is wrong.
    ///
    /// The table arrives in one sequential copy and the lookups are
    /// independent of each other, so their cache misses overlap, where
    /// inserting token by token waits on each in turn.
    pub(crate) fn with_short_table(
        table: ShortTable,
        bytes: &[u8],
        starts: &[u32],
    ) -> Result<Self, String> {
        let ShortTable { slots, bits } = table;
        if slots.len() != 1 << bits {
            return Err(format!(
                "a token table of 2^{bits} slots has {}",
                slots.len()
            ));
        }
        let size = starts.len() - 1;
        let mut short = ShortMap {
            slots,
            shift: 64 - bits,
            len: 0,
        };
        for (i, s) in short.slots.iter().enumerate() {
            if s.meta == 0 && (s.lo != 0 || s.hi != 0) {
                return Err(format!("empty slot {i} of the token table holds a key"));
            }
        }
        short.len = short.slots.iter().filter(|s| s.meta != 0).count();
        if short.len * 2 > short.slots.len() {
            return Err("the token table is more than half full".into());
        }
        // Every short token is found under its own id: that many distinct
        // slots; with no more slots full, the table is exactly theirs. The
        // lookups are independent, so their misses overlap.
        let found = |id: usize| {
            let t = &bytes[starts[id] as usize..starts[id + 1] as usize];
            short.get(&Piece::new(t)) == Some(id as u32)
        };
        let mut n_short = 0;
        let mut all_found = true;
        for id in 0..size {
            if (2..=SHORT).contains(&((starts[id + 1] - starts[id]) as usize)) {
                n_short += 1;
                all_found &= found(id);
            }
        }
        if !all_found {
            let id = (0..size)
                .find(|&id| {
                    (2..=SHORT).contains(&((starts[id + 1] - starts[id]) as usize)) && !found(id)
                })
                .expect("a token not found");
            return Err(format!("token {id} is not in the token table under its id"));
        }
        if n_short != short.len {
            return Err(format!(
                "the token table holds {} tokens for {n_short} short tokens",
                short.len
            ));
        }
        Ok(TokenIndex {
            byte_ids: [NO_TOKEN; 256],
            short,
            whole: FastMap::default(),
        })
    }

    /// The token spelled `bytes`.
    pub(crate) fn get(&self, bytes: &[u8]) -> Option<u32> {
        match bytes {
            [] => None,
            [b] => Some(self.byte_ids[*b as usize]).filter(|&id| id != NO_TOKEN),
            _ if bytes.len() <= SHORT => self.short.get(&Piece::new(bytes)),
            _ => self.whole.get(bytes).copied(),
        }
    }
}

/// A stored table of short tokens being read (see
/// [`TokenIndex::short_table`]), checked by [`TokenIndex::with_short_table`].
pub(crate) struct ShortTable {
    slots: Vec<ShortSlot>,
    bits: u32,
}

impl ShortTable {
    /// Room for `2^bits` slots (`bits` ≤ 27: 2 GiB).
    pub(crate) fn with_capacity(bits: u32) -> Self {
        debug_assert!(bits <= 27);
        ShortTable {
            slots: Vec::with_capacity(1 << bits),
            bits,
        }
    }

    /// Appends the slots stored in `b` (a whole number of 16-byte slots).
    pub(crate) fn extend_from_le(&mut self, b: &[u8]) {
        self.slots.extend(b.chunks_exact(16).map(|b| ShortSlot {
            lo: u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
            hi: u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")),
            meta: u32::from_le_bytes(b[12..].try_into().expect("4 bytes")),
        }));
    }
}

/// Open-addressing map from byte strings of 2..=[`SHORT`] bytes to ids, keys
/// stored inline: no pointer chase, no memcmp call. Slots are 16 bytes
/// because the table's size shows in encode time: with 24-byte slots
/// (GPT-2: 3 MiB) whole-process encoding was ~4% slower.
#[derive(Debug, Clone)]
struct ShortMap {
    slots: Vec<ShortSlot>,
    shift: u32,
    /// Keys held (at most half the slots: probes stay short).
    len: usize,
}

#[derive(Debug, Clone, Copy, Default)]
struct ShortSlot {
    /// Key bytes 0..8 and 8..12, zero-padded.
    lo: u64,
    hi: u32,
    /// `len << 24 | id`; 0 marks an empty slot (keys have 2+ bytes).
    meta: u32,
}

// Ids fit the low 24 bits of `ShortSlot::meta`.
const _: () = assert!(crate::MAX_VOCAB_SIZE <= 1 << 24);

/// A piece of text and its first (up to) 16 bytes as two little-endian
/// words, zero-padded: the key of the short-token map and of the word cache
/// (which hold pieces of up to 12 and 16 bytes), read once per piece.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Piece<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) lo: u64,
    pub(crate) hi: u64,
}

impl<'a> Piece<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        let (lo, hi) = load16(&bytes[..bytes.len().min(16)]);
        Piece { bytes, lo, hi }
    }

    /// `text[start..end]` (not empty). Where the text has 16 bytes from
    /// `start`, its key is [`key_at`]'s.
    #[inline(always)]
    pub(crate) fn at(text: &'a [u8], start: usize, end: usize) -> Self {
        let bytes = &text[start..end];
        match key_at(text, start, bytes.len().min(16)) {
            Some((lo, hi)) => Piece { bytes, lo, hi },
            None => Self::new(bytes),
        }
    }

    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }
}

/// The key of the piece of `len <= 16` bytes at `text[start..]` (see
/// [`Piece`]) where the text has 16 bytes from `start`: one unaligned load
/// and a mask, no branch on the length, which is as unpredictable as the
/// text. (No bytes are sliced: the encode loop's hot tokens need none.)
#[inline(always)]
pub(crate) fn key_at(text: &[u8], start: usize, len: usize) -> Option<(u64, u64)> {
    let w = text.get(start..start + 16)?;
    let word = |i: usize| u64::from_le_bytes(w[i..i + 8].try_into().expect("8 bytes"));
    // A table of masks: a variable shift of a u128 was ~13 instructions a
    // piece, 5% of encoding.
    let (keep_lo, keep_hi) = KEEP[len];
    Some((word(0) & keep_lo, word(8) & keep_hi))
}

/// Masks of a 16-byte key's two little-endian words that keep its first `n`
/// bytes, by `n`.
static KEEP: [(u64, u64); 17] = {
    let mut keep = [(0, 0); 17];
    let mut n = 1;
    while n <= 16 {
        keep[n] = if n < 8 {
            ((1 << (8 * n)) - 1, 0)
        } else if n < 16 {
            (!0, (1u64 << (8 * (n - 8))).wrapping_sub(1))
        } else {
            (!0, !0)
        };
        n += 1;
    }
    keep
};

/// The bytes of `p` (`p.len() <= 16`) as two little-endian words, zero-padded,
/// with a few overlapping loads instead of a variable-length copy.
#[inline(always)]
pub(crate) fn load16(p: &[u8]) -> (u64, u64) {
    let n = p.len();
    let u64_at = |i: usize| u64::from_le_bytes(p[i..i + 8].try_into().expect("8 bytes"));
    let u32_at = |i: usize| u32::from_le_bytes(p[i..i + 4].try_into().expect("4 bytes")) as u64;
    if n >= 8 {
        let hi = if n > 8 {
            u64_at(n - 8) >> (8 * (16 - n))
        } else {
            0
        };
        (u64_at(0), hi)
    } else if n >= 4 {
        (u32_at(0) | u32_at(n - 4) << (8 * (n - 4)), 0)
    } else if n > 0 {
        let lo =
            p[0] as u64 | (p[n / 2] as u64) << (8 * (n / 2)) | (p[n - 1] as u64) << (8 * (n - 1));
        (lo, 0)
    } else {
        (0, 0)
    }
}

impl ShortMap {
    /// Table size (log2) for `n` keys: at most half full.
    fn bits_for(n: usize) -> u32 {
        (n.saturating_mul(2))
            .max(16)
            .next_power_of_two()
            .trailing_zeros()
    }

    /// An empty map of `2^bits` slots (`bits` ≥ 1).
    fn with_bits(bits: u32) -> Self {
        ShortMap {
            slots: vec![ShortSlot::default(); 1 << bits],
            shift: 64 - bits,
            len: 0,
        }
    }

    /// Adds `key` (2..=[`SHORT`] bytes) as `id` unless it is there: then
    /// the id it has. Doubles the table rather than fill more than half.
    fn insert(&mut self, key: &[u8], id: u32) -> Option<u32> {
        debug_assert!((2..=SHORT).contains(&key.len()));
        if (self.len + 1) * 2 > self.slots.len() {
            let bits = self.slots.len().trailing_zeros() + 1;
            let old = std::mem::replace(self, ShortMap::with_bits(bits));
            for s in old.slots.iter().filter(|s| s.meta != 0) {
                let i = self.slot_of(s.lo, s.hi as u64, (s.meta >> 24) as usize);
                self.slots[i] = *s;
            }
            self.len = old.len;
        }
        let (lo, hi) = load16(key);
        let i = self.slot_of(lo, hi, key.len());
        let s = &mut self.slots[i];
        if s.meta != 0 {
            return Some(s.meta & 0x00FF_FFFF);
        }
        *s = ShortSlot {
            lo,
            hi: hi as u32,
            meta: (key.len() as u32) << 24 | id,
        };
        self.len += 1;
        None
    }

    /// The slot holding this key, or else the empty one it would take (the
    /// one probe of both `get` and `insert`).
    #[inline(always)]
    fn slot_of(&self, lo: u64, hi: u64, len: usize) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = self.index(lo, hi, len);
        loop {
            let s = &self.slots[i];
            if s.meta == 0 || (s.meta >> 24 == len as u32 && s.lo == lo && s.hi as u64 == hi) {
                return i;
            }
            i = (i + 1) & mask;
        }
    }

    #[inline(always)]
    fn index(&self, lo: u64, hi: u64, len: usize) -> usize {
        let h =
            (lo ^ hi.rotate_left(29) ^ ((len as u64) << 58)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> self.shift) as usize
    }

    #[inline]
    fn get(&self, key: &Piece) -> Option<u32> {
        if key.len() > SHORT {
            return None;
        }
        let s = &self.slots[self.slot_of(key.lo, key.hi, key.len())];
        (s.meta != 0).then_some(s.meta & 0x00FF_FFFF)
    }
}

/// No single byte (in `BpeModel::new`'s table of bytes by id).
const NO_BYTE: u16 = u16::MAX;

#[inline(always)]
fn pair_key(l: u32, r: u32) -> u64 {
    ((l as u64) << 32) | r as u64
}

#[cfg(test)]
mod tests;
