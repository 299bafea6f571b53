//! BERT pretraining data: MLM masking statistics (80/10/10 on 100k tokens),
//! whole-word masking, and the balance and structure of NSP pairs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use lmkit::data::mlm::{MaskCounts, MlmConfig, MlmMasker, IGNORE_INDEX};
use lmkit::data::nsp::{build_nsp_pairs, read_documents, split_sentences, NspConfig, NspPair};
use lmkit::util::Rng;

const PAD: u32 = 0;
const UNK: u32 = 1;
const CLS: u32 = 2;
const SEP: u32 = 3;
const MASK: u32 = 4;

/// 5 specials, then words `w5..`, with every 4th token a `##` continuation.
fn vocab(n: usize) -> Vec<String> {
    let mut v: Vec<String> = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for i in 5..n {
        v.push(if i % 4 == 0 {
            format!("##p{i}")
        } else {
            format!("w{i}")
        });
    }
    v
}

fn masker(whole_word: bool, v: &[String]) -> MlmMasker {
    let cfg = MlmConfig {
        whole_word,
        ..MlmConfig::default()
    };
    MlmMasker::new(cfg, v, &[PAD, UNK, CLS, SEP, MASK], MASK, "##").unwrap()
}

/// `[CLS] body [SEP] body [SEP] [PAD]...` rows of length 128 with random lengths.
fn sequences(total_tokens: usize, vocab_len: usize, rng: &mut Rng) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    let mut n = 0;
    while n < total_tokens {
        let len = 40 + rng.below(88) as usize; // 40..=127 real tokens
        let mut s = vec![CLS];
        let sep_at = 1 + rng.below(len as u64 - 3) as usize;
        while s.len() < len - 1 {
            if s.len() == sep_at {
                s.push(SEP);
            } else {
                s.push(5 + rng.below(vocab_len as u64 - 5) as u32);
            }
        }
        s.push(SEP);
        n += s.len();
        s.resize(128, PAD);
        out.push(s);
    }
    out
}

#[test]
fn mlm_statistics_on_100k_tokens() {
    let v = vocab(1000);
    let m = masker(false, &v);
    let mut data_rng = Rng::new(11);
    let seqs = sequences(100_000, v.len(), &mut data_rng);
    let mut total = MaskCounts::default();
    let (mut seen_mask, mut seen_changed, mut seen_same) = (0usize, 0usize, 0usize);
    for (k, orig) in seqs.iter().enumerate() {
        let mut ids = orig.clone();
        let mut labels = vec![0i32; ids.len()];
        let mut rng = Rng::derive(7, k as u64);
        let c = m.mask(&mut ids, &mut labels, &mut rng);
        assert_eq!(c.chosen, c.masked + c.random + c.kept);
        total += c;
        for i in 0..ids.len() {
            let special = [PAD, UNK, CLS, SEP, MASK].contains(&orig[i]);
            if labels[i] == IGNORE_INDEX {
                assert_eq!(ids[i], orig[i], "unlabelled position changed");
                continue;
            }
            assert!(!special, "special token chosen at {i}");
            assert_eq!(labels[i], orig[i] as i32, "label is not the original id");
            if ids[i] == MASK {
                seen_mask += 1;
            } else if ids[i] != orig[i] {
                assert!(ids[i] >= 5, "random replacement drew a special token");
                seen_changed += 1;
            } else {
                seen_same += 1;
            }
        }
    }
    let cand = total.candidates as f64;
    let chosen = total.chosen as f64;
    assert!(total.candidates > 95_000, "{total:?}");
    let frac = chosen / cand;
    // Stochastic rounding makes the expected count exactly 15% (plus the
    // at-least-one rule, which never binds at these lengths).
    assert!((frac - 0.15).abs() < 0.002, "chosen fraction {frac}");
    let (pm, pr, pk) = (
        total.masked as f64 / chosen,
        total.random as f64 / chosen,
        total.kept as f64 / chosen,
    );
    // ~15k chosen: one standard deviation is 0.0033 (80%) / 0.0025 (10%); allow 3.
    assert!((pm - 0.8).abs() < 0.01, "[MASK] share {pm}");
    assert!((pr - 0.1).abs() < 0.0075, "random share {pr}");
    assert!((pk - 0.1).abs() < 0.0075, "kept share {pk}");
    // What the outputs show agrees with the counts (a random draw of the
    // original id, p = 1/995, looks unchanged).
    assert_eq!(seen_mask, total.masked);
    assert_eq!(seen_changed + seen_same, total.random + total.kept);
    assert!(seen_changed <= total.random && total.random - seen_changed < 10);
    println!(
        "candidates {} chosen {frac:.4} mask {pm:.4} random {pr:.4} kept {pk:.4}",
        total.candidates
    );
}

#[test]
fn masks_are_seeded_and_fresh_per_epoch() {
    let v = vocab(500);
    let m = masker(false, &v);
    let seq = sequences(128, v.len(), &mut Rng::new(3)).remove(0);
    let run = |seed: u64, stream: u64| {
        let mut ids = seq.clone();
        let mut labels = vec![0; ids.len()];
        m.mask(&mut ids, &mut labels, &mut Rng::derive(seed, stream));
        (ids, labels)
    };
    assert_eq!(run(1, 0), run(1, 0));
    assert_ne!(run(1, 0).1, run(1, 1).1, "epoch 1 reused epoch 0's mask");
}

#[test]
fn whole_word_masking_takes_words_whole() {
    let v = vocab(1000);
    let m = masker(true, &v);
    let seqs = sequences(50_000, v.len(), &mut Rng::new(5));
    let (mut chosen, mut cand, mut multi_piece_words) = (0usize, 0usize, 0usize);
    for (k, orig) in seqs.iter().enumerate() {
        let mut ids = orig.clone();
        let mut labels = vec![0; ids.len()];
        let c = m.mask(&mut ids, &mut labels, &mut Rng::derive(9, k as u64));
        chosen += c.chosen;
        cand += c.candidates;
        // Words: a non-## token then its ## continuations (ids ≡ 0 mod 4 are ##).
        let mut i = 0;
        while i < orig.len() {
            if orig[i] < 5 {
                i += 1;
                continue;
            }
            let mut j = i + 1;
            while j < orig.len() && orig[j] >= 5 && orig[j] % 4 == 0 {
                j += 1;
            }
            let labelled = (i..j).filter(|&p| labels[p] != IGNORE_INDEX).count();
            assert!(
                labelled == 0 || labelled == j - i,
                "word {i}..{j} partly chosen in sequence {k}"
            );
            if j - i > 1 && labelled > 0 {
                multi_piece_words += 1;
            }
            i = j;
        }
    }
    assert!(
        multi_piece_words > 100,
        "no multi-piece word was ever chosen"
    );
    let frac = chosen as f64 / cand as f64;
    // Words that would overflow the count are skipped, so slightly under 15%.
    assert!(
        (0.14..=0.152).contains(&frac),
        "whole-word chosen fraction {frac}"
    );
}

/// A corpus whose token ids encode (document, running position): id =
/// doc · 1_000_000 + position, so pair structure can be checked exactly.
fn numbered_corpus(rng: &mut Rng, docs: usize) -> Vec<Vec<Vec<u32>>> {
    (0..docs)
        .map(|d| {
            let n_sent = 1 + rng.below(30) as usize;
            let mut pos = 0u32;
            (0..n_sent)
                .map(|_| {
                    let len = 3 + rng.below(38) as u32;
                    let s: Vec<u32> = (pos..pos + len).map(|p| d as u32 * 1_000_000 + p).collect();
                    pos += len;
                    s
                })
                .collect()
        })
        .collect()
}

fn check_pairs(pairs: &[NspPair], max_seq_len: usize) -> f64 {
    let doc = |t: u32| t / 1_000_000;
    for p in pairs {
        assert!(!p.tokens_a.is_empty() && !p.tokens_b.is_empty());
        assert!(p.tokens_a.len() + p.tokens_b.len() + 3 <= max_seq_len);
        let da = doc(p.tokens_a[0]);
        assert!(
            p.tokens_a.iter().all(|&t| doc(t) == da),
            "A spans documents"
        );
        let db = doc(p.tokens_b[0]);
        assert!(
            p.tokens_b.iter().all(|&t| doc(t) == db),
            "B spans documents"
        );
        // Within a side, tokens keep document order (truncation only trims ends).
        assert!(p.tokens_a.windows(2).all(|w| w[0] < w[1]));
        assert!(p.tokens_b.windows(2).all(|w| w[0] < w[1]));
        if p.is_random_next {
            assert_ne!(da, db, "random B from the same document");
        } else {
            assert_eq!(da, db, "actual-next B from another document");
            assert!(
                p.tokens_a.last() < p.tokens_b.first(),
                "B does not follow A"
            );
        }
    }
    pairs.iter().filter(|p| p.is_random_next).count() as f64 / pairs.len() as f64
}

#[test]
fn nsp_pairs_are_balanced_and_well_formed() {
    let mut rng = Rng::new(21);
    let corpus = numbered_corpus(&mut rng, 3000);
    let cfg = NspConfig::new(128);
    let pairs = build_nsp_pairs(&corpus, &cfg, &mut Rng::new(1)).unwrap();
    let random = check_pairs(&pairs, 128);
    // ~10k pairs: one standard deviation is 0.005; forced random pairs (a
    // document's lone last segment) are paid back, so the share stays at 1/2.
    assert!(pairs.len() > 5000, "{} pairs", pairs.len());
    assert!((random - 0.5).abs() < 0.015, "random-next share {random}");
    // Most pairs fill the sequence (10% get a short random target length).
    let full = pairs
        .iter()
        .filter(|p| p.tokens_a.len() + p.tokens_b.len() + 3 >= 100)
        .count() as f64
        / pairs.len() as f64;
    println!(
        "{} pairs, random {random:.4}, ≥100 tokens {full:.3}",
        pairs.len()
    );
    assert!(full > 0.5, "only {full} of pairs are near full length");
}

#[test]
fn nsp_input_layout_and_errors() {
    let p = NspPair {
        tokens_a: vec![10, 11],
        tokens_b: vec![20],
        is_random_next: false,
    };
    let (ids, types) = p.to_input(CLS, SEP);
    assert_eq!(ids, [CLS, 10, 11, SEP, 20, SEP]);
    assert_eq!(types, [0, 0, 0, 0, 1, 1]);
    let one_doc = vec![vec![vec![5u32, 6, 7]]];
    let err = build_nsp_pairs(&one_doc, &NspConfig::new(16), &mut Rng::new(0)).unwrap_err();
    assert!(err.to_string().contains("at least 2 documents"), "{err}");
    let two = vec![vec![vec![5u32]], vec![vec![6u32]]];
    let err = build_nsp_pairs(&two, &NspConfig::new(4), &mut Rng::new(0)).unwrap_err();
    assert!(err.to_string().contains("too short"), "{err}");
}

#[test]
fn sentence_splitter() {
    let doc = "The stack is fast. The heap is\nslower! Why? Because \"pointers.\" Yes.\n\nfn main() {\nlet x = 5.0;\n}";
    assert_eq!(
        split_sentences(doc),
        [
            "The stack is fast.",
            "The heap is slower!",
            "Why?",
            "Because \"pointers.\"",
            "Yes.",
            "fn main() { let x = 5.0; }",
        ]
    );
}

fn books_corpus() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/books/corpus.txt");
    assert!(
        p.exists(),
        "{} is missing: run scripts/fetch-assets.sh first",
        p.display()
    );
    p
}

/// Balance on the real document structure of the Rust books (words as
/// tokens: the pair builder only sees lengths and boundaries).
#[test]
fn nsp_balance_on_real_documents() {
    let docs = read_documents(&[books_corpus()]).unwrap();
    assert!(docs.len() > 1000, "{} documents", docs.len());
    let mut ids: HashMap<String, u32> = HashMap::new();
    let corpus: Vec<Vec<Vec<u32>>> = docs
        .iter()
        .map(|d| {
            split_sentences(d)
                .into_iter()
                .map(|s| {
                    s.split_whitespace()
                        .map(|w| {
                            let n = ids.len() as u32;
                            *ids.entry(w.to_string()).or_insert(n)
                        })
                        .collect::<Vec<u32>>()
                })
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
        })
        .filter(|d| !d.is_empty())
        .collect();
    let pairs = build_nsp_pairs(&corpus, &NspConfig::new(128), &mut Rng::new(2)).unwrap();
    let random = pairs.iter().filter(|p| p.is_random_next).count() as f64 / pairs.len() as f64;
    println!(
        "books: {} documents, {} pairs, random {random:.4}",
        corpus.len(),
        pairs.len()
    );
    assert!(pairs.len() > 5000);
    assert!((random - 0.5).abs() < 0.015, "random-next share {random}");
}
