//! Loading, saving, training and bad input for the WordPiece tokenizer.

use std::path::{Path, PathBuf};

use lmkit_tokenizers::wordpiece::{
    train_wordpiece, train_wordpiece_files, TrainProgress, Truncation, TruncationStrategy,
    WordPieceOptions, WordPieceTokenizer, WordPieceTrainer,
};
use lmkit_tokenizers::Error;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn minilm() -> PathBuf {
    let dir = root().join("assets/minilm");
    assert!(
        dir.join("vocab.txt").is_file(),
        "{} is missing: run scripts/fetch-assets.sh first",
        dir.display()
    );
    dir
}

fn corpus() -> String {
    let path = root().join("assets/books/corpus.txt");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/fetch-assets.sh first", path.display()))
}

/// A fresh scratch directory under the system temp dir.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lmkit-wordpiece-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &Path, name: &str, content: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p
}

const SAMPLES: &[&str] = &[
    "Hello, world! Ünïcödé façade — naïve café.",
    "野口里佳 Noguchi Rika; 한국어 텍스트 [SEP] [MASK] x",
    "fn main() { println!(\"{}\", 1 + 2); } // don't panic",
    "",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
];

#[test]
fn vocab_errors_name_file_and_line() {
    let dir = scratch("vocab-errors");
    let dup = write(&dir, "dup.txt", b"[PAD]\n[UNK]\nhello\n[CLS]\nhello\n");
    match WordPieceTokenizer::from_vocab_file(&dup, Default::default()) {
        Err(Error::Parse {
            path,
            line,
            message,
        }) => {
            assert_eq!((path, line), (dup.clone(), 5));
            assert!(message.contains("line 3"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let bad = write(&dir, "bad.txt", b"[PAD]\n[UN\xffK]\n");
    match WordPieceTokenizer::from_vocab_file(&bad, Default::default()) {
        Err(Error::Parse { line, .. }) => assert_eq!(line, 2),
        other => panic!("{other:?}"),
    }
    let no_unk = write(&dir, "nounk.txt", b"[PAD]\n[CLS]\n[SEP]\nhello\n");
    let err = WordPieceTokenizer::from_vocab_file(&no_unk, Default::default()).unwrap_err();
    assert!(
        matches!(err, Error::Unsupported { .. }) && err.to_string().contains("[UNK]"),
        "{err}"
    );
    let missing = dir.join("absent");
    match WordPieceTokenizer::from_dir(&missing) {
        Err(Error::Io { path, .. }) => assert_eq!(path, missing.join("vocab.txt")),
        other => panic!("{other:?}"),
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn json_errors_name_file_and_line() {
    let dir = scratch("json-errors");
    // The real file is one line: pretty-print it so errors have distinct lines.
    let compact = std::fs::read_to_string(minilm().join("tokenizer.json")).unwrap();
    let value: serde_json::Value = serde_json::from_str(&compact).unwrap();
    let good = serde_json::to_string_pretty(&value).unwrap();
    let p = write(&dir, "tokenizer.json", good.as_bytes());
    assert_eq!(
        WordPieceTokenizer::from_tokenizer_json(&p)
            .unwrap()
            .vocab_size(),
        30522
    );

    // A syntax error: the reported line is where the JSON breaks.
    let broken = good.replacen("\"[PAD]\": 0", "\"[PAD]\" 0", 1);
    let want_line = 1 + broken[..broken.find("\"[PAD]\" 0").unwrap()]
        .matches('\n')
        .count();
    let p = write(&dir, "tokenizer.json", broken.as_bytes());
    match WordPieceTokenizer::from_tokenizer_json(&p) {
        Err(Error::Parse { path, line, .. }) => assert_eq!((path, line), (p.clone(), want_line)),
        other => panic!("{other:?}"),
    }

    // Another model type.
    let bpe = good.replacen(
        "\"type\": \"WordPiece\",\n    \"unk_token\"",
        "\"type\": \"BPE\",\n    \"unk_token\"",
        1,
    );
    assert_ne!(bpe, good);
    let p = write(&dir, "tokenizer.json", bpe.as_bytes());
    let err = WordPieceTokenizer::from_tokenizer_json(&p).unwrap_err();
    assert!(
        matches!(err, Error::Parse { line, .. } if line > 0),
        "{err}"
    );
    assert!(err.to_string().contains("BPE"), "{err}");

    // An id outside the vocabulary points at the token's line.
    let gap = good.replacen("\"hello\": 7592", "\"hello\": 99999", 1);
    let p = write(&dir, "tokenizer.json", gap.as_bytes());
    let want_line = 1 + gap[..gap.find("\"hello\": 99999").unwrap()]
        .matches('\n')
        .count();
    match WordPieceTokenizer::from_tokenizer_json(&p) {
        Err(Error::Parse { line, message, .. }) => {
            assert_eq!(line, want_line);
            assert!(message.contains("hello"), "{message}");
        }
        other => panic!("{other:?}"),
    }

    // A token twice (under two ids) is an error naming its first line, as
    // in vocab.txt (a JSON object read into a map would keep the last).
    let twice = good.replacen("\"hello\": 7592", "\"hello\": 7592,\n\"hello\": 30522", 1);
    let p = write(&dir, "tokenizer.json", twice.as_bytes());
    let want_line = 1 + twice[..twice.find("\"hello\": 7592").unwrap()]
        .matches('\n')
        .count();
    match WordPieceTokenizer::from_tokenizer_json(&p) {
        Err(Error::Parse { line, message, .. }) => {
            assert_eq!(line, want_line, "{message}");
            assert!(message.contains("duplicate token \"hello\""), "{message}");
        }
        other => panic!("{other:?}"),
    }

    // A tokenizer_config.json with a wrongly typed key.
    std::fs::copy(minilm().join("vocab.txt"), dir.join("vocab.txt")).unwrap();
    std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
    write(
        &dir,
        "tokenizer_config.json",
        b"{\n  \"do_lower_case\": \"yes\"\n}\n",
    );
    match WordPieceTokenizer::from_dir(&dir) {
        Err(Error::Parse { path, line, .. }) => {
            assert_eq!((path, line), (dir.join("tokenizer_config.json"), 2))
        }
        other => panic!("{other:?}"),
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn invalid_utf8_and_bad_options_are_errors() {
    let mut t = WordPieceTokenizer::from_vocab_file(minilm().join("vocab.txt"), Default::default())
        .unwrap();
    assert!(matches!(
        t.encode_bytes(b"ok \xff\xfe", true),
        Err(Error::InvalidInput(_))
    ));
    assert_eq!(t.encode_bytes(b"hello", false).unwrap().ids, [7592]);
    t.set_truncation(Some(
        Truncation::new(8).with_strategy(TruncationStrategy::OnlySecond),
    ));
    assert!(
        t.encode("a b c d e f g h i j", true).is_err(),
        "only_second without a pair"
    );
    t.set_truncation(Some(Truncation::new(1)));
    assert!(
        t.encode("a b c", true).is_err(),
        "max_length below the special tokens"
    );
    t.set_truncation(None);
    assert!(
        t.encode_pair_windows("question", "a long context with many more words", 8, 4)
            .is_err(),
        "stride too big"
    );
    assert!(
        t.encode_pair_windows(&"word ".repeat(20), "context", 8, 0)
            .is_err(),
        "no room for context"
    );
}

#[test]
fn save_round_trips_through_both_formats() {
    let mut t = WordPieceTokenizer::from_tokenizer_json(minilm().join("tokenizer.json")).unwrap();
    t.set_truncation(None).set_padding(None);
    let dir = scratch("save");
    t.save(&dir).unwrap();
    let original = std::fs::read_to_string(minilm().join("vocab.txt")).unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join("vocab.txt")).unwrap(),
        original
    );

    let via_json = WordPieceTokenizer::from_dir(&dir).unwrap();
    std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
    let via_vocab = WordPieceTokenizer::from_dir(&dir).unwrap();
    let text = corpus();
    let lines: Vec<&str> = text
        .lines()
        .take(3000)
        .chain(SAMPLES.iter().copied())
        .collect();
    for line in lines {
        let want = t.encode(line, true).unwrap();
        assert_eq!(via_json.encode(line, true).unwrap(), want, "{line:?}");
        assert_eq!(via_vocab.encode(line, true).unwrap(), want, "{line:?}");
        assert_eq!(
            via_json.decode(&want.ids, true).unwrap(),
            t.decode(&want.ids, true).unwrap()
        );
    }
    assert_eq!(via_vocab.options(), t.options());

    // Settings survive the round trip through tokenizer_config.json too.
    let cased =
        WordPieceTokenizer::from_vocab_file(minilm().join("vocab.txt"), WordPieceOptions::cased())
            .unwrap();
    cased.save(&dir).unwrap();
    std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
    let back = WordPieceTokenizer::from_dir(&dir).unwrap();
    assert!(!back.options().lowercase);
    for s in SAMPLES {
        assert_eq!(
            back.encode(s, true).unwrap(),
            cased.encode(s, true).unwrap()
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn training_learns_a_vocab_that_round_trips() {
    let text = corpus();
    // A megabyte of the books, cut at a line end.
    let cut = text[..1 << 20].rfind('\n').unwrap();
    let dir = scratch("train");
    let file = write(&dir, "train.txt", &text.as_bytes()[..cut]);
    let trainer = WordPieceTrainer {
        vocab_size: 3000,
        ..Default::default()
    };
    let mut counted = 0;
    let mut merged = 0;
    let t = train_wordpiece_files(&[&file], &trainer, |p| match p {
        TrainProgress::Counting {
            done_bytes,
            total_bytes,
        } => {
            assert!(done_bytes <= total_bytes);
            counted = done_bytes;
        }
        TrainProgress::Merging { vocab_size, target } => {
            assert!(vocab_size <= target);
            merged = vocab_size;
        }
    })
    .unwrap();
    assert_eq!(counted, cut as u64);
    assert_eq!((t.vocab_size(), merged), (3000, 3000));
    assert_eq!(
        &t.vocab()[..5],
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    );
    assert!(t.vocab().iter().any(|v| v.starts_with("##") && v.len() > 3));
    assert!(t.vocab().iter().any(|v| v == "the"));

    // Deterministic, and the same from memory as from the file.
    let again = train_wordpiece(&[&text[..cut]], &trainer, |_| {}).unwrap();
    assert_eq!(again.vocab(), t.vocab());

    // Saved and loaded back, it encodes the same; plain lowercase text decodes back.
    let out = dir.join("tok");
    t.save(&out).unwrap();
    let back = WordPieceTokenizer::from_dir(&out).unwrap();
    let mut unk = 0;
    let mut total = 0;
    for line in text[..cut].lines().take(2000) {
        let e = t.encode(line, true).unwrap();
        assert_eq!(back.encode(line, true).unwrap(), e);
        unk += e.ids.iter().filter(|&&id| id == t.unk_id()).count();
        total += e.len();
    }
    assert!(
        unk * 1000 < total,
        "{unk} [UNK] of {total} tokens on training text"
    );
    let plain = "the borrow checker makes sure that references are valid";
    let e = back.encode(plain, false).unwrap();
    assert_eq!(back.decode(&e.ids, false).unwrap(), plain);

    let bad = write(&dir, "bad.txt", b"fine line\nbroken \xc3( line\n");
    let err = train_wordpiece_files(&[&bad], &trainer, |_| {}).unwrap_err();
    assert!(err.to_string().contains("bad.txt:2"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}
