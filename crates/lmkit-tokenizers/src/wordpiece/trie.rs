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
        let mut keys: Vec<(&[u8], u32)> = entries.map(|(k, v)| (k.as_bytes(), v)).collect();
        keys.sort_unstable();
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
    /// Keys must be distinct.
    pub(crate) fn new<'a>(entries: impl ExactSizeIterator<Item = (&'a str, u32)>) -> Self {
        let cap = (entries.len() * 2).next_power_of_two().max(16);
        let mut m = WordMap {
            slots: vec![Slot::default(); cap].into_boxed_slice(),
            mask: cap - 1,
            long: Default::default(),
        };
        for (k, id) in entries {
            let k = k.as_bytes();
            if k.len() > 16 {
                m.long.insert(k.into(), id);
                continue;
            }
            let (lo, hi) = pack(k);
            let len = k.len() as u32 + 1;
            let mut i = mix(lo, hi, len) & m.mask;
            while m.slots[i].len != 0 {
                i = (i + 1) & m.mask;
            }
            m.slots[i] = Slot { lo, hi, len, id };
        }
        m
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

    #[test]
    fn longest_prefix_and_exact() {
        let words = ["a", "ab", "abc", "abd", "b", "été", "x"];
        let t = Trie::new(words.iter().enumerate().map(|(i, w)| (*w, i as u32)));
        assert_eq!(t.longest_prefix(b"abcd"), Some((2, 3)));
        assert_eq!(t.longest_prefix(b"abx"), Some((1, 2)));
        assert_eq!(t.longest_prefix(b"zz"), None);
        assert_eq!(t.longest_prefix("étés".as_bytes()), Some((5, 5)));
        let m = WordMap::new(words.iter().enumerate().map(|(i, w)| (*w, i as u32)));
        assert_eq!(m.get(b"ab"), Some(1));
        assert_eq!(m.get(b"abe"), None);
        assert_eq!(m.get(b""), None);
        assert_eq!(m.get("été".as_bytes()), Some(5));
        // Wide fan-out takes the binary-search path.
        let many: Vec<String> = (0u8..200).map(|b| format!("q{}", b as char)).collect();
        let t = Trie::new(many.iter().enumerate().map(|(i, w)| (w.as_str(), i as u32)));
        let m = WordMap::new(many.iter().enumerate().map(|(i, w)| (w.as_str(), i as u32)));
        for (i, w) in many.iter().enumerate() {
            assert_eq!(t.longest_prefix(w.as_bytes()), Some((i as u32, w.len())));
            assert_eq!(m.get(w.as_bytes()), Some(i as u32));
        }
        let long = "x".repeat(40);
        let m = WordMap::new([(long.as_str(), 7), ("", 8)].into_iter());
        assert_eq!(
            (m.get(long.as_bytes()), m.get(b""), m.get(b"x")),
            (Some(7), Some(8), None)
        );
    }
}
