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
    /// Tokens (2+ bytes) that BPE turns back into themselves, by their bytes.
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
            whole: FastMap::default(),
            max_token_len: 0,
        };
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
        model.whole = consistent.into_iter().collect();
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

    /// Appends the ids of one pre-tokenized piece.
    #[inline]
    pub(crate) fn encode_piece(&self, piece: &[u8], out: &mut Vec<u32>) {
        if piece.len() == 1 {
            out.push(self.byte_ids[piece[0] as usize]);
            return;
        }
        if piece.len() <= self.max_token_len {
            if let Some(&id) = self.whole.get(piece) {
                out.push(id);
                return;
            }
        }
        self.merge_piece(piece, out);
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
        debug_assert!(n <= SMALL_PIECE);
        let mut ids = [0u32; SMALL_PIECE];
        // pairs[i] = rank << 32 | merged id for (ids[i], ids[i + 1]).
        let mut pairs = [NO_MERGE; SMALL_PIECE];
        for (i, &b) in piece.iter().enumerate() {
            ids[i] = self.byte_ids[b as usize];
        }
        for i in 0..n.saturating_sub(1) {
            pairs[i] = self.pair(ids[i], ids[i + 1]);
        }
        let mut len = n;
        while len > 1 {
            let mut best = NO_MERGE;
            let mut at = 0;
            for (i, &p) in pairs[..len - 1].iter().enumerate() {
                if p < best {
                    best = p;
                    at = i;
                }
            }
            if best == NO_MERGE {
                break;
            }
            ids[at] = best as u32;
            ids.copy_within(at + 2..len, at + 1);
            pairs.copy_within(at + 2..len, at + 1);
            len -= 1;
            pairs[len - 1] = NO_MERGE;
            if at + 1 < len {
                pairs[at] = self.pair(ids[at], ids[at + 1]);
            } else {
                pairs[at] = NO_MERGE;
            }
            if at > 0 {
                pairs[at - 1] = self.pair(ids[at - 1], ids[at]);
            }
        }
        out.extend_from_slice(&ids[..len]);
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
                let p = self.pair(ids[i], ids[i + 1]);
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

#[inline(always)]
fn pair_key(l: u32, r: u32) -> u64 {
    ((l as u64) << 32) | r as u64
}
