//! Any bytes as an `overlap.bloom` file: a clear error or a filter, never a
//! panic or an allocation the file's own length does not justify; any text
//! through the n-gram normalisation and a filter lookup.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lmkit::data::overlap::BloomFilter;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = BloomFilter::from_bytes(data) {
        assert!(f.bits() > 0 && (1..=64).contains(&f.n()));
        let _ = f.doc_overlap(&["the quick brown fox jumps over the lazy dog again"]);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let f = BloomFilter::new(3, 64, 1e-3).expect("valid sizes");
        f.insert_text(text);
        let d = f.doc_overlap(&[text]);
        assert_eq!(d.hits, d.ngrams, "no false negatives");
    }
});
