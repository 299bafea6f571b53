//! The byte-level BPE model: token bytes, rank-ordered merges, and the merge
//! loop that turns one pre-tokenized piece into token ids.
//!
//! Semantics are HF's / GPT-2's: repeatedly merge the adjacent pair with the
//! lowest merge rank, the leftmost one on ties. Two fast paths keep this cheap:
//! a piece that is itself a token whose own BPE gives that token is looked up
//! whole (checked for every token at load time, so the shortcut never changes
//! the result), and long pieces use a heap over a linked list, O(n log n), so a
//! 1 MB word without spaces costs no more per byte than ordinary text.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rayon::prelude::*;

use super::hash::FastMap;

/// Pieces longer than this (in bytes) use the heap merge.
const SMALL_PIECE: usize = 64;
const NO_MERGE: u64 = u64::MAX;

#[derive(Debug, Clone)]
pub(crate) struct BpeModel {
    /// Bytes of token `id` are `bytes[starts[id]..starts[id + 1]]`.
    bytes: Vec<u8>,
    starts: Vec<u32>,
    /// Token id of each single byte.
    pub(crate) byte_ids: [u32; 256],
    /// `(left << 32 | right)` -> `(rank << 32 | merged id)`.
    merges: FastMap<u64, u64>,
    /// The same for the two single-byte tokens of bytes `a`, `b` at `a << 8 | b`
    /// (every piece starts as bytes: no hashing for the first pairs).
    byte_pairs: Box<[u64]>,
    /// Tokens (2+ bytes) that BPE turns back into themselves, by their bytes:
    /// up to 16 bytes in `short`, longer ones in `whole`.
    short: ShortMap,
    whole: FastMap<Box<[u8]>, u32>,
    max_token_len: usize,
}

impl BpeModel {
    /// `tokens[id]` are the bytes of each id (`None` for ids that are not
    /// ordinary tokens, e.g. holes or special tokens). `byte_ids` must cover
    /// every byte; `merges` are `(left, right, merged)` in rank order.
    pub(crate) fn new(
        tokens: &[Option<Vec<u8>>],
        byte_ids: [u32; 256],
        merges: &[(u32, u32, u32)],
    ) -> Self {
        let mut bytes = Vec::new();
        let mut starts = Vec::with_capacity(tokens.len() + 1);
        starts.push(0u32);
        for t in tokens {
            if let Some(t) = t {
                bytes.extend_from_slice(t);
            }
            starts.push(bytes.len() as u32);
        }
        let mut merge_map = FastMap::default();
        for (rank, &(l, r, m)) in merges.iter().enumerate() {
            // A repeated pair keeps its first (lowest) rank, as in HF.
            merge_map
                .entry(pair_key(l, r))
                .or_insert(((rank as u64) << 32) | m as u64);
        }
        let mut model = BpeModel {
            bytes,
            starts,
            byte_ids,
            merges: merge_map,
            byte_pairs: Box::new([]),
            short: ShortMap::default(),
            whole: FastMap::default(),
            max_token_len: 0,
        };
        model.byte_pairs = (0..1usize << 16)
            .map(|ab| model.pair(byte_ids[ab >> 8], byte_ids[ab & 255]))
            .collect();
        let consistent: Vec<(Box<[u8]>, u32)> = (0..tokens.len() as u32)
            .into_par_iter()
            .filter(|&id| tokens[id as usize].as_ref().is_some_and(|t| t.len() >= 2))
            .filter_map(|id| {
                let t = model.token_bytes(id);
                let mut out = Vec::new();
                model.merge_piece(t, &mut out);
                (out == [id]).then(|| (t.into(), id))
            })
            .collect();
        model.max_token_len = consistent.iter().map(|(t, _)| t.len()).max().unwrap_or(1);
        let (short, long): (Vec<_>, Vec<_>) =
            consistent.into_iter().partition(|(t, _)| t.len() <= SHORT);
        model.short = ShortMap::new(&short);
        model.whole = long.into_iter().collect();
        model
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

    /// The token a whole piece (2+ bytes) is, when BPE would give just that token.
    #[inline]
    pub(crate) fn lookup_whole(&self, piece: &[u8]) -> Option<u32> {
        if piece.len() <= SHORT {
            self.short.get(piece)
        } else if piece.len() <= self.max_token_len {
            self.whole.get(piece).copied()
        } else {
            None
        }
    }

    /// The merge loop proper (no whole-piece shortcut).
    pub(crate) fn merge_piece(&self, piece: &[u8], out: &mut Vec<u32>) {
        if piece.len() <= SMALL_PIECE {
            self.merge_small(piece, out)
        } else {
            self.merge_large(piece, out)
        }
    }

    /// Quadratic in the number of merges, but branch-light and allocation-free:
    /// fastest for word-sized pieces.
    fn merge_small(&self, piece: &[u8], out: &mut Vec<u32>) {
        let n = piece.len();
        debug_assert!((1..=SMALL_PIECE).contains(&n));
        // parts[i] = (id, rank << 32 | merged id of (parts[i], parts[i + 1])).
        let mut parts = [(0u32, NO_MERGE); SMALL_PIECE];
        let parts = &mut parts[..n];
        for (i, w) in piece.windows(2).enumerate() {
            let pair = self.byte_pairs[(w[0] as usize) << 8 | w[1] as usize];
            parts[i] = (self.byte_ids[w[0] as usize], pair);
        }
        parts[n - 1] = (self.byte_ids[piece[n - 1] as usize], NO_MERGE);
        let mut len = n;
        loop {
            let mut best = NO_MERGE;
            let mut at = 0;
            for (i, p) in parts[..len - 1].iter().enumerate() {
                if p.1 < best {
                    best = p.1;
                    at = i;
                }
            }
            if best == NO_MERGE {
                break;
            }
            let merged = best as u32;
            for i in at + 1..len - 1 {
                parts[i] = parts[i + 1];
            }
            len -= 1;
            parts[at].0 = merged;
            parts[at].1 = if at + 1 < len {
                self.pair(merged, parts[at + 1].0)
            } else {
                NO_MERGE
            };
            if at > 0 {
                parts[at - 1].1 = self.pair(parts[at - 1].0, merged);
            }
            if len == 1 {
                break;
            }
        }
        out.extend(parts[..len].iter().map(|p| p.0));
    }

    /// O(n log n): a min-heap of (rank, position) over a linked list of parts,
    /// with stale entries skipped when popped.
    fn merge_large(&self, piece: &[u8], out: &mut Vec<u32>) {
        const NONE: u32 = u32::MAX;
        const DEAD: u32 = u32::MAX;
        let n = piece.len();
        let mut ids: Vec<u32> = piece.iter().map(|&b| self.byte_ids[b as usize]).collect();
        let mut next: Vec<u32> = (1..=n as u32).collect();
        let mut prev: Vec<u32> = (0..n as u32).map(|i| i.wrapping_sub(1)).collect();
        let mut heap: BinaryHeap<Reverse<u64>> = (0..n - 1)
            .filter_map(|i| {
                let p = self.byte_pairs[(piece[i] as usize) << 8 | piece[i + 1] as usize];
                (p != NO_MERGE).then_some(Reverse((p >> 32) << 32 | i as u64))
            })
            .collect();
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
            let p = self.pair(ids[pos], ids[nx]);
            if p == NO_MERGE || p >> 32 != rank {
                continue;
            }
            ids[pos] = p as u32;
            ids[nx] = DEAD;
            let nn = next[nx];
            next[pos] = nn;
            if (nn as usize) < n {
                prev[nn as usize] = pos as u32;
                let q = self.pair(ids[pos], ids[nn as usize]);
                if q != NO_MERGE {
                    heap.push(Reverse((q >> 32) << 32 | pos as u64));
                }
            }
            let pv = prev[pos];
            if pv != NONE {
                let q = self.pair(ids[pv as usize], ids[pos]);
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
    }
}

/// Longest key of [`ShortMap`].
const SHORT: usize = 16;

/// Open-addressing map from byte strings of 2..=16 bytes to ids, with keys
/// stored inline as two words: no pointer chase, no memcmp call.
#[derive(Debug, Clone, Default)]
struct ShortMap {
    slots: Vec<ShortSlot>,
    shift: u32,
}

#[derive(Debug, Clone, Copy, Default)]
struct ShortSlot {
    lo: u64,
    hi: u64,
    /// Key length; 0 marks an empty slot.
    len: u32,
    id: u32,
}

/// The bytes of `p` (`p.len() <= 16`) as two little-endian words, zero-padded,
/// with a few overlapping loads instead of a variable-length copy.
#[inline(always)]
fn load16(p: &[u8]) -> (u64, u64) {
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
    fn new(entries: &[(Box<[u8]>, u32)]) -> Self {
        let bits = (entries.len() * 2)
            .max(16)
            .next_power_of_two()
            .trailing_zeros();
        let mut map = ShortMap {
            slots: vec![ShortSlot::default(); 1 << bits],
            shift: 64 - bits,
        };
        for (key, id) in entries {
            let (lo, hi) = load16(key);
            let mask = map.slots.len() - 1;
            let mut i = map.index(lo, hi, key.len());
            while map.slots[i].len != 0 {
                i = (i + 1) & mask;
            }
            map.slots[i] = ShortSlot {
                lo,
                hi,
                len: key.len() as u32,
                id: *id,
            };
        }
        map
    }

    #[inline(always)]
    fn index(&self, lo: u64, hi: u64, len: usize) -> usize {
        let h =
            (lo ^ hi.rotate_left(29) ^ ((len as u64) << 58)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> self.shift) as usize
    }

    #[inline]
    fn get(&self, key: &[u8]) -> Option<u32> {
        if self.slots.is_empty() {
            return None;
        }
        let (lo, hi) = load16(key);
        let mask = self.slots.len() - 1;
        let mut i = self.index(lo, hi, key.len());
        loop {
            let s = &self.slots[i];
            if s.len == key.len() as u32 && s.lo == lo && s.hi == hi {
                return Some(s.id);
            }
            if s.len == 0 {
                return None;
            }
            i = (i + 1) & mask;
        }
    }
}

#[inline(always)]
fn pair_key(l: u32, r: u32) -> u64 {
    ((l as u64) << 32) | r as u64
}
