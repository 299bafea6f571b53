//! Parquet files written by pyarrow (`scripts/make_parquet_fixtures.py`:
//! Snappy, Zstandard, gzip; string and large_string; several row groups;
//! a null; a nested column left out) read to the rows pyarrow reads back.

use std::path::{Path, PathBuf};

use lmkit::data::classify_data::read_jsonl_objects;
use lmkit::data::nsp::read_documents;
use lmkit::data::parquet::{parse_parquet_rows, read_parquet_rows};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/parquet")
}

#[test]
fn pyarrow_files_read_as_pyarrow_reads_them() {
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join("expected.json")).unwrap())
            .unwrap();
    let cases = expected.as_object().unwrap();
    assert_eq!(cases.len(), 3);
    for (name, case) in cases {
        let path = dir().join(name);
        let rows = read_parquet_rows(&path, None).unwrap();
        let want = case["rows"].as_array().unwrap();
        assert!(case["row_groups"].as_u64().unwrap() > 1, "{name}");
        assert_eq!(rows.len(), want.len(), "{name}");
        for (k, ((line, row), w)) in rows.iter().zip(want).enumerate() {
            assert_eq!(*line, k + 1);
            assert_eq!(&serde_json::Value::Object(row.clone()), w, "{name} row {k}");
        }
        // One column read alone gives the same values.
        let texts = read_parquet_rows(&path, Some(&["text"])).unwrap();
        for ((_, row), w) in texts.iter().zip(want) {
            assert_eq!(row.len(), 1);
            assert_eq!(row["text"], w["text"]);
        }
        // The JSONL-row reader takes Parquet as it is.
        assert_eq!(read_jsonl_objects(&path).unwrap(), rows);
    }
    // A missing column is named, with those there are.
    let e = read_parquet_rows(&dir().join("zstd.parquet"), Some(&["body"])).unwrap_err();
    assert!(
        e.to_string()
            .contains("no column `body` (columns: title, text, score)"),
        "{e}"
    );
    // Documents: each row's `text`.
    let docs = read_documents(&[dir().join("zstd.parquet")]).unwrap();
    let want: Vec<&str> = cases["zstd.parquet"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["text"].as_str().unwrap())
        .collect();
    assert_eq!(docs, want);
}

#[test]
fn damaged_parquet_is_an_error() {
    let bytes = std::fs::read(dir().join("snappy.parquet")).unwrap();
    // Cut anywhere, or a byte flipped in the data pages: an error or rows, never a panic.
    for cut in [0, 4, 100, bytes.len() / 2, bytes.len() - 9, bytes.len() - 1] {
        assert!(
            parse_parquet_rows(bytes[..cut].to_vec(), None).is_err(),
            "cut {cut}"
        );
    }
    for at in (4..bytes.len() - 8).step_by(97) {
        let mut b = bytes.clone();
        b[at] ^= 0x5a;
        let _ = parse_parquet_rows(b, None);
    }
}

/// A file the fuzzer made: a data page says it is dictionary-encoded but its
/// column chunk has no dictionary page, on which the parquet crate's decoder
/// panics ("Decoder for dict should have been set"). The reader's page check
/// meets the damaged page header first (a decoder panic past it is caught
/// too): an error naming the row group and column, not a crash.
#[test]
fn a_damaged_dictionary_page_is_an_error() {
    let bytes = std::fs::read(dir().join("dict-page-missing.parquet")).unwrap();
    assert!(parse_parquet_rows(bytes.clone(), None).is_err());
    let e = parse_parquet_rows(bytes, Some(&["text"])).unwrap_err();
    assert!(e.contains("row group 1, column `text`"), "{e}");
}

/// A dictionary page whose header claims ~1.1 billion strings in a few bytes
/// (found by `scripts/fuzz.sh`): the decoder would size the dictionary first
/// and abort on a 35 GB allocation. The reader checks the count against the
/// page's bytes before decoding.
#[test]
fn a_dictionary_larger_than_its_page_is_an_error() {
    let bytes = std::fs::read(dir().join("dict-count-huge.parquet")).unwrap();
    for columns in [None, Some(&["text"][..])] {
        let e = parse_parquet_rows(bytes.clone(), columns).unwrap_err();
        assert!(e.contains("dictionary page claims"), "{e}");
    }
}
