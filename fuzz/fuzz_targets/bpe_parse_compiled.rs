//! The compiled-tokenizer reader never panics on arbitrary input, and
//! whatever loads is a working tokenizer: it round-trips any text, and its
//! tokens map back to their ids. Each input is also tried with its checksum
//! made right, so mutations reach the checks behind it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lmkit_tokenizers::BpeTokenizer;

fuzz_target!(|data: &[u8]| {
    let mut sealed = data.to_vec();
    lmkit_tokenizers::bpe::reseal_compiled(&mut sealed);
    for input in [data, &sealed] {
        if let Ok(tok) = BpeTokenizer::from_compiled_bytes(input) {
            check(&tok);
        }
    }
});

fn check(tok: &BpeTokenizer) {
    let sample = b"Hello world, it's 2024! \xff\xfe <|endoftext|> abcabc";
    for special in [false, true] {
        let ids = tok.encode_ids(sample, special);
        assert_eq!(tok.decode(&ids).expect("ids in range"), sample);
    }
    for id in 0..tok.vocab_size().min(4096) as u32 {
        if let Some(t) = tok.id_to_token(id) {
            assert_eq!(tok.token_to_id(t), Some(id), "{t:?}");
        }
    }
}
