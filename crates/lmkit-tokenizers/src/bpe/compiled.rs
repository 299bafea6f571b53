//! lmkit's compiled form of a byte-level BPE tokenizer, and the cache of
//! them that makes a second load of the same files fast.
//!
//! Loading GPT-2's `vocab.json` + `merges.txt` spends most of its ~10 ms on
//! what a binary form need not do: parsing JSON, spelling tokens out of the
//! byte alphabet and finding each merge's tokens by their spelling. The
//! compiled form holds the results (every id's bytes, merges as ids, the
//! hash table of tokens by their bytes) and is checked as strictly as the
//! text files: each token's bytes distinct, all 256 bytes present, every
//! merge's result the bytes of its two tokens, the table exactly that of
//! the tokens, so a corrupt or crafted file is an error, never a different
//! tokenizer. The table is checked by lookups that do not depend on each
//! other, so their cache misses overlap, where building it token by token
//! waits on each miss in turn.
//!
//! Layout (integers little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `lmkitBPE` |
//! | 4 | format version (1) |
//! | 4 | `size`: ids |
//! | 4 | `n_bytes`: bytes of all tokens |
//! | 4 | `n_merges` |
//! | 4 | `n_specials` |
//! | 4 | `n_special_bytes`: bytes of their texts |
//! | 4 | `short_bits`: log2 of the slots of the table of short tokens |
//! | 4 | 0 |
//! | 16 | key of the source files (0 when none) |
//! | `size` | kind per id: 0 none, 1 ordinary, 2 special |
//! | 4 × (`size` + 1) | where each id's bytes start, then `n_bytes` |
//! | `n_bytes` | the ordinary tokens' bytes, by id |
//! | 12 × `n_merges` | `left, right, merged` ids, in rank order |
//! | 16 × 2^`short_bits` | the model's table of tokens of 2 to 12 bytes |
//! | 8 × `n_specials` | `id, length` of each special token's text |
//! | `n_special_bytes` | the texts |
//! | 8 | checksum: [`digest`] of all the above, low half |
//!
//! The cache holds one such file per set of source files, named by a
//! [`digest`] of their bytes, so an edited file is a new entry and a stale
//! one is never read. Its folder is `$LMKIT_CACHE_DIR` (empty turns the
//! cache off), else `$XDG_CACHE_HOME/lmkit`, else `~/.cache/lmkit`. Only
//! sources of [`MIN_CACHED`] bytes or more are cached (small vocabularies
//! load in well under a millisecond anyway), and a cache that cannot be
//! read or written is passed over without a word: it only ever saves time.

use std::path::{Path, PathBuf};

use super::files::{parse_error, write_atomic};
use super::model::{load16, ShortTable, TokenIndex, SHORT};
use super::{byte_level, BpeTokenizer, Kind, Tables};
use crate::{Error, Result, MAX_VOCAB_SIZE};

const MAGIC: &[u8; 8] = b"lmkitBPE";
const VERSION: u32 = 1;
const HEADER: usize = 56;
/// Smallest source (bytes, all files together) worth a cache entry.
pub(super) const MIN_CACHED: usize = 256 << 10;

/// A 128-bit hash of `parts` and their lengths (see [`Digest`]).
pub(super) fn digest(parts: &[&[u8]]) -> u128 {
    let mut d = Digest::default();
    for p in parts {
        d.update(p);
        d.end_part();
    }
    d.finish()
}

const LANE_KEYS: [u64; 4] = [
    0x9E37_79B9_7F4A_7C15,
    0xC2B2_AE3D_27D4_EB4F,
    0x1656_67B1_9E37_79F9,
    0xD6E8_FEB8_6659_FD93,
];

/// A 128-bit hash of a sequence of parts, each fed in pieces of any size:
/// four independent lanes of eight-byte words, each part closed by its
/// length. A cache key and a checksum, not a defence against crafted
/// collisions: a file made to collide with a cached one could as well be
/// that tokenizer.
pub(super) struct Digest {
    lanes: [u64; 4],
    /// A partial 32-byte block.
    block: [u8; 32],
    fill: usize,
    part_len: u64,
}

impl Default for Digest {
    fn default() -> Self {
        Digest {
            lanes: LANE_KEYS,
            block: [0; 32],
            fill: 0,
            part_len: 0,
        }
    }
}

impl Digest {
    #[inline(always)]
    fn step(&mut self, j: usize, w: u64) {
        self.lanes[j] = (self.lanes[j].rotate_left(26) ^ w).wrapping_mul(LANE_KEYS[j]);
    }

    fn blocks(&mut self, data: &[u8]) {
        for b in data.chunks_exact(32) {
            for (j, w) in b.chunks_exact(8).enumerate() {
                self.step(j, u64::from_le_bytes(w.try_into().expect("8 bytes")));
            }
        }
    }

    pub(super) fn update(&mut self, mut data: &[u8]) {
        self.part_len += data.len() as u64;
        if self.fill > 0 {
            let n = data.len().min(32 - self.fill);
            self.block[self.fill..self.fill + n].copy_from_slice(&data[..n]);
            self.fill += n;
            data = &data[n..];
            if self.fill < 32 {
                return;
            }
            let block = self.block;
            self.blocks(&block);
            self.fill = 0;
        }
        let whole = data.len() / 32 * 32;
        self.blocks(&data[..whole]);
        let rest = &data[whole..];
        self.block[..rest.len()].copy_from_slice(rest);
        self.fill = rest.len();
    }

    /// Ends a part: its last words (zero-padded) and its length.
    pub(super) fn end_part(&mut self) {
        let block = self.block;
        for (j, w) in block[..self.fill].chunks(8).enumerate() {
            let mut buf = [0u8; 8];
            buf[..w.len()].copy_from_slice(w);
            self.step(j, u64::from_le_bytes(buf));
        }
        let len = self.part_len;
        self.step(0, len);
        self.fill = 0;
        self.part_len = 0;
    }

    pub(super) fn finish(self) -> u128 {
        // murmur3's finaliser: a bijection, so a difference in any one lane
        // shows in both halves (the checksum is the low one).
        let fmix = |mut x: u64| {
            x ^= x >> 33;
            x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
            x ^= x >> 33;
            x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
            x ^ (x >> 33)
        };
        let [a, b, c, d] = self.lanes;
        let lo = fmix(a ^ fmix(b ^ fmix(c ^ fmix(d))));
        let hi = fmix(d ^ fmix(c ^ fmix(b ^ fmix(a ^ LANE_KEYS[0]))));
        (hi as u128) << 64 | lo as u128
    }
}

/// Bytes read at a time while hashing source files or reading a compiled
/// one: a multiple of every record size (4, 8, 12, 16 bytes), so each
/// chunk holds whole records. Reading through one small buffer instead of
/// into a buffer of the file's size spares the page faults of megabytes of
/// fresh memory, which cost a cached load more than its arithmetic.
const CHUNK: usize = 48 << 10;

/// The cache key of the source files at `paths` (`label` names their
/// kind), or `None` when the cache is off or they are small.
pub(super) fn key_of_files(label: &[u8], paths: &[&Path]) -> Result<Option<u128>> {
    use std::io::Read;
    if cache_dir().is_none() {
        return Ok(None);
    }
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    let mut files = Vec::with_capacity(paths.len());
    let mut total = 0u64;
    for &path in paths {
        let f = std::fs::File::open(path).map_err(io(path))?;
        total += f.metadata().map_err(io(path))?.len();
        files.push(f);
    }
    if total < MIN_CACHED as u64 {
        return Ok(None);
    }
    let mut d = Digest::default();
    d.update(label);
    d.end_part();
    let mut buf = vec![0u8; CHUNK];
    for (mut f, &path) in files.into_iter().zip(paths) {
        loop {
            let n = f.read(&mut buf).map_err(io(path))?;
            if n == 0 {
                break;
            }
            d.update(&buf[..n]);
        }
        d.end_part();
    }
    Ok(Some(d.finish()))
}

/// The compiled form of `t`, recording `key` (its source files' digest).
pub(super) fn to_bytes(t: &BpeTokenizer, key: u128) -> Vec<u8> {
    let (bytes, starts) = t.model.tables();
    let (short_bits, short_table) = t.model.index.short_table();
    let size = t.kinds.len();
    // Every special id, in order, with its text (empty if it has none).
    let specials: Vec<(u32, &[u8])> = (0..size as u32)
        .filter(|&id| t.kinds[id as usize] == Kind::Special)
        .map(|id| (id, t.special_content(id)))
        .collect();
    let special_bytes: usize = specials.iter().map(|(_, c)| c.len()).sum();
    let mut out = Vec::with_capacity(
        HEADER
            + size
            + 4 * (size + 1)
            + bytes.len()
            + 12 * t.merges.len()
            + short_table.len()
            + special_bytes
            + 64,
    );
    out.extend_from_slice(MAGIC);
    for n in [
        VERSION as usize,
        size,
        bytes.len(),
        t.merges.len(),
        specials.len(),
        special_bytes,
        short_bits as usize,
        0,
    ] {
        out.extend_from_slice(&(n as u32).to_le_bytes());
    }
    out.extend_from_slice(&key.to_le_bytes());
    out.extend(t.kinds.iter().map(|k| match k {
        Kind::Hole => 0u8,
        Kind::Ordinary => 1,
        Kind::Special => 2,
    }));
    for s in starts {
        out.extend_from_slice(&s.to_le_bytes());
    }
    out.extend_from_slice(bytes);
    for &(l, r) in &t.merges {
        let m = t
            .model
            .merged_id(l, r)
            .expect("every merge is in the model");
        for id in [l, r, m] {
            out.extend_from_slice(&id.to_le_bytes());
        }
    }
    out.extend_from_slice(&short_table);
    for (id, c) in &specials {
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&(c.len() as u32).to_le_bytes());
    }
    for (_, c) in &specials {
        out.extend_from_slice(c);
    }
    let sum = digest(&[&out]) as u64;
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// Rewrites the checksum at the end of `data` (a compiled tokenizer, or any
/// bytes of at least 8) to match the rest, so fuzzing reaches the checks
/// behind it.
pub fn reseal(data: &mut [u8]) {
    if let Some(n) = data.len().checked_sub(8) {
        let sum = digest(&[&data[..n]]) as u64;
        data[n..].copy_from_slice(&sum.to_le_bytes());
    }
}

/// Reads a compiled tokenizer from `data` (`path` names it in errors).
pub(super) fn from_bytes(path: &Path, data: &[u8]) -> Result<(Tables, u128)> {
    let mut src = data;
    parse(path, &mut src, data.len() as u64)
}

/// The compiled tokenizer in `path`: its tables, checked, and the key it records.
pub(super) fn from_file(path: &Path) -> Result<(Tables, u128)> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::File::open(path).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    parse(path, &mut f, len)
}

/// Reads a compiled tokenizer of `len` bytes from `src`, a chunk at a time
/// straight into its tables, hashing as it goes. Nothing is allocated
/// before the header's sizes are checked against `len`.
fn parse(path: &Path, src: &mut impl std::io::Read, len: u64) -> Result<(Tables, u128)> {
    let err = |message: String| parse_error(path, 0, message);
    let short = || err(format!("the file ends early ({len} bytes)"));
    let mut head = [0u8; HEADER];
    if len < (HEADER + 8) as u64 || src.read_exact(&mut head).is_err() || &head[..8] != MAGIC {
        return Err(err("not a compiled lmkit BPE tokenizer".into()));
    }
    let mut sum = Digest::default();
    sum.update(&head);
    let word = |i: usize| u32::from_le_bytes(head[8 + 4 * i..12 + 4 * i].try_into().expect("4"));
    let version = word(0);
    if version != VERSION {
        return Err(err(format!(
            "compiled tokenizer format {version}; this build reads {VERSION}"
        )));
    }
    let [size, n_bytes, n_merges, n_specials, n_special_bytes, short_bits, zero] =
        [1, 2, 3, 4, 5, 6, 7].map(|i| word(i) as u64);
    if zero != 0 || !(1..=27).contains(&short_bits) {
        return Err(err(format!(
            "header words {short_bits}, {zero} are out of range"
        )));
    }
    // Spellings take up to two bytes per token byte, at u32 offsets.
    if n_bytes > (u32::MAX / 2) as u64 {
        return Err(err(format!("{n_bytes} bytes of tokens, more than 2 GiB")));
    }
    if size > MAX_VOCAB_SIZE as u64 {
        return Err(err(format!(
            "{size} ids, more than the {MAX_VOCAB_SIZE} supported"
        )));
    }
    // Every count is below 2^32, so this cannot overflow a u64; nothing is
    // allocated until the file is known to hold all it claims.
    let expected = HEADER as u64
        + size
        + 4 * (size + 1)
        + n_bytes
        + 12 * n_merges
        + (16 << short_bits)
        + 8 * n_specials
        + n_special_bytes
        + 8;
    if expected != len {
        return Err(err(format!(
            "the header describes {expected} bytes but the file has {len}"
        )));
    }
    let key = u128::from_le_bytes(head[40..56].try_into().expect("16 bytes"));
    let (size, n_bytes, n_merges, n_specials) = (
        size as usize,
        n_bytes as usize,
        n_merges as usize,
        n_specials as usize,
    );
    // Reads `n` bytes (a whole number of records) in chunks of whole records.
    let mut buf = vec![0u8; CHUNK];
    let mut read = |n: usize, f: &mut dyn FnMut(&[u8])| -> Result<()> {
        let mut left = n;
        while left > 0 {
            let m = left.min(CHUNK);
            src.read_exact(&mut buf[..m]).map_err(|_| short())?;
            sum.update(&buf[..m]);
            f(&buf[..m]);
            left -= m;
        }
        Ok(())
    };
    let u32_at = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes"));
    let mut kind_codes = Vec::with_capacity(size);
    read(size, &mut |b| kind_codes.extend_from_slice(b))?;
    let mut starts = Vec::with_capacity(size + 1);
    read(4 * (size + 1), &mut |b| {
        starts.extend(b.chunks_exact(4).map(u32_at))
    })?;
    let mut bytes = Vec::with_capacity(n_bytes);
    read(n_bytes, &mut |b| bytes.extend_from_slice(b))?;
    let mut merges = Vec::with_capacity(n_merges);
    let mut merged = Vec::with_capacity(n_merges);
    read(12 * n_merges, &mut |b| {
        for m in b.chunks_exact(12) {
            merges.push((u32_at(&m[..4]), u32_at(&m[4..8])));
            merged.push(u32_at(&m[8..]));
        }
    })?;
    let mut table = ShortTable::with_capacity(short_bits as u32);
    read(16 << short_bits, &mut |b| table.extend_from_le(b))?;
    let mut special_heads = Vec::with_capacity(2 * n_specials);
    read(8 * n_specials, &mut |b| {
        special_heads.extend(b.chunks_exact(4).map(u32_at))
    })?;
    let mut special_text = Vec::with_capacity(n_special_bytes as usize);
    read(n_special_bytes as usize, &mut |b| {
        special_text.extend_from_slice(b)
    })?;
    let mut stored = [0u8; 8];
    src.read_exact(&mut stored).map_err(|_| short())?;
    sum.end_part();
    if sum.finish() as u64 != u64::from_le_bytes(stored) {
        return Err(err("checksum mismatch: the file is damaged".into()));
    }
    let kinds = kind_codes
        .iter()
        .enumerate()
        .map(|(id, k)| match k {
            0 => Ok(Kind::Hole),
            1 => Ok(Kind::Ordinary),
            2 => Ok(Kind::Special),
            k => Err(err(format!("id {id} has unknown kind {k}"))),
        })
        .collect::<Result<Vec<Kind>>>()?;
    drop(kind_codes);

    if starts[0] != 0 || starts[size] as usize != n_bytes {
        return Err(err("token offsets do not span the token bytes".into()));
    }
    // Offsets first: the table's check reads tokens by id.
    for (id, kind) in kinds.iter().enumerate() {
        let (a, b) = (starts[id] as usize, starts[id + 1] as usize);
        if b < a || b > n_bytes {
            return Err(err(format!("id {id}: token offsets out of order")));
        }
        match kind {
            Kind::Ordinary if a == b => return Err(err(format!("id {id}: empty token"))),
            Kind::Hole | Kind::Special if a != b => {
                return Err(err(format!(
                    "id {id} is not an ordinary token but has bytes"
                )));
            }
            _ => {}
        }
    }
    let token = |id: u32| &bytes[starts[id as usize] as usize..starts[id as usize + 1] as usize];
    let ordinary = |id: u32| kinds.get(id as usize) == Some(&Kind::Ordinary);
    let mut index = TokenIndex::with_short_table(table, &bytes, &starts).map_err(err)?;
    for id in 0..size as u32 {
        let t = token(id);
        if ordinary(id) && !(2..=SHORT).contains(&t.len()) {
            if let Err(first) = index.insert(t, id) {
                return Err(err(format!(
                    "ids {first} and {id} are the same token {:?}",
                    byte_level::bytes_to_token(t)
                )));
            }
        }
    }
    if let Some(b) = (0..=255u8).find(|&b| index.get(&[b]).is_none()) {
        return Err(err(format!(
            "no token for byte 0x{b:02x}; byte-level BPE needs all 256"
        )));
    }
    // Each merge's result is its tokens joined. Checked without a branch
    // per merge (a second pass names the first that fails).
    let merge_ok = |(l, r): (u32, u32), j: u32| {
        if !(ordinary(l) && ordinary(r) && ordinary(j)) {
            return false;
        }
        let (tl, tr, tj) = (token(l), token(r), token(j));
        if tj.len() <= 16 {
            // As words: no memcmp calls for the usual short tokens.
            let word = |t: &[u8]| {
                let (lo, hi) = load16(t);
                lo as u128 | (hi as u128) << 64
            };
            tj.len() == tl.len() + tr.len() && word(tj) == word(tl) | word(tr) << (8 * tl.len())
        } else {
            tj.len() == tl.len() + tr.len() && tj.starts_with(tl) && tj.ends_with(tr)
        }
    };
    let all_ok = merges
        .iter()
        .zip(&merged)
        .fold(true, |ok, (&m, &j)| ok & merge_ok(m, j));
    if !all_ok {
        let (rank, (&(l, r), &j)) = merges
            .iter()
            .zip(&merged)
            .enumerate()
            .find(|&(_, (&m, &j))| !merge_ok(m, j))
            .expect("a merge that fails");
        return Err(err(if ordinary(l) && ordinary(r) && ordinary(j) {
            format!("merge {rank}: token {j} is not tokens {l} and {r} joined")
        } else {
            format!("merge {rank} ({l}, {r} -> {j}) names an id that is not an ordinary token")
        }));
    }
    let mut specials: Vec<(Vec<u8>, u32)> = Vec::with_capacity(n_specials);
    let mut text_at = 0usize;
    for h in special_heads.chunks_exact(2) {
        let (id, len) = (h[0], h[1] as usize);
        let content = special_text
            .get(text_at..text_at + len)
            .ok_or_else(|| err("special token texts overrun their bytes".into()))?;
        text_at += len;
        if kinds.get(id as usize) != Some(&Kind::Special) {
            return Err(err(format!("special token {id} is not marked special")));
        }
        if specials.last().is_some_and(|&(_, prev)| prev >= id) {
            return Err(err(format!(
                "special token {id} is out of order or repeated"
            )));
        }
        let Ok(text) = std::str::from_utf8(content) else {
            return Err(err(format!("special token {id}'s text is not UTF-8")));
        };
        // Spelled in the alphabet, an ordinary token would share its spelling.
        let mut as_bytes = Vec::new();
        if byte_level::token_to_bytes_into(text, &mut as_bytes) && index.get(&as_bytes).is_some() {
            return Err(err(format!(
                "special token {text:?} is also spelled as an ordinary token"
            )));
        }
        if specials.iter().any(|(c, _)| c == content) {
            return Err(err(format!("special token text {text:?} appears twice")));
        }
        specials.push((content.to_vec(), id));
    }
    if text_at != special_text.len() {
        return Err(err("special token texts do not fill their bytes".into()));
    }
    let marked = kinds.iter().filter(|&&k| k == Kind::Special).count();
    if marked != specials.len() {
        return Err(err(format!(
            "{marked} ids are marked special but {} special tokens are given",
            specials.len()
        )));
    }
    let tables = Tables {
        bytes,
        starts,
        kinds,
        index,
        merges,
        merged,
        specials,
    };
    Ok((tables, key))
}

/// The cache folder, if any (see the module docs).
pub fn cache_dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name);
    if let Some(dir) = var("LMKIT_CACHE_DIR") {
        return (!dir.is_empty()).then(|| PathBuf::from(dir));
    }
    if let Some(dir) = var("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("lmkit"));
    }
    var("HOME")
        .filter(|d| !d.is_empty())
        .map(|home| PathBuf::from(home).join(".cache").join("lmkit"))
}

/// The cached tokenizer of sources with digest `key`, if there is a sound one.
pub(super) fn load(key: u128) -> Option<BpeTokenizer> {
    load_in(&cache_dir()?, key)
}

/// Caches `t` as the tokenizer of sources with digest `key`; a failure is
/// ignored (the next load parses the sources again).
pub(super) fn store(key: u128, t: &BpeTokenizer) {
    if let Some(dir) = cache_dir() {
        let _ = store_in(&dir, key, t);
    }
}

/// Where cache folder `dir` keeps the tokenizer of sources with digest `key`.
fn entry(dir: &Path, key: u128) -> PathBuf {
    dir.join(format!("bpe-{key:032x}.lmbpe"))
}

fn load_in(dir: &Path, key: u128) -> Option<BpeTokenizer> {
    match from_file(&entry(dir, key)) {
        Ok((tables, k)) if k == key => Some(BpeTokenizer::assemble(tables, None)),
        _ => None,
    }
}

fn store_in(dir: &Path, key: u128, t: &BpeTokenizer) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    write_atomic(&entry(dir, key), &to_bytes(t, key), false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes, `ab`, `abc`, ` a`, then `<|endoftext|>`.
    fn small() -> BpeTokenizer {
        let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        tokens.extend([b"ab".to_vec(), b"abc".to_vec(), b" a".to_vec()]);
        let merges = [
            (b'a' as u32, b'b' as u32),
            (256, b'c' as u32),
            (b' ' as u32, b'a' as u32),
        ];
        BpeTokenizer::from_parts(&tokens, &merges, &[super::super::ENDOFTEXT]).unwrap()
    }

    /// `data` with its checksum made right again after an edit.
    fn resealed(mut data: Vec<u8>) -> Vec<u8> {
        super::reseal(&mut data);
        data
    }

    fn error_of(data: &[u8]) -> String {
        match from_bytes(Path::new("t.lmbpe"), data) {
            Ok(_) => panic!("loaded"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn round_trip_keeps_everything() {
        let t = small();
        let data = to_bytes(&t, 42);
        let (tables, key) = from_bytes(Path::new("t"), &data).unwrap();
        assert_eq!(key, 42);
        let c = BpeTokenizer::assemble(tables, None);
        let text = b"abc ab a<|endoftext|>\xff abcabc";
        for special in [false, true] {
            assert_eq!(c.encode(text, special), t.encode(text, special));
        }
        assert_eq!(c.merges(), t.merges());
        assert_eq!(c.vocab_size(), t.vocab_size());
        for id in 0..t.vocab_size() as u32 {
            assert_eq!(c.id_to_token(id), t.id_to_token(id));
            assert_eq!(c.token_bytes(id), t.token_bytes(id));
        }
        assert_eq!(c.token_to_id("<|endoftext|>"), Some(259));
        assert_eq!(c.token_to_id("Ġa"), Some(258));
        assert_eq!(
            to_bytes(&c, 42),
            data,
            "compiling again gives the same file"
        );
    }

    /// Offsets of the fields of `small()`'s compiled form.
    struct At {
        kinds: usize,
        starts: usize,
        bytes: usize,
        merges: usize,
        table: usize,
        specials: usize,
    }

    fn at(t: &BpeTokenizer) -> At {
        let size = t.vocab_size();
        let kinds = HEADER;
        let starts = kinds + size;
        let bytes = starts + 4 * (size + 1);
        let merges = bytes + t.model.tables().0.len();
        let table = merges + 12 * t.merges().len();
        let specials = table + t.model.index.short_table().1.len();
        At {
            kinds,
            starts,
            bytes,
            merges,
            table,
            specials,
        }
    }

    #[test]
    fn every_damage_is_an_error() {
        let t = small();
        let good = to_bytes(&t, 0);
        for n in 0..good.len() {
            assert!(
                from_bytes(Path::new("t"), &good[..n]).is_err(),
                "cut at {n}"
            );
        }
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x10;
            assert!(
                from_bytes(Path::new("t"), &bad).is_err(),
                "byte {i} flipped"
            );
        }
        let a = at(&t);
        let put = |edits: &[(usize, &[u8])]| {
            let mut d = good.clone();
            for &(i, b) in edits {
                d[i..i + b.len()].copy_from_slice(b);
            }
            error_of(&resealed(d))
        };
        let u32le = |v: u32| v.to_le_bytes();
        // Slot offsets in the table, the first full and the first empty one.
        let slots: Vec<usize> = (a.table..a.specials).step_by(16).collect();
        let full = |i: &&usize| good[**i + 12..**i + 16] != [0; 4];
        let first_full = *slots.iter().find(full).unwrap();
        let first_empty = *slots.iter().find(|i| !full(i)).unwrap();
        let cases: Vec<(String, &str)> = vec![
            (put(&[(0, b"lmkitXXX")]), "not a compiled"),
            (put(&[(8, &u32le(2))]), "format 2"),
            (put(&[(12, &u32le(1 << 22))]), "more than the"),
            (put(&[(36, &u32le(1))]), "header words"),
            (put(&[(16, &u32le(1000))]), "the header describes"),
            (put(&[(a.kinds + 5, &[7])]), "unknown kind 7"),
            (put(&[(a.starts, &u32le(1))]), "do not span"),
            // Byte 0x01's token given byte 0x00's byte: a repeat, and 0x01 has none.
            (put(&[(a.bytes + 1, &[0])]), "are the same token"),
            // `ab` spelled `ba`: the table's key no longer its token's.
            (
                put(&[(a.bytes + 256, b"ba")]),
                "token 256 is not in the token table under its id",
            ),
            // Merge 0 gives `abc`.
            (
                put(&[(a.merges + 8, &u32le(257))]),
                "merge 0: token 257 is not tokens 97 and 98 joined",
            ),
            (
                put(&[(first_full + 15, &[0])]),
                "in the token table under its id",
            ),
            // The slot's id changed (its length kept): the table and the
            // tokens disagree.
            (
                put(&[(first_full + 12, &[255, 0, 0])]),
                "in the token table under its id",
            ),
            (
                put(&[(32, &u32le(0))]),
                "header words 0, 0 are out of range",
            ),
            (
                put(&[(first_empty, &[1])]),
                "of the token table holds a key",
            ),
            // Moved to an empty slot: not where a lookup finds it.
            (
                put(&[
                    (first_full, &[0; 16]),
                    (first_empty, &good[first_full..first_full + 16]),
                ]),
                "in the token table under its id",
            ),
            // Copied to an empty slot: one slot too many.
            (
                put(&[(first_empty, &good[first_full..first_full + 16])]),
                "the token table holds 4 tokens for 3 short tokens",
            ),
            (
                put(&[(first_full, &[0; 16])]),
                "in the token table under its id",
            ),
            (put(&[(a.merges, &u32le(259))]), "not an ordinary token"),
            (
                put(&[(a.merges + 8, &u32le(9999))]),
                "not an ordinary token",
            ),
            (put(&[(a.specials, &u32le(258))]), "is not marked special"),
            (
                put(&[(a.specials + 4, &u32le(12))]),
                "do not fill their bytes",
            ),
            (put(&[(a.specials + 4, &u32le(99))]), "overrun"),
            (
                put(&[(a.kinds + 258, &[2])]),
                "not an ordinary token but has bytes",
            ),
            (put(&[(a.specials + 8, b"\xff")]), "not UTF-8"),
        ];
        for (got, want) in cases {
            assert!(got.contains(want), "{got:?} lacks {want:?}");
            assert!(got.starts_with("t.lmbpe:0: "), "{got}");
        }
    }

    /// A special token with no text (kept by id, never matched in text).
    #[test]
    fn empty_special_token_round_trips() {
        let tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        let t = BpeTokenizer::from_parts(&tokens, &[], &["", "<|x|>"]).unwrap();
        let (tables, _) = from_bytes(Path::new("t"), &to_bytes(&t, 0)).unwrap();
        let c = BpeTokenizer::assemble(tables, None);
        assert_eq!(c.id_to_token(256), Some(""));
        assert_eq!(c.id_to_token(257), Some("<|x|>"));
        assert_eq!(c.encode_ids(b"a<|x|>", true), t.encode_ids(b"a<|x|>", true));
        assert_eq!(to_bytes(&c, 0), to_bytes(&t, 0));
    }

    #[test]
    fn special_text_spelled_as_ordinary_token_is_refused() {
        let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        tokens.push(b"ab".to_vec());
        let t = BpeTokenizer::from_parts(&tokens, &[(97, 98)], &["xy"]).unwrap();
        // Loading from text refuses it (the token would be there twice).
        let mut data = to_bytes(&t, 0);
        let n = data.len();
        assert_eq!(&data[n - 10..n - 8], b"xy");
        data[n - 10..n - 8].copy_from_slice(b"ab");
        let e = error_of(&resealed(data));
        assert!(e.contains("also spelled as an ordinary token"), "{e}");
    }

    #[test]
    fn cache_finds_only_its_own_sound_entry() {
        let dir = std::env::temp_dir().join(format!("lmkit-cache-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let t = small();
        assert!(load_in(&dir, 7).is_none(), "empty cache");
        store_in(&dir, 7, &t).unwrap();
        let c = load_in(&dir, 7).expect("stored");
        assert_eq!(c.encode(b"abc a", false), t.encode(b"abc a", false));
        assert!(load_in(&dir, 8).is_none(), "another key");
        // An entry under the wrong name (its recorded key differs) is not used.
        std::fs::copy(entry(&dir, 7), entry(&dir, 9)).unwrap();
        assert!(load_in(&dir, 9).is_none(), "recorded key differs");
        // A damaged entry is passed over; storing again mends it.
        let path = entry(&dir, 7);
        let mut data = std::fs::read(&path).unwrap();
        data[HEADER + 3] ^= 1;
        std::fs::write(&path, &data).unwrap();
        assert!(load_in(&dir, 7).is_none(), "damaged");
        store_in(&dir, 7, &t).unwrap();
        assert!(load_in(&dir, 7).is_some(), "mended");
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 2, "no temporary files left: {left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn digest_sees_every_word_and_length() {
        let base = vec![0u8; 100];
        let h = digest(&[&base]);
        for i in 0..100 {
            let mut d = base.clone();
            d[i] = 1;
            let g = digest(&[&d]);
            assert_ne!(g as u64, h as u64, "byte {i}, low half");
            assert_ne!(g >> 64, h >> 64, "byte {i}, high half");
        }
        assert_ne!(digest(&[&base[..99]]), h, "length");
        assert_ne!(digest(&[&base[..50], &base[50..]]), h, "split");
    }
}
