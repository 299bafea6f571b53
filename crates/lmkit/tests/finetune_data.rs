//! Fine-tuning / evaluation data readers: classification JSONL, SQuAD v1.1,
//! LAMBADA and summarisation JSONL — bad input names the line or entry — and
//! the committed real-text sets under tests/data.

use std::path::{Path, PathBuf};

use lmkit::data::classify_data::{read_classify_jsonl, Label, LabelMap};
use lmkit::data::squad::{char_to_byte, read_squad};
use lmkit::eval::{read_lambada, read_summarize};

fn tmp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lmkit-ftdata-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data")
        .join(rel)
}

#[test]
fn classify_jsonl_string_and_int_labels() {
    let p = tmp(
        "cls.jsonl",
        "{\"text\": \"good film\", \"label\": \"pos\"}\n\n{\"text\": \"q\", \"text_pair\": \"a\", \"label\": \"neg\"}\n{\"text\": \"meh\", \"text_pair\": null, \"label\": \"neu\"}\n",
    );
    let d = read_classify_jsonl(&p).unwrap();
    assert_eq!(d.examples.len(), 3);
    assert_eq!(d.examples[1].text_pair.as_deref(), Some("a"));
    assert_eq!(d.examples[1].line, 3, "blank lines still count");
    let map = LabelMap::from_examples(&d).unwrap();
    assert_eq!(map.names(), ["neg", "neu", "pos"], "sorted string labels");
    assert_eq!(map.ids(&d).unwrap(), [2, 0, 1]);

    let p = tmp(
        "int.jsonl",
        "{\"text\": \"a\", \"label\": 0}\n{\"text\": \"b\", \"label\": 2}\n",
    );
    let d = read_classify_jsonl(&p).unwrap();
    let map = LabelMap::from_examples(&d).unwrap();
    assert_eq!(map.names(), ["LABEL_0", "LABEL_1", "LABEL_2"]);
    assert_eq!(map.ids(&d).unwrap(), [0, 2]);
    assert_eq!(map.id(&Label::Int(3)), None);
}

#[test]
fn classify_jsonl_errors_name_the_line() {
    let cases: &[(&str, &str)] = &[
        (
            "{\"text\": \"a\", \"label\": \"x\"}\n{\"text\": \"b\"\n",
            ":2: invalid JSON",
        ),
        (
            "{\"text\": \"a\", \"label\": \"x\"}\n[1, 2]\n",
            ":2: expected a JSON object, found an array",
        ),
        ("{\"label\": \"x\"}\n", ":1: missing field `text`"),
        (
            "{\"text\": 5, \"label\": \"x\"}\n",
            ":1: field `text` must be a string",
        ),
        (
            "{\"text\": \"a\", \"label\": 1.5}\n",
            ":1: label 1.5 is not a non-negative integer",
        ),
        (
            "{\"text\": \"a\", \"label\": -1}\n",
            ":1: label -1 is not a non-negative integer",
        ),
        (
            "{\"text\": \"a\", \"label\": [1]}\n",
            ":1: field `label` must be a string or an integer",
        ),
        (
            "{\"text\": \"a\", \"label\": 1}\n{\"text\": \"b\", \"label\": \"x\"}\n",
            ":2: label \"x\" is a string but line 1 has integer labels",
        ),
        ("{\"text\": \"a\"}\n", ":1: missing field `label`"),
        (
            "{\"text\": \"a\", \"label\": \"x\", \"text_pair\": 3}\n",
            ":1: field `text_pair` must be a string",
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let p = tmp(&format!("bad{i}.jsonl"), text);
        let err = read_classify_jsonl(&p).unwrap_err().to_string();
        assert!(err.contains(want), "case {i}: {err:?} lacks {want:?}");
        assert!(
            err.contains(&format!("bad{i}.jsonl")),
            "case {i}: no file name in {err:?}"
        );
    }
    let err = read_classify_jsonl(&tmp("empty.jsonl", "\n"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no examples"), "{err}");
    let one = tmp("one.jsonl", "{\"text\": \"a\", \"label\": \"x\"}\n");
    let err = LabelMap::from_examples(&read_classify_jsonl(&one).unwrap()).unwrap_err();
    assert!(err.to_string().contains("only one distinct label"), "{err}");
}

#[test]
fn unknown_label_at_eval_names_the_line() {
    let map = LabelMap::from_names(vec!["neg".into(), "pos".into()]).unwrap();
    let p = tmp(
        "eval.jsonl",
        "{\"text\": \"a\", \"label\": \"pos\"}\n{\"text\": \"b\", \"label\": \"meh\"}\n",
    );
    let err = map
        .ids(&read_classify_jsonl(&p).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("eval.jsonl:2: unknown label \"meh\""), "{err}");
    assert!(err.contains("0=neg, 1=pos"), "{err}");
    let p = tmp("evalint.jsonl", "{\"text\": \"a\", \"label\": 5}\n");
    let err = map
        .ids(&read_classify_jsonl(&p).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains(":1: unknown label 5"), "{err}");
}

#[test]
fn squad_reader_offsets_and_errors() {
    // "é" is 2 bytes: answer_start counts characters, the byte offset differs.
    let json = r#"{"version": "1.1", "data": [{"title": "T", "paragraphs": [
        {"context": "Café au lait in Paris.", "qas": [
            {"id": "q1", "question": "Where?", "answers": [{"text": "Paris", "answer_start": 16}]},
            {"id": "q2", "question": "Bad offset?", "answers": [{"text": "Paris", "answer_start": 3}]}
        ]}]}]}"#;
    let p = tmp("squad.json", json);
    let ex = read_squad(&p).unwrap();
    assert_eq!(ex.len(), 2);
    assert_eq!(ex[0].answers[0].byte_start, Some(17));
    assert_eq!(&ex[0].context[17..22], "Paris");
    assert_eq!(
        ex[1].answers[0].byte_start, None,
        "misaligned answer is flagged"
    );
    assert_eq!(ex[0].answer_texts(), ["Paris"]);
    assert_eq!(char_to_byte("aé b", 3), Some(4));
    assert_eq!(char_to_byte("ab", 2), Some(2));
    assert_eq!(char_to_byte("ab", 3), None);

    let bad = [
        (
            r#"{"data": [{"paragraphs": [{"context": "x", "qas": [{"id": "z9", "answers": []}]}]}]}"#,
            "data[0].paragraphs[0].qas[0] (id \"z9\"): missing field `question`",
        ),
        (
            r#"{"data": [{"paragraphs": [{"qas": []}]}]}"#,
            "data[0].paragraphs[0]: missing field `context`",
        ),
        (
            r#"{"data": [{"paragraphs": [{"context": "x", "qas": [{"id": "a", "question": "q", "answers": [{"text": "x", "answer_start": "0"}]}]}]}]}"#,
            "qas[0] (id \"a\").answers[0]: field `answer_start` must be an integer",
        ),
        (r#"{"dat": []}"#, "top level: missing field `data`"),
        (r#"{"data": [}"#, "invalid JSON"),
    ];
    for (i, (text, want)) in bad.iter().enumerate() {
        let err = read_squad(&tmp(&format!("sq{i}.json"), text))
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "case {i}: {err:?} lacks {want:?}");
    }
}

#[test]
fn lambada_and_summarize_readers() {
    let p = tmp(
        "lam.jsonl",
        "{\"text\": \"she opened the door for Anna\"}\n{\"text\": \"alone\"}\n",
    );
    let err = read_lambada(&p).unwrap_err().to_string();
    assert!(
        err.contains("lam.jsonl:2: passage needs at least two words"),
        "{err}"
    );
    let p = tmp(
        "lam2.jsonl",
        "{\"text\": \"she opened the door for Anna\"}\n",
    );
    let items = read_lambada(&p).unwrap();
    assert_eq!(items[0].context, "she opened the door for");
    assert_eq!(items[0].target(), " Anna");
    let p = tmp(
        "sum.jsonl",
        "{\"article\": \"a\", \"summary\": \"b\"}\n{\"article\": \"a\"}\n",
    );
    let err = read_summarize(&p).unwrap_err().to_string();
    assert!(
        err.contains("sum.jsonl:2: missing field `summary`"),
        "{err}"
    );
}

/// The committed real-text sets parse and have the documented shape.
#[test]
fn committed_eval_sets() {
    let train = read_classify_jsonl(&data("classify/prose_code.train.jsonl")).unwrap();
    let held = read_classify_jsonl(&data("classify/prose_code.eval.jsonl")).unwrap();
    assert_eq!((train.examples.len(), held.examples.len()), (2000, 500));
    let map = LabelMap::from_examples(&train).unwrap();
    assert_eq!(map.names(), ["code", "prose"]);
    let ids = map.ids(&held).unwrap();
    assert_eq!(
        ids.iter().filter(|&&i| i == 0).count(),
        250,
        "balanced held-out set"
    );
    let train_texts: std::collections::HashSet<&str> =
        train.examples.iter().map(|e| e.text.as_str()).collect();
    assert!(held
        .examples
        .iter()
        .all(|e| !train_texts.contains(e.text.as_str())));

    let squad = read_squad(&data("squad/rust_book.json")).unwrap();
    assert!(squad.len() >= 50, "{} questions", squad.len());
    for ex in &squad {
        let a = &ex.answers[0];
        let b = a
            .byte_start
            .unwrap_or_else(|| panic!("{}: answer not at its offset", ex.id));
        assert_eq!(&ex.context[b..b + a.text.len()], a.text);
    }
    assert!(
        read_lambada(&data("lambada/rust_book.jsonl"))
            .unwrap()
            .len()
            >= 20
    );
    assert!(
        read_summarize(&data("summarize/rust_book.jsonl"))
            .unwrap()
            .len()
            >= 10
    );
}
