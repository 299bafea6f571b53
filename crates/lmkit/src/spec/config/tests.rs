//! Config parsing: aliases, defaults, rejections, round trips.

use super::*;

#[test]
fn gpt2_aliases_defaults_and_errors() {
    let c = Gpt2Config::from_json_str(r#"{"n_ctx": 64, "n_positions": 64, "hidden_size": 32, "n_head": 4, "n_layer": 2, "foo": [1]}"#).unwrap();
    assert_eq!(
        (c.n_positions, c.n_embd, c.inner(), c.vocab_size),
        (64, 32, 128, 50257)
    );
    assert_eq!(c.extra.get("foo"), Some(&serde_json::json!([1])));
    let e = Gpt2Config::from_json_str(r#"{"n_ctx": 64, "n_positions": 32}"#).unwrap_err();
    assert!(e.to_string().contains("n_ctx"), "{e}");
    let e = Gpt2Config::from_json_str(r#"{"n_embd": 30, "n_head": 4}"#).unwrap_err();
    assert!(
        matches!(&e, Error::Config { field, .. } if field == "n_embd"),
        "{e}"
    );
    let e = Gpt2Config::from_json_str(r#"{"activation_function": "relu"}"#).unwrap_err();
    assert!(e.to_string().contains("\"relu\""), "{e}");
    let e = Gpt2Config::from_json_str(r#"{"n_layer": -1}"#).unwrap_err();
    assert!(
        matches!(&e, Error::Config { field, .. } if field == "n_layer"),
        "{e}"
    );
    let e = Gpt2Config::from_json_str(r#"{"scale_attn_by_inverse_layer_idx": true}"#).unwrap_err();
    assert!(
        e.to_string().contains("scale_attn_by_inverse_layer_idx"),
        "{e}"
    );
    assert!(Gpt2Config::from_json_str(r#"{"reorder_and_upcast_attn": true}"#).is_ok());
    let e = Gpt2Config::from_json_str(r#"{"model_type": "bert"}"#).unwrap_err();
    assert!(e.to_string().contains("model_type"), "{e}");
}

#[test]
fn bert_labels_and_rejections() {
    let c = BertConfig::from_json_str(
        r#"{"id2label": {"1": "pos", "0": "neg"}, "label2id": {"neg": 0, "pos": 1}}"#,
    )
    .unwrap();
    assert_eq!(c.id2label, vec!["neg", "pos"]);
    let c = BertConfig::from_json_str(r#"{"num_labels": 3}"#).unwrap();
    assert_eq!(c.num_labels(), 3);
    let e = BertConfig::from_json_str(r#"{"id2label": {"0": "a", "2": "b"}}"#).unwrap_err();
    assert!(e.to_string().contains("id2label"), "{e}");
    let e =
        BertConfig::from_json_str(r#"{"position_embedding_type": "relative_key"}"#).unwrap_err();
    assert!(e.to_string().contains("position_embedding_type"), "{e}");
    let e = BertConfig::from_json_str(r#"{"hidden_dropout_prob": 1.5}"#).unwrap_err();
    assert!(e.to_string().contains("hidden_dropout_prob"), "{e}");
    let e = BertConfig::from_json_str(r#"{"is_decoder": true}"#).unwrap_err();
    assert!(e.to_string().contains("is_decoder"), "{e}");
}

#[test]
fn json_round_trip_and_detection() {
    let g = Gpt2Config {
        n_layer: 3,
        ..Default::default()
    };
    let back = AnyConfig::from_json_str(&g.to_json()).unwrap();
    assert_eq!(back, AnyConfig::Gpt2(g));
    let mut b = BertConfig {
        hidden_size: 64,
        num_attention_heads: 4,
        ..Default::default()
    };
    b.set_num_labels(3);
    let back = AnyConfig::from_json_str(&b.to_json()).unwrap();
    assert_eq!(back.family(), Family::Bert);
    assert_eq!(back, AnyConfig::Bert(b));
    let a = AnyConfig::from_json_str(r#"{"architectures": ["BertForMaskedLM"]}"#).unwrap();
    assert_eq!(a.architecture(), Architecture::BertForMaskedLM);
    let e = AnyConfig::from_json_str(r#"{"model_type": "llama"}"#).unwrap_err();
    assert!(e.to_string().contains("llama"), "{e}");
    let e = AnyConfig::from_json_str("{\n  \"a\": 1,\n}").unwrap_err();
    assert!(matches!(e, Error::Json { line: 3, .. }), "{e}");
}
