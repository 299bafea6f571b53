//! Token classification against its references: seqeval's entity scores on
//! tricky tag sequences (tests/fixtures/seqeval, written by the `seqeval`
//! package), and the word → first-piece label alignment against HF run_ner's
//! (tests/fixtures/bert-tiny-token-classify).

use std::path::{Path, PathBuf};

use lmkit::data::classify_data::LabelMap;
use lmkit::data::tagging::{
    encode_sentences, encode_words, read_tagging, tag_map, TaggedSentence, TaggingData,
};
use lmkit::eval::{get_entities, seqeval_scores};
use lmkit_tokenizers::wordpiece::{PaddingLength, Truncation, WordPieceTokenizer};
use serde_json::Value;

fn fixture(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(case)
}

fn json(case: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(case).join("reference.json")).unwrap())
        .unwrap()
}

fn tags(v: &Value) -> Vec<Vec<String>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| {
            s.as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

fn close(what: &str, got: f64, want: &Value) {
    let want = want.as_f64().unwrap();
    assert!((got - want).abs() < 1e-12, "{what}: {got} vs {want}");
}

#[test]
fn entity_scores_equal_seqeval() {
    let r = json("seqeval");
    let cases = r["cases"].as_array().unwrap();
    assert!(cases.len() >= 10);
    for (i, c) in cases.iter().enumerate() {
        let (gold, pred) = (tags(&c["gold"]), tags(&c["pred"]));
        for (side, seqs) in [("gold", &gold), ("pred", &pred)] {
            let want: Vec<(String, usize, usize)> = c[format!("{side}_entities")]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    (
                        e[0].as_str().unwrap().to_string(),
                        e[1].as_u64().unwrap() as usize,
                        e[2].as_u64().unwrap() as usize,
                    )
                })
                .collect();
            assert_eq!(get_entities(seqs), want, "case {i} {side} entities");
        }
        let s = seqeval_scores(&gold, &pred).unwrap();
        close(&format!("case {i} precision"), s.precision, &c["precision"]);
        close(&format!("case {i} recall"), s.recall, &c["recall"]);
        close(&format!("case {i} f1"), s.f1, &c["f1"]);
        match s.accuracy {
            Some(a) => close(&format!("case {i} accuracy"), a, &c["accuracy"]),
            None => assert!(c["accuracy"].is_null()),
        }
        let want = c["per_type"].as_object().unwrap();
        assert_eq!(s.per_type.len(), want.len(), "case {i} types");
        for (k, w) in want {
            let got = &s.per_type[k];
            close(
                &format!("case {i} {k} precision"),
                got.precision,
                &w["precision"],
            );
            close(&format!("case {i} {k} recall"), got.recall, &w["recall"]);
            close(&format!("case {i} {k} f1"), got.f1, &w["f1-score"]);
            assert_eq!(got.support as u64, w["support"].as_u64().unwrap());
        }
    }
    assert!(seqeval_scores(&[vec!["O"]], &[vec!["O", "O"]]).is_none());
}

#[test]
fn first_piece_alignment_equals_hf_run_ner() {
    let dir = fixture("bert-tiny-token-classify");
    let r = json("bert-tiny-token-classify");
    let tok = WordPieceTokenizer::from_dir(&dir).unwrap();
    let model = lmkit::models::bert::Bert::from_dir(&dir).unwrap();
    let map = LabelMap::from_names(model.config.id2label.clone()).unwrap();
    let data = TaggingData {
        path: "fixture".into(),
        sentences: tags(&r["words"])
            .into_iter()
            .zip(tags(&r["tags"]))
            .map(|(words, tags)| TaggedSentence {
                words,
                tags,
                line: 1,
            })
            .collect(),
    };
    let ids = data.tag_ids(&map).unwrap();
    let bytes = std::fs::read(dir.join("reference.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let (want_labels, want_ids) = (
        st.tensor("labels").unwrap(),
        st.tensor("input_ids").unwrap(),
    );
    let t = want_labels.shape()[1];
    let i64s = |d: &[u8]| -> Vec<i64> {
        d.chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect()
    };
    let (wl, wi) = (i64s(want_labels.data()), i64s(want_ids.data()));
    for (b, s) in data.sentences.iter().enumerate() {
        let e = encode_words(&tok, &s.words, Some(&ids[b]), 64).unwrap();
        let k = e.labels.len();
        let got_ids: Vec<i64> = e.encoding.ids.iter().map(|&x| x as i64).collect();
        assert_eq!(got_ids, wi[b * t..b * t + k], "sentence {b} ids");
        let got: Vec<i64> = e.labels.iter().map(|&x| x as i64).collect();
        assert_eq!(got, wl[b * t..b * t + k], "sentence {b} labels");
        assert!(wl[b * t + k..(b + 1) * t].iter().all(|&x| x == -100));
        // Truncation keeps [CLS] … [SEP] within max_len; later words go unscored.
        let cut = encode_words(&tok, &s.words, Some(&ids[b]), 4).unwrap();
        assert_eq!(cut.labels.len(), 4);
        assert_eq!(cut.labels[..3], e.labels[..3]);
        assert_eq!(cut.labels[3], -100);
    }
    // A tokenizer that pads and truncates every encoding, as
    // sentence-transformers' tokenizer.json does (Fixed 128): the words
    // are still their own pieces (each word was padded to a whole
    // sentence, so only the first word was trained on).
    let mut padded = tok.clone();
    padded.set_padding(Some(padded.padding_to(PaddingLength::Fixed(128))));
    padded.set_truncation(Some(Truncation::new(128)));
    let plain: Vec<_> = data
        .sentences
        .iter()
        .zip(&ids)
        .map(|(s, t)| encode_words(&tok, &s.words, Some(t), 64).unwrap())
        .collect();
    for (b, s) in data.sentences.iter().enumerate() {
        let e = encode_words(&padded, &s.words, Some(&ids[b]), 64).unwrap();
        assert_eq!(e, plain[b], "sentence {b}, padding tokenizer");
    }
    assert_eq!(encode_sentences(&padded, &data, &map, 64).unwrap(), plain);
    // The map from data is sorted, as run_ner's label list.
    let names = tag_map(&data).unwrap().names().to_vec();
    assert_eq!(names, ["B-LOC", "B-PER", "I-PER", "O"]);
}

#[test]
fn tagging_files_read_as_conll_or_jsonl() {
    let dir = std::env::temp_dir().join(format!("lmkit-tagging-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conll = dir.join("train.txt");
    std::fs::write(
        &conll,
        "-DOCSTART- O\n\nRust B-LANG\nis O\n\nFerris B-PER\n",
    )
    .unwrap();
    let d = read_tagging(&conll).unwrap();
    assert_eq!(d.sentences.len(), 2);
    assert_eq!(d.sentences[1].tags, ["B-PER"]);
    let jsonl = dir.join("train.data");
    std::fs::write(
        &jsonl,
        "\n{\"tokens\": [\"Rust\", \"is\"], \"tags\": [\"B-LANG\", \"O\"]}\n",
    )
    .unwrap();
    assert_eq!(
        read_tagging(&jsonl).unwrap().sentences[0].words,
        ["Rust", "is"]
    );
    for (body, want) in [
        (
            "{\"tokens\": [\"a\"], \"tags\": []}\n",
            "1 tokens but 0 tags",
        ),
        ("{\"tokens\": [\"a\"], \"tags\": [3]}\n", "must be a string"),
        ("{\"tokens\": [\"a\"]}\n", "missing field `tags`"),
        ("\n\n", "no tagged sentences"),
    ] {
        std::fs::write(&jsonl, body).unwrap();
        let e = read_tagging(&jsonl).unwrap_err().to_string();
        assert!(e.contains(want), "{body:?}: {e}");
    }
    let map = LabelMap::from_names(vec!["O".into()]).unwrap();
    let e = d.tag_ids(&map).unwrap_err().to_string();
    assert!(
        e.contains("train.txt:3") && e.contains("unknown tag `B-LANG`"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn check_entities(what: &str, got: &[lmkit::models::bert::NerEntity], want: &Value) {
    let want = want.as_array().unwrap();
    assert_eq!(got.len(), want.len(), "{what}: {got:?}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(
            g.entity_group,
            w["entity_group"].as_str().unwrap(),
            "{what}"
        );
        assert_eq!(g.word, w["word"].as_str().unwrap(), "{what}");
        assert_eq!(
            g.start as u64,
            w["start"].as_u64().unwrap(),
            "{what} {}",
            g.word
        );
        assert_eq!(
            g.end as u64,
            w["end"].as_u64().unwrap(),
            "{what} {}",
            g.word
        );
        let ws = w["score"].as_f64().unwrap();
        assert!(
            (g.score as f64 - ws).abs() < 1e-4,
            "{what} {}: {} vs {ws}",
            g.word,
            g.score
        );
    }
}

#[test]
fn ner_equals_hf_token_classification_pipeline() {
    use lmkit::models::bert::{group_entities, BertPipeline, TokenTag};
    let r = json("bert-tiny-token-classify");
    let ner = &r["ner_pipeline"];
    // HF's grouping rules on given per-token tags.
    let g = &ner["grouping"];
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect()
    };
    let (pieces, tags) = (strs(&g["pieces"]), strs(&g["tags"]));
    let tokens: Vec<TokenTag> = (0..pieces.len())
        .map(|i| TokenTag {
            tag: tags[i].clone(),
            score: g["scores"][i].as_f64().unwrap() as f32,
            word: pieces[i].clone(),
            start: g["spans"][i][0].as_u64().unwrap() as usize,
            end: g["spans"][i][1].as_u64().unwrap() as usize,
        })
        .collect();
    check_entities("grouping", &group_entities(&tokens), &g["groups"]);
    // The pipeline end to end on raw text (character offsets, [UNK] words).
    let p = BertPipeline::from_dir(fixture("bert-tiny-token-classify")).unwrap();
    for res in ner["results"].as_array().unwrap() {
        let text = res["text"].as_str().unwrap();
        check_entities(text, &p.ner(text, false).unwrap(), &res["entities"]);
    }
    let seq = BertPipeline::from_dir(fixture("bert-tiny-classify")).unwrap();
    assert!(seq.ner("the king", false).is_err());
}
