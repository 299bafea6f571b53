//! WordPiece `vocab.txt` and `tokenizer.json` never panic; whatever loads
//! encodes and decodes any text.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use lmkit_tokenizers::wordpiece::{WordPieceOptions, WordPieceTokenizer};

fuzz_target!(|data: &[u8]| {
    let dir = common::scratch("wordpiece");
    std::fs::write(dir.join("vocab.txt"), data).expect("write");
    std::fs::write(dir.join("tokenizer.json"), data).expect("write");
    let loaded = [
        WordPieceTokenizer::from_vocab_file(dir.join("vocab.txt"), WordPieceOptions::default()),
        WordPieceTokenizer::from_tokenizer_json(dir.join("tokenizer.json")),
    ];
    for tok in loaded.into_iter().flatten() {
        if let Ok(enc) = tok.encode("Hello, wörld! [MASK] 2024 héllo", true) {
            let _ = tok.decode(&enc.ids, true);
        }
    }
});
