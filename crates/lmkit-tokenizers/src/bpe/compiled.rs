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
    let mut sum = Digest::default();
    let h = read_header(src, len, &mut sum).map_err(err)?;
    let raw = read_sections(src, len, &h, sum).map_err(err)?;
    let kinds = check_kinds(&raw.kind_codes, &raw.starts, h.n_bytes).map_err(err)?;
    let Raw {
        starts,
        bytes,
        merges,
        merged,
        table,
        special_heads,
        special_text,
        ..
    } = raw;
    let index = check_index(&kinds, &bytes, &starts, table).map_err(err)?;
    check_merges(&kinds, &bytes, &starts, &merges, &merged).map_err(err)?;
    let specials = check_specials(&kinds, &index, &special_heads, &special_text).map_err(err)?;
    let tables = Tables {
        bytes,
        starts,
        kinds,
        index,
        merges,
        merged,
        merge_ranks: None,
        specials,
    };
    Ok((tables, h.key))
}

/// The sizes a compiled tokenizer's header gives, checked against its length.
struct Header {
    size: usize,
    n_bytes: usize,
    n_merges: usize,
    n_specials: usize,
    n_special_bytes: usize,
    short_bits: u32,
    key: u128,
}

/// The sections of a compiled tokenizer as read, before their checks.
struct Raw {
    kind_codes: Vec<u8>,
    starts: Vec<u32>,
    bytes: Vec<u8>,
    merges: Vec<(u32, u32)>,
    merged: Vec<u32>,
    table: ShortTable,
    special_heads: Vec<u32>,
    special_text: Vec<u8>,
}

/// Reads and checks the header of a compiled tokenizer of `len` bytes.
fn read_header(
    src: &mut impl std::io::Read,
    len: u64,
    sum: &mut Digest,
) -> std::result::Result<Header, String> {
    let mut head = [0u8; HEADER];
    if len < (HEADER + 8) as u64 || src.read_exact(&mut head).is_err() || &head[..8] != MAGIC {
        return Err("not a compiled lmkit BPE tokenizer".into());
    }
    sum.update(&head);
    let word = |i: usize| u32::from_le_bytes(head[8 + 4 * i..12 + 4 * i].try_into().expect("4"));
    let version = word(0);
    if version != VERSION {
        return Err(format!(
            "compiled tokenizer format {version}; this build reads {VERSION}"
        ));
    }
    let [size, n_bytes, n_merges, n_specials, n_special_bytes, short_bits, zero] =
        [1, 2, 3, 4, 5, 6, 7].map(|i| word(i) as u64);
    if zero != 0 || !(1..=27).contains(&short_bits) {
        return Err(format!(
            "header words {short_bits}, {zero} are out of range"
        ));
    }
    // Spellings take up to two bytes per token byte, at u32 offsets.
    if n_bytes > (u32::MAX / 2) as u64 {
        return Err(format!("{n_bytes} bytes of tokens, more than 2 GiB"));
    }
    if size > MAX_VOCAB_SIZE as u64 {
        return Err(format!(
            "{size} ids, more than the {MAX_VOCAB_SIZE} supported"
        ));
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
        return Err(format!(
            "the header describes {expected} bytes but the file has {len}"
        ));
    }
    Ok(Header {
        size: size as usize,
        n_bytes: n_bytes as usize,
        n_merges: n_merges as usize,
        n_specials: n_specials as usize,
        n_special_bytes: n_special_bytes as usize,
        short_bits: short_bits as u32,
        key: u128::from_le_bytes(head[40..56].try_into().expect("16 bytes")),
    })
}

/// Reads the sections after the header and checks the checksum (`sum`:
/// the digest of the header).
fn read_sections(
    src: &mut impl std::io::Read,
    len: u64,
    h: &Header,
    mut sum: Digest,
) -> std::result::Result<Raw, String> {
    let short = || format!("the file ends early ({len} bytes)");
    // Reads `n` bytes (a whole number of records) in chunks of whole records.
    let mut buf = vec![0u8; CHUNK];
    let mut read = |n: usize, f: &mut dyn FnMut(&[u8])| -> std::result::Result<(), String> {
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
    let mut kind_codes = Vec::with_capacity(h.size);
    read(h.size, &mut |b| kind_codes.extend_from_slice(b))?;
    let mut starts = Vec::with_capacity(h.size + 1);
    read(4 * (h.size + 1), &mut |b| {
        starts.extend(b.chunks_exact(4).map(u32_at))
    })?;
    let mut bytes = Vec::with_capacity(h.n_bytes);
    read(h.n_bytes, &mut |b| bytes.extend_from_slice(b))?;
    let mut merges = Vec::with_capacity(h.n_merges);
    let mut merged = Vec::with_capacity(h.n_merges);
    read(12 * h.n_merges, &mut |b| {
        for m in b.chunks_exact(12) {
            merges.push((u32_at(&m[..4]), u32_at(&m[4..8])));
            merged.push(u32_at(&m[8..]));
        }
    })?;
    let mut table = ShortTable::with_capacity(h.short_bits);
    read(16 << h.short_bits, &mut |b| table.extend_from_le(b))?;
    let mut special_heads = Vec::with_capacity(2 * h.n_specials);
    read(8 * h.n_specials, &mut |b| {
        special_heads.extend(b.chunks_exact(4).map(u32_at))
    })?;
    let mut special_text = Vec::with_capacity(h.n_special_bytes);
    read(h.n_special_bytes, &mut |b| {
        special_text.extend_from_slice(b)
    })?;
    let mut stored = [0u8; 8];
    src.read_exact(&mut stored).map_err(|_| short())?;
    sum.end_part();
    if sum.finish() as u64 != u64::from_le_bytes(stored) {
        return Err("checksum mismatch: the file is damaged".into());
    }
    Ok(Raw {
        kind_codes,
        starts,
        bytes,
        merges,
        merged,
        table,
        special_heads,
        special_text,
    })
}

/// The kind of every id, with each id's token offsets in order and inside
/// the `n_bytes` token bytes (bytes for ordinary tokens only).
fn check_kinds(
    kind_codes: &[u8],
    starts: &[u32],
    n_bytes: usize,
) -> std::result::Result<Vec<Kind>, String> {
    let size = kind_codes.len();
    let kinds = kind_codes
        .iter()
        .enumerate()
        .map(|(id, k)| match k {
            0 => Ok(Kind::Hole),
            1 => Ok(Kind::Ordinary),
            2 => Ok(Kind::Special),
            k => Err(format!("id {id} has unknown kind {k}")),
        })
        .collect::<std::result::Result<Vec<Kind>, String>>()?;

    if starts[0] != 0 || starts[size] as usize != n_bytes {
        return Err("token offsets do not span the token bytes".into());
    }
    // Offsets first: the table's check reads tokens by id.
    for (id, kind) in kinds.iter().enumerate() {
        let (a, b) = (starts[id] as usize, starts[id + 1] as usize);
        if b < a || b > n_bytes {
            return Err(format!("id {id}: token offsets out of order"));
        }
        match kind {
            Kind::Ordinary if a == b => return Err(format!("id {id}: empty token")),
            Kind::Hole | Kind::Special if a != b => {
                return Err(format!("id {id} is not an ordinary token but has bytes"));
            }
            _ => {}
        }
    }
    Ok(kinds)
}

/// The index of the ordinary tokens: the stored table of short tokens,
/// checked to be exactly theirs, with the other tokens inserted; every
/// token distinct and every byte among them.
fn check_index(
    kinds: &[Kind],
    bytes: &[u8],
    starts: &[u32],
    table: ShortTable,
) -> std::result::Result<TokenIndex, String> {
    let token = |id: u32| &bytes[starts[id as usize] as usize..starts[id as usize + 1] as usize];
    let mut index = TokenIndex::with_short_table(table, bytes, starts)?;
    for id in 0..kinds.len() as u32 {
        let t = token(id);
        if kinds[id as usize] == Kind::Ordinary && !(2..=SHORT).contains(&t.len()) {
            if let Err(first) = index.insert(t, id) {
                return Err(format!(
                    "ids {first} and {id} are the same token {:?}",
                    byte_level::bytes_to_token(t)
                ));
            }
        }
    }
    if let Some(b) = (0..=255u8).find(|&b| index.get(&[b]).is_none()) {
        return Err(format!(
            "no token for byte 0x{b:02x}; byte-level BPE needs all 256"
        ));
    }
    Ok(index)
}

/// Each merge's result is its tokens joined. Checked without a branch per
/// merge (a second pass names the first that fails).
fn check_merges(
    kinds: &[Kind],
    bytes: &[u8],
    starts: &[u32],
    merges: &[(u32, u32)],
    merged: &[u32],
) -> std::result::Result<(), String> {
    let token = |id: u32| &bytes[starts[id as usize] as usize..starts[id as usize + 1] as usize];
    let ordinary = |id: u32| kinds.get(id as usize) == Some(&Kind::Ordinary);
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
        .zip(merged)
        .fold(true, |ok, (&m, &j)| ok & merge_ok(m, j));
    if !all_ok {
        let (rank, (&(l, r), &j)) = merges
            .iter()
            .zip(merged)
            .enumerate()
            .find(|&(_, (&m, &j))| !merge_ok(m, j))
            .expect("a merge that fails");
        return Err(if ordinary(l) && ordinary(r) && ordinary(j) {
            format!("merge {rank}: token {j} is not tokens {l} and {r} joined")
        } else {
            format!("merge {rank} ({l}, {r} -> {j}) names an id that is not an ordinary token")
        });
    }
    Ok(())
}

/// The special tokens (`id, length` heads, then their texts), checked: in
/// id order, each marked special, UTF-8, distinct, not an ordinary token's
/// spelling, and every id marked special among them.
fn check_specials(
    kinds: &[Kind],
    index: &TokenIndex,
    special_heads: &[u32],
    special_text: &[u8],
) -> std::result::Result<Vec<(Vec<u8>, u32)>, String> {
    let mut specials: Vec<(Vec<u8>, u32)> = Vec::with_capacity(special_heads.len() / 2);
    let mut text_at = 0usize;
    for h in special_heads.chunks_exact(2) {
        let (id, len) = (h[0], h[1] as usize);
        let content = special_text
            .get(text_at..text_at + len)
            .ok_or_else(|| "special token texts overrun their bytes".to_string())?;
        text_at += len;
        if kinds.get(id as usize) != Some(&Kind::Special) {
            return Err(format!("special token {id} is not marked special"));
        }
        if specials.last().is_some_and(|&(_, prev)| prev >= id) {
            return Err(format!("special token {id} is out of order or repeated"));
        }
        let Ok(text) = std::str::from_utf8(content) else {
            return Err(format!("special token {id}'s text is not UTF-8"));
        };
        // Spelled in the alphabet, an ordinary token would share its spelling.
        let mut as_bytes = Vec::new();
        if byte_level::token_to_bytes_into(text, &mut as_bytes) && index.get(&as_bytes).is_some() {
            return Err(format!(
                "special token {text:?} is also spelled as an ordinary token"
            ));
        }
        if specials.iter().any(|(c, _)| c == content) {
            return Err(format!("special token text {text:?} appears twice"));
        }
        specials.push((content.to_vec(), id));
    }
    if text_at != special_text.len() {
        return Err("special token texts do not fill their bytes".into());
    }
    let marked = kinds.iter().filter(|&&k| k == Kind::Special).count();
    if marked != specials.len() {
        return Err(format!(
            "{marked} ids are marked special but {} special tokens are given",
            specials.len()
        ));
    }
    Ok(specials)
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
mod tests;
