//! Any bytes as a `.tiktoken` rank file: parsing never panics, and ranks
//! it accepts either build a tokenizer (with each pattern, picked by the
//! first byte) or give an error; a built one round-trips text.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use lmkit_tokenizers::bpe::parse_tiktoken;
use lmkit_tokenizers::pretokenize::Pattern;
use lmkit_tokenizers::BpeTokenizer;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz.tiktoken");
    let Ok(mut ranks) = parse_tiktoken(path, data) else {
        return;
    };
    // Every single byte, so that some inputs build (ranks above the file's).
    let top = ranks.iter().map(|&(_, r)| r).max().unwrap_or(0);
    for b in 0..=255u8 {
        if !ranks.iter().any(|(t, _)| t == &[b]) {
            ranks.push((vec![b], top + 1 + b as u32));
        }
    }
    let pattern = [Pattern::Gpt2, Pattern::Cl100k, Pattern::O200k][data[0] as usize % 3].clone();
    let specials = [("<|s|>".to_string(), top + 300)];
    if let Ok(t) = BpeTokenizer::from_tiktoken_ranks(path, &ranks, &specials, pattern) {
        let text = b"Hello world, it's <|s|> 12345 \xff caf\xc3\xa9";
        for special in [false, true] {
            let ids = t.encode_ids(text, special);
            assert_eq!(t.decode(&ids).expect("ids in range"), text);
        }
    }
});
