//! Reading and writing the HF / GPT-2 file formats: `vocab.json`,
//! `merges.txt` and `tokenizer.json` (model type BPE, ByteLevel pre-tokenizer).
//!
//! Errors name the file and, where the format has lines, the 1-based line.

use std::fmt;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use crate::{Error, Result};

pub(crate) fn read_bytes(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// `bytes` (read from `path`) as text, or an error naming the first line
/// that is not UTF-8.
pub(crate) fn text_of(path: &Path, bytes: Vec<u8>) -> Result<String> {
    String::from_utf8(bytes).map_err(|e| {
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        parse_error(
            path,
            1 + valid.iter().filter(|&&b| b == b'\n').count(),
            "file is not valid UTF-8".into(),
        )
    })
}

pub(crate) fn parse_error(path: &Path, line: usize, message: String) -> Error {
    Error::Parse {
        path: path.to_path_buf(),
        line,
        message,
    }
}

fn json_error(path: &Path, e: serde_json::Error) -> Error {
    // serde_json appends " at line L column C"; the line is in our own field.
    let message = e.to_string();
    let message = match message.rfind(" at line ") {
        Some(i) => format!("{} (column {})", &message[..i], e.column()),
        None => message,
    };
    parse_error(path, e.line(), message)
}

/// The two ways a JSON file may spell string `s`: as serde_json writes it,
/// and with every non-ASCII character as `\u` escapes.
fn json_spellings(s: &str) -> [String; 2] {
    let plain = serde_json::to_string(s).unwrap_or_default();
    let mut ascii = String::from("\"");
    for c in plain[1..plain.len() - 1].chars() {
        if c.is_ascii() {
            ascii.push(c);
        } else {
            let mut buf = [0u16; 2];
            for unit in c.encode_utf16(&mut buf) {
                ascii.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    ascii.push('"');
    [plain, ascii]
}

fn line_at(text: &str, at: usize) -> usize {
    1 + text[..at].matches('\n').count()
}

/// 1-based line of the first occurrence of JSON string `s` in `text` (as a
/// key or value, spelled with or without `\u` escapes), 0 if not found.
pub(crate) fn line_of_json_string(text: &str, s: &str) -> usize {
    json_spellings(s)
        .iter()
        .find_map(|needle| text.find(needle.as_str()))
        .map_or(0, |at| line_at(text, at))
}

/// 1-based line of merge `left right` in a `tokenizer.json` text, in either
/// form HF writes (`"l r"` or `["l", "r"]`), 0 if not found. Only called for
/// an error message: a search per merge made loading quadratic.
pub(crate) fn merge_line_in_json(text: &str, left: &str, right: &str) -> usize {
    let joined = line_of_json_string(text, &format!("{left} {right}"));
    if joined > 0 {
        return joined;
    }
    let rights = json_spellings(right);
    for l in json_spellings(left) {
        for (at, _) in text.match_indices(l.as_str()) {
            let rest = text[at + l.len()..].trim_start();
            if let Some(rest) = rest.strip_prefix(',') {
                let rest = rest.trim_start();
                if rights.iter().any(|r| rest.starts_with(r.as_str())) {
                    return line_at(text, at);
                }
            }
        }
    }
    0
}

/// Vocabulary entries in file order, their spellings packed into one string:
/// no allocation per entry (GPT-2 has 50k).
#[derive(Default)]
pub(crate) struct Entries {
    text: String,
    /// `(end of the spelling in text, id)`; each spelling starts where the
    /// previous one ends.
    items: Vec<(u32, u32)>,
}

impl Entries {
    pub(crate) fn push(&mut self, token: &str, id: u32) {
        self.text.push_str(token);
        self.end_last(id);
    }

    /// Closes the spelling appended to `text` since the last entry.
    fn end_last(&mut self, id: u32) {
        self.items.push((self.text.len() as u32, id));
    }

    /// The spelling appended since the last entry (not yet closed).
    fn open(&self) -> &str {
        let start = self.items.last().map_or(0, |&(end, _)| end as usize);
        &self.text[start..]
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Bytes of all spellings together.
    pub(crate) fn text_len(&self) -> usize {
        self.text.len()
    }

    /// The spellings and where each starts (`starts[k]..starts[k + 1]` for
    /// entry k), for a vocabulary in id order.
    pub(crate) fn into_text_and_starts(self) -> (String, Vec<u32>) {
        let mut starts = Vec::with_capacity(self.items.len() + 1);
        starts.push(0);
        starts.extend(self.items.iter().map(|&(end, _)| end));
        (self.text, starts)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, u32)> + '_ {
        let mut start = 0;
        self.items.iter().map(move |&(end, id)| {
            let s = &self.text[start as usize..end as usize];
            start = end;
            (s, id)
        })
    }
}

/// A buffer JSON strings are appended to.
trait Arena {
    fn append(&mut self, s: &str);
}

impl Arena for String {
    fn append(&mut self, s: &str) {
        self.push_str(s);
    }
}

impl Arena for Vec<u8> {
    fn append(&mut self, s: &str) {
        self.extend_from_slice(s.as_bytes());
    }
}

/// A serde seed that appends a JSON string to an arena instead of
/// allocating it (serde_json hands over borrowed or scratch-buffer strings).
struct AppendStr<'a, A>(&'a mut A);

impl<'de, A: Arena> de::DeserializeSeed<'de> for AppendStr<'_, A> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl<A: Arena> Visitor<'_> for AppendStr<'_, A> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<(), E> {
        self.0.append(v);
        Ok(())
    }
}

/// A JSON object of token -> id, kept in file order.
pub(crate) struct OrderedVocab(pub Entries);

impl<'de> Deserialize<'de> for OrderedVocab {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OrderedVocab;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object mapping tokens to integer ids")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<OrderedVocab, A::Error> {
                let mut entries = Entries::default();
                if let Some(n) = map.size_hint() {
                    entries.items.reserve(n);
                }
                while map.next_key_seed(AppendStr(&mut entries.text))?.is_some() {
                    let id: u64 = map.next_value()?;
                    if id > MAX_ID as u64 {
                        return Err(de::Error::custom(format!(
                            "id {id} of token {:?} is larger than {MAX_ID}",
                            entries.open()
                        )));
                    }
                    if entries.text.len() > u32::MAX as usize {
                        return Err(de::Error::custom("the vocabulary is larger than 4 GiB"));
                    }
                    entries.end_last(id as u32);
                }
                Ok(OrderedVocab(entries))
            }
        }
        d.deserialize_map(V)
    }
}

/// Largest token id accepted (bounds the tables a malformed file can make us allocate).
pub(crate) const MAX_ID: u32 = crate::MAX_VOCAB_SIZE as u32 - 1;

/// Parses `vocab.json` (`text`, read from `path`): token (in GPT-2's byte
/// alphabet) -> id, in file order.
pub(crate) fn parse_vocab_json(path: &Path, text: String) -> Result<(Entries, String)> {
    let vocab: OrderedVocab = serde_json::from_str(&text).map_err(|e| json_error(path, e))?;
    Ok((vocab.0, text))
}

/// Merge rules `left right` in rank order, the tokens as byte ranges into
/// one buffer (the bytes of `merges.txt` itself, or an arena for
/// `tokenizer.json`): no allocation per merge. The tokens' bytes are the
/// file's, not yet checked to be UTF-8 (see [`parse_merges_txt`]).
#[derive(Default)]
pub(crate) struct Merges {
    text: Vec<u8>,
    items: Vec<MergeItem>,
    /// Bytes between a merge's left and right token: 1 (the space) in
    /// `merges.txt`, 0 in an arena.
    gap: u32,
}

/// Left token `start..mid`, right `mid + gap..end`.
#[derive(Clone, Copy)]
struct MergeItem {
    start: u32,
    mid: u32,
    end: u32,
    /// 1-based line; 0 for `tokenizer.json`, where it is looked up only if
    /// the merge is in error ([`merge_line_in_json`]).
    line: u32,
}

/// One merge rule with the line it came from.
pub(crate) struct MergeLine<'a> {
    pub left: &'a [u8],
    pub right: &'a [u8],
    pub line: usize,
}

impl Merges {
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = MergeLine<'_>> + '_ {
        self.items.iter().map(move |m| MergeLine {
            left: &self.text[m.start as usize..m.mid as usize],
            right: &self.text[(m.mid + self.gap) as usize..m.end as usize],
            line: m.line as usize,
        })
    }

    /// Appends `left right` to an arena (merges that are not read from a file).
    pub(crate) fn push(&mut self, left: &str, right: &str, line: usize) {
        debug_assert_eq!(self.gap, 0, "an arena");
        let start = self.text.len() as u32;
        self.text.extend_from_slice(left.as_bytes());
        let mid = self.text.len() as u32;
        self.text.extend_from_slice(right.as_bytes());
        self.items.push(MergeItem {
            start,
            mid,
            end: self.text.len() as u32,
            line: line as u32,
        });
    }
}

/// High bit of each byte of `w` that equals `c`, exactly (no carries
/// between bytes).
#[inline(always)]
fn bytes_equal(w: u64, c: u8) -> u64 {
    const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
    let x = w ^ (c as u64 * 0x0101_0101_0101_0101);
    !(((x & LOW7) + LOW7) | x | LOW7)
}

/// Parses the bytes of a `merges.txt` (`path` names it in errors): an
/// optional `#version` header, then `left right` per line. The header line
/// is checked to be UTF-8 here; the tokens are when they are spelled out in
/// the byte alphabet ([`super::byte_level::spelled_to_bytes_into`] accepts
/// only UTF-8), which saves a pass over the file (~0.8 ms of GPT-2's
/// start-up: its text is mostly two-byte characters, std's validator's
/// slow path).
pub(crate) fn parse_merges_txt(path: &Path, text: Vec<u8>) -> Result<Merges> {
    if text.len() > u32::MAX as usize {
        return Err(parse_error(path, 0, "file is larger than 4 GiB".into()));
    }
    let mut items = Vec::with_capacity(text.iter().filter(|&&b| b == b'\n').count() + 1);
    // Lines are those of `str::lines`: split at '\n', a '\r' before it
    // dropped. The newlines and spaces are found eight bytes at a time: a
    // byte loop spent ~4 cycles a byte, 1.5 ms of GPT-2's start-up.
    let (mut start, mut index, mut space, mut spaces) = (0usize, 0usize, 0usize, 0usize);
    let mut line_end = |end: usize, space: usize, spaces: usize, start: usize, index: usize| {
        let next = end + 1;
        let mut end = end;
        if end < text.len() && end > start && text[end - 1] == b'\r' {
            end -= 1;
        }
        let line = &text[start..end];
        if index == 1 && line.starts_with(b"#version") {
            return match std::str::from_utf8(line) {
                Ok(_) => Ok(next),
                Err(_) => Err(parse_error(path, 1, "file is not valid UTF-8".into())),
            };
        }
        if line.is_empty() {
            return Ok(next);
        }
        if spaces != 1 || space == start || space + 1 >= end {
            return Err(parse_error(
                path,
                index,
                format!(
                    "expected two tokens separated by one space, found {:?}",
                    String::from_utf8_lossy(line)
                ),
            ));
        }
        items.push(MergeItem {
            start: start as u32,
            mid: space as u32,
            end: end as u32,
            line: index as u32,
        });
        Ok(next)
    };
    let mut at = 0;
    while at < text.len() {
        let mut word = [0u8; 8];
        let chunk = &text[at..text.len().min(at + 8)];
        word[..chunk.len()].copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        // Padding is zeros: neither a newline nor a space.
        let mut marks = bytes_equal(w, b'\n') | bytes_equal(w, b' ');
        while marks != 0 {
            let pos = at + marks.trailing_zeros() as usize / 8;
            marks &= marks - 1;
            if text[pos] == b' ' {
                space = pos;
                spaces += 1;
            } else {
                index += 1;
                start = line_end(pos, space, spaces, start, index)?;
                spaces = 0;
            }
        }
        at += 8;
    }
    if start < text.len() {
        line_end(text.len(), space, spaces, start, index + 1)?;
    }
    Ok(Merges {
        text,
        items,
        gap: 1,
    })
}

/// `model.merges` of a `tokenizer.json`: each merge `"left right"` or
/// `["left", "right"]`, appended to a [`Merges`] arena.
struct HfMerges(Merges);

impl<'de> Deserialize<'de> for HfMerges {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Seq;
        impl<'de> Visitor<'de> for Seq {
            type Value = HfMerges;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of merges")
            }
            fn visit_seq<A: de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<HfMerges, A::Error> {
                let mut merges = Merges::default();
                if let Some(n) = seq.size_hint() {
                    merges.items.reserve(n);
                }
                while seq.next_element_seed(OneMerge(&mut merges))?.is_some() {
                    if merges.text.len() > u32::MAX as usize {
                        return Err(de::Error::custom("the merges are larger than 4 GiB"));
                    }
                }
                Ok(HfMerges(merges))
            }
        }
        d.deserialize_seq(Seq)
    }
}

/// One element of `model.merges`, appended to the arena.
struct OneMerge<'a>(&'a mut Merges);

impl<'de> de::DeserializeSeed<'de> for OneMerge<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for OneMerge<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a merge: \"left right\" or [\"left\", \"right\"]")
    }
    fn visit_str<E: de::Error>(self, s: &str) -> std::result::Result<(), E> {
        match s.split_once(' ') {
            Some((l, r)) if !l.is_empty() && !r.is_empty() && !r.contains(' ') => {
                self.0.push(l, r, 0);
                Ok(())
            }
            _ => Err(E::custom(format!(
                "merge {s:?} is not two tokens separated by one space"
            ))),
        }
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        let m = self.0;
        let a = m.text.len() as u32;
        let mut bounds = [a; 3];
        for (k, b) in bounds[1..].iter_mut().enumerate() {
            if seq.next_element_seed(AppendStr(&mut m.text))?.is_none() {
                return Err(de::Error::invalid_length(k, &"two tokens"));
            }
            *b = m.text.len() as u32;
        }
        if seq.next_element::<de::IgnoredAny>()?.is_some() {
            return Err(de::Error::invalid_length(3, &"two tokens"));
        }
        m.items.push(MergeItem {
            start: bounds[0],
            mid: bounds[1],
            end: bounds[2],
            line: 0,
        });
        Ok(())
    }
}

#[derive(Deserialize)]
struct HfJson {
    #[serde(default)]
    added_tokens: Vec<HfAddedToken>,
    #[serde(default)]
    normalizer: Option<Value>,
    #[serde(default)]
    pre_tokenizer: Option<Value>,
    #[serde(default)]
    post_processor: Option<Value>,
    #[serde(default)]
    decoder: Option<Value>,
    #[serde(default)]
    truncation: Option<Value>,
    #[serde(default)]
    padding: Option<Value>,
    model: HfBpeModel,
}

#[derive(Deserialize)]
struct HfAddedToken {
    id: u64,
    content: String,
    #[serde(default)]
    special: bool,
}

#[derive(Deserialize)]
struct HfBpeModel {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    dropout: Option<f64>,
    #[serde(default)]
    continuing_subword_prefix: Option<String>,
    #[serde(default)]
    end_of_word_suffix: Option<String>,
    #[serde(default)]
    byte_fallback: Option<bool>,
    #[serde(default)]
    ignore_merges: Option<bool>,
    vocab: OrderedVocab,
    merges: HfMerges,
}

/// What a BPE tokenizer.json holds, checked to be GPT-2-style byte-level BPE.
pub(crate) struct HfBpe {
    pub vocab: Entries,
    pub merges: Merges,
    /// Special added tokens: content -> id.
    pub specials: Vec<(String, u32)>,
    pub text: String,
}

fn is_type(v: &Value, ty: &str) -> bool {
    v.get("type").and_then(Value::as_str) == Some(ty)
}

/// Parses an HF `tokenizer.json` (`text`, read from `path`) whose model is
/// BPE with ByteLevel pre-tokenization.
pub(crate) fn parse_tokenizer_json(path: &Path, text: String) -> Result<HfBpe> {
    let json: HfJson = serde_json::from_str(&text).map_err(|e| json_error(path, e))?;
    let unsupported = |message: String| Error::Unsupported {
        path: path.to_path_buf(),
        message,
    };
    let m = &json.model;
    if m.kind.as_deref().is_some_and(|k| k != "BPE") {
        return Err(unsupported(format!("model type {:?} is not BPE", m.kind)));
    }
    if m.dropout.is_some_and(|p| p > 0.0) {
        return Err(unsupported("BPE dropout is not supported".into()));
    }
    if m.byte_fallback == Some(true) || m.ignore_merges == Some(true) {
        return Err(unsupported(
            "byte_fallback and ignore_merges are not supported".into(),
        ));
    }
    for (name, v) in [
        ("continuing_subword_prefix", &m.continuing_subword_prefix),
        ("end_of_word_suffix", &m.end_of_word_suffix),
    ] {
        if v.as_deref().is_some_and(|s| !s.is_empty()) {
            return Err(unsupported(format!("model.{name} {v:?} is not supported")));
        }
    }
    if json.normalizer.is_some() {
        return Err(unsupported(
            "a normalizer is not supported for byte-level BPE".into(),
        ));
    }
    let byte_level_ok = |v: &Value| {
        is_type(v, "ByteLevel")
            && v.get("add_prefix_space").and_then(Value::as_bool) != Some(true)
            && v.get("use_regex").and_then(Value::as_bool) != Some(false)
    };
    match &json.pre_tokenizer {
        Some(v) if byte_level_ok(v) => {}
        other => {
            return Err(unsupported(format!(
                "pre_tokenizer must be ByteLevel with add_prefix_space=false and use_regex=true, found {}",
                other.as_ref().map_or("null".into(), |v| v.to_string())
            )))
        }
    }
    // A ByteLevel post-processor only trims offsets (GPT-2's does not even
    // that); transformers writes a TemplateProcessing that adds nothing.
    let adds_nothing = |v: &Value| {
        is_type(v, "TemplateProcessing")
            && v.get("single")
                .and_then(Value::as_array)
                .is_some_and(|items| items.iter().all(|item| item.get("Sequence").is_some()))
    };
    if let Some(v) = &json.post_processor {
        if !is_type(v, "ByteLevel") && !adds_nothing(v) {
            return Err(unsupported(format!(
                "post_processor must be ByteLevel, null or a TemplateProcessing that adds no tokens, found {v}"
            )));
        }
    }
    if json
        .decoder
        .as_ref()
        .is_some_and(|v| !is_type(v, "ByteLevel"))
    {
        return Err(unsupported("decoder must be ByteLevel or null".into()));
    }
    if json.truncation.is_some() || json.padding.is_some() {
        return Err(unsupported(
            "truncation and padding settings are not supported".into(),
        ));
    }
    let mut specials = Vec::new();
    for t in &json.added_tokens {
        if !t.special {
            return Err(unsupported(format!(
                "non-special added token {:?} is not supported",
                t.content
            )));
        }
        if t.id > MAX_ID as u64 {
            return Err(parse_error(
                path,
                line_of_json_string(&text, &t.content),
                format!(
                    "added token {:?} has id {}, larger than {MAX_ID}",
                    t.content, t.id
                ),
            ));
        }
        specials.push((t.content.clone(), t.id as u32));
    }
    Ok(HfBpe {
        vocab: json.model.vocab.0,
        merges: json.model.merges.0,
        specials,
        text,
    })
}

/// Writes `contents` to `path` atomically: a temporary file in the same
/// folder (named for this process and call, so concurrent writers never
/// share one), then rename, so readers never see a half-written file. With
/// `durable` the file is synced before the rename (a save); without (a
/// cache entry, which is checked when read) it is not.
pub(crate) fn write_atomic(path: &Path, contents: &[u8], durable: bool) -> Result<()> {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let tmp: PathBuf =
        path.with_file_name(format!(".{file_name}.tmp-{}-{call}", std::process::id()));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(contents)?;
        if durable {
            f.sync_all()?;
        }
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(io)
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("strings always serialize")
}

/// `vocab.json`, one entry per line in id order (so errors can point at a line).
pub(crate) fn vocab_json(tokens: &[(String, u32)]) -> String {
    let mut out = String::from("{\n");
    for (i, (t, id)) in tokens.iter().enumerate() {
        let comma = if i + 1 < tokens.len() { "," } else { "" };
        out.push_str(&format!("  {}: {id}{comma}\n", json_str(t)));
    }
    out.push_str("}\n");
    out
}

pub(crate) fn merges_txt(merges: &[(String, String)]) -> String {
    let mut out = String::from("#version: 0.2\n");
    for (l, r) in merges {
        out.push_str(l);
        out.push(' ');
        out.push_str(r);
        out.push('\n');
    }
    out
}

/// An HF `tokenizer.json` equivalent to GPT-2's (what `tokenizers` writes for it).
pub(crate) fn tokenizer_json(
    tokens: &[(String, u32)],
    merges: &[(String, String)],
    specials: &[(String, u32)],
) -> String {
    let byte_level = |add_prefix_space: bool, trim_offsets: bool| {
        serde_json::json!({
            "type": "ByteLevel",
            "add_prefix_space": add_prefix_space,
            "trim_offsets": trim_offsets,
            "use_regex": true
        })
    };
    let added: Vec<Value> = specials
        .iter()
        .map(|(content, id)| {
            serde_json::json!({
                "id": id, "content": content, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": true, "special": true
            })
        })
        .collect();
    let head = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": byte_level(false, true),
        "post_processor": byte_level(true, false),
        "decoder": byte_level(true, true),
    });
    // The model is written by hand to keep the vocabulary in id order, one per line.
    let mut out = serde_json::to_string_pretty(&head).expect("json value");
    out.truncate(out.trim_end().len() - 1); // drop the closing brace
    out.push_str(",\n  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n");
    out.push_str("    \"continuing_subword_prefix\": \"\",\n    \"end_of_word_suffix\": \"\",\n");
    out.push_str(
        "    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"ignore_merges\": false,\n",
    );
    out.push_str("    \"vocab\": {\n");
    for (i, (t, id)) in tokens.iter().enumerate() {
        let comma = if i + 1 < tokens.len() { "," } else { "" };
        out.push_str(&format!("      {}: {id}{comma}\n", json_str(t)));
    }
    out.push_str("    },\n    \"merges\": [\n");
    for (i, (l, r)) in merges.iter().enumerate() {
        let comma = if i + 1 < merges.len() { "," } else { "" };
        out.push_str(&format!(
            "      [{}, {}]{comma}\n",
            json_str(l),
            json_str(r)
        ));
    }
    out.push_str("    ]\n  }\n}\n");
    out
}

#[cfg(test)]
mod tests;
