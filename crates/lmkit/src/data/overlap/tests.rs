//! The filter: normalization, n-grams, sizing, the file format.

use super::*;

#[test]
fn normalization_is_lowercase_alphanumeric_words() {
    assert_eq!(
        normalized_words("Hello, World! It's 2024 — naïve_café ΣΑΣ"),
        ["hello", "world", "it", "s", "2024", "naïve", "café", "σας"]
    );
}

#[test]
fn ngrams_are_windows_and_found_after_insertion() {
    let f = BloomFilter::new(3, 100, 1e-6).unwrap();
    f.insert_text("a b c d");
    assert_eq!(f.inserted(), 2);
    let d = f.doc_overlap(&["A, B; c!", "b c d e", "x y"]);
    assert_eq!(d, DocOverlap { ngrams: 3, hits: 2 });
    let bytes = {
        let dir = std::env::temp_dir().join(format!("lmkit-bloom-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("f.bloom");
        f.save(&p).unwrap();
        let b = std::fs::read(&p).unwrap();
        let g = BloomFilter::load(&p).unwrap();
        assert_eq!(
            g.doc_overlap(&["b c d e"]),
            DocOverlap { ngrams: 2, hits: 1 }
        );
        std::fs::remove_dir_all(&dir).unwrap();
        b
    };
    // Any damage is refused: a flipped bit, a cut file, another version.
    let mut bad = bytes.clone();
    bad[HEADER + 1] ^= 1;
    assert!(BloomFilter::from_bytes(&bad)
        .unwrap_err()
        .contains("checksum"));
    assert!(BloomFilter::from_bytes(&bytes[..bytes.len() - 9]).is_err());
    let mut v2 = bytes.clone();
    v2[8] = 2;
    assert!(BloomFilter::from_bytes(&v2).unwrap_err().contains("format"));
    let mut huge = bytes;
    huge[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(BloomFilter::from_bytes(&huge).is_err());
}

#[test]
fn sizing_follows_the_bloom_formulas() {
    let (m, k) = filter_size(1_000_000, 1e-8).unwrap();
    // m/N = -ln(1e-8) / ln(2)^2 = 38.34 bits, k = 26.6 -> 27 (and m
    // grown a little so that the rate at k = 27 stays within 1e-8).
    assert!((38.34..38.4).contains(&(m as f64 / 1e6)), "{m}");
    assert_eq!(k, 27);
    let rate = (1.0 - (-27.0 * 1e6 / m as f64).exp()).powf(27.0);
    assert!(rate <= 1e-8, "{rate}");
    assert!(filter_size(10, 0.0).is_err() && filter_size(10, 1.0).is_err());
    assert!(BloomFilter::new(0, 10, 0.1).is_err());
}
