//! Writing `vocab.txt`, `tokenizer_config.json`, `special_tokens_map.json`
//! and `tokenizer.json`.

use std::collections::HashMap;
use std::path::Path;

use serde::Serialize;

use super::{
    AddedTokenJson, DecoderJson, DirectionJson, NormalizerJson, PadStrategyJson, PaddingJson,
    PostProcessorJson, PreTokenizerJson, SequenceId, SpecialTokenJson, StrategyJson,
    TemplatePieceJson, TruncationJson,
};
use crate::bpe::write_atomic;
use crate::wordpiece::post::Piece;
use crate::wordpiece::{
    PaddingDirection, PaddingLength, TruncationDirection, TruncationStrategy, WordPieceTokenizer,
};
use crate::{Error, Result};

/// The vocabulary as a JSON object in id order.
struct OrderedVocab<'a>(&'a [String]);

impl Serialize for OrderedVocab<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (id, tok) in self.0.iter().enumerate() {
            m.serialize_entry(tok, &id)?;
        }
        m.end()
    }
}

#[derive(Serialize)]
struct ModelOut<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    unk_token: &'a str,
    continuing_subword_prefix: &'a str,
    max_input_chars_per_word: usize,
    vocab: OrderedVocab<'a>,
}

#[derive(Serialize)]
struct TokenizerOut<'a> {
    version: &'static str,
    truncation: Option<TruncationJson>,
    padding: Option<PaddingJson>,
    added_tokens: Vec<AddedTokenJson>,
    normalizer: NormalizerJson,
    pre_tokenizer: PreTokenizerJson,
    post_processor: PostProcessorJson,
    decoder: Option<DecoderJson>,
    model: ModelOut<'a>,
}

/// The tokenizer's template as a `TemplateProcessing` post-processor.
fn post_processor_json(t: &WordPieceTokenizer) -> PostProcessorJson {
    let piece_json = |p: &Piece| match p {
        Piece::Special { name, type_id, .. } => TemplatePieceJson::SpecialToken {
            id: name.clone(),
            type_id: *type_id,
        },
        Piece::Sequence { second, type_id } => TemplatePieceJson::Sequence {
            id: if *second {
                SequenceId::B
            } else {
                SequenceId::A
            },
            type_id: *type_id,
        },
    };
    let mut special_tokens = HashMap::new();
    for p in t.template.single.iter().chain(&t.template.pair) {
        if let Piece::Special { name, ids, .. } = p {
            let tokens = ids.iter().map(|&id| t.vocab[id as usize].clone()).collect();
            special_tokens.insert(
                name.clone(),
                SpecialTokenJson {
                    id: name.clone(),
                    ids: ids.clone(),
                    tokens,
                },
            );
        }
    }
    PostProcessorJson::TemplateProcessing {
        single: t.template.single.iter().map(piece_json).collect(),
        pair: t.template.pair.iter().map(piece_json).collect(),
        special_tokens,
    }
}

pub(crate) fn save(t: &WordPieceTokenizer, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let o = &t.options;

    let mut vocab_txt = String::with_capacity(t.vocab.iter().map(|v| v.len() + 1).sum());
    for tok in &t.vocab {
        if tok.contains('\n') || tok.trim_end() != tok {
            return Err(Error::InvalidInput(format!(
                "token {tok:?} cannot be written to vocab.txt (newline or trailing whitespace)"
            )));
        }
        vocab_txt.push_str(tok);
        vocab_txt.push('\n');
    }
    write_atomic(&dir.join("vocab.txt"), vocab_txt.as_bytes(), true)?;

    let to_json =
        |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default() + "\n";
    let specials = serde_json::json!({
        "unk_token": o.unk_token,
        "sep_token": o.sep_token,
        "pad_token": o.pad_token,
        "cls_token": o.cls_token,
        "mask_token": o.mask_token,
    });
    let mut config = serde_json::json!({
        "do_lower_case": o.lowercase,
        "strip_accents": o.strip_accents,
        "tokenize_chinese_chars": o.handle_chinese_chars,
        "do_basic_tokenize": true,
        "never_split": null,
        "tokenizer_class": "BertTokenizer",
        "model_max_length": t.truncation.as_ref().map_or(512, |tr| tr.max_length),
        "clean_up_tokenization_spaces": t.decoder.as_ref().is_some_and(|d| d.cleanup),
    });
    if let (Some(c), Some(s)) = (config.as_object_mut(), specials.as_object()) {
        c.extend(s.clone());
    }
    write_atomic(
        &dir.join("tokenizer_config.json"),
        to_json(&config).as_bytes(),
        true,
    )?;
    write_atomic(
        &dir.join("special_tokens_map.json"),
        to_json(&specials).as_bytes(),
        true,
    )?;

    let dir_json = |d: TruncationDirection| match d {
        TruncationDirection::Left => DirectionJson::Left,
        TruncationDirection::Right => DirectionJson::Right,
    };
    let out = TokenizerOut {
        version: "1.0",
        truncation: t.truncation.as_ref().map(|tr| TruncationJson {
            direction: dir_json(tr.direction),
            max_length: tr.max_length,
            strategy: match tr.strategy {
                TruncationStrategy::LongestFirst => StrategyJson::LongestFirst,
                TruncationStrategy::OnlyFirst => StrategyJson::OnlyFirst,
                TruncationStrategy::OnlySecond => StrategyJson::OnlySecond,
            },
            stride: tr.stride,
        }),
        padding: t.padding.as_ref().map(|p| PaddingJson {
            strategy: match p.to {
                PaddingLength::Longest => PadStrategyJson::BatchLongest,
                PaddingLength::Fixed(n) => PadStrategyJson::Fixed(n),
            },
            direction: match p.direction {
                PaddingDirection::Left => DirectionJson::Left,
                PaddingDirection::Right => DirectionJson::Right,
            },
            pad_to_multiple_of: p.pad_to_multiple_of,
            pad_id: p.pad_id,
            pad_type_id: p.pad_type_id,
            pad_token: t.vocab.get(p.pad_id as usize).cloned(),
        }),
        added_tokens: t
            .added
            .iter()
            .map(|a| AddedTokenJson {
                id: a.id,
                content: a.content.clone(),
                single_word: a.single_word,
                lstrip: a.lstrip,
                rstrip: a.rstrip,
                normalized: false,
                special: a.special,
            })
            .collect(),
        normalizer: NormalizerJson::BertNormalizer {
            clean_text: o.clean_text,
            handle_chinese_chars: o.handle_chinese_chars,
            strip_accents: o.strip_accents,
            lowercase: o.lowercase,
        },
        pre_tokenizer: PreTokenizerJson::BertPreTokenizer,
        post_processor: post_processor_json(t),
        decoder: t.decoder.as_ref().map(|d| DecoderJson::WordPiece {
            prefix: d.prefix.clone(),
            cleanup: d.cleanup,
        }),
        model: ModelOut {
            kind: "WordPiece",
            unk_token: &o.unk_token,
            continuing_subword_prefix: &o.continuing_subword_prefix,
            max_input_chars_per_word: o.max_input_chars_per_word,
            vocab: OrderedVocab(&t.vocab),
        },
    };
    let json = serde_json::to_string_pretty(&out)
        .map_err(|e| Error::InvalidInput(format!("cannot serialise tokenizer.json: {e}")))?;
    write_atomic(&dir.join("tokenizer.json"), (json + "\n").as_bytes(), true)
}
