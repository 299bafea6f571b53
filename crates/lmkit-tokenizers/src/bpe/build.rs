//! A vocabulary and its merges checked and indexed into [`Tables`], and the
//! tokenizer of checked tables.

use std::path::Path;
use std::sync::OnceLock;

use super::files::{self, parse_error, Entries, MergeLine, Merges};
use super::hash::FastMap;
use super::model::{BpeModel, TokenIndex};
use super::{byte_level, cache, BpeTokenizer, Kind, Spellings};
use crate::pretokenize::Pattern;
use crate::{Error, Result};

/// A vocabulary and its merges, checked: ids below `kinds.len()`, the
/// ordinary tokens' bytes distinct (indexed by `index`) with every single
/// byte among them, merge `rank` joins `merges[rank]` into `merged[rank]`
/// (whose bytes are theirs concatenated), and each special id's text.
pub(super) struct Tables {
    /// Bytes of token `id` are `bytes[starts[id]..starts[id + 1]]`.
    pub(super) bytes: Vec<u8>,
    pub(super) starts: Vec<u32>,
    pub(super) kinds: Vec<Kind>,
    pub(super) index: TokenIndex,
    pub(super) merges: Vec<(u32, u32)>,
    pub(super) merged: Vec<u32>,
    /// Each merge's rank when it is not its position (tiktoken's rank
    /// files: see [`super::model::BpeModel::new`]).
    pub(super) merge_ranks: Option<Vec<u32>>,
    pub(super) specials: Vec<(Vec<u8>, u32)>,
}

/// Where the vocabulary and merges came from, for error messages.
pub(super) struct Source<'a> {
    pub(super) vocab_path: &'a Path,
    pub(super) vocab_text: &'a str,
    pub(super) merges_path: &'a Path,
}

/// The vocabulary's tokens checked and indexed, in file order.
struct Vocab {
    kinds: Vec<Kind>,
    /// Bytes of the tokens in file order: entry k's are
    /// `arena[ends[k]..ends[k + 1]]` (empty for special tokens).
    arena: Vec<u8>,
    ends: Vec<u32>,
    /// Whether entry k has id k for every k: then the file order is the
    /// id order and the tables need no reordering.
    in_order: bool,
    index: TokenIndex,
}

impl Source<'_> {
    fn vocab_err(&self, token: &str, message: String) -> Error {
        parse_error(
            self.vocab_path,
            files::line_of_json_string(self.vocab_text, token),
            message,
        )
    }

    /// The error of merge `m`: its line in merges.txt, or looked up in the
    /// tokenizer.json.
    fn merge_err(&self, m: &MergeLine, message: String) -> Error {
        let line = match m.line {
            0 => files::merge_line_in_json(
                self.vocab_text,
                &String::from_utf8_lossy(m.left),
                &String::from_utf8_lossy(m.right),
            ),
            line => line,
        };
        parse_error(self.merges_path, line, message)
    }
}

impl BpeTokenizer {
    /// Checks and indexes the vocabulary and merges: linear, one table of
    /// tokens by their bytes (kept by the model) with one insert per token
    /// and two or three lookups per merge, no allocation per entry, and no
    /// copy of the tables when the vocabulary is in id order.
    pub(super) fn build(
        src: &Source,
        entries: Entries,
        merges_in: &Merges,
        specials: Vec<(String, u32)>,
    ) -> Result<Self> {
        let Vocab {
            kinds,
            arena,
            ends,
            in_order,
            index,
        } = check_vocab(src, &entries, &specials)?;
        // The tokens' bytes by id: `bytes[starts[id]..starts[id + 1]]`.
        let (bytes, starts) = if in_order {
            (arena, ends)
        } else {
            let mut span = vec![(0u32, 0u32); kinds.len()];
            for (k, (_, id)) in entries.iter().enumerate() {
                span[id as usize] = (ends[k], ends[k + 1]);
            }
            let mut bytes = Vec::with_capacity(arena.len());
            let mut starts = Vec::with_capacity(kinds.len() + 1);
            starts.push(0);
            for (a, b) in span {
                bytes.extend_from_slice(&arena[a as usize..b as usize]);
                starts.push(bytes.len() as u32);
            }
            (bytes, starts)
        };
        let spellings = Spellings::new(entries, &kinds, in_order);
        let (merges, merged) = check_merges(src, merges_in, &kinds, &index, &spellings, |id| {
            &bytes[starts[id] as usize..starts[id + 1] as usize]
        })?;
        let specials = specials
            .into_iter()
            .map(|(c, id)| (c.into_bytes(), id))
            .collect();
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
        Ok(Self::assemble(tables, Some(spellings)))
    }

    /// The tokenizer of checked tables (see [`Tables`]).
    pub(super) fn assemble(t: Tables, spellings: Option<Spellings>) -> Self {
        let model = BpeModel::new(
            t.bytes,
            t.starts,
            t.index,
            &t.merges,
            &t.merged,
            t.merge_ranks.as_deref(),
        );
        let mut specials = t.specials;
        specials.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        specials.retain(|(c, _)| !c.is_empty());
        let mut special_first_byte = [false; 256];
        for (c, _) in &specials {
            special_first_byte[c[0] as usize] = true;
        }
        let cell = OnceLock::new();
        if let Some(s) = spellings {
            let _ = cell.set(s);
        }
        BpeTokenizer {
            model,
            spellings: cell,
            kinds: t.kinds,
            merges: t.merges,
            specials,
            special_first_byte,
            owner: cache::new_owner(),
            word_cache: true,
            pattern: Pattern::Gpt2,
        }
    }
}

/// Checks the vocabulary's entries (ids given once, ordinary tokens spelled
/// in the byte alphabet and distinct, every byte a token) and indexes the
/// ordinary tokens by their bytes.
fn check_vocab(src: &Source, entries: &Entries, specials: &[(String, u32)]) -> Result<Vocab> {
    let size = entries
        .iter()
        .map(|(_, id)| id as usize + 1)
        .max()
        .unwrap_or(0);
    let mut kinds = vec![Kind::Hole; size];
    let mut arena: Vec<u8> = Vec::with_capacity(entries.text_len());
    let mut ends: Vec<u32> = Vec::with_capacity(entries.len() + 1);
    ends.push(0);
    let mut in_order = true;
    let mut index = TokenIndex::with_capacity(entries.len());
    let mut special_ids: FastMap<&str, u32> = FastMap::default();
    for (k, (token, id)) in entries.iter().enumerate() {
        let i = id as usize;
        in_order &= i == k;
        if kinds[i] != Kind::Hole {
            let first = entries
                .iter()
                .find(|&(_, j)| j == id)
                .map_or("", |(t, _)| t);
            return Err(src.vocab_err(
                token,
                format!("id {id} is given to both {first:?} and {token:?}"),
            ));
        }
        let twice = || src.vocab_err(token, format!("token {token:?} appears twice"));
        if specials.iter().any(|(c, _)| c == token) {
            if special_ids.insert(token, id).is_some() {
                return Err(twice());
            }
            kinds[i] = Kind::Special;
        } else {
            let start = arena.len();
            if !byte_level::token_to_bytes_into(token, &mut arena) {
                return Err(src.vocab_err(
                    token,
                    format!("token {token:?} is not spelled in GPT-2's byte-level alphabet"),
                ));
            }
            if arena.len() == start {
                return Err(src.vocab_err(token, "empty token".into()));
            }
            if arena.len() > u32::MAX as usize {
                return Err(src.vocab_err(token, "the vocabulary is larger than 4 GiB".into()));
            }
            if index.insert(&arena[start..], id).is_err() {
                return Err(twice());
            }
            kinds[i] = Kind::Ordinary;
        }
        ends.push(arena.len() as u32);
    }
    for b in 0..=255u8 {
        if index.get(&[b]).is_none() {
            let c = byte_level::BYTE_TO_CHAR[b as usize];
            return Err(parse_error(
                src.vocab_path,
                0,
                format!("the vocabulary has no token for byte 0x{b:02x} ({c:?}); byte-level BPE needs all 256"),
            ));
        }
    }
    Ok(Vocab {
        kinds,
        arena,
        ends,
        in_order,
        index,
    })
}

/// Merges as `(left, right)` ids in rank order, and the id of each one's join.
type MergeIds = (Vec<(u32, u32)>, Vec<u32>);

/// Each merge's left and right ids and the id of their join, checked
/// against the vocabulary (`token(id)`: the bytes of ordinary token `id`).
fn check_merges<'t>(
    src: &Source,
    merges_in: &Merges,
    kinds: &[Kind],
    index: &TokenIndex,
    spellings: &Spellings,
    token: impl Fn(usize) -> &'t [u8],
) -> Result<MergeIds> {
    let size = kinds.len();
    let mut merges = Vec::with_capacity(merges_in.len());
    let mut merged_ids: Vec<u32> = Vec::with_capacity(merges_in.len());
    // The bytes of a merge's left and right tokens (then of their join).
    let (mut left, mut right) = (Vec::new(), Vec::new());
    for m in merges_in.iter() {
        // Merge results usually take consecutive ids in rank order
        // (GPT-2: 256 + rank): try the id after the previous result.
        let guess = merged_ids.last().map_or(256, |&m| m as usize + 1);
        // When it is spelled `left right` joined, cut at a character
        // boundary, the two tokens' bytes are its bytes cut after
        // left's characters (one byte each): no spelling to decode,
        // whose unpredictable branches cost more than the lookups.
        if guess < size && kinds[guess] == Kind::Ordinary {
            let spelled = spellings.get(guess as u32).as_bytes();
            let is_char_start = |b: &u8| b & 0xC0 != 0x80;
            if spelled.len() == m.left.len() + m.right.len()
                && spelled.starts_with(m.left)
                && spelled.ends_with(m.right)
                && m.right.first().is_some_and(is_char_start)
            {
                let (t, cut) = (
                    token(guess),
                    m.left.iter().filter(|b| is_char_start(b)).count(),
                );
                if let (Some(l), Some(r)) = (index.get(&t[..cut]), index.get(&t[cut..])) {
                    merges.push((l, r));
                    merged_ids.push(guess as u32);
                    continue;
                }
            }
        }
        let id_of = |t: &[u8], bytes: &mut Vec<u8>| {
            bytes.clear();
            byte_level::spelled_to_bytes_into(t, bytes)
                .then(|| index.get(bytes))
                .flatten()
                .ok_or_else(|| {
                    src.merge_err(
                        &m,
                        match std::str::from_utf8(t) {
                            Ok(t) => {
                                format!("merge token {t:?} is not an ordinary vocabulary token")
                            }
                            Err(_) => format!(
                                "merge token {:?} is not valid UTF-8",
                                String::from_utf8_lossy(t)
                            ),
                        },
                    )
                })
        };
        let (l, r) = (id_of(m.left, &mut left)?, id_of(m.right, &mut right)?);
        // The guess compared by bytes (unique), before looking the join up.
        let is_join = |t: &[u8]| {
            t.len() == left.len() + right.len() && t.starts_with(&left) && t.ends_with(&right)
        };
        let merged = if guess < size && kinds[guess] == Kind::Ordinary && is_join(token(guess)) {
            guess as u32
        } else {
            left.extend_from_slice(&right);
            index.get(&left).ok_or_else(|| {
                src.merge_err(
                    &m,
                    format!(
                        "merge result {:?} is not in the vocabulary",
                        String::from_utf8_lossy(&[m.left, m.right].concat())
                    ),
                )
            })?
        };
        merges.push((l, r));
        merged_ids.push(merged);
    }
    Ok((merges, merged_ids))
}
