//! Prefix caching: the keys and values of served prompts, kept in a bounded
//! pool of fixed-size blocks so that a later prompt starting with the same
//! tokens prefills only the rest (vLLM's automatic prefix caching,
//! llama.cpp's `cache_prompt`).
//!
//! A block holds `block_tokens` consecutive prompt positions: their keys and
//! values (every layer, in the KV cache's own format, so restoring them is a
//! copy, bit for bit) and their final hidden states (after `ln_f`, f32), from
//! which prompt log-probabilities (`echo` with `logprobs`) of cached
//! positions are recomputed through the LM head alone. A block's key is its
//! tokens plus its parent block's id (ids are never reused), so a key names
//! a whole prefix exactly: no hash, no collision. Only full blocks are kept;
//! a prompt ending mid-block recomputes its tail.
//!
//! Eviction is least-recently-used over blocks, within a byte budget. A
//! lookup or an insertion touches a whole chain with one tick; ties go to
//! the deepest block first, so a parent never leaves before its children
//! (each would be unreachable without it). Sequences copy blocks into
//! their own KV cache, so evicting never affects a running sequence.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};

use crate::error::{Error, Result};
use crate::kernels::kv_cache::{KvCache, KvSpan};

/// Tokens per block a server uses (vLLM's default): small enough that a
/// prompt's tail beyond its last full block (recomputed) stays short, large
/// enough that the per-block bookkeeping is negligible next to its data.
pub const DEFAULT_BLOCK_TOKENS: usize = 16;

/// Block id of the empty prefix (the parent of first blocks).
const ROOT: u64 = 0;

/// Bytes counted per block beyond its data (maps, bookkeeping).
const BLOCK_OVERHEAD: usize = 128;

struct Block {
    parent: u64,
    tokens: Vec<u32>,
    kv: KvSpan,
    /// `[block_tokens, C]`
    hidden: Vec<f32>,
    tick: u64,
    depth: usize,
    bytes: usize,
}

/// Counters since the pool was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    /// Prompt tokens whose keys and values came from the pool.
    pub hit_tokens: u64,
    /// Prompt tokens prefilled (not found in the pool).
    pub miss_tokens: u64,
    /// Bytes the pool holds now.
    pub bytes: usize,
    /// Blocks the pool holds now.
    pub blocks: usize,
    /// Blocks evicted to make room.
    pub evicted_blocks: u64,
}

/// What a lookup found for a prompt: the positions it covers and, when
/// asked for, their final hidden states.
#[derive(Debug, Default)]
pub struct PrefixHit {
    /// Cached positions `[0, tokens)`, restored into the KV cache.
    pub tokens: usize,
    /// `[tokens, C]` hidden states (empty unless asked for).
    pub hidden: Vec<f32>,
}

/// The pool; see the module docs.
pub struct PrefixCache {
    block_tokens: usize,
    budget: usize,
    blocks: HashMap<u64, Block>,
    /// (parent id, tokens) → block id.
    index: HashMap<(u64, Vec<u32>), u64>,
    /// Eviction order: oldest tick first, deepest first among equals.
    lru: BTreeSet<(u64, Reverse<usize>, u64)>,
    tick: u64,
    next_id: u64,
    stats: PrefixCacheStats,
}

impl std::fmt::Debug for PrefixCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrefixCache")
            .field("block_tokens", &self.block_tokens)
            .field("budget", &self.budget)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl PrefixCache {
    /// A pool of at most `budget_bytes`, in blocks of `block_tokens` tokens.
    pub fn new(budget_bytes: usize, block_tokens: usize) -> Result<Self> {
        if block_tokens == 0 {
            return Err(Error::InvalidInput(
                "prefix cache blocks need at least one token".into(),
            ));
        }
        Ok(PrefixCache {
            block_tokens,
            budget: budget_bytes,
            blocks: HashMap::new(),
            index: HashMap::new(),
            lru: BTreeSet::new(),
            tick: 0,
            next_id: ROOT + 1,
            stats: PrefixCacheStats::default(),
        })
    }

    pub fn block_tokens(&self) -> usize {
        self.block_tokens
    }

    pub fn budget_bytes(&self) -> usize {
        self.budget
    }

    pub fn stats(&self) -> PrefixCacheStats {
        PrefixCacheStats {
            blocks: self.blocks.len(),
            ..self.stats
        }
    }

    /// Sets a chain's blocks to the current tick.
    fn touch(&mut self, chain: &[u64]) {
        for id in chain {
            if let Some(b) = self.blocks.get_mut(id) {
                self.lru.remove(&(b.tick, Reverse(b.depth), *id));
                b.tick = self.tick;
                self.lru.insert((b.tick, Reverse(b.depth), *id));
            }
        }
    }

    /// The cached blocks that start `tokens`, at most `max_tokens` of them.
    fn chain(&self, tokens: &[u32], max_tokens: usize) -> Vec<u64> {
        let mut chain = Vec::new();
        let mut parent = ROOT;
        for block in tokens[..max_tokens.min(tokens.len())].chunks_exact(self.block_tokens) {
            match self.index.get(&(parent, block.to_vec())) {
                Some(&id) => {
                    chain.push(id);
                    parent = id;
                }
                None => break,
            }
        }
        chain
    }

    /// Restores into `cache` (a fresh one-row cache) the longest cached
    /// prefix of `tokens` that leaves at least `min_feed` (at least one)
    /// tokens to feed: a prompt's last position must be computed for its
    /// logits, and the rest of the prompt must go through the same kernels
    /// as a full prefill ([`crate::models::gpt2::Gpt2Engine::min_exact_rows`]).
    /// Counts hits and misses; with `want_hidden`, also returns the
    /// prefix's hidden states.
    pub(crate) fn restore(
        &mut self,
        tokens: &[u32],
        min_feed: usize,
        cache: &mut KvCache,
        want_hidden: bool,
    ) -> PrefixHit {
        let mut hit = PrefixHit::default();
        let reusable = tokens.len().saturating_sub(min_feed.max(1));
        if cache.is_empty() && reusable >= self.block_tokens {
            self.tick += 1;
            let chain = self.chain(tokens, reusable);
            self.touch(&chain);
            for id in &chain {
                let b = &self.blocks[id];
                if !cache.push_span(&b.kv) {
                    break; // another model's blocks, or no room: prefill the rest
                }
                hit.tokens += self.block_tokens;
                if want_hidden {
                    hit.hidden.extend_from_slice(&b.hidden);
                }
            }
        }
        self.stats.hit_tokens += hit.tokens as u64;
        self.stats.miss_tokens += (tokens.len() - hit.tokens) as u64;
        hit
    }

    /// Keeps the full blocks of `tokens`, a prompt just prefilled into
    /// `cache` (positions `[0, tokens.len())`); `hidden(p)` is position
    /// `p`'s final hidden state, asked for positions `>= cached` only (those
    /// below were restored from the pool). Blocks already held are touched;
    /// new ones evict the least recently used until they fit. Stops early
    /// when the budget cannot hold a block (or a parent went away).
    pub(crate) fn insert<'h>(
        &mut self,
        tokens: &[u32],
        cached: usize,
        cache: &KvCache,
        hidden: impl Fn(usize) -> &'h [f32],
    ) {
        self.tick += 1;
        let bt = self.block_tokens;
        let mut parent = ROOT;
        let mut chain = Vec::new();
        // The blocks held so far, touched once before the first new block's
        // eviction (new blocks start at the current tick).
        let mut touched = false;
        for (i, block) in tokens.chunks_exact(bt).enumerate() {
            let key = (parent, block.to_vec());
            if let Some(&id) = self.index.get(&key) {
                chain.push(id);
                parent = id;
                continue;
            }
            let start = i * bt;
            if start < cached {
                break; // restored from a block evicted since: no hidden states
            }
            let Some(kv) = cache.copy_span(start, bt) else {
                break;
            };
            let hidden: Vec<f32> = (start..start + bt)
                .flat_map(|p| hidden(p).iter().copied())
                .collect();
            let bytes = kv.bytes() + hidden.len() * 4 + bt * 4 + BLOCK_OVERHEAD;
            if !touched {
                self.touch(&chain);
                touched = true;
            }
            if !self.make_room(bytes) {
                break;
            }
            let id = self.next_id;
            self.next_id += 1;
            self.index.insert(key, id);
            self.lru.insert((self.tick, Reverse(i + 1), id));
            self.blocks.insert(
                id,
                Block {
                    parent,
                    tokens: block.to_vec(),
                    kv,
                    hidden,
                    tick: self.tick,
                    depth: i + 1,
                    bytes,
                },
            );
            self.stats.bytes += bytes;
            chain.push(id);
            parent = id;
        }
        if !touched {
            self.touch(&chain);
        }
    }

    /// Evicts least recently used blocks (never those of the current tick)
    /// until `bytes` more fit; false if they cannot.
    fn make_room(&mut self, bytes: usize) -> bool {
        while self.stats.bytes + bytes > self.budget {
            let Some(&(tick, depth, id)) = self.lru.first() else {
                return false;
            };
            if tick == self.tick {
                return false;
            }
            self.lru.remove(&(tick, depth, id));
            if let Some(b) = self.blocks.remove(&id) {
                self.index.remove(&(b.parent, b.tokens));
                self.stats.bytes -= b.bytes;
                self.stats.evicted_blocks += 1;
            }
        }
        true
    }
}
