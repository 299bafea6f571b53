//! Data as users have it, end to end: llm.c / nanoGPT token files written
//! by `lmkit tokenize --format` (checked byte by byte against llm.c's
//! `write_datafile` layout) and read back by `lmkit pretrain --data x.bin`
//! into the same shards as the text they came from.

mod common;

use std::path::{Path, PathBuf};

use common::{byte_tokenizer, lmkit, tmpdir};

const EOT: u32 = 256;

/// Documents of varied text, one JSONL row each (the byte tokenizer's ids
/// are the bytes, so the expected ids need no tokenizer).
fn documents() -> Vec<String> {
    (0..40)
        .map(|i| {
            format!("Document {i}: the quick brown fox jumps over the lazy dog, {i} times.\nA second line, é.")
        })
        .collect()
}

fn write_jsonl(dir: &Path, docs: &[String]) -> PathBuf {
    let p = dir.join("docs.jsonl");
    let text: String = docs
        .iter()
        .map(|d| serde_json::json!({ "text": d }).to_string() + "\n")
        .collect();
    std::fs::write(&p, text).unwrap();
    p
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The ids of a token file read as llm.c's C loader (`dataloader.h`) does:
/// 256 int32 header, check magic and version, then `header[2]` uint16s.
fn read_llmc(bytes: &[u8]) -> Vec<u32> {
    let int = |i: usize| i32::from_le_bytes(bytes[i * 4..i * 4 + 4].try_into().unwrap());
    assert_eq!(int(0), 20240520, "magic");
    assert_eq!(int(1), 1, "version");
    assert!(
        (3..256).all(|i| int(i) == 0),
        "the rest of the header is zero"
    );
    let n = int(2) as usize;
    assert_eq!(bytes.len(), 1024 + 2 * n, "header count vs file size");
    read_u16(&bytes[1024..])
}

/// nanoGPT's `np.memmap(path, dtype=np.uint16)`.
fn read_u16(bytes: &[u8]) -> Vec<u32> {
    assert_eq!(bytes.len() % 2, 0);
    bytes
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]) as u32)
        .collect()
}

/// `pretrain` for one step on a tiny model with no validation split: the
/// shards in OUTPUT/data are the whole token stream.
fn pretrain_shard(tok: &Path, data: &Path, out: &Path) -> Vec<u8> {
    let o = lmkit(&pretrain_args(tok, data, out, &["--max-steps", "1"]));
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::read(out.join("data/train.bin")).unwrap()
}

fn pretrain_args<'a>(
    tok: &'a Path,
    data: &'a Path,
    out: &'a Path,
    more: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "pretrain",
        "--tokenizer",
        tok.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
        "--n-layer",
        "1",
        "--n-embd",
        "16",
        "--n-head",
        "2",
        "--seq-len",
        "16",
        "--batch-size",
        "2",
        "--val-fraction",
        "0",
    ];
    args.extend_from_slice(more);
    args
}

/// `--text-field`: rows whose text is in another column (HF datasets name
/// it `content`, `article`...) make the same shards as `text` rows; a
/// resumed run keeps the field its shards were made from, and a different
/// one is refused before anything is replaced.
#[test]
fn pretrain_reads_the_text_field() {
    let dir = tmpdir("text-field");
    let tok = byte_tokenizer(&dir);
    let docs = documents();
    let from_text = pretrain_shard(&tok, &write_jsonl(&dir, &docs), &dir.join("run-text"));
    let content = dir.join("content.jsonl");
    let rows: String = docs
        .iter()
        .map(|d| serde_json::json!({ "id": 1, "content": d }).to_string() + "\n")
        .collect();
    std::fs::write(&content, rows).unwrap();
    let out = dir.join("run-content");

    let o = lmkit(&pretrain_args(&tok, &content, &out, &["--max-steps", "1"]));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("content.jsonl:1: missing field `text`"),
        "{}",
        stderr(&o)
    );
    let o = lmkit(&pretrain_args(
        &tok,
        &content,
        &out,
        &["--text-field", "content", "--max-steps", "1"],
    ));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(out.join("data/train.bin")).unwrap(),
        from_text
    );
    let meta = std::fs::read_to_string(out.join("data/meta.json")).unwrap();
    assert!(meta.contains("\"text_field\": \"content\""), "{meta}");

    // --resume with the data again and no --text-field: the run's field.
    let o = lmkit(&pretrain_args(
        &tok,
        &content,
        &out,
        &["--resume", "--max-steps", "2"],
    ));
    assert!(o.status.success(), "{}", stderr(&o));
    // Another field is another token stream: refused, the shards kept.
    let o = lmkit(&pretrain_args(
        &tok,
        &content,
        &out,
        &["--resume", "--max-steps", "3", "--text-field", "id"],
    ));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("the shards hold the `content` field of the rows, not `id`"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read(out.join("data/train.bin")).unwrap(),
        from_text
    );

    // The overlap filter reads the same field: every 8-gram of the
    // documents is found.
    let eval = dir.join("eval.txt");
    std::fs::write(&eval, docs.join("\n\n")).unwrap();
    let o = lmkit(&[
        "overlap",
        "--train",
        content.to_str().unwrap(),
        "--text-field",
        "content",
        "--eval",
        eval.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["eval"]["documents"], 40, "{report}");
    assert_eq!(report["eval"]["share"], 1.0, "{report}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn llmc_and_nanogpt_token_files_round_trip() {
    let dir = tmpdir("token-files");
    let tok = byte_tokenizer(&dir);
    let docs = documents();
    let jsonl = write_jsonl(&dir, &docs);
    let doc_ids: Vec<Vec<u32>> = docs
        .iter()
        .map(|d| d.bytes().map(u32::from).collect())
        .collect();

    // Export: llm.c puts end-of-text before every document, nanoGPT after.
    let llmc = dir.join("docs_llmc.bin");
    let nano = dir.join("docs_nano.bin");
    for (format, path) in [("llmc", &llmc), ("nanogpt", &nano)] {
        let o = lmkit(&[
            "tokenize",
            "--tokenizer",
            tok.to_str().unwrap(),
            "--input",
            jsonl.to_str().unwrap(),
            "--format",
            format,
            "--output",
            path.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let before: Vec<u32> = doc_ids
        .iter()
        .flat_map(|d| [&[EOT][..], d].concat())
        .collect();
    let after: Vec<u32> = doc_ids
        .iter()
        .flat_map(|d| [d, &[EOT][..]].concat())
        .collect();
    assert_eq!(read_llmc(&std::fs::read(&llmc).unwrap()), before);
    assert_eq!(read_u16(&std::fs::read(&nano).unwrap()), after);

    // An output file is never overwritten.
    let o = lmkit(&[
        "tokenize",
        "--tokenizer",
        tok.to_str().unwrap(),
        "--input",
        jsonl.to_str().unwrap(),
        "--format",
        "llmc",
        "--output",
        llmc.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("exists"), "{}", stderr(&o));

    // `-` is stdout: the same bytes.
    let o = lmkit(&[
        "tokenize",
        "--tokenizer",
        tok.to_str().unwrap(),
        "--input",
        jsonl.to_str().unwrap(),
        "--format",
        "llmc",
        "--output",
        "-",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(o.stdout, std::fs::read(&llmc).unwrap());

    // Import: the llm.c file trains on exactly the shards the text gives
    // (lmkit also puts end-of-text before every document).
    let from_text = pretrain_shard(&tok, &jsonl, &dir.join("run-text"));
    let from_llmc = pretrain_shard(&tok, &llmc, &dir.join("run-llmc"));
    assert_eq!(from_llmc, from_text);
    assert_eq!(read_u16(&from_llmc[32..]), before);
    let from_nano = pretrain_shard(&tok, &nano, &dir.join("run-nano"));
    assert_eq!(read_u16(&from_nano[32..]), after);

    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_token_files_are_clear_errors() {
    let dir = tmpdir("token-files-bad");
    let tok = byte_tokenizer(&dir);
    let run = |data: &Path, name: &str| {
        let o = lmkit(&[
            "pretrain",
            "--tokenizer",
            tok.to_str().unwrap(),
            "--data",
            data.to_str().unwrap(),
            "--output",
            dir.join(name).to_str().unwrap(),
            "--n-layer",
            "1",
            "--n-embd",
            "16",
            "--n-head",
            "2",
            "--seq-len",
            "16",
            "--max-steps",
            "1",
        ]);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        stderr(&o)
    };
    // An id outside the tokenizer's vocabulary of 257.
    let ids = dir.join("ids.bin");
    std::fs::write(&ids, [1u16, 2, 300].map(u16::to_le_bytes).concat()).unwrap();
    let e = run(&ids, "a");
    assert!(e.contains("token id 300 is outside the vocabulary"), "{e}");
    // A truncated llm.c file.
    let mut header = vec![0u8; 1024];
    header[..4].copy_from_slice(&20240520i32.to_le_bytes());
    header[4..8].copy_from_slice(&1i32.to_le_bytes());
    header[8..12].copy_from_slice(&1000i32.to_le_bytes());
    let cut = dir.join("cut.bin");
    std::fs::write(&cut, [&header[..], &[1, 0, 2, 0]].concat()).unwrap();
    let e = run(&cut, "b");
    assert!(e.contains("llm.c header says 1000 tokens"), "{e}");
    // An odd number of bytes is no token file.
    let odd = dir.join("odd.bin");
    std::fs::write(&odd, [1u8, 0, 2]).unwrap();
    let e = run(&odd, "c");
    assert!(e.contains("neither an llm.c token file"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
