//! Any bytes through cl100k_base and o200k_base: each scanner's pieces tile
//! the input, encode never panics, and decode(encode(x)) == x with and
//! without special tokens.
#![no_main]

use std::ops::Range;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use lmkit_tokenizers::pretokenize::{split_cl100k, split_o200k};
use lmkit_tokenizers::BpeTokenizer;

fn tokenizers() -> &'static [BpeTokenizer; 2] {
    static TOKS: OnceLock<[BpeTokenizer; 2]> = OnceLock::new();
    TOKS.get_or_init(|| {
        ["cl100k_base", "o200k_base"]
            .map(|n| lmkit_tokenizers::openai::encoding(n).expect("built in"))
    })
}

fn assert_tiles(pieces: impl Iterator<Item = Range<usize>>, len: usize) {
    let mut at = 0;
    for r in pieces {
        assert_eq!(r.start, at);
        assert!(r.end > r.start);
        at = r.end;
    }
    assert_eq!(at, len);
}

fuzz_target!(|data: &[u8]| {
    assert_tiles(split_cl100k(data), data.len());
    assert_tiles(split_o200k(data), data.len());
    for t in tokenizers() {
        for special in [false, true] {
            let ids = t.encode_ids(data, special);
            assert_eq!(t.decode(&ids).expect("ids in range"), data);
        }
    }
});
