//! Reading and writing the HF file formats: `vocab.txt`,
//! `tokenizer_config.json`, `special_tokens_map.json` and `tokenizer.json`.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::post::{Piece, Template};
use super::{
    AddedToken, DecoderConfig, Padding, PaddingDirection, PaddingLength, Parts, Truncation,
    TruncationDirection, TruncationStrategy, WordPieceOptions, WordPieceTokenizer,
};
use crate::bpe::line_of_json_string;
use crate::{Error, Result};

mod save;
pub(crate) use save::save;

fn read_text(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = 1 + e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count();
        Error::Parse {
            path: path.to_path_buf(),
            line,
            message: "invalid UTF-8".into(),
        }
    })
}

fn json_error(path: &Path, e: serde_json::Error) -> Error {
    Error::Parse {
        path: path.to_path_buf(),
        line: e.line(),
        message: e.to_string(),
    }
}

pub(crate) fn from_dir(dir: &Path) -> Result<WordPieceTokenizer> {
    let json = dir.join("tokenizer.json");
    if json.is_file() {
        return from_tokenizer_json(&json);
    }
    let mut options = WordPieceOptions::default();
    let config = dir.join("tokenizer_config.json");
    if config.is_file() {
        apply_config(&config, &mut options, true)?;
    }
    let map = dir.join("special_tokens_map.json");
    if map.is_file() {
        apply_config(&map, &mut options, false)?;
    }
    from_vocab_file(&dir.join("vocab.txt"), options)
}

/// A special token in a config: a string or an `AddedToken` object.
#[derive(Deserialize)]
#[serde(untagged)]
enum TokenSpec {
    Plain(String),
    Added { content: String },
}

impl TokenSpec {
    fn into_string(self) -> String {
        match self {
            TokenSpec::Plain(s) | TokenSpec::Added { content: s } => s,
        }
    }
}

/// The keys of `tokenizer_config.json` / `special_tokens_map.json` that BERT uses.
#[derive(Deserialize, Default)]
struct ConfigJson {
    do_lower_case: Option<bool>,
    #[serde(default)]
    strip_accents: Option<bool>,
    tokenize_chinese_chars: Option<bool>,
    do_basic_tokenize: Option<bool>,
    unk_token: Option<TokenSpec>,
    sep_token: Option<TokenSpec>,
    pad_token: Option<TokenSpec>,
    cls_token: Option<TokenSpec>,
    mask_token: Option<TokenSpec>,
}

fn apply_config(path: &Path, o: &mut WordPieceOptions, settings: bool) -> Result<()> {
    let text = read_text(path)?;
    let c: ConfigJson = serde_json::from_str(&text).map_err(|e| json_error(path, e))?;
    if settings {
        if c.do_basic_tokenize == Some(false) {
            return Err(Error::Unsupported {
                path: path.to_path_buf(),
                message: "do_basic_tokenize = false is not supported".into(),
            });
        }
        if let Some(v) = c.do_lower_case {
            o.lowercase = v;
        }
        o.strip_accents = c.strip_accents;
        if let Some(v) = c.tokenize_chinese_chars {
            o.handle_chinese_chars = v;
        }
    }
    let set = |slot: &mut String, v: Option<TokenSpec>| {
        if let Some(v) = v {
            *slot = v.into_string();
        }
    };
    set(&mut o.unk_token, c.unk_token);
    set(&mut o.sep_token, c.sep_token);
    set(&mut o.pad_token, c.pad_token);
    set(&mut o.cls_token, c.cls_token);
    set(&mut o.mask_token, c.mask_token);
    Ok(())
}

pub(crate) fn from_vocab_file(
    path: &Path,
    options: WordPieceOptions,
) -> Result<WordPieceTokenizer> {
    let text = read_text(path)?;
    let vocab = parse_vocab_txt(path, &text)?;
    WordPieceTokenizer::from_parts(
        Parts {
            vocab,
            options,
            added: None,
            template: None,
            decoder: Some(DecoderConfig {
                prefix: String::new(),
                cleanup: true,
            }),
            truncation: None,
            padding: None,
        },
        path,
        &|id, _| id + 1,
    )
}

/// One token per line; trailing whitespace (`\r` included) is not part of
/// the token, as in HF `WordPiece::read_file`.
fn parse_vocab_txt(path: &Path, text: &str) -> Result<Vec<String>> {
    let body = text.strip_suffix('\n').unwrap_or(text);
    if body.is_empty() {
        return Err(Error::Parse {
            path: path.to_path_buf(),
            line: 1,
            message: "empty vocabulary".into(),
        });
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut vocab = Vec::new();
    for (i, line) in body.split('\n').enumerate() {
        let tok = line.trim_end();
        if let Some(first) = seen.insert(tok, i + 1) {
            return Err(Error::Parse {
                path: path.to_path_buf(),
                line: i + 1,
                message: format!("duplicate token {tok:?} (first on line {first})"),
            });
        }
        vocab.push(tok.to_string());
    }
    Ok(vocab)
}

// ---- tokenizer.json ------------------------------------------------------

fn yes() -> bool {
    true
}

fn hashes() -> String {
    "##".into()
}

fn unk() -> String {
    "[UNK]".into()
}

fn hundred() -> usize {
    100
}

#[derive(Deserialize, Serialize)]
struct AddedTokenJson {
    id: u32,
    content: String,
    #[serde(default)]
    single_word: bool,
    #[serde(default)]
    lstrip: bool,
    #[serde(default)]
    rstrip: bool,
    #[serde(default = "yes")]
    normalized: bool,
    #[serde(default)]
    special: bool,
}

#[derive(Deserialize, Serialize)]
#[serde(tag = "type")]
enum NormalizerJson {
    BertNormalizer {
        #[serde(default = "yes")]
        clean_text: bool,
        #[serde(default = "yes")]
        handle_chinese_chars: bool,
        #[serde(default)]
        strip_accents: Option<bool>,
        #[serde(default = "yes")]
        lowercase: bool,
    },
}

#[derive(Deserialize, Serialize)]
#[serde(tag = "type")]
enum PreTokenizerJson {
    BertPreTokenizer,
}

#[derive(Deserialize, Serialize, Clone, Copy, PartialEq, Eq)]
enum SequenceId {
    A,
    B,
}

#[derive(Deserialize, Serialize)]
enum TemplatePieceJson {
    SpecialToken { id: String, type_id: u32 },
    Sequence { id: SequenceId, type_id: u32 },
}

#[derive(Deserialize, Serialize)]
struct SpecialTokenJson {
    id: String,
    ids: Vec<u32>,
    tokens: Vec<String>,
}

#[derive(Deserialize, Serialize)]
#[serde(tag = "type")]
enum PostProcessorJson {
    TemplateProcessing {
        single: Vec<TemplatePieceJson>,
        pair: Vec<TemplatePieceJson>,
        special_tokens: HashMap<String, SpecialTokenJson>,
    },
    BertProcessing {
        sep: (String, u32),
        cls: (String, u32),
    },
}

#[derive(Deserialize, Serialize)]
#[serde(tag = "type")]
enum DecoderJson {
    WordPiece {
        #[serde(default = "hashes")]
        prefix: String,
        #[serde(default = "yes")]
        cleanup: bool,
    },
}

/// `model`: a struct with its `type` checked by hand rather than an
/// internally tagged enum, which serde reads by first copying the whole
/// object (the vocabulary: a string per token) into a buffer of its own.
#[derive(Deserialize)]
struct ModelJson {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default = "unk")]
    unk_token: String,
    #[serde(default = "hashes")]
    continuing_subword_prefix: String,
    #[serde(default = "hundred")]
    max_input_chars_per_word: usize,
    vocab: VocabJson,
}

/// `model.vocab`: its entries in file order (a repeated token is an error
/// later, as in vocab.txt, rather than a silent overwrite).
struct VocabJson(Vec<(String, u32)>);

impl<'de> Deserialize<'de> for VocabJson {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = VocabJson;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object mapping tokens to integer ids")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<VocabJson, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some(entry) = map.next_entry::<String, u32>()? {
                    out.push(entry);
                }
                Ok(VocabJson(out))
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Deserialize, Serialize)]
enum StrategyJson {
    LongestFirst,
    OnlyFirst,
    OnlySecond,
}

#[derive(Deserialize, Serialize, Default)]
enum DirectionJson {
    Left,
    #[default]
    Right,
}

#[derive(Deserialize, Serialize)]
struct TruncationJson {
    #[serde(default)]
    direction: DirectionJson,
    max_length: usize,
    strategy: StrategyJson,
    #[serde(default)]
    stride: usize,
}

#[derive(Deserialize, Serialize)]
enum PadStrategyJson {
    BatchLongest,
    Fixed(usize),
}

#[derive(Deserialize, Serialize)]
struct PaddingJson {
    strategy: PadStrategyJson,
    #[serde(default)]
    direction: DirectionJson,
    #[serde(default)]
    pad_to_multiple_of: Option<usize>,
    #[serde(default)]
    pad_id: u32,
    #[serde(default)]
    pad_type_id: u32,
    #[serde(default)]
    pad_token: Option<String>,
}

#[derive(Deserialize)]
struct TokenizerJson {
    #[serde(default)]
    added_tokens: Vec<AddedTokenJson>,
    #[serde(default)]
    normalizer: Option<NormalizerJson>,
    #[serde(default)]
    pre_tokenizer: Option<PreTokenizerJson>,
    #[serde(default)]
    post_processor: Option<PostProcessorJson>,
    #[serde(default)]
    decoder: Option<DecoderJson>,
    model: ModelJson,
    #[serde(default)]
    truncation: Option<TruncationJson>,
    #[serde(default)]
    padding: Option<PaddingJson>,
}

/// The 1-based line of the first occurrence of `needle` in `text` (0 if absent),
/// to point errors found after parsing at the right place.
fn line_of(text: &str, needle: &str) -> usize {
    text.find(needle)
        .map_or(0, |at| 1 + text[..at].matches('\n').count())
}

pub(crate) fn from_tokenizer_json(path: &Path) -> Result<WordPieceTokenizer> {
    let text = read_text(path)?;
    let j: TokenizerJson = serde_json::from_str(&text).map_err(|e| json_error(path, e))?;
    let unsupported = |message: String| Error::Unsupported {
        path: path.to_path_buf(),
        message,
    };
    let parse_err = |needle: &str, message: String| Error::Parse {
        path: path.to_path_buf(),
        line: line_of(&text, needle),
        message,
    };

    let ModelJson {
        kind,
        unk_token,
        continuing_subword_prefix,
        max_input_chars_per_word,
        vocab: VocabJson(vocab),
    } = j.model;
    // An error about a JSON string, at its first line (either spelling).
    let json_line = |s: &str| line_of_json_string(&text, s);
    let string_err = |s: &str, message: String| Error::Parse {
        path: path.to_path_buf(),
        line: json_line(s),
        message,
    };
    if kind != "WordPiece" {
        return Err(string_err(
            &kind,
            format!("model type {kind:?} is not WordPiece"),
        ));
    }
    // The ids must be exactly 0..n.
    let n = vocab.len();
    let mut by_id: Vec<Option<String>> = vec![None; n];
    for (tok, id) in vocab {
        let Some(slot) = by_id.get_mut(id as usize) else {
            return Err(string_err(
                &tok,
                format!("model.vocab: id {id} of {tok:?} is not below the vocabulary size {n}"),
            ));
        };
        if let Some(other) = slot {
            return Err(string_err(
                &tok,
                format!("model.vocab: {tok:?} and {other:?} share id {id}"),
            ));
        }
        *slot = Some(tok);
    }
    let vocab: Vec<String> = by_id.into_iter().map(|t| t.unwrap_or_default()).collect();

    let mut options = WordPieceOptions {
        unk_token,
        continuing_subword_prefix,
        max_input_chars_per_word,
        ..WordPieceOptions::default()
    };
    match j.normalizer {
        Some(NormalizerJson::BertNormalizer {
            clean_text,
            handle_chinese_chars,
            strip_accents,
            lowercase,
        }) => {
            options.clean_text = clean_text;
            options.handle_chinese_chars = handle_chinese_chars;
            options.strip_accents = strip_accents;
            options.lowercase = lowercase;
        }
        None => {
            options.clean_text = false;
            options.handle_chinese_chars = false;
            options.strip_accents = Some(false);
            options.lowercase = false;
        }
    }
    if j.pre_tokenizer.is_none() {
        return Err(unsupported(
            "a WordPiece tokenizer without BertPreTokenizer".into(),
        ));
    }

    let template = template_of(j.post_processor, &mut options, &parse_err)?;

    let decoder = j
        .decoder
        .map(|DecoderJson::WordPiece { prefix, cleanup }| DecoderConfig { prefix, cleanup });

    let added = added_tokens_of(path, j.added_tokens)?;
    if let Some(m) = added
        .iter()
        .find(|a| a.special && a.content.contains("MASK"))
    {
        options.mask_token = m.content.clone();
    }

    let direction = |d: DirectionJson| match d {
        DirectionJson::Left => TruncationDirection::Left,
        DirectionJson::Right => TruncationDirection::Right,
    };
    let truncation = j.truncation.map(|t| Truncation {
        max_length: t.max_length,
        strategy: match t.strategy {
            StrategyJson::LongestFirst => TruncationStrategy::LongestFirst,
            StrategyJson::OnlyFirst => TruncationStrategy::OnlyFirst,
            StrategyJson::OnlySecond => TruncationStrategy::OnlySecond,
        },
        stride: t.stride,
        direction: direction(t.direction),
    });
    let padding = j.padding.map(|p| {
        if let Some(tok) = &p.pad_token {
            options.pad_token = tok.clone();
        }
        Padding {
            to: match p.strategy {
                PadStrategyJson::BatchLongest => PaddingLength::Longest,
                PadStrategyJson::Fixed(n) => PaddingLength::Fixed(n),
            },
            pad_to_multiple_of: p.pad_to_multiple_of,
            pad_id: p.pad_id,
            pad_type_id: p.pad_type_id,
            direction: match p.direction {
                DirectionJson::Left => PaddingDirection::Left,
                DirectionJson::Right => PaddingDirection::Right,
            },
        }
    });

    WordPieceTokenizer::from_parts(
        Parts {
            vocab,
            options,
            added: Some(added),
            template: Some(template),
            decoder,
            truncation,
            padding,
        },
        path,
        &|_, tok| json_line(tok),
    )
}

/// The template of a `post_processor` (none: the plain one); a BERT one
/// also names `options`' CLS and SEP tokens.
fn template_of(
    post_processor: Option<PostProcessorJson>,
    options: &mut WordPieceOptions,
    parse_err: &dyn Fn(&str, String) -> Error,
) -> Result<Template> {
    Ok(match post_processor {
        None => Template::plain(),
        Some(PostProcessorJson::BertProcessing { sep, cls }) => {
            options.cls_token = cls.0.clone();
            options.sep_token = sep.0.clone();
            Template::bert((&cls.0, cls.1), (&sep.0, sep.1))
        }
        Some(PostProcessorJson::TemplateProcessing {
            single,
            pair,
            special_tokens,
        }) => {
            let convert = |pieces: Vec<TemplatePieceJson>| -> Result<Vec<Piece>> {
                pieces
                    .into_iter()
                    .map(|p| match p {
                        TemplatePieceJson::Sequence { id, type_id } => {
                            Ok(Piece::Sequence { second: id == SequenceId::B, type_id })
                        }
                        TemplatePieceJson::SpecialToken { id, type_id } => {
                            let s = special_tokens.get(&id).ok_or_else(|| {
                                parse_err(
                                    "\"post_processor\"",
                                    format!("post_processor: special token {id:?} is not in special_tokens"),
                                )
                            })?;
                            Ok(Piece::Special { name: id, ids: s.ids.clone(), type_id })
                        }
                    })
                    .collect()
            };
            let template = Template {
                single: convert(single)?,
                pair: convert(pair)?,
            };
            let specials: Vec<&str> = template
                .single
                .iter()
                .filter_map(|p| match p {
                    Piece::Special { name, .. } => Some(name.as_str()),
                    Piece::Sequence { .. } => None,
                })
                .collect();
            if let (Some(first), Some(last)) = (specials.first(), specials.last()) {
                if specials.len() == 2 {
                    options.cls_token = first.to_string();
                    options.sep_token = last.to_string();
                }
            }
            template
        }
    })
}

/// The added tokens, none matched after normalization (unsupported).
fn added_tokens_of(path: &Path, added_tokens: Vec<AddedTokenJson>) -> Result<Vec<AddedToken>> {
    let mut added = Vec::with_capacity(added_tokens.len());
    for a in added_tokens {
        if a.normalized {
            return Err(Error::Unsupported {
                path: path.to_path_buf(),
                message: format!(
                    "added token {:?} is matched after normalization (\"normalized\": true)",
                    a.content
                ),
            });
        }
        added.push(AddedToken {
            content: a.content,
            id: a.id,
            special: a.special,
            single_word: a.single_word,
            lstrip: a.lstrip,
            rstrip: a.rstrip,
        });
    }
    Ok(added)
}
