//! tiktoken's `.tiktoken` rank files (`<base64 token> <rank>` per line) and
//! the tokenizer of ranks: every OpenAI encoding's vocabulary.
//!
//! tiktoken merges the adjacent pair whose concatenation has the lowest
//! rank (leftmost on ties), any two tokens that spell a token: so each way
//! to cut a token into two tokens is a merge of that token's rank, and a
//! whole piece that is a token is that token (see
//! [`super::model::BpeModel::new`]).

use std::path::Path;

use super::build::Tables;
use super::files::parse_error;
use super::model::{Piece, TokenIndex};
use super::{BpeTokenizer, Kind};
use crate::pretokenize::Pattern;
use crate::{Error, Result, MAX_VOCAB_SIZE};

/// Value of each base64 character (standard alphabet), 255 for others.
static BASE64: [u8; 256] = {
    let mut t = [255u8; 256];
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut i = 0;
    while i < 64 {
        t[alphabet[i] as usize] = i as u8;
        i += 1;
    }
    t
};

/// Appends the bytes of standard, padded base64 `s` to `out`; `Err` says
/// what is wrong (a wrong length, character or padding).
fn decode_base64(s: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    if s.is_empty() || !s.len().is_multiple_of(4) {
        return Err(format!(
            "base64 of {} characters (not a multiple of 4)",
            s.len()
        ));
    }
    let pad = s.iter().rev().take_while(|&&c| c == b'=').count();
    if pad > 2 {
        return Err("base64 with more than two '=' of padding".into());
    }
    let body = &s[..s.len() - pad];
    let mut acc = 0u32;
    for (k, &c) in body.iter().enumerate() {
        let v = BASE64[c as usize];
        if v == 255 {
            return Err(format!("{:?} is not a base64 character", c as char));
        }
        acc = acc << 6 | v as u32;
        if k % 4 == 3 {
            out.extend_from_slice(&acc.to_be_bytes()[1..]);
            acc = 0;
        }
    }
    // The last group: 2 or 3 characters hold 1 or 2 bytes, whose unused
    // low bits must be zero (canonical base64, as tiktoken writes it).
    match body.len() % 4 {
        0 => {}
        2 if acc & 0xF == 0 => out.push((acc >> 4) as u8),
        3 if acc & 0x3 == 0 => out.extend_from_slice(&((acc >> 2) as u16).to_be_bytes()),
        _ => return Err("base64 with stray bits in its last character".into()),
    }
    Ok(())
}

/// Parses a `.tiktoken` rank file (`path` names it in errors): each
/// non-empty line is a token's bytes in base64 and its rank, one space
/// apart. Every line is checked (base64, a rank below
/// [`MAX_VOCAB_SIZE`], no token or rank twice); the tokens are returned
/// with their ranks, in file order.
pub fn parse_tiktoken(path: &Path, data: &[u8]) -> Result<Vec<(Vec<u8>, u32)>> {
    let mut tokens = Vec::with_capacity(data.len() / 12);
    let mut seen_rank = Vec::new();
    for (k, line) in data.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let err = |message: String| parse_error(path, k + 1, message);
        let mut fields = line.split(|&b| b == b' ');
        let (Some(b64), Some(rank), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(err("expected `<base64 token> <rank>`".into()));
        };
        let rank = std::str::from_utf8(rank)
            .ok()
            .filter(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|r| r.parse::<u32>().ok())
            .filter(|&r| (r as usize) < MAX_VOCAB_SIZE)
            .ok_or_else(|| {
                err(format!(
                    "rank {:?} is not a number below {MAX_VOCAB_SIZE}",
                    String::from_utf8_lossy(rank)
                ))
            })?;
        let mut token = Vec::with_capacity(b64.len() * 3 / 4);
        decode_base64(b64, &mut token).map_err(&err)?;
        if seen_rank.len() <= rank as usize {
            seen_rank.resize(rank as usize + 1, false);
        }
        if std::mem::replace(&mut seen_rank[rank as usize], true) {
            return Err(err(format!("rank {rank} is given twice")));
        }
        tokens.push((token, rank));
    }
    if tokens.is_empty() {
        return Err(parse_error(path, 0, "no tokens".into()));
    }
    Ok(tokens)
}

impl BpeTokenizer {
    /// The tokenizer of tiktoken ranks (from [`parse_tiktoken`], `path`
    /// naming their file in errors), `specials` as `(text, id)`, cutting
    /// text with `pattern`. Every single byte must be a token, and the
    /// special tokens' ids must be free.
    pub fn from_tiktoken_ranks(
        path: &Path,
        ranks: &[(Vec<u8>, u32)],
        specials: &[(String, u32)],
        pattern: Pattern,
    ) -> Result<Self> {
        let err = |message: String| parse_error(path, 0, message);
        let size = ranks
            .iter()
            .map(|&(_, r)| r)
            .chain(specials.iter().map(|&(_, id)| id))
            .max()
            .map_or(0, |m| m as usize + 1);
        if size > MAX_VOCAB_SIZE {
            return Err(err(format!(
                "id {} is not below {MAX_VOCAB_SIZE}",
                size - 1
            )));
        }
        let mut kinds = vec![Kind::Hole; size];
        let mut span = vec![(0usize, 0usize); size];
        let mut arena = Vec::with_capacity(ranks.iter().map(|(t, _)| t.len()).sum());
        let mut index = TokenIndex::with_capacity(ranks.len());
        for (token, rank) in ranks {
            if token.is_empty() {
                return Err(err(format!("rank {rank} is an empty token")));
            }
            if kinds[*rank as usize] != Kind::Hole {
                return Err(err(format!("rank {rank} is given twice")));
            }
            if let Err(first) = index.insert(token, *rank) {
                return Err(err(format!(
                    "ranks {first} and {rank} are the same token {token:?}"
                )));
            }
            kinds[*rank as usize] = Kind::Ordinary;
            span[*rank as usize] = (arena.len(), arena.len() + token.len());
            arena.extend_from_slice(token);
        }
        if let Some(b) = (0..=255u8).find(|&b| index.get(&[b]).is_none()) {
            return Err(err(format!(
                "byte 0x{b:02x} has no token; byte-level BPE needs all 256"
            )));
        }
        // Two texts may share a special id (tiktoken's o200k_harmony:
        // `<|endofprompt|>` and `<|reserved_200018|>`); an ordinary id not.
        for (k, (text, id)) in specials.iter().enumerate() {
            let twice = specials[..k].iter().any(|(t, _)| t == text);
            if text.is_empty() || twice || kinds[*id as usize] == Kind::Ordinary {
                return Err(err(format!(
                    "special token {text:?} (id {id}) is empty, given twice, or its id is a token's"
                )));
            }
            kinds[*id as usize] = Kind::Special;
        }
        if arena.len() > u32::MAX as usize {
            return Err(err("the tokens are larger than 4 GiB".into()));
        }
        // The tokens' bytes by id, holes and specials empty.
        let mut bytes = Vec::with_capacity(arena.len());
        let mut starts = Vec::with_capacity(size + 1);
        starts.push(0u32);
        for &(a, b) in &span {
            bytes.extend_from_slice(&arena[a..b]);
            starts.push(bytes.len() as u32);
        }
        drop(arena);
        // Every cut of every token into two tokens, at the token's rank.
        let (mut merges, mut merged) = (Vec::new(), Vec::new());
        for id in 0..size {
            let t = &bytes[starts[id] as usize..starts[id + 1] as usize];
            for k in 1..t.len() {
                if let (Some(l), Some(r)) = (index.get(&t[..k]), index.get(&t[k..])) {
                    merges.push((l, r));
                    merged.push(id as u32);
                }
            }
        }
        let tables = Tables {
            bytes,
            starts,
            kinds,
            index,
            merge_ranks: Some(merged.clone()),
            merges,
            merged,
            specials: specials
                .iter()
                .map(|(t, id)| (t.as_bytes().to_vec(), *id))
                .collect(),
        };
        let mut tokenizer = Self::assemble(tables, None);
        tokenizer.pattern = pattern;
        Ok(tokenizer)
    }

    /// tiktoken's `_encode_single_piece`: BPE of `piece` as one piece (no
    /// pre-tokenization, no special tokens).
    pub fn encode_single_piece(&self, piece: &[u8]) -> Vec<u32> {
        let mut out = Vec::new();
        match piece {
            [] => {}
            [b] => out.push(self.model.index.byte_ids[*b as usize]),
            _ => {
                let p = Piece::new(piece);
                let whole = if self.model.piece_is_token {
                    self.model.lookup_token(&p)
                } else {
                    self.model.lookup_whole(&p)
                };
                match whole {
                    Some(id) => out.push(id),
                    None => self.model.merge_piece(piece, &mut out),
                }
            }
        }
        out
    }

    /// tiktoken's `byte_pair_encode`: the merge loop on `piece` alone, no
    /// lookup of the whole piece first (which [`Self::encode_single_piece`]
    /// does, as tiktoken's `_encode_single_piece`).
    pub fn byte_pair_encode(&self, piece: &[u8]) -> Vec<u32> {
        let mut out = Vec::new();
        match piece {
            [] => {}
            [b] => out.push(self.model.index.byte_ids[*b as usize]),
            _ => self.model.merge_piece(piece, &mut out),
        }
        out
    }

    /// The last pre-tokenization piece of `text`, if it has one.
    fn last_piece(&self, text: &[u8]) -> Option<std::ops::Range<usize>> {
        match &self.pattern {
            Pattern::Gpt2 => crate::pretokenize::split_gpt2(text).last(),
            Pattern::Cl100k => crate::pretokenize::split_cl100k(text).last(),
            Pattern::O200k => crate::pretokenize::split_o200k(text).last(),
            Pattern::Custom(p) => p.pieces(text).pop(),
        }
    }

    /// tiktoken's `last_piece_token_len` of encoding `text` with the
    /// special tokens `allowed`: how many of the ids are those of the last
    /// piece after the last special token (0 when the text ends with one,
    /// or nothing after it is a piece). `encode_with_unstable` starts there.
    pub fn last_piece_token_len(&self, text: &[u8], allowed: impl Fn(u32) -> bool) -> usize {
        let mut start = 0;
        while let Some((at, len, _)) = self.find_special_among(text, start, &allowed) {
            start = at + len;
        }
        let tail = &text[start..];
        self.last_piece(tail)
            .map_or(0, |r| self.encode_single_piece(&tail[r]).len())
    }

    /// tiktoken's `_encode_bytes`: the valid UTF-8 prefix of `bytes`
    /// encoded as text, except that its last piece (with the all-space
    /// tokens before it) and the invalid rest are encoded as one piece.
    /// On valid UTF-8 it is [`Self::encode_ordinary`].
    pub fn encode_bytes_tiktoken(&self, bytes: &[u8]) -> Vec<u32> {
        let valid = match std::str::from_utf8(bytes) {
            Ok(_) => return self.encode_ordinary(bytes),
            Err(e) => e.valid_up_to(),
        };
        let text = &bytes[..valid];
        let last_start = self.last_piece(text).map_or(valid, |r| r.start);
        let mut tokens = self.encode_ordinary(&text[..last_start]);
        let mut unstable = self.encode_ordinary(&text[last_start..]);
        let all_space = |id: u32| {
            self.token_bytes(id)
                .is_some_and(|b| b.iter().all(|c| matches!(c, b' ' | b'\n' | b'\t')))
        };
        if unstable.first().is_some_and(|&id| all_space(id)) {
            while tokens.last().is_some_and(|&id| all_space(id)) {
                unstable.insert(0, tokens.pop().expect("not empty"));
            }
        }
        let mut rest = self.decode(&unstable).expect("ids of this tokenizer");
        rest.extend_from_slice(&bytes[valid..]);
        tokens.extend(self.encode_single_piece(&rest));
        tokens
    }

    /// [`Self::from_tiktoken_ranks`] of a `.tiktoken` file.
    pub fn from_tiktoken_file(
        path: impl AsRef<Path>,
        specials: &[(String, u32)],
        pattern: Pattern,
    ) -> Result<Self> {
        let path = path.as_ref();
        let data = std::fs::read(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_tiktoken_ranks(path, &parse_tiktoken(path, &data)?, specials, pattern)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        decode_base64(s.as_bytes(), &mut out).map(|()| out)
    }

    #[test]
    fn base64_is_strict() {
        assert_eq!(b64("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(b64("aGk=").unwrap(), b"hi");
        assert_eq!(b64("aA==").unwrap(), b"h");
        assert_eq!(b64("/w==").unwrap(), [0xff]);
        for bad in ["", "aGk", "aG!=", "a===", "aB==", "aGl=", "=aGk"] {
            assert!(b64(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn rank_files_are_checked_line_by_line() {
        let p = Path::new("x.tiktoken");
        let ok = parse_tiktoken(p, b"IQ== 0\r\n\nIg== 1\n").unwrap();
        assert_eq!(ok, [(b"!".to_vec(), 0), (b"\"".to_vec(), 1)]);
        for (bad, line, what) in [
            (&b"IQ== 0\nIg== 0\n"[..], 2, "twice"),
            (b"IQ==  0", 1, "expected"),
            (b"IQ== 0 1", 1, "expected"),
            (b"IQ== -1", 1, "rank"),
            (b"IQ== 99999999999", 1, "rank"),
            (b"IQ 0", 1, "base64"),
            (b"", 0, "no tokens"),
        ] {
            let e = parse_tiktoken(p, bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("x.tiktoken:{line}:")), "{e}");
            assert!(e.contains(what), "{e}");
        }
    }

    #[test]
    fn ranks_need_every_byte_and_free_special_ids() {
        let p = Path::new("x.tiktoken");
        let bytes: Vec<(Vec<u8>, u32)> = (0..=255u8).map(|b| (vec![b], b as u32)).collect();
        let specials = [("<|s|>".to_string(), 256)];
        let t = BpeTokenizer::from_tiktoken_ranks(p, &bytes, &specials, Pattern::Gpt2).unwrap();
        assert_eq!(t.encode_ids(b"ab<|s|>", true), [97, 98, 256]);
        let e = BpeTokenizer::from_tiktoken_ranks(p, &bytes[1..], &[], Pattern::Gpt2);
        assert!(e.unwrap_err().to_string().contains("byte 0x00"));
        let taken = [("<|s|>".to_string(), 3)];
        let e = BpeTokenizer::from_tiktoken_ranks(p, &bytes, &taken, Pattern::Gpt2);
        assert!(e.unwrap_err().to_string().contains("id is a token's"));
        let mut twice = bytes.clone();
        twice.push((b"a".to_vec(), 300));
        let e = BpeTokenizer::from_tiktoken_ranks(p, &twice, &[], Pattern::Gpt2);
        assert!(e.unwrap_err().to_string().contains("same token"));
    }
}
