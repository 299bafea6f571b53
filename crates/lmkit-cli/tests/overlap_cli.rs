//! `lmkit overlap` against an exact computation (the set of the training
//! text's normalised 8-grams) on real prose with planted overlap, JSONL
//! documents, the saved filter, and every refusal: an existing output
//! file, a filter over the memory limit, a damaged filter file.
//! (`scripts/check_overlap.py` does the same against Python's own
//! normalisation.)

mod common;

use std::collections::HashSet;
use std::path::Path;

use common::{lmkit, tmpdir};
use lmkit::data::overlap::normalized_words;
use serde_json::Value;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn ok(args: &[&str]) -> Value {
    let o = lmkit(args);
    assert!(
        o.status.success(),
        "lmkit {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

fn refused(args: &[&str]) -> String {
    let o = lmkit(args);
    assert!(!o.status.success(), "lmkit {args:?} should fail");
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!err.contains("panicked"), "{err}");
    err
}

fn grams(text: &str) -> Vec<Vec<String>> {
    normalized_words(text)
        .windows(8)
        .map(<[String]>::to_vec)
        .collect()
}

#[test]
fn shares_equal_the_exact_ngram_sets() {
    let dir = tmpdir("overlap");
    let corpus = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/books/corpus.txt"),
    )
    .expect("assets/books/corpus.txt (scripts/fetch-assets.sh)");
    let paras: Vec<&str> = corpus
        .split("\n\n")
        .map(str::trim)
        .filter(|p| normalized_words(p).len() >= 20 && !p.contains('\u{c}'))
        .take(400)
        .collect();
    let (train, rest) = paras.split_at(200);
    let train_text = train.join("\n\n");
    // Every 4th evaluation document is a training paragraph with a new start.
    let docs: Vec<String> = rest
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let p = p.replace("\n\n", "\n");
            if i % 4 == 0 {
                format!("Planted: {}", train[i].replace("\n\n", "\n"))
            } else {
                p
            }
        })
        .collect();
    let train_set: HashSet<Vec<String>> = grams(&train_text).into_iter().collect();
    let exact: Vec<(usize, usize)> = docs
        .iter()
        .map(|d| {
            let g = grams(d);
            (g.len(), g.iter().filter(|x| train_set.contains(*x)).count())
        })
        .collect();
    let t = dir.join("train.txt");
    std::fs::write(&t, &train_text).unwrap();
    let e = dir.join("eval.txt");
    std::fs::write(&e, docs.join("\n\n")).unwrap();
    let bloom = dir.join("f.bloom");
    let clean = dir.join("clean.txt");
    let r = ok(&[
        "overlap",
        "--train",
        s(&t),
        "--eval",
        s(&e),
        "--save-filter",
        s(&bloom),
        "--write-clean",
        s(&clean),
        "--json",
    ]);
    let per: Vec<(usize, usize)> = r["eval"]["per_document"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["ngrams"].as_u64().unwrap() as usize,
                d["hits"].as_u64().unwrap() as usize,
            )
        })
        .collect();
    // At 1e-8 and a few thousand n-grams a false positive is a 1e-4 event.
    assert_eq!(per, exact);
    let overlapping: Vec<usize> = (0..docs.len()).filter(|&i| exact[i].1 > 0).collect();
    assert!(overlapping.len() >= docs.len() / 4);
    let got: Vec<usize> = serde_json::from_value(r["eval"]["overlapping"].clone()).unwrap();
    assert_eq!(got, overlapping);
    let kept: Vec<&String> = docs
        .iter()
        .enumerate()
        .filter(|(i, _)| !overlapping.contains(i))
        .map(|(_, d)| d)
        .collect();
    let written = std::fs::read_to_string(&clean).unwrap();
    assert_eq!(
        written.trim_end().split("\n\n").collect::<Vec<_>>(),
        kept.iter().map(|d| d.as_str()).collect::<Vec<_>>()
    );
    assert!(r["filter"]["expected_fp_rate"].as_f64().unwrap() <= 1e-8);

    // `-`: the filter or the clean set on stdout (the same bytes as the
    // files), the report then on stderr; only one output may take stdout.
    for (flag, file) in [("--save-filter", &bloom), ("--write-clean", &clean)] {
        let o = lmkit(&[
            "overlap",
            "--train",
            s(&t),
            "--eval",
            s(&e),
            flag,
            "-",
            "--json",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(o.stdout, std::fs::read(file).unwrap(), "{flag} -");
        let report: Value = serde_json::from_slice(&o.stderr).unwrap();
        assert_eq!(report["eval"]["per_document"], r["eval"]["per_document"]);
    }
    let err = refused(&[
        "overlap",
        "--train",
        s(&t),
        "--eval",
        s(&e),
        "--save-filter",
        "-",
        "--write-clean",
        "-",
    ]);
    assert!(err.contains("only one of"), "{err}");

    // The saved filter, and JSONL rows as documents, give the same counts.
    let ej = dir.join("eval.jsonl");
    let rows: Vec<String> = docs
        .iter()
        .map(|d| serde_json::json!({ "text": d, "label": 1 }).to_string())
        .collect();
    std::fs::write(&ej, rows.join("\n")).unwrap();
    let r2 = ok(&["overlap", "--filter", s(&bloom), "--eval", s(&ej), "--json"]);
    assert_eq!(r2["eval"]["per_document"], r["eval"]["per_document"]);

    // SQuAD JSON: each question a document of its context and question;
    // the report names the overlapping questions by id.
    let squad = serde_json::json!({"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": train[3], "qas": [{"id": "seen", "question": "what is it?",
            "answers": [{"text": train[3].split(' ').next().unwrap(), "answer_start": 0}]}]},
        {"context": "A short new context about nothing in the books at all today.",
         "qas": [{"id": "new", "question": "what?", "answers": [{"text": "A", "answer_start": 0}]}]},
    ]}]});
    let sq = dir.join("dev.json");
    std::fs::write(&sq, squad.to_string()).unwrap();
    let r3 = ok(&["overlap", "--filter", s(&bloom), "--eval", s(&sq), "--json"]);
    assert_eq!(r3["overlapping_ids"], serde_json::json!(["seen"]), "{r3}");
    let err = refused(&[
        "overlap",
        "--filter",
        s(&bloom),
        "--eval",
        s(&sq),
        "--write-clean",
        s(&dir.join("sq.clean")),
    ]);
    assert!(err.contains("SQuAD"), "{err}");

    // Refusals: an existing output file is never overwritten; a filter
    // over --max-memory is refused before it is allocated; a damaged
    // filter file is an error naming it.
    let err = refused(&[
        "overlap",
        "--train",
        s(&t),
        "--eval",
        s(&e),
        "--write-clean",
        s(&clean),
    ]);
    assert!(err.contains("exists"), "{err}");
    let err = refused(&[
        "overlap",
        "--train",
        s(&t),
        "--eval",
        s(&e),
        "--max-memory",
        "1KB",
    ]);
    assert!(err.contains("over the limit"), "{err}");
    let mut bytes = std::fs::read(&bloom).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x10;
    let bad = dir.join("bad.bloom");
    std::fs::write(&bad, &bytes).unwrap();
    let err = refused(&["overlap", "--filter", s(&bad), "--eval", s(&e)]);
    assert!(
        err.contains("bad.bloom") && err.contains("checksum"),
        "{err}"
    );
    std::fs::write(&bad, b"LMKBLOOM").unwrap();
    let err = refused(&["overlap", "--filter", s(&bad), "--eval", s(&e)]);
    assert!(err.contains("bad.bloom"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
