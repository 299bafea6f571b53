//! A byte trie answering "longest vocabulary entry that is a prefix of this
//! text" in one walk, which is what WordPiece's greedy longest-match-first
//! needs. HF tries every shorter substring in a hash map instead; the answer
//! is the same, but one walk is much cheaper than a hash per candidate.

const NONE: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Node {
    /// Children's span in `labels` / `children`.
    first: u32,
    count: u32,
    /// The id of the key ending here, or `NONE`.
    value: u32,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Trie {
    /// Nodes in depth-first order, so a walk down stays close in memory;
    /// node 0 is the root.
    nodes: Vec<Node>,
    /// Child labels, sorted per node; `children[i]` is the node for `labels[i]`.
    labels: Vec<u8>,
    children: Vec<u32>,
    /// The root's children by byte, for the first step.
    root: Box<[u32]>,
}

impl Trie {
    /// Builds the trie of `(key, id)` entries; keys must be distinct.
    pub(crate) fn new<'a>(entries: impl Iterator<Item = (&'a str, u32)>) -> Self {
        // Sorted by bytes, compared first by their first eight bytes as one
        // big-endian word (zero-padded; equal words fall back to the bytes):
        // most comparisons then need no memcmp call, which was ~15% of
        // loading a BERT vocabulary.
        let mut keyed: Vec<(u64, &[u8], u32)> = entries
            .map(|(k, v)| {
                let k = k.as_bytes();
                let mut head = [0u8; 8];
                let n = k.len().min(8);
                head[..n].copy_from_slice(&k[..n]);
                (u64::from_be_bytes(head), k, v)
            })
            .collect();
        keyed.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)).then(a.2.cmp(&b.2)));
        let keys: Vec<(&[u8], u32)> = keyed.into_iter().map(|(_, k, v)| (k, v)).collect();
        let mut t = Trie {
            root: vec![NONE; 256].into_boxed_slice(),
            ..Default::default()
        };
        // Depth-first with an explicit stack (keys can be long): entries are
        // (edge to fill or NONE for the root, depth, range of `keys` below).
        let mut stack = vec![(NONE, 0usize, 0usize, keys.len())];
        while let Some((edge, depth, lo, hi)) = stack.pop() {
            let node = t.nodes.len() as u32;
            t.nodes.push(Node {
                first: t.labels.len() as u32,
                count: 0,
                value: NONE,
            });
            if edge != NONE {
                t.children[edge as usize] = node;
            }
            let mut i = lo;
            // A key ending here sorts first.
            if i < hi && keys[i].0.len() == depth {
                t.nodes[node as usize].value = keys[i].1;
                i += 1;
            }
            let first = t.labels.len();
            let mut groups = Vec::new();
            while i < hi {
                let b = keys[i].0[depth];
                let j = i + keys[i..hi].iter().take_while(|k| k.0[depth] == b).count();
                groups.push((first + groups.len(), i, j));
                t.labels.push(b);
                t.children.push(NONE);
                i = j;
            }
            t.nodes[node as usize].count = groups.len() as u32;
            for &(e, lo, hi) in groups.iter().rev() {
                stack.push((e as u32, depth + 1, lo, hi));
            }
        }
        let root = t.nodes[0];
        for e in root.first as usize..(root.first + root.count) as usize {
            t.root[t.labels[e] as usize] = t.children[e];
        }
        t
    }

    #[inline]
    fn child(&self, node: u32, b: u8) -> u32 {
        if node == 0 {
            return self.root[b as usize];
        }
        let n = self.nodes[node as usize];
        let (f, c) = (n.first as usize, n.count as usize);
        let labels = &self.labels[f..f + c];
        let found = if c <= 16 {
            labels.iter().position(|&l| l == b)
        } else {
            labels.binary_search(&b).ok()
        };
        found.map_or(NONE, |i| self.children[f + i])
    }

    /// The id and byte length of the longest non-empty key that `text` starts with.
    #[inline]
    pub(crate) fn longest_prefix(&self, text: &[u8]) -> Option<(u32, usize)> {
        let mut node = 0;
        let mut best = None;
        for (i, &b) in text.iter().enumerate() {
            node = self.child(node, b);
            if node == NONE {
                break;
            }
            let v = self.nodes[node as usize].value;
            if v != NONE {
                best = Some((v, i + 1));
            }
        }
        best
    }
}

/// Exact lookup of short byte strings with one memory access: keys of up to
/// 16 bytes live packed in the slots of an open-addressing table (longer keys,
/// rare in vocabularies, go to a hash map). Most words are one vocabulary
/// token, so this is WordPiece's hot path.
#[derive(Debug, Clone)]
pub(crate) struct WordMap {
    slots: Box<[Slot]>,
    mask: usize,
    /// Keys in `slots` (at most half of them).
    short: usize,
    long: rustc_hash::FxHashMap<Box<[u8]>, u32>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    lo: u64,
    hi: u64,
    /// Key length + 1; 0 marks an empty slot.
    len: u32,
    id: u32,
}

#[inline]
fn pack(key: &[u8]) -> (u64, u64) {
    let mut buf = [0u8; 16];
    buf[..key.len()].copy_from_slice(key);
    let (a, b) = buf.split_at(8);
    let lo = u64::from_le_bytes(a.try_into().unwrap_or_default());
    let hi = u64::from_le_bytes(b.try_into().unwrap_or_default());
    (lo, hi)
}

#[inline]
fn mix(lo: u64, hi: u64, len: u32) -> usize {
    let h = (lo ^ u64::from(len).rotate_right(8)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ hi.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    (h ^ (h >> 32)) as usize
}

impl WordMap {
    /// An empty map with room for `n` keys at most half full.
    pub(crate) fn with_capacity(n: usize) -> Self {
        let cap = (n.saturating_mul(2)).next_power_of_two().max(16);
        WordMap {
            slots: vec![Slot::default(); cap].into_boxed_slice(),
            mask: cap - 1,
            short: 0,
            long: Default::default(),
        }
    }

    /// Adds `key` as `id`; `Err` holds the id `key` already has.
    pub(crate) fn insert(&mut self, key: &[u8], id: u32) -> Result<(), u32> {
        if key.len() > 16 {
            return match self.long.entry(key.into()) {
                std::collections::hash_map::Entry::Occupied(e) => Err(*e.get()),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(id);
                    Ok(())
                }
            };
        }
        if (self.short + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let (lo, hi) = pack(key);
        let len = key.len() as u32 + 1;
        let mut i = mix(lo, hi, len) & self.mask;
        loop {
            let s = &mut self.slots[i];
            if s.len == 0 {
                *s = Slot { lo, hi, len, id };
                self.short += 1;
                return Ok(());
            }
            if s.lo == lo && s.hi == hi && s.len == len {
                return Err(s.id);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Twice the slots, the keys moved over.
    fn grow(&mut self) {
        let cap = self.slots.len() * 2;
        let old = std::mem::replace(
            &mut self.slots,
            vec![Slot::default(); cap].into_boxed_slice(),
        );
        self.mask = cap - 1;
        for s in old.iter().filter(|s| s.len != 0) {
            let mut i = mix(s.lo, s.hi, s.len) & self.mask;
            while self.slots[i].len != 0 {
                i = (i + 1) & self.mask;
            }
            self.slots[i] = *s;
        }
    }

    #[inline]
    pub(crate) fn get(&self, key: &[u8]) -> Option<u32> {
        if key.len() > 16 {
            return self.long.get(key).copied();
        }
        let (lo, hi) = pack(key);
        let len = key.len() as u32 + 1;
        let mut i = mix(lo, hi, len) & self.mask;
        loop {
            let s = &self.slots[i];
            if s.len == 0 {
                return None;
            }
            if s.lo == lo && s.hi == hi && s.len == len {
                return Some(s.id);
            }
            i = (i + 1) & self.mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map_of<'a>(entries: impl ExactSizeIterator<Item = (&'a str, u32)>) -> WordMap {
        let mut m = WordMap::with_capacity(entries.len());
        for (k, id) in entries {
            m.insert(k.as_bytes(), id).unwrap();
        }
        m
    }

    #[test]
    fn longest_prefix_and_exact() {
        let words = ["a", "ab", "abc", "abd", "b", "été", "x"];
        let t = Trie::new(words.iter().enumerate().map(|(i, w)| (*w, i as u32)));
        assert_eq!(t.longest_prefix(b"abcd"), Some((2, 3)));
        assert_eq!(t.longest_prefix(b"abx"), Some((1, 2)));
        assert_eq!(t.longest_prefix(b"zz"), None);
        assert_eq!(t.longest_prefix("étés".as_bytes()), Some((5, 5)));
        let m = map_of(words.iter().enumerate().map(|(i, w)| (*w, i as u32)));
        assert_eq!(m.get(b"ab"), Some(1));
        assert_eq!(m.get(b"abe"), None);
        assert_eq!(m.get(b""), None);
        assert_eq!(m.get("été".as_bytes()), Some(5));
        // Wide fan-out takes the binary-search path.
        let many: Vec<String> = (0u8..200).map(|b| format!("q{}", b as char)).collect();
        let t = Trie::new(many.iter().enumerate().map(|(i, w)| (w.as_str(), i as u32)));
        let m = map_of(many.iter().enumerate().map(|(i, w)| (w.as_str(), i as u32)));
        for (i, w) in many.iter().enumerate() {
            assert_eq!(t.longest_prefix(w.as_bytes()), Some((i as u32, w.len())));
            assert_eq!(m.get(w.as_bytes()), Some(i as u32));
        }
        let long = "x".repeat(40);
        let m = map_of([(long.as_str(), 7), ("", 8)].into_iter());
        assert_eq!(
            (m.get(long.as_bytes()), m.get(b""), m.get(b"x")),
            (Some(7), Some(8), None)
        );
    }

    /// Against a brute-force reference, on keys that share long heads,
    /// hold NUL bytes and run past 16 bytes: the trie (its sort compares
    /// eight-byte heads first) finds the longest key prefix, the map every
    /// key, and a second insert of a key is refused with the first id.
    #[test]
    fn trie_and_map_match_a_reference() {
        use proptest::prelude::*;
        let key = proptest::collection::vec(
            prop_oneof![Just(0u8), Just(b'a'), Just(b'b'), Just(0xC3), Just(0xFF)],
            0..20,
        );
        proptest!(|(keys in proptest::collection::vec(key.clone(), 1..60),
                    texts in proptest::collection::vec(key, 1..20))| {
            let mut unique: Vec<Vec<u8>> = Vec::new();
            for k in keys {
                if !unique.contains(&k) {
                    unique.push(k);
                }
            }
            let as_str: Vec<String> = unique
                .iter()
                .map(|k| k.iter().map(|&b| b as char).collect())
                .collect();
            let bytes: Vec<&[u8]> = as_str.iter().map(|s| s.as_bytes()).collect();
            let t = Trie::new(as_str.iter().enumerate().map(|(i, k)| (k.as_str(), i as u32)));
            let mut m = WordMap::with_capacity(0);
            for (i, k) in bytes.iter().enumerate() {
                prop_assert_eq!(m.insert(k, i as u32), Ok(()));
            }
            for (i, k) in bytes.iter().enumerate() {
                prop_assert_eq!(m.get(k), Some(i as u32));
                prop_assert_eq!(m.insert(k, 999), Err(i as u32));
            }
            for text in texts {
                let text: String = text.iter().map(|&b| b as char).collect();
                let text = text.as_bytes();
                let want = bytes
                    .iter()
                    .enumerate()
                    .filter(|(_, k)| !k.is_empty() && text.starts_with(k))
                    .max_by_key(|(_, k)| k.len())
                    .map(|(i, k)| (i as u32, k.len()));
                prop_assert_eq!(t.longest_prefix(text), want);
                let exact = bytes.iter().position(|k| *k == text).map(|i| i as u32);
                prop_assert_eq!(m.get(text), exact);
            }
        });
    }
}
