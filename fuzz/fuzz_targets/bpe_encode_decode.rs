//! Any bytes: pre-tokenization tiles the input, with the same pieces on the
//! fast path as on its one-character-at-a-time twin; encode never panics, and
//! decode(encode(x)) == x with and without special tokens.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use lmkit_tokenizers::pretokenize::{split_gpt2, split_gpt2_with};
use lmkit_tokenizers::BpeTokenizer;

fn gpt2() -> &'static BpeTokenizer {
    static TOK: OnceLock<BpeTokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../assets/gpt2");
        BpeTokenizer::from_dir(dir).expect("run scripts/fetch-assets.sh first")
    })
}

fuzz_target!(|data: &[u8]| {
    let mut at = 0;
    for r in split_gpt2(data) {
        assert_eq!(r.start, at);
        assert!(r.end > r.start);
        at = r.end;
    }
    assert_eq!(at, data.len());
    assert!(split_gpt2(data).eq(split_gpt2_with(data, false)));
    for special in [false, true] {
        let ids = gpt2().encode_ids(data, special);
        assert_eq!(gpt2().decode(&ids).expect("ids in range"), data);
    }
});
