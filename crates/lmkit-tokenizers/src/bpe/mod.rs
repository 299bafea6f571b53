//! GPT-2's byte-level BPE: load (`vocab.json` + `merges.txt`, or an HF
//! `tokenizer.json`), encode, decode, save.
//!
//! Encoding equals tiktoken's r50k/gpt2 and HF tokenizers id for id on valid
//! UTF-8 (see the tests). Any byte string is encodable: invalid UTF-8 bytes are
//! pre-tokenized as "other" characters (see [`crate::pretokenize`]) and BPE
//! works on bytes, so `decode(encode(x)) == x` for every `x`.
//!
//! Special tokens (`<|endoftext|>`) are recognised in the text only when asked
//! (`special = true`, like tiktoken's `allowed_special="all"`); otherwise their
//! text is encoded as ordinary text (tiktoken's `encode_ordinary`).

mod build;
pub mod byte_level;
mod cache;
mod compiled;
mod encode;
mod files;
mod hash;
mod joins;
mod model;
mod tiktoken;

use std::path::Path;
use std::sync::OnceLock;

use rayon::prelude::*;

use crate::pretokenize::Pattern;
use crate::{Encoding, Error, Result};
use build::{Source, Tables};
pub use compiled::cache_dir;
#[doc(hidden)]
pub use compiled::reseal as reseal_compiled;
pub(crate) use files::{line_of_json_string, read_bytes, text_of, write_atomic};
use files::{parse_error, Entries, Merges};
pub(crate) use hash::FastMap;
use model::BpeModel;
pub use tiktoken::parse_tiktoken;

/// GPT-2's end-of-text token.
pub const ENDOFTEXT: &str = "<|endoftext|>";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Hole,
    Ordinary,
    Special,
}

/// A byte-level BPE tokenizer (GPT-2 style).
#[derive(Debug, Clone)]
pub struct BpeTokenizer {
    model: BpeModel,
    /// Spelling of each id: the byte alphabet for ordinary tokens (as in
    /// vocab.json), the literal content for special tokens. Loading from
    /// text has them; a compiled tokenizer spells them out on first use
    /// (encoding and decoding never need them).
    spellings: OnceLock<Spellings>,
    kinds: Vec<Kind>,
    merges: Vec<(u32, u32)>,
    /// Special tokens, longest content first (longest match wins).
    specials: Vec<(Vec<u8>, u32)>,
    special_first_byte: [bool; 256],
    /// Unique per build: keys this tokenizer's entries in the per-thread word cache.
    owner: u64,
    word_cache: bool,
    /// How text is cut into pieces before BPE.
    pattern: Pattern,
}

/// Token spellings packed into one string, with every id's range and the
/// ids sorted by spelling for reverse lookup: a few bytes per token instead
/// of two heap strings and a hash-map slot (GPT-2: 5 MB less resident).
#[derive(Debug, Clone)]
struct Spellings {
    text: String,
    /// Spelling of id `i` is `text[starts[i]..starts[i + 1]]`.
    starts: Vec<u32>,
    /// Ids that are not holes, in the byte order of their spellings; sorted
    /// on the first reverse lookup, which start-up does not need.
    sorted: OnceLock<Vec<u32>>,
    /// Ids that are not holes, `None` when every id below `len` is a token.
    present: Option<Vec<u32>>,
}

impl Spellings {
    /// The spellings of `entries` by id (`kinds` per id, holes empty). When
    /// the entries are in id order without holes (GPT-2's vocab.json, and
    /// the files [`BpeTokenizer::save`] writes) their text is the table as
    /// it is: no copy.
    fn new(entries: Entries, kinds: &[Kind], in_order: bool) -> Self {
        let (text, starts) = if in_order {
            entries.into_text_and_starts()
        } else {
            let mut tokens = vec![""; kinds.len()];
            for (t, id) in entries.iter() {
                tokens[id as usize] = t;
            }
            let mut text = String::with_capacity(tokens.iter().map(|t| t.len()).sum());
            let mut starts = Vec::with_capacity(tokens.len() + 1);
            starts.push(0);
            for t in tokens {
                text.push_str(t);
                starts.push(text.len() as u32);
            }
            (text, starts)
        };
        Self::from_parts(text, starts, kinds)
    }

    /// Spelling of id `i` is `text[starts[i]..starts[i + 1]]`.
    fn from_parts(text: String, starts: Vec<u32>, kinds: &[Kind]) -> Self {
        let present = kinds.contains(&Kind::Hole).then(|| {
            (0..kinds.len() as u32)
                .filter(|&id| kinds[id as usize] != Kind::Hole)
                .collect()
        });
        Spellings {
            text,
            starts,
            sorted: OnceLock::new(),
            present,
        }
    }

    fn len(&self) -> usize {
        self.starts.len() - 1
    }

    fn get(&self, id: u32) -> &str {
        let i = id as usize;
        &self.text[self.starts[i] as usize..self.starts[i + 1] as usize]
    }

    fn id_of(&self, spelling: &str) -> Option<u32> {
        let sorted = self.sorted.get_or_init(|| {
            let mut sorted = match &self.present {
                Some(ids) => ids.clone(),
                None => (0..self.len() as u32).collect(),
            };
            sorted.sort_unstable_by(|&a, &b| self.get(a).cmp(self.get(b)));
            sorted
        });
        sorted
            .binary_search_by(|&id| self.get(id).cmp(spelling))
            .ok()
            .map(|i| sorted[i])
    }
}

impl BpeTokenizer {
    /// Loads GPT-2's `vocab.json` + `merges.txt`. `<|endoftext|>`, if in the
    /// vocabulary, is the special token. Large vocabularies are cached
    /// compiled (see [`cache_dir`]): loading the same files again takes a
    /// fraction of the time.
    pub fn from_files(vocab: impl AsRef<Path>, merges: impl AsRef<Path>) -> Result<Self> {
        let (vocab_path, merges_path) = (vocab.as_ref(), merges.as_ref());
        let key = compiled::key_of_files(b"vocab.json+merges.txt", &[vocab_path, merges_path])?;
        if let Some(t) = Self::from_cache(key) {
            return Ok(t);
        }
        let vocab_bytes = files::read_bytes(vocab_path)?;
        let merges_bytes = files::read_bytes(merges_path)?;
        let text = files::text_of(vocab_path, vocab_bytes)?;
        let (entries, text) = files::parse_vocab_json(vocab_path, text)?;
        let merge_lines = files::parse_merges_txt(merges_path, merges_bytes)?;
        let specials: Vec<(String, u32)> = entries
            .iter()
            .filter(|&(t, _)| t == ENDOFTEXT)
            .map(|(t, id)| (t.to_string(), id))
            .collect();
        let source = Source {
            vocab_path,
            vocab_text: &text,
            merges_path,
        };
        let t = Self::build(&source, entries, &merge_lines, specials)?;
        if let Some(key) = key {
            compiled::store(key, &t);
        }
        Ok(t)
    }

    /// Loads a directory holding `vocab.json` + `merges.txt` or `tokenizer.json`.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let (vocab, merges) = (dir.join("vocab.json"), dir.join("merges.txt"));
        if vocab.is_file() && merges.is_file() {
            return Self::from_files(vocab, merges);
        }
        Self::from_tokenizer_json(dir.join("tokenizer.json"))
    }

    /// Loads an HF `tokenizer.json` of model type BPE with ByteLevel
    /// pre-tokenization (GPT-2's, or one written by [`Self::save`]). Cached
    /// like [`Self::from_files`].
    pub fn from_tokenizer_json(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let key = Self::json_cache_key(path)?;
        if let Some(t) = Self::from_cache(key) {
            return Ok(t);
        }
        let text = files::text_of(path, files::read_bytes(path)?)?;
        Self::from_json_text(path, text, key)
    }

    /// The cache key of the `tokenizer.json` at `path`, if it is cached.
    pub(crate) fn json_cache_key(path: &Path) -> Result<Option<u128>> {
        compiled::key_of_files(b"tokenizer.json", &[path])
    }

    /// The cached tokenizer under `key`, if there is a sound one.
    pub(crate) fn from_cache(key: Option<u128>) -> Option<Self> {
        key.and_then(compiled::load)
    }

    /// Parses a `tokenizer.json` (`text`, read from `path`) and caches the
    /// result under `key`.
    pub(crate) fn from_json_text(path: &Path, text: String, key: Option<u128>) -> Result<Self> {
        let hf = files::parse_tokenizer_json(path, text)?;
        let mut vocab = hf.vocab;
        // The vocabulary's ids of the added tokens' contents (the last
        // entry's, if one is there twice: `build` refuses that).
        let mut ids: FastMap<&str, u32> = hf
            .specials
            .iter()
            .map(|(c, _)| (c.as_str(), u32::MAX))
            .collect();
        // Only entries of an added token's length are hashed.
        let mut lens: Vec<usize> = hf.specials.iter().map(|(c, _)| c.len()).collect();
        lens.sort_unstable();
        lens.dedup();
        for (t, id) in vocab.iter() {
            if lens.binary_search(&t.len()).is_ok() {
                if let Some(slot) = ids.get_mut(t) {
                    *slot = id;
                }
            }
        }
        let mut extra = Vec::new();
        for (content, id) in &hf.specials {
            match ids.get(content.as_str()).filter(|&&vid| vid != u32::MAX) {
                Some(vid) if vid != id => {
                    return Err(parse_error(
                        path,
                        files::line_of_json_string(&hf.text, content),
                        format!(
                            "added token {content:?} has id {id} but the vocabulary says {vid}"
                        ),
                    ))
                }
                Some(_) => {}
                None => extra.push((content.clone(), *id)),
            }
        }
        drop(ids);
        for (content, id) in extra {
            vocab.push(&content, id);
        }
        let source = Source {
            vocab_path: path,
            vocab_text: &hf.text,
            merges_path: path,
        };
        let t = Self::build(&source, vocab, &hf.merges, hf.specials)?;
        if let Some(key) = key {
            compiled::store(key, &t);
        }
        Ok(t)
    }

    /// Writes the tokenizer in lmkit's compiled form to `path`, atomically:
    /// one file that [`Self::from_compiled`] loads in a fraction of the time
    /// the text files take (the form the cache keeps; its layout is in
    /// `bpe/compiled.rs`).
    pub fn save_compiled(&self, path: impl AsRef<Path>) -> Result<()> {
        self.check_savable(path.as_ref())?;
        files::write_atomic(path.as_ref(), &compiled::to_bytes(self, 0), true)
    }

    /// Loads a tokenizer written by [`Self::save_compiled`], checked as
    /// strictly as the text files: a damaged or crafted file is an error.
    pub fn from_compiled(path: impl AsRef<Path>) -> Result<Self> {
        let (tables, _) = compiled::from_file(path.as_ref())?;
        Ok(Self::assemble(tables, None))
    }

    /// [`Self::from_compiled`] from bytes in memory (e.g. `include_bytes!`).
    pub fn from_compiled_bytes(data: &[u8]) -> Result<Self> {
        let (tables, _) = compiled::from_bytes(Path::new("<compiled tokenizer>"), data)?;
        Ok(Self::assemble(tables, None))
    }

    /// Builds a tokenizer from ordinary tokens given by their bytes (index =
    /// id), merges `(left, right)` in rank order, and special tokens appended
    /// after them. Used by training.
    pub(crate) fn from_parts(
        token_bytes: &[Vec<u8>],
        merges: &[(u32, u32)],
        specials: &[&str],
    ) -> Result<Self> {
        let spelled: Vec<String> = token_bytes
            .iter()
            .map(|b| byte_level::bytes_to_token(b))
            .collect();
        let mut entries = Entries::default();
        for (id, t) in spelled.iter().enumerate() {
            entries.push(t, id as u32);
        }
        let n = spelled.len() as u32;
        let specials: Vec<(String, u32)> = specials
            .iter()
            .enumerate()
            .map(|(i, s)| (s.to_string(), n + i as u32))
            .collect();
        for (s, id) in &specials {
            entries.push(s, *id);
        }
        let mut merge_lines = Merges::default();
        for (i, &(l, r)) in merges.iter().enumerate() {
            let spelling = |id: u32| spelled.get(id as usize).map_or("", String::as_str);
            merge_lines.push(spelling(l), spelling(r), i + 2);
        }
        let source = Source {
            vocab_path: Path::new("<trained vocabulary>"),
            vocab_text: "",
            merges_path: Path::new("<trained merges>"),
        };
        Self::build(&source, entries, &merge_lines, specials)
    }

    /// Writes `vocab.json`, `merges.txt` and `tokenizer.json` into `dir`
    /// (created if needed), each atomically.
    pub fn save(&self, dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        self.check_savable(dir)?;
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let entries: Vec<(String, u32)> = (0..self.vocab_size() as u32)
            .filter(|&id| self.kinds[id as usize] != Kind::Hole)
            .map(|id| (self.spellings().get(id).to_string(), id))
            .collect();
        let merges: Vec<(String, String)> = self
            .merges
            .iter()
            .map(|&(l, r)| {
                (
                    self.spellings().get(l).to_string(),
                    self.spellings().get(r).to_string(),
                )
            })
            .collect();
        let mut specials: Vec<(String, u32)> = self
            .specials
            .iter()
            .map(|(c, id)| (String::from_utf8_lossy(c).into_owned(), *id))
            .collect();
        specials.sort_by_key(|&(_, id)| id);
        files::write_atomic(
            &dir.join("vocab.json"),
            files::vocab_json(&entries).as_bytes(),
            true,
        )?;
        files::write_atomic(
            &dir.join("merges.txt"),
            files::merges_txt(&merges).as_bytes(),
            true,
        )?;
        files::write_atomic(
            &dir.join("tokenizer.json"),
            files::tokenizer_json(&entries, &merges, &specials).as_bytes(),
            true,
        )
    }

    /// Token ids of `text` (any bytes). With `special`, special-token strings
    /// in the text become their ids; without, they are ordinary text.
    pub fn encode_ids(&self, text: &[u8], special: bool) -> Vec<u32> {
        if special {
            self.encode_ids_allowing(text, |_| true)
        } else {
            self.encode_ordinary(text)
        }
    }

    /// Token ids of `text` where only the special tokens whose id `allowed`
    /// accepts become their ids (tiktoken's `allowed_special`); the text of
    /// the others is encoded as ordinary text.
    pub fn encode_ids_allowing(&self, text: &[u8], allowed: impl Fn(u32) -> bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 8);
        let mut start = 0;
        while let Some((at, len, id)) = self.find_special_among(text, start, &allowed) {
            self.encode_ordinary_into(&text[start..at], &mut out);
            out.push(id);
            start = at + len;
        }
        self.encode_ordinary_into(&text[start..], &mut out);
        out
    }

    /// The first special token written in `text` whose id `among` accepts:
    /// its byte position and id (tiktoken's check for `disallowed_special`).
    pub fn find_special_token(
        &self,
        text: &[u8],
        among: impl Fn(u32) -> bool,
    ) -> Option<(usize, u32)> {
        self.find_special_among(text, 0, &among)
            .map(|(at, _, id)| (at, id))
    }

    /// [`Self::encode_ids`] on all cores (rayon) for one large text: the text
    /// is cut into ~1 MB chunks at places where GPT-2's pre-tokenization
    /// always has a piece boundary (see [`safe_split`]), so the ids are exactly
    /// those of [`Self::encode_ids`].
    pub fn encode_ids_parallel(&self, text: &[u8], special: bool) -> Vec<u32> {
        let Some(jobs) = self.parallel_jobs(text, special, 1 << 20) else {
            return self.encode_ids(text, special);
        };
        let parts: Vec<Vec<u32>> = jobs
            .par_iter()
            .map(|&(s, e, special_id)| match special_id {
                Some(id) => vec![id],
                None => {
                    let mut out = Vec::with_capacity((e - s) / 3 + 8);
                    self.encode_ordinary_into(&text[s..e], &mut out);
                    out
                }
            })
            .collect();
        parts.concat()
    }

    /// `encode_ids_parallel(text, special).len()` without holding the ids:
    /// memory stays at one chunk's ids per thread, whatever the text's size.
    /// Chunks are ~64 KB, so those ids stay in the core's cache (with 1 MB
    /// chunks, ~1.3 MB of ids per chunk pushed the tokenizer's tables out
    /// of L2: ~4% slower).
    pub fn count_tokens_parallel(&self, text: &[u8], special: bool) -> usize {
        let Some(jobs) = self.parallel_jobs(text, special, 1 << 16) else {
            return self.encode_ids(text, special).len();
        };
        jobs.par_iter()
            .map_init(Vec::new, |out, &(s, e, special_id)| match special_id {
                Some(_) => 1,
                None => {
                    out.clear();
                    self.encode_ordinary_into(&text[s..e], out);
                    out.len()
                }
            })
            .sum()
    }

    /// The ~`chunk`-byte pieces of a large text that encode independently
    /// to the same ids: `(start, end, Some(id))` for a special token, `None`
    /// for ordinary text. `None` when the text is under 2 MB, too small to
    /// be worth it.
    fn parallel_jobs(
        &self,
        text: &[u8],
        special: bool,
        chunk: usize,
    ) -> Option<Vec<(usize, usize, Option<u32>)>> {
        if text.len() < 2 << 20 {
            return None;
        }
        let mut jobs: Vec<(usize, usize, Option<u32>)> = Vec::new();
        let push_text = |mut start: usize, end: usize, jobs: &mut Vec<_>| {
            while end - start > 2 * chunk {
                match self.pattern.safe_split(&text[start..end], chunk) {
                    Some(cut) => {
                        jobs.push((start, start + cut, None));
                        start += cut;
                    }
                    None => break,
                }
            }
            jobs.push((start, end, None));
        };
        let mut start = 0;
        if special {
            while let Some((at, len, id)) = self.find_special(text, start) {
                push_text(start, at, &mut jobs);
                jobs.push((at, at + len, Some(id)));
                start = at + len;
            }
        }
        push_text(start, text.len(), &mut jobs);
        Some(jobs)
    }

    /// Token ids of `text`, special-token strings encoded as ordinary text.
    pub fn encode_ordinary(&self, text: &[u8]) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 8);
        self.encode_ordinary_into(text, &mut out);
        out
    }

    /// A copy that uses the per-thread word cache (`true`, the default) or
    /// runs the merge loop for every piece that is not a single token. The
    /// ids are the same either way; off is for measuring and testing.
    pub fn with_word_cache(mut self, on: bool) -> Self {
        self.word_cache = on;
        self
    }

    /// First special token at or after `from`: (position, length, id).
    fn find_special(&self, text: &[u8], from: usize) -> Option<(usize, usize, u32)> {
        self.find_special_among(text, from, &|_| true)
    }

    /// [`Self::find_special`] among the special tokens `among` accepts.
    fn find_special_among(
        &self,
        text: &[u8],
        from: usize,
        among: &dyn Fn(u32) -> bool,
    ) -> Option<(usize, usize, u32)> {
        if self.specials.is_empty() {
            return None;
        }
        (from..text.len())
            .filter(|&i| self.special_first_byte[text[i] as usize])
            .find_map(|i| {
                self.specials
                    .iter()
                    .find(|(c, id)| among(*id) && text[i..].starts_with(c))
                    .map(|(c, id)| (i, c.len(), *id))
            })
    }

    /// Encodes `text` with byte offsets (each token's byte range in `text`;
    /// they tile it). A special token matched in the text (with `special`)
    /// keeps its real range and has `special_tokens_mask` 1. GPT-2 adds no
    /// tokens of its own, so `type_ids` are 0 and `attention_mask` is 1.
    pub fn encode(&self, text: &[u8], special: bool) -> Encoding {
        self.encoding_of(self.encode_ids(text, special))
    }

    /// [`Self::encode`] with [`Self::encode_ids_allowing`]'s special tokens.
    pub fn encode_allowing(&self, text: &[u8], allowed: impl Fn(u32) -> bool) -> Encoding {
        self.encoding_of(self.encode_ids_allowing(text, allowed))
    }

    /// The encoding of `ids`, the ids of a whole text: offsets tile it.
    fn encoding_of(&self, ids: Vec<u32>) -> Encoding {
        let mut offsets = Vec::with_capacity(ids.len());
        let mut special_tokens_mask = Vec::with_capacity(ids.len());
        let mut at = 0;
        for &id in &ids {
            let len = self.token_len(id);
            offsets.push((at, at + len));
            special_tokens_mask.push(u8::from(self.kinds[id as usize] == Kind::Special));
            at += len;
        }
        let n = ids.len();
        Encoding {
            ids,
            type_ids: vec![0; n],
            offsets,
            special_tokens_mask,
            attention_mask: vec![1; n],
        }
    }

    /// Encodes many texts in parallel (rayon), like [`Self::encode_ids`].
    pub fn encode_batch<T: AsRef<[u8]> + Sync>(&self, texts: &[T], special: bool) -> Vec<Vec<u32>> {
        texts
            .par_iter()
            .map(|t| self.encode_ids(t.as_ref(), special))
            .collect()
    }

    fn token_len(&self, id: u32) -> usize {
        match self.kinds[id as usize] {
            Kind::Special => self.special_content(id).len(),
            _ => self.model.token_bytes(id).len(),
        }
    }

    /// The bytes of `ids` concatenated; special tokens give their text.
    pub fn decode(&self, ids: &[u32]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            match self.kinds.get(id as usize) {
                Some(Kind::Ordinary) => out.extend_from_slice(self.model.token_bytes(id)),
                Some(Kind::Special) => out.extend_from_slice(self.special_content(id)),
                _ => {
                    return Err(Error::IdOutOfRange {
                        id,
                        vocab_size: self.vocab_size(),
                    })
                }
            }
        }
        Ok(out)
    }

    /// The bytes of one ordinary token, or a special token's text.
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        match self.kinds.get(id as usize)? {
            Kind::Ordinary => Some(self.model.token_bytes(id)),
            Kind::Special => Some(self.special_content(id)),
            Kind::Hole => None,
        }
    }

    /// Token spelling as in vocab.json (`Ġthe`), or a special token's text.
    pub fn id_to_token(&self, id: u32) -> Option<&str> {
        match self.kinds.get(id as usize)? {
            Kind::Hole => None,
            _ => Some(self.spellings().get(id)),
        }
    }

    /// Id of a token spelled as in vocab.json, or of a special token's text.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.spellings().id_of(token)
    }

    /// One more than the largest id.
    pub fn vocab_size(&self) -> usize {
        self.kinds.len()
    }

    /// The text of special token `id` (empty if it has none).
    pub(crate) fn special_content(&self, id: u32) -> &[u8] {
        self.specials
            .iter()
            .find(|&&(_, i)| i == id)
            .map_or(&[], |(c, _)| c.as_slice())
    }

    /// Every id's spelling, spelled out from the tokens' bytes on first use
    /// when the tokenizer was loaded compiled.
    fn spellings(&self) -> &Spellings {
        self.spellings.get_or_init(|| {
            let mut text = String::new();
            let mut starts = Vec::with_capacity(self.kinds.len() + 1);
            starts.push(0);
            for (id, kind) in self.kinds.iter().enumerate() {
                match kind {
                    Kind::Ordinary => byte_level::bytes_to_token_into(
                        self.model.token_bytes(id as u32),
                        &mut text,
                    ),
                    Kind::Special => text.push_str(
                        std::str::from_utf8(self.special_content(id as u32)).unwrap_or_default(),
                    ),
                    Kind::Hole => {}
                }
                starts.push(text.len() as u32);
            }
            Spellings::from_parts(text, starts, &self.kinds)
        })
    }

    /// Special tokens: (text, id).
    pub fn special_tokens(&self) -> impl Iterator<Item = (&str, u32)> {
        self.specials
            .iter()
            .map(|(c, id)| (std::str::from_utf8(c).unwrap_or_default(), *id))
    }

    /// GPT-2's `<|endoftext|>` (its BOS and EOS), if the vocabulary has it.
    pub fn endoftext_id(&self) -> Option<u32> {
        self.specials
            .iter()
            .find(|(c, _)| c == ENDOFTEXT.as_bytes())
            .map(|&(_, id)| id)
    }

    /// The pre-tokenization pattern text is cut by before BPE.
    pub fn pattern(&self) -> &Pattern {
        &self.pattern
    }

    /// Saved files hold GPT-2's merges and pattern only: a tokenizer of
    /// tiktoken ranks or another pattern would load back different.
    fn check_savable(&self, path: &Path) -> Result<()> {
        if self.model.piece_is_token || self.pattern != Pattern::Gpt2 {
            return Err(Error::Unsupported {
                path: path.to_path_buf(),
                message: "a tiktoken encoding (rank file) cannot be saved as GPT-2 files".into(),
            });
        }
        Ok(())
    }

    /// Merge rules `(left, right)` in rank order.
    pub fn merges(&self) -> &[(u32, u32)] {
        &self.merges
    }
}

/// A cut position at or after `from` where GPT-2 pre-tokenization of `text`
/// always has a piece boundary, and the pieces on each side equal those of
/// each side alone: after a `\n` that follows an ASCII non-space byte and
/// precedes one. (The `\n` is then a lone whitespace character: it is its
/// own piece in both the whole and the cut text, and nothing after it looks
/// back.)
pub fn safe_split(text: &[u8], from: usize) -> Option<usize> {
    Pattern::Gpt2.safe_split(text, from)
}
