//! The real GPT-2 tokenizer (`scripts/fetch-assets.sh`), shared by the
//! GPT-2 inference tests: the tiny model's ids 0..128 are single-byte
//! tokens in it.

use std::path::Path;

pub fn gpt2_tokenizer() -> lmkit_tokenizers::BpeTokenizer {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/gpt2");
    assert!(
        dir.join("merges.txt").exists(),
        "{} is missing: run scripts/fetch-assets.sh first",
        dir.display()
    );
    lmkit_tokenizers::BpeTokenizer::from_dir(&dir).expect("GPT-2 tokenizer")
}
