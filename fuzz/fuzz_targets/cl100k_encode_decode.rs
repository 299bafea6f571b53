//! Any bytes through cl100k_base: its scanner's pieces tile the input, encode
//! never panics, and decode(encode(x)) == x with and without special tokens.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use lmkit_tokenizers::pretokenize::split_cl100k;
use lmkit_tokenizers::BpeTokenizer;

fn tokenizer() -> &'static BpeTokenizer {
    static TOK: OnceLock<BpeTokenizer> = OnceLock::new();
    TOK.get_or_init(|| lmkit_tokenizers::openai::encoding("cl100k_base").expect("built in"))
}

fuzz_target!(|data: &[u8]| {
    let mut at = 0;
    for r in split_cl100k(data) {
        assert_eq!(r.start, at);
        assert!(r.end > r.start);
        at = r.end;
    }
    assert_eq!(at, data.len());
    for special in [false, true] {
        let ids = tokenizer().encode_ids(data, special);
        assert_eq!(tokenizer().decode(&ids).expect("ids in range"), data);
    }
});
