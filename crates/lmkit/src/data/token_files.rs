//! Token files of other trainers, read as pretraining data without
//! re-tokenizing and written for them:
//!
//! - llm.c (`dev/data/data_common.py`, `write_datafile`): a header of 256
//!   little-endian int32 — `[0]` magic, `[1]` version, `[2]` token count —
//!   then the tokens: magic 20240520 / version 1 holds uint16 ids (GPT-2),
//!   magic 20240801 / version 7 uint32 ids (Llama 3; read, not written).
//! - nanoGPT (`data/*/prepare.py`): raw little-endian uint16 ids, no header
//!   (`np.memmap(path, dtype=np.uint16)`).
//!
//! A `.bin` file with llm.c's magic and a consistent length is llm.c's; any
//! other even-length file is nanoGPT's. Documents: llm.c's scripts put the
//! end-of-text token before every document, nanoGPT's after every document;
//! [`join_documents`] does the same, and reading keeps the ids as they are.

use std::io::Write;
use std::path::Path;

use memmap2::Mmap;

use super::{io_err, DataError, Result};

/// llm.c's header: 256 int32.
pub const LLMC_HEADER_BYTES: usize = 256 * 4;
/// llm.c's GPT-2 files: magic and version (uint16 tokens).
pub const LLMC_MAGIC: i32 = 20240520;
pub const LLMC_VERSION: i32 = 1;
/// llm.c's Llama 3 files (uint32 tokens).
pub const LLMC_MAGIC_U32: i32 = 20240801;
pub const LLMC_VERSION_U32: i32 = 7;
/// llm.c asserts fewer tokens than this in one file (its count is an int32).
pub const LLMC_MAX_TOKENS: usize = (1 << 31) - 1;

/// A token-file layout lmkit reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenFileFormat {
    /// llm.c's header + uint16 (or, read only, uint32) ids.
    Llmc,
    /// nanoGPT's raw uint16 ids.
    NanoGpt,
}

impl std::str::FromStr for TokenFileFormat {
    type Err = DataError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "llmc" | "llm.c" => Ok(TokenFileFormat::Llmc),
            "nanogpt" => Ok(TokenFileFormat::NanoGpt),
            other => Err(DataError::Invalid(format!(
                "unknown token file format {other:?} (llmc or nanogpt)"
            ))),
        }
    }
}

/// Whether lmkit reads `path` as a token file (`.bin`) rather than text.
pub fn is_token_file(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("bin"))
}

/// A token file, memory-mapped and checked (header, length), not yet its ids.
pub struct TokenFile {
    map: Mmap,
    format: TokenFileFormat,
    /// Byte offset of the first token.
    start: usize,
    /// Bytes per token (2 or 4).
    width: usize,
    len: usize,
}

impl TokenFile {
    pub fn open(path: &Path) -> Result<Self> {
        let file = std::fs::File::open(path).map_err(io_err(path))?;
        // SAFETY: read-only map of a user's data file; lmkit never writes it.
        // A file truncated while mapped would fault, as for any mmap reader;
        // data files are not expected to change during a run.
        let map = unsafe { Mmap::map(&file) }.map_err(io_err(path))?;
        Self::from_map(map).map_err(|message| DataError::Parse {
            path: path.to_path_buf(),
            line: 0,
            message,
        })
    }

    fn from_map(map: Mmap) -> std::result::Result<Self, String> {
        let (format, start, width, len) = layout(&map)?;
        Ok(TokenFile {
            map,
            format,
            start,
            width,
            len,
        })
    }

    pub fn format(&self) -> TokenFileFormat {
        self.format
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The ids, in order.
    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        ids_of(&self.map[self.start..], self.width)
    }
}

fn ids_of(data: &[u8], width: usize) -> impl Iterator<Item = u32> + '_ {
    data.chunks_exact(width).map(move |b| {
        if width == 2 {
            u16::from_le_bytes([b[0], b[1]]) as u32
        } else {
            u32::from_le_bytes([b[0], b[1], b[2], b[3]])
        }
    })
}

/// `(format, first token byte, token width, token count)` of a token file's
/// bytes; the error says what is wrong, in words.
fn layout(bytes: &[u8]) -> std::result::Result<(TokenFileFormat, usize, usize, usize), String> {
    // lmkit's own shard magic (`shards::SHARD_MAGIC`, not imported: shards reads this module).
    if bytes.starts_with(b"LMKTOK01") {
        return Err(
            "an lmkit token shard (OUTPUT/data/*.bin): pretrain reuses those from \
                    its run folder; give --data the text, or export with `lmkit tokenize \
                    --format llmc`"
                .into(),
        );
    }
    let int = |i: usize| {
        bytes
            .get(i * 4..i * 4 + 4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let magic = int(0);
    if magic == Some(LLMC_MAGIC) || magic == Some(LLMC_MAGIC_U32) {
        let (version, width) = if magic == Some(LLMC_MAGIC) {
            (LLMC_VERSION, 2)
        } else {
            (LLMC_VERSION_U32, 4)
        };
        let got = int(1).unwrap_or(-1);
        if got != version {
            return Err(format!(
                "llm.c token file version {got} (expected {version} for magic {})",
                magic.unwrap_or(0)
            ));
        }
        let count = int(2).unwrap_or(-1);
        let expected = usize::try_from(count)
            .ok()
            .and_then(|n| n.checked_mul(width))
            .and_then(|n| n.checked_add(LLMC_HEADER_BYTES));
        if expected != Some(bytes.len()) {
            return Err(format!(
                "llm.c header says {count} tokens of {width} bytes, the file has {} bytes \
                 (truncated or not an llm.c file)",
                bytes.len()
            ));
        }
        return Ok((
            TokenFileFormat::Llmc,
            LLMC_HEADER_BYTES,
            width,
            count as usize,
        ));
    }
    if !bytes.len().is_multiple_of(2) {
        return Err(format!(
            "{} bytes: neither an llm.c token file (magic {LLMC_MAGIC}) nor nanoGPT's \
             uint16 ids (an even number of bytes)",
            bytes.len()
        ));
    }
    Ok((TokenFileFormat::NanoGpt, 0, 2, bytes.len() / 2))
}

/// The ids of a token file's bytes (what [`TokenFile`] reads from a file):
/// for fuzzing and in-memory use.
pub fn parse_token_bytes(bytes: &[u8]) -> Result<Vec<u32>> {
    let (_, start, width, _) = layout(bytes).map_err(DataError::Invalid)?;
    Ok(ids_of(&bytes[start..], width).collect())
}

/// One token stream of documents, as the other trainer's scripts make it:
/// `eos` before every document (llm.c) or after every document (nanoGPT).
pub fn join_documents(format: TokenFileFormat, docs: &[Vec<u32>], eos: u32) -> Vec<u32> {
    let total: usize = docs.iter().map(|d| d.len() + 1).sum();
    let mut out = Vec::with_capacity(total);
    for d in docs {
        if format == TokenFileFormat::Llmc {
            out.push(eos);
        }
        out.extend_from_slice(d);
        if format == TokenFileFormat::NanoGpt {
            out.push(eos);
        }
    }
    out
}

/// Writes `ids` in `format` (uint16 ids: every id must be below 65536; llm.c:
/// fewer than 2^31 tokens). Checked before a byte is written.
pub fn write_token_file(out: &mut dyn Write, format: TokenFileFormat, ids: &[u32]) -> Result<()> {
    if let Some((i, id)) = ids.iter().enumerate().find(|(_, &id)| id > u16::MAX as u32) {
        return Err(DataError::Invalid(format!(
            "token {i} has id {id}: these files hold uint16 ids (a vocabulary of at most 65536)"
        )));
    }
    if format == TokenFileFormat::Llmc {
        if ids.len() > LLMC_MAX_TOKENS {
            return Err(DataError::Invalid(format!(
                "{} tokens: an llm.c file holds fewer than 2^31; split the data",
                ids.len()
            )));
        }
        let mut header = [0u8; LLMC_HEADER_BYTES];
        for (k, v) in [LLMC_MAGIC, LLMC_VERSION, ids.len() as i32]
            .into_iter()
            .enumerate()
        {
            header[k * 4..k * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        out.write_all(&header).map_err(io_err("<output>"))?;
    }
    let mut buf = Vec::with_capacity(ids.len() * 2);
    for &id in ids {
        buf.extend_from_slice(&(id as u16).to_le_bytes());
    }
    out.write_all(&buf).map_err(io_err("<output>"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_formats_round_trip_and_bad_files_are_errors() {
        let docs = vec![vec![10, 20, 30], vec![65535, 0]];
        for format in [TokenFileFormat::Llmc, TokenFileFormat::NanoGpt] {
            let ids = join_documents(format, &docs, 50256);
            let mut bytes = Vec::new();
            write_token_file(&mut bytes, format, &ids).unwrap();
            assert_eq!(parse_token_bytes(&bytes).unwrap(), ids);
            assert_eq!(layout(&bytes).unwrap().0, format);
        }
        let llmc = {
            let mut b = Vec::new();
            write_token_file(&mut b, TokenFileFormat::Llmc, &[1, 2, 3]).unwrap();
            b
        };
        assert_eq!(llmc.len(), 1024 + 6);
        assert!(parse_token_bytes(&llmc[..llmc.len() - 2]).is_err());
        let mut v2 = llmc.clone();
        v2[4] = 2;
        assert!(parse_token_bytes(&v2).is_err());
        let mut huge = llmc.clone();
        huge[8..12].copy_from_slice(&i32::MAX.to_le_bytes());
        assert!(parse_token_bytes(&huge).is_err());
        huge[8..12].copy_from_slice(&(-1i32).to_le_bytes());
        assert!(parse_token_bytes(&huge).is_err());
        assert!(parse_token_bytes(&[1, 2, 3]).is_err());
        assert!(parse_token_bytes(b"LMKTOK01\x02\0\0\0").is_err());
        let mut out = Vec::new();
        assert!(write_token_file(&mut out, TokenFileFormat::NanoGpt, &[70000]).is_err());
        assert!(out.is_empty());
    }
}
