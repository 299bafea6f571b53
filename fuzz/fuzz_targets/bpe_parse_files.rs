//! The file parsers never panic on arbitrary input: the data is split at the
//! first NUL into a vocab.json and a merges.txt, and is also tried whole as a
//! tokenizer.json. Whatever loads must round-trip any text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lmkit_tokenizers::{BpeTokenizer, Tokenizer};

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("lmkit-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (vocab, merges) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    std::fs::write(dir.join("vocab.json"), vocab).expect("write");
    std::fs::write(dir.join("merges.txt"), merges).expect("write");
    std::fs::write(dir.join("tokenizer.json"), data).expect("write");
    let sample = b"Hello world, it's 2024! \xff\xfe <|endoftext|>";
    let loaded = [
        BpeTokenizer::from_files(dir.join("vocab.json"), dir.join("merges.txt")).map(Tokenizer::from),
        Tokenizer::from_tokenizer_json(dir.join("tokenizer.json")),
    ];
    for tok in loaded.into_iter().flatten() {
        let ids = tok.encode_ids(sample, true).expect("BPE encodes any bytes");
        assert_eq!(tok.decode(&ids).expect("ids in range"), sample);
    }
});
