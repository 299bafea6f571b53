//! Binary token shards.
//!
//! `prepare_shards` tokenizes text files, directories, JSONL and Parquet
//! (`text` field), or takes llm.c / nanoGPT token files as they are, once into `DIR/train.bin` + `DIR/val.bin` + `DIR/meta.json`; a later run
//! with the same sources and tokenizer reuses them. Documents are joined with
//! the end-of-text token (one before every document, as GPT-2 was trained).
//!
//! Shard file: a 32-byte header (`LMKTOK01`, token width u32 = 2 or 4,
//! reserved u32, token count u64, 8 reserved bytes), then little-endian
//! tokens: u16 when the vocabulary fits, else u32.
//!
//! Validation split: the token stream is cut into chunks of `chunk_tokens`,
//! and every `stride`-th chunk goes to validation, so the held-out text is
//! spread over the whole corpus (one long file still gets a fair split).

use super::{io_err, DataError, Result};
use memmap2::Mmap;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

pub const SHARD_MAGIC: &[u8; 8] = b"LMKTOK01";
const HEADER_LEN: usize = 32;
const META_VERSION: u32 = 1;
/// Extensions picked up when a directory is given (explicit files are always read).
const TEXT_EXTENSIONS: &[&str] = &[
    "txt", "md", "markdown", "rst", "text", "jsonl", "ndjson", "parquet",
];
/// Large documents are cut into pieces of about this many bytes to tokenize
/// in parallel (at boundaries where the result is unchanged, see `split_pieces`).
const PIECE_BYTES: usize = 1 << 16;

/// A memory-mapped token shard.
pub struct TokenShard {
    path: PathBuf,
    map: Mmap,
    width: usize,
    len: usize,
}

impl TokenShard {
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(io_err(path))?;
        // SAFETY: the shard is written once (temp file + rename) and never
        // modified in place; a concurrent writer replaces, not mutates, it.
        let map = unsafe { Mmap::map(&file) }.map_err(io_err(path))?;
        let bad = |message: String| DataError::Parse {
            path: path.to_path_buf(),
            line: 0,
            message,
        };
        if map.len() < HEADER_LEN || &map[..8] != SHARD_MAGIC {
            return Err(bad("not an lmkit token shard (bad header)".into()));
        }
        let width = u32::from_le_bytes(map[8..12].try_into().expect("4 bytes")) as usize;
        let len = u64::from_le_bytes(map[16..24].try_into().expect("8 bytes")) as usize;
        if width != 2 && width != 4 {
            return Err(bad(format!("token width {width} (expected 2 or 4)")));
        }
        // Checked: `len` is read from the file and may be anything.
        let expected = len
            .checked_mul(width)
            .and_then(|n| n.checked_add(HEADER_LEN));
        if expected != Some(map.len()) {
            return Err(bad(format!(
                "truncated: header says {len} tokens of {width} bytes, file has {} bytes",
                map.len()
            )));
        }
        Ok(TokenShard {
            path: path.to_path_buf(),
            map,
            width,
            len,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes per token (2 or 4).
    pub fn width(&self) -> usize {
        self.width
    }

    pub fn get(&self, i: usize) -> u32 {
        let o = HEADER_LEN + i * self.width;
        if self.width == 2 {
            u16::from_le_bytes([self.map[o], self.map[o + 1]]) as u32
        } else {
            u32::from_le_bytes(self.map[o..o + 4].try_into().expect("4 bytes"))
        }
    }

    /// The largest token id in the shard (0 when empty): one pass, so ids
    /// are checked against the vocabulary once at open, not at every batch.
    pub fn max_token(&self) -> u32 {
        let data = &self.map[HEADER_LEN..];
        if self.width == 2 {
            data.chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]) as u32)
                .fold(0, u32::max)
        } else {
            data.chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .fold(0, u32::max)
        }
    }

    /// Copies tokens `start..start + out.len()` into `out`.
    pub fn read_into(&self, start: usize, out: &mut [u32]) {
        for (k, o) in out.iter_mut().enumerate() {
            *o = self.get(start + k);
        }
    }
}

/// Writes a shard to `PATH.tmp`, then fsyncs and renames it into place.
/// Dropped unfinished (an error, a full disk), it removes its temp file.
struct ShardWriter {
    tmp: PathBuf,
    path: PathBuf,
    /// `None` once finished.
    out: Option<BufWriter<File>>,
    width: usize,
    len: u64,
}

impl Drop for ShardWriter {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

impl ShardWriter {
    fn create(path: &Path, width: usize) -> Result<Self> {
        let tmp = path.with_extension("bin.tmp");
        let file = File::create(&tmp).map_err(io_err(&tmp))?;
        let mut w = ShardWriter {
            tmp,
            path: path.to_path_buf(),
            out: Some(BufWriter::with_capacity(1 << 20, file)),
            width,
            len: 0,
        };
        let mut header = [0u8; HEADER_LEN];
        header[..8].copy_from_slice(SHARD_MAGIC);
        header[8..12].copy_from_slice(&(width as u32).to_le_bytes());
        w.writer().write_all(&header).map_err(io_err(&w.tmp))?;
        Ok(w)
    }

    fn writer(&mut self) -> &mut BufWriter<File> {
        self.out
            .as_mut()
            .expect("an unfinished writer has its file")
    }

    fn push(&mut self, token: u32) -> Result<()> {
        let wide = self.width == 4;
        let out = self.writer();
        let r = if wide {
            out.write_all(&token.to_le_bytes())
        } else {
            out.write_all(&(token as u16).to_le_bytes())
        };
        r.map_err(io_err(&self.tmp))?;
        self.len += 1;
        Ok(())
    }

    fn finish(mut self) -> Result<u64> {
        let tmp = self.tmp.clone();
        // Flush while `out` is still held: on an error, drop removes the temp file.
        self.writer().flush().map_err(io_err(&tmp))?;
        let mut file = self.writer().get_ref().try_clone().map_err(io_err(&tmp))?;
        file.seek(SeekFrom::Start(16)).map_err(io_err(&tmp))?;
        file.write_all(&self.len.to_le_bytes())
            .map_err(io_err(&tmp))?;
        file.sync_all().map_err(io_err(&tmp))?;
        std::fs::rename(&tmp, &self.path).map_err(io_err(&self.path))?;
        self.out = None;
        Ok(self.len)
    }
}

/// The token stream cut into train and validation chunks as it is written.
struct Split {
    train: ShardWriter,
    val: Option<ShardWriter>,
    /// Every `stride`-th chunk of `chunk_tokens` goes to validation (0: none).
    stride: u64,
    chunk_tokens: u64,
    position: u64,
    vocab_size: usize,
}

impl Split {
    /// `out_dir/train.bin` (and `val.bin` when `opts.val_fraction` > 0)
    /// created for tokens of `width` bytes, the validation chunks sized for
    /// about `total_bytes` of text.
    fn create(out_dir: &Path, opts: &PrepareOptions, total_bytes: u64, width: u32) -> Result<Self> {
        // ~4 bytes per token; aim for ≥ 20 validation chunks.
        let stride: u64 = if opts.val_fraction > 0.0 {
            ((1.0 / opts.val_fraction).round() as u64).max(2)
        } else {
            0
        };
        let est_tokens = (total_bytes / 4).max(1);
        let chunk_tokens: u64 = if stride > 0 {
            (est_tokens / (stride * 20)).clamp(32, 1 << 16)
        } else {
            u64::MAX
        };

        let train = ShardWriter::create(&out_dir.join("train.bin"), width as usize)?;
        let val = if stride > 0 {
            Some(ShardWriter::create(
                &out_dir.join("val.bin"),
                width as usize,
            )?)
        } else {
            None
        };
        Ok(Split {
            train,
            val,
            stride,
            chunk_tokens,
            position: 0,
            vocab_size: opts.vocab_size,
        })
    }

    /// Appends one token of `file`, checked against the vocabulary.
    fn push(&mut self, tok: u32, file: &Path) -> Result<()> {
        if tok as usize >= self.vocab_size {
            return Err(DataError::Invalid(format!(
                "{}: token id {tok} is outside the vocabulary of {} \
                 (tokenizer and model do not match)",
                file.display(),
                self.vocab_size
            )));
        }
        let to_val =
            self.stride > 0 && (self.position / self.chunk_tokens) % self.stride == self.stride - 1;
        match (&mut self.val, to_val) {
            (Some(v), true) => v.push(tok)?,
            _ => self.train.push(tok)?,
        }
        self.position += 1;
        Ok(())
    }
}

/// One input file as recorded in `meta.json` (a change invalidates the shards).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceInfo {
    pub path: String,
    pub bytes: u64,
    pub modified_ns: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardMeta {
    pub version: u32,
    pub token_width: u32,
    pub vocab_size: u32,
    pub eos_id: u32,
    pub val_fraction: f64,
    pub chunk_tokens: u64,
    pub train_tokens: u64,
    pub val_tokens: u64,
    pub documents: u64,
    /// Identifies the tokenizer (e.g. a hash of its files).
    pub tokenizer: String,
    pub sources: Vec<SourceInfo>,
    /// The field of JSONL / Parquet rows that was read as text (shards made
    /// before this was recorded read `text`).
    #[serde(default = "default_text_field")]
    pub text_field: String,
}

fn default_text_field() -> String {
    DEFAULT_TEXT_FIELD.to_string()
}

/// The field of JSONL / Parquet rows read as a document's text unless told
/// otherwise (HF datasets' usual column).
pub const DEFAULT_TEXT_FIELD: &str = "text";

#[derive(Debug, Clone)]
pub struct PrepareOptions {
    pub vocab_size: usize,
    pub eos_id: u32,
    /// Fraction of tokens held out for validation, in [0, 0.5].
    pub val_fraction: f64,
    /// Identifies the tokenizer; shards made with another one are rebuilt.
    pub tokenizer_id: String,
    /// The field of JSONL / Parquet rows holding the text
    /// ([`DEFAULT_TEXT_FIELD`] as a rule).
    pub text_field: String,
}

/// Result of [`prepare_shards`].
pub struct PreparedData {
    pub meta: ShardMeta,
    /// True when existing shards matched and were reused.
    pub reused: bool,
}

/// Train + optional validation shards, memory-mapped.
pub struct TokenData {
    pub meta: ShardMeta,
    pub train: TokenShard,
    pub val: Option<TokenShard>,
}

/// Expands files and directories (recursively, sorted, hidden entries and
/// files without a text extension skipped) into the list of files to read.
pub fn list_sources(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(io_err(dir))?
            .map(|e| e.map(|e| e.path()).map_err(io_err(dir)))
            .collect::<Result<_>>()?;
        entries.sort();
        for p in entries {
            let hidden = p
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.'));
            if hidden {
                continue;
            }
            if p.is_dir() {
                walk(&p, out)?;
            } else if super::source::text_extension(&p)
                .is_some_and(|e| TEXT_EXTENSIONS.contains(&e.as_str()))
            {
                out.push(p);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    for p in paths {
        let md = std::fs::metadata(p).map_err(io_err(p))?;
        if md.is_dir() {
            let before = out.len();
            walk(p, &mut out)?;
            if out.len() == before {
                return Err(DataError::Invalid(format!(
                    "{}: directory holds no text files ({})",
                    p.display(),
                    TEXT_EXTENSIONS.join(", ")
                )));
            }
        } else {
            out.push(p.clone());
        }
    }
    if out.is_empty() {
        return Err(DataError::Invalid("no data files given".into()));
    }
    Ok(out)
}

fn source_info(path: &Path) -> Result<SourceInfo> {
    let md = std::fs::metadata(path).map_err(io_err(path))?;
    let modified_ns = md
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64);
    let abs = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    Ok(SourceInfo {
        path: abs.display().to_string(),
        bytes: md.len(),
        modified_ns,
    })
}

/// The documents of one data file: the `field` of each row of a JSONL or
/// Parquet file (one row, one document), else the file's pages
/// ([`super::source::split_pages`]). Blank documents are dropped.
pub fn file_documents(path: &Path, field: &str) -> Result<Vec<String>> {
    if super::source::is_rows(path) {
        let mut docs = Vec::new();
        super::classify_data::for_each_jsonl_object(path, |line, row| {
            let text = super::classify_data::string_field(&row, field, path, line)?;
            if !text.trim().is_empty() {
                docs.push(text);
            }
            Ok(())
        })?;
        return Ok(docs);
    }
    let text = super::source::read_source_text(path)?;
    Ok(super::source::split_pages(&text)
        .map(str::to_string)
        .collect())
}

/// Cuts a document into pieces of about `PIECE_BYTES` at a newline that is
/// followed by a non-whitespace character. A GPT-2 style pre-tokenizer always
/// ends a pre-token there, so encoding the pieces separately gives exactly the
/// tokens of encoding the whole document.
fn split_pieces(doc: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let bytes = doc.as_bytes();
    let mut start = 0;
    while doc.len() - start > PIECE_BYTES {
        let mut cut = None;
        let mut i = start + PIECE_BYTES;
        while i + 1 < bytes.len() {
            if bytes[i] == b'\n' && !bytes[i + 1].is_ascii_whitespace() {
                cut = Some(i + 1);
                break;
            }
            i += 1;
        }
        match cut {
            Some(c) => {
                pieces.push(&doc[start..c]);
                start = c;
            }
            None => break,
        }
    }
    pieces.push(&doc[start..]);
    pieces
}

/// Token ids produced for a piece of text; the error is the tokenizer's message.
pub type EncodeFn<'a> = dyn Fn(&str) -> std::result::Result<Vec<u32>, String> + Sync + 'a;

/// Tokenizes `paths` into `out_dir/{train,val}.bin` + `meta.json`, or reuses
/// them when `meta.json` matches these sources and this tokenizer.
/// `progress(bytes_done, bytes_total)` is called as files are read.
pub fn prepare_shards(
    paths: &[PathBuf],
    out_dir: &Path,
    opts: &PrepareOptions,
    encode: &EncodeFn,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<PreparedData> {
    if !(0.0..=0.5).contains(&opts.val_fraction) {
        return Err(DataError::Invalid(format!(
            "validation fraction {} is outside [0, 0.5]",
            opts.val_fraction
        )));
    }
    let files = list_sources(paths)?;
    let sources = files
        .iter()
        .map(|f| source_info(f))
        .collect::<Result<Vec<_>>>()?;
    let total_bytes: u64 = sources.iter().map(|s| s.bytes).sum();
    let width: u32 = if opts.vocab_size <= 1 << 16 { 2 } else { 4 };

    let meta_path = out_dir.join("meta.json");
    if let Ok(meta) = shards_differ(out_dir, &sources, opts) {
        progress(total_bytes, total_bytes);
        return Ok(PreparedData { meta, reused: true });
    }
    std::fs::create_dir_all(out_dir).map_err(io_err(out_dir))?;
    // Invalidate old shards first: a crash mid-way must not leave a stale
    // meta.json describing new shards.
    let _ = std::fs::remove_file(&meta_path);

    let mut split = Split::create(out_dir, opts, total_bytes, width)?;
    let (stride, chunk_tokens) = (split.stride, split.chunk_tokens);
    let mut documents: u64 = 0;
    let mut progress = Progress {
        report: progress,
        done: 0,
        total: total_bytes,
    };
    progress.at(0);
    for (file, info) in files.iter().zip(&sources) {
        documents += if super::token_files::is_token_file(file) {
            push_token_file(&mut split, file, info, opts.eos_id, &mut progress)?
        } else {
            push_text_file(&mut split, file, info, opts, encode, &mut progress)?
        };
        progress.file_done(info.bytes);
    }
    let train_tokens = split.train.finish()?;
    let val_tokens = match split.val {
        Some(v) => v.finish()?,
        None => {
            let _ = std::fs::remove_file(out_dir.join("val.bin"));
            0
        }
    };
    if train_tokens == 0 || documents == 0 {
        return Err(DataError::Invalid(format!(
            "no text in the data ({} file(s), {} bytes)",
            files.len(),
            total_bytes
        )));
    }
    let meta = ShardMeta {
        version: META_VERSION,
        token_width: width,
        vocab_size: opts.vocab_size as u32,
        eos_id: opts.eos_id,
        val_fraction: opts.val_fraction,
        chunk_tokens: if stride > 0 { chunk_tokens } else { 0 },
        train_tokens,
        val_tokens,
        documents,
        tokenizer: opts.tokenizer_id.clone(),
        sources,
        text_field: opts.text_field.clone(),
    };
    let json = serde_json::to_string_pretty(&meta).expect("meta serializes");
    crate::util::fs::atomic_write(&meta_path, json.as_bytes()).map_err(|e| match e {
        crate::Error::Io { path, source } => DataError::Io { path, source },
        other => DataError::Invalid(other.to_string()),
    })?;
    Ok(PreparedData {
        meta,
        reused: false,
    })
}

/// `report(bytes_done, bytes_total)` as the files are read.
struct Progress<'p> {
    report: &'p mut dyn FnMut(u64, u64),
    /// Bytes of the files done.
    done: u64,
    total: u64,
}

impl Progress<'_> {
    /// `within` bytes into the file being read.
    fn at(&mut self, within: u64) {
        (self.report)(self.done + within, self.total);
    }

    /// A file of `bytes` done.
    fn file_done(&mut self, bytes: u64) {
        self.done += bytes;
        (self.report)(self.done, self.total);
    }
}

/// An already tokenized file (llm.c / nanoGPT) into `split`: the ids as they
/// are, their end-of-text tokens included. Returns its documents: one per
/// end-of-text (at least one when it holds tokens).
fn push_token_file(
    split: &mut Split,
    file: &Path,
    info: &SourceInfo,
    eos_id: u32,
    progress: &mut Progress<'_>,
) -> Result<u64> {
    let tokens = super::token_files::TokenFile::open(file)?;
    let mut eos_seen = 0u64;
    for (i, tok) in tokens.ids().enumerate() {
        eos_seen += u64::from(tok == eos_id);
        split.push(tok, file)?;
        if i % (1 << 20) == 0 {
            progress.at(info.bytes * i as u64 / tokens.len().max(1) as u64);
        }
    }
    Ok(eos_seen.max(u64::from(!tokens.is_empty())))
}

/// The documents of a text, JSONL or Parquet file tokenized into `split`,
/// each after an end-of-text token, pieces of 64 encoded in parallel.
/// Returns its documents.
fn push_text_file(
    split: &mut Split,
    file: &Path,
    info: &SourceInfo,
    opts: &PrepareOptions,
    encode: &EncodeFn,
    progress: &mut Progress<'_>,
) -> Result<u64> {
    let mut documents = 0;
    let docs = file_documents(file, &opts.text_field)?;
    // (starts a document, text)
    let mut pieces: Vec<(bool, &str)> = Vec::new();
    for doc in &docs {
        if doc.trim().is_empty() {
            continue;
        }
        for (k, p) in split_pieces(doc).into_iter().enumerate() {
            pieces.push((k == 0, p));
        }
    }
    let file_pieces = pieces.len().max(1) as u64;
    for (g, group) in pieces.chunks(64).enumerate() {
        let encoded: Vec<std::result::Result<Vec<u32>, String>> =
            group.par_iter().map(|(_, p)| encode(p)).collect();
        for ((starts_doc, _), ids) in group.iter().zip(encoded) {
            let ids = ids.map_err(|m| DataError::Parse {
                path: file.to_path_buf(),
                line: 0,
                message: format!("tokenizer: {m}"),
            })?;
            if *starts_doc {
                documents += 1;
            }
            let eos = starts_doc.then_some(opts.eos_id);
            for tok in eos.into_iter().chain(ids) {
                split.push(tok, file)?;
            }
        }
        let frac = ((g + 1) * 64).min(pieces.len()) as u64;
        progress.at(info.bytes * frac / file_pieces);
    }
    Ok(documents)
}

/// Whether the shards in `out_dir` were made from `paths` (their sizes and
/// modification times as recorded) with `opts`: `Ok(meta)` when they were,
/// else what differs, in words. Reads and writes nothing else, so a resumed
/// run can check its data before anything is replaced.
pub fn check_shards(
    paths: &[PathBuf],
    out_dir: &Path,
    opts: &PrepareOptions,
) -> Result<std::result::Result<ShardMeta, String>> {
    let sources = list_sources(paths)?
        .iter()
        .map(|f| source_info(f))
        .collect::<Result<Vec<_>>>()?;
    Ok(shards_differ(out_dir, &sources, opts))
}

/// See [`check_shards`].
fn shards_differ(
    out_dir: &Path,
    sources: &[SourceInfo],
    opts: &PrepareOptions,
) -> std::result::Result<ShardMeta, String> {
    let meta_path = out_dir.join("meta.json");
    let Ok(text) = std::fs::read_to_string(&meta_path) else {
        return Err(format!("{} is missing", meta_path.display()));
    };
    let Ok(meta) = serde_json::from_str::<ShardMeta>(&text) else {
        return Err(format!("{} does not parse", meta_path.display()));
    };
    let why = if meta.version != META_VERSION {
        format!(
            "shard format {} (this build writes {META_VERSION})",
            meta.version
        )
    } else if meta.sources != sources {
        let stored: Vec<&str> = meta.sources.iter().map(|s| s.path.as_str()).collect();
        let given: Vec<&str> = sources.iter().map(|s| s.path.as_str()).collect();
        if stored == given {
            let changed = meta
                .sources
                .iter()
                .zip(sources)
                .find(|(a, b)| a != b)
                .map_or(String::new(), |(a, _)| a.path.clone());
            format!("{changed} changed (size or modification time) since the shards were made")
        } else {
            format!(
                "the shards were made from [{}], not [{}]",
                stored.join(", "),
                given.join(", ")
            )
        }
    } else if meta.tokenizer != opts.tokenizer_id
        || meta.vocab_size as usize != opts.vocab_size
        || meta.eos_id != opts.eos_id
    {
        "the shards were made with another tokenizer".to_string()
    } else if meta.val_fraction != opts.val_fraction {
        format!(
            "the shards hold out a validation fraction of {}, not {}",
            meta.val_fraction, opts.val_fraction
        )
    } else if meta.text_field != opts.text_field
        && meta
            .sources
            .iter()
            .any(|s| super::source::is_rows(Path::new(&s.path)))
    {
        format!(
            "the shards hold the `{}` field of the rows, not `{}`",
            meta.text_field, opts.text_field
        )
    } else if let Err(e) = open_shards(out_dir) {
        format!("the shards do not open: {e}")
    } else {
        return Ok(meta);
    };
    Err(why)
}

/// Opens the shards written by [`prepare_shards`].
pub fn open_shards(dir: &Path) -> Result<TokenData> {
    let meta_path = dir.join("meta.json");
    let text = std::fs::read_to_string(&meta_path).map_err(io_err(&meta_path))?;
    let meta: ShardMeta = serde_json::from_str(&text).map_err(|e| DataError::Parse {
        path: meta_path.clone(),
        line: e.line(),
        message: e.to_string(),
    })?;
    let train = TokenShard::open(&dir.join("train.bin"))?;
    let val = if meta.val_tokens > 0 {
        Some(TokenShard::open(&dir.join("val.bin"))?)
    } else {
        None
    };
    let mismatch = train.len() as u64 != meta.train_tokens
        || val.as_ref().map_or(0, |v| v.len() as u64) != meta.val_tokens;
    if mismatch {
        return Err(DataError::Invalid(format!(
            "{}: shard sizes do not match meta.json; delete the folder to rebuild it",
            dir.display()
        )));
    }
    for shard in std::iter::once(&train).chain(val.as_ref()) {
        let max = shard.max_token();
        if !shard.is_empty() && max as u64 >= meta.vocab_size as u64 {
            return Err(DataError::Invalid(format!(
                "{}: token id {max} is outside the vocabulary of {} in meta.json; \
                 delete the folder to rebuild it",
                shard.path().display(),
                meta.vocab_size
            )));
        }
    }
    Ok(TokenData { meta, train, val })
}

/// FNV-1a over the contents of `files`: a cheap identity for a tokenizer.
pub fn fingerprint_files(files: &[PathBuf]) -> std::io::Result<String> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for f in files {
        for b in std::fs::read(f)? {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    Ok(format!("fnv1a64:{h:016x}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cut_only_before_non_space() {
        let line = "word ".repeat(20) + "\n";
        let doc = line.repeat(3000) + "\n\n  indented\nend";
        let pieces = split_pieces(&doc);
        assert!(pieces.len() > 2);
        assert_eq!(pieces.concat(), doc);
        for p in &pieces[..pieces.len() - 1] {
            assert!(p.ends_with('\n'));
        }
        for p in &pieces[1..] {
            assert!(!p.as_bytes()[0].is_ascii_whitespace());
        }
    }
}
