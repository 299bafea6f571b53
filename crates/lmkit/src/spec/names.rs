//! The one table of exceptions between checkpoint keys and our parameter names.
//!
//! Our canonical parameter names are the HF keys WITHOUT the base-model prefix
//! (`h.0.attn.c_attn.weight`, `encoder.layer.0.attention.self.query.weight`,
//! `cls.predictions.bias`). A key in a file maps to a canonical name by:
//! 1. stripping the family prefix (`transformer.` / `bert.`) if present;
//! 2. renaming legacy suffixes (TF-era BERT `LayerNorm.gamma`/`beta`);
//! 3. classifying what is left: a parameter, a tensor tied to a parameter
//!    (written by some exporters, checked for shape then dropped), or a
//!    non-parameter buffer (causal masks, position ids) that is ignored.
//!
//! Writing goes the other way: [`file_key`] adds the prefix HF uses for the
//! chosen [`Architecture`] (head tensors such as `cls.*` never get one).

/// Which BERT heads a model has (see `Architecture::bert_heads`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BertHeads {
    /// `pooler.dense` `[C,C]` + tanh on `[CLS]`.
    pub pooler: bool,
    /// `cls.predictions.transform.{dense [C,C], LayerNorm [C]}` and
    /// `cls.predictions.bias [V]`; the decoder weight is tied to
    /// `embeddings.word_embeddings.weight`.
    pub mlm: bool,
    /// `cls.seq_relationship` `[2,C]`, `[2]`; needs the pooler.
    pub nsp: bool,
    /// `classifier` `[L,C]`, `[L]` with L = `num_labels()`.
    pub classifier: bool,
    /// `qa_outputs` `[2,C]`, `[2]` (start/end logits).
    pub qa: bool,
    /// `classifier` `[L,C]`, `[L]` on every token (`BertForTokenClassification`);
    /// the same tensors as `classifier`, never both.
    pub token_classifier: bool,
    /// `classifier` `[1,C]`, `[1]` on the pooled output of each choice
    /// (`BertForMultipleChoice`); needs the pooler; never with the others
    /// that own `classifier`.
    pub multiple_choice: bool,
}

/// Which GPT-2 heads a model has (see `Architecture::gpt2_heads`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gpt2Heads {
    /// An LM head: `wte` when tied, else `lm_head.weight` [V, C].
    pub lm: bool,
    /// `score.weight` [L, C], no bias, on the last non-pad token.
    pub score: bool,
    /// `multiple_choice_head.summary.{weight [1, C], bias [1]}` on `mc_token_ids`.
    pub multiple_choice: bool,
}

/// Which model family a config, layout or checkpoint belongs to.
/// Options (and JSON) name it `gpt2` or `bert`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    Gpt2,
    Bert,
}

/// The HF model classes we read and write; decides key prefixes, the
/// `architectures` entry of `config.json`, and which BERT heads exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Architecture {
    /// `GPT2Model`: keys without prefix (`h.0...`), no LM head.
    Gpt2Model,
    /// `GPT2LMHeadModel`: keys under `transformer.`, `lm_head` tied to `wte`
    /// (or its own `lm_head.weight` with `tie_word_embeddings: false`).
    Gpt2LMHeadModel,
    /// `GPT2ForSequenceClassification`: `score` [num_labels, C], no bias.
    Gpt2ForSequenceClassification,
    /// `GPT2DoubleHeadsModel`: the LM head and a multiple-choice head.
    Gpt2DoubleHeadsModel,
    /// `BertModel`: keys without prefix, with pooler.
    BertModel,
    /// `BertForPreTraining`: pooler + MLM head + NSP head.
    BertForPreTraining,
    /// `BertForMaskedLM`: MLM head, no pooler.
    BertForMaskedLM,
    /// `BertForNextSentencePrediction`: pooler + NSP head.
    BertForNextSentencePrediction,
    /// `BertForSequenceClassification`: pooler + `classifier` [num_labels, C].
    BertForSequenceClassification,
    /// `BertForTokenClassification`: `classifier` on every token, no pooler.
    BertForTokenClassification,
    /// `BertForQuestionAnswering`: `qa_outputs` [2, C], no pooler.
    BertForQuestionAnswering,
    /// `BertForMultipleChoice`: pooler + `classifier` [1, C], one score per choice.
    BertForMultipleChoice,
}

impl Architecture {
    pub const ALL: [Architecture; 12] = [
        Architecture::Gpt2Model,
        Architecture::Gpt2LMHeadModel,
        Architecture::Gpt2ForSequenceClassification,
        Architecture::Gpt2DoubleHeadsModel,
        Architecture::BertModel,
        Architecture::BertForPreTraining,
        Architecture::BertForMaskedLM,
        Architecture::BertForNextSentencePrediction,
        Architecture::BertForSequenceClassification,
        Architecture::BertForTokenClassification,
        Architecture::BertForQuestionAnswering,
        Architecture::BertForMultipleChoice,
    ];

    /// The HF class name, as written in `config.json` `architectures`.
    pub fn hf_name(self) -> &'static str {
        match self {
            Architecture::Gpt2Model => "GPT2Model",
            Architecture::Gpt2LMHeadModel => "GPT2LMHeadModel",
            Architecture::Gpt2ForSequenceClassification => "GPT2ForSequenceClassification",
            Architecture::Gpt2DoubleHeadsModel => "GPT2DoubleHeadsModel",
            Architecture::BertModel => "BertModel",
            Architecture::BertForPreTraining => "BertForPreTraining",
            Architecture::BertForMaskedLM => "BertForMaskedLM",
            Architecture::BertForNextSentencePrediction => "BertForNextSentencePrediction",
            Architecture::BertForSequenceClassification => "BertForSequenceClassification",
            Architecture::BertForTokenClassification => "BertForTokenClassification",
            Architecture::BertForQuestionAnswering => "BertForQuestionAnswering",
            Architecture::BertForMultipleChoice => "BertForMultipleChoice",
        }
    }

    /// Parses an HF class name; `None` for classes we do not implement.
    pub fn from_hf_name(name: &str) -> Option<Architecture> {
        Architecture::ALL.into_iter().find(|a| a.hf_name() == name)
    }

    pub fn family(self) -> Family {
        match self {
            Architecture::Gpt2Model
            | Architecture::Gpt2LMHeadModel
            | Architecture::Gpt2ForSequenceClassification
            | Architecture::Gpt2DoubleHeadsModel => Family::Gpt2,
            _ => Family::Bert,
        }
    }

    /// The prefix HF puts before base-model keys for this class.
    pub fn prefix(self) -> &'static str {
        match self {
            Architecture::Gpt2Model | Architecture::BertModel => "",
            Architecture::Gpt2LMHeadModel
            | Architecture::Gpt2ForSequenceClassification
            | Architecture::Gpt2DoubleHeadsModel => GPT2.prefix,
            _ => BERT.prefix,
        }
    }

    /// The GPT-2 heads this class has (all false for BERT classes).
    pub fn gpt2_heads(self) -> Gpt2Heads {
        let none = Gpt2Heads::default();
        match self {
            Architecture::Gpt2LMHeadModel => Gpt2Heads { lm: true, ..none },
            Architecture::Gpt2ForSequenceClassification => Gpt2Heads {
                score: true,
                ..none
            },
            Architecture::Gpt2DoubleHeadsModel => Gpt2Heads {
                lm: true,
                multiple_choice: true,
                ..none
            },
            _ => none,
        }
    }

    /// The BERT heads this class has (all false for GPT-2 classes).
    pub fn bert_heads(self) -> BertHeads {
        let none = BertHeads::default();
        match self {
            Architecture::Gpt2Model
            | Architecture::Gpt2LMHeadModel
            | Architecture::Gpt2ForSequenceClassification
            | Architecture::Gpt2DoubleHeadsModel => none,
            Architecture::BertModel => BertHeads {
                pooler: true,
                ..none
            },
            Architecture::BertForPreTraining => BertHeads {
                pooler: true,
                mlm: true,
                nsp: true,
                ..none
            },
            Architecture::BertForMaskedLM => BertHeads { mlm: true, ..none },
            Architecture::BertForNextSentencePrediction => BertHeads {
                pooler: true,
                nsp: true,
                ..none
            },
            Architecture::BertForSequenceClassification => BertHeads {
                pooler: true,
                classifier: true,
                ..none
            },
            Architecture::BertForTokenClassification => BertHeads {
                token_classifier: true,
                ..none
            },
            Architecture::BertForQuestionAnswering => BertHeads { qa: true, ..none },
            Architecture::BertForMultipleChoice => BertHeads {
                pooler: true,
                multiple_choice: true,
                ..none
            },
        }
    }
}

impl Family {
    /// "GPT-2" or "BERT".
    pub fn name(self) -> &'static str {
        match self {
            Family::Gpt2 => "GPT-2",
            Family::Bert => "BERT",
        }
    }
}

impl std::fmt::Display for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::fmt::Display for Architecture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.hf_name())
    }
}

/// The naming rules of one family. `*` in a pattern stands for a layer index.
struct NamingTable {
    /// Prefix of base-model keys in task-model checkpoints.
    prefix: &'static str,
    /// Canonical-name prefixes of head tensors: never prefixed on write,
    /// optional on load (`LoadOptions`).
    heads: &'static [&'static str],
    /// Of `heads`, those that live inside the base model (get the prefix).
    prefixed_heads: &'static [&'static str],
    /// Keys that duplicate a parameter (weight tying): (key, tied-to). When
    /// the layout has the key's own parameter (untied), it is that parameter.
    tied: &'static [(&'static str, &'static str)],
    /// Non-parameter buffers saved by some versions of transformers.
    buffers: &'static [&'static str],
    /// Legacy suffix renames: (old, new).
    renames: &'static [(&'static str, &'static str)],
}

const GPT2: NamingTable = NamingTable {
    prefix: "transformer.",
    heads: &["lm_head.", "score.", "multiple_choice_head."],
    prefixed_heads: &[],
    tied: &[("lm_head.weight", "wte.weight")],
    buffers: &["h.*.attn.bias", "h.*.attn.masked_bias"],
    renames: &[],
};

const BERT: NamingTable = NamingTable {
    prefix: "bert.",
    heads: &["pooler.", "cls.", "classifier.", "qa_outputs."],
    prefixed_heads: &["pooler."],
    tied: &[
        (
            "cls.predictions.decoder.weight",
            "embeddings.word_embeddings.weight",
        ),
        ("cls.predictions.decoder.bias", "cls.predictions.bias"),
    ],
    buffers: &["embeddings.position_ids"],
    renames: &[
        ("LayerNorm.gamma", "LayerNorm.weight"),
        ("LayerNorm.beta", "LayerNorm.bias"),
    ],
};

fn table(family: Family) -> &'static NamingTable {
    match family {
        Family::Gpt2 => &GPT2,
        Family::Bert => &BERT,
    }
}

/// `pattern` with `*` = one or more ASCII digits.
fn matches(pattern: &str, key: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == key,
        Some((pre, post)) => key
            .strip_prefix(pre)
            .and_then(|rest| rest.strip_suffix(post))
            .is_some_and(|mid| !mid.is_empty() && mid.bytes().all(|b| b.is_ascii_digit())),
    }
}

/// What a checkpoint key is, once resolved through the naming table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyRole {
    /// A parameter, by canonical name (it may or may not be in a given layout).
    Param(String),
    /// A copy of the parameter `target` (weight tying): shape-checked, then dropped.
    Tied { name: String, target: String },
    /// A non-parameter buffer (causal mask, position ids): ignored.
    Buffer,
}

/// Strips the family prefix from a checkpoint key and applies legacy renames.
pub fn canonical_name(family: Family, key: &str) -> String {
    let t = table(family);
    let mut name = key.strip_prefix(t.prefix).unwrap_or(key).to_string();
    for (old, new) in t.renames {
        if let Some(stem) = name.strip_suffix(old) {
            name = format!("{stem}{new}");
        }
    }
    name
}

/// Classifies a checkpoint key (with or without prefix).
pub fn resolve_key(family: Family, key: &str) -> KeyRole {
    let t = table(family);
    let name = canonical_name(family, key);
    if t.buffers.iter().any(|p| matches(p, &name)) {
        return KeyRole::Buffer;
    }
    if let Some((_, target)) = t.tied.iter().find(|(k, _)| *k == name) {
        return KeyRole::Tied {
            name,
            target: (*target).to_string(),
        };
    }
    KeyRole::Param(name)
}

/// Whether a canonical name belongs to a task head (pooler, MLM, NSP,
/// classifier, QA): such tensors may be missing when a fine-tuning model is
/// initialised from a base checkpoint, or unused when loading a base model
/// from a pretraining checkpoint.
pub fn is_head(family: Family, name: &str) -> bool {
    table(family).heads.iter().any(|h| name.starts_with(h))
}

/// The key HF uses in `model.safetensors` of `arch` for canonical `name`.
pub fn file_key(arch: Architecture, name: &str) -> String {
    let t = table(arch.family());
    let unprefixed_head = t
        .heads
        .iter()
        .any(|h| name.starts_with(h) && !t.prefixed_heads.contains(h));
    if unprefixed_head {
        name.to_string()
    } else {
        format!("{}{name}", arch.prefix())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_prefixes_buffers_ties_and_renames() {
        let g = Family::Gpt2;
        assert_eq!(
            resolve_key(g, "transformer.h.3.attn.c_attn.bias"),
            KeyRole::Param("h.3.attn.c_attn.bias".into())
        );
        assert_eq!(resolve_key(g, "h.11.attn.bias"), KeyRole::Buffer);
        assert_eq!(
            resolve_key(g, "transformer.h.0.attn.masked_bias"),
            KeyRole::Buffer
        );
        assert_eq!(
            resolve_key(g, "h.x.attn.bias"),
            KeyRole::Param("h.x.attn.bias".into())
        );
        assert!(matches!(
            resolve_key(g, "lm_head.weight"),
            KeyRole::Tied { .. }
        ));
        let b = Family::Bert;
        assert_eq!(
            resolve_key(b, "bert.embeddings.LayerNorm.gamma"),
            KeyRole::Param("embeddings.LayerNorm.weight".into())
        );
        assert_eq!(
            resolve_key(b, "bert.embeddings.position_ids"),
            KeyRole::Buffer
        );
        assert_eq!(
            resolve_key(b, "cls.predictions.decoder.weight"),
            KeyRole::Tied {
                name: "cls.predictions.decoder.weight".into(),
                target: "embeddings.word_embeddings.weight".into()
            }
        );
    }

    #[test]
    fn file_keys_follow_hf_prefixes() {
        use Architecture::*;
        assert_eq!(
            file_key(Gpt2LMHeadModel, "wte.weight"),
            "transformer.wte.weight"
        );
        assert_eq!(file_key(Gpt2Model, "wte.weight"), "wte.weight");
        assert_eq!(
            file_key(Gpt2ForSequenceClassification, "h.0.ln_1.bias"),
            "transformer.h.0.ln_1.bias"
        );
        assert_eq!(
            file_key(Gpt2ForSequenceClassification, "score.weight"),
            "score.weight"
        );
        assert_eq!(
            file_key(Gpt2LMHeadModel, "lm_head.weight"),
            "lm_head.weight"
        );
        assert_eq!(
            file_key(Gpt2DoubleHeadsModel, "multiple_choice_head.summary.bias"),
            "multiple_choice_head.summary.bias"
        );
        assert_eq!(
            file_key(BertForPreTraining, "pooler.dense.weight"),
            "bert.pooler.dense.weight"
        );
        assert_eq!(
            file_key(BertForPreTraining, "cls.predictions.bias"),
            "cls.predictions.bias"
        );
        assert_eq!(
            file_key(BertForQuestionAnswering, "qa_outputs.bias"),
            "qa_outputs.bias"
        );
        assert_eq!(
            file_key(BertForMultipleChoice, "classifier.weight"),
            "classifier.weight"
        );
        assert_eq!(
            file_key(BertForMultipleChoice, "pooler.dense.bias"),
            "bert.pooler.dense.bias"
        );
        assert_eq!(
            file_key(BertModel, "pooler.dense.bias"),
            "pooler.dense.bias"
        );
        for a in Architecture::ALL {
            assert_eq!(Architecture::from_hf_name(a.hf_name()), Some(a));
        }
    }
}
