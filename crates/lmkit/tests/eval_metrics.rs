//! Evaluation scorers against hand-computed cases (each also checked against
//! the reference implementation: `rouge-score` 0.1.2 with `use_stemmer=False`,
//! SQuAD's `evaluate-v1.1.py`, scikit-learn `f1_score(average="macro")`).

use lmkit::eval::lambada::{lambada_scores, score_target, split_last_word, LambadaOutcome};
use lmkit::eval::rouge::{rouge, rouge_means, tokenize};
use lmkit::eval::squad::{f1_score, normalize_answer, squad_scores};
use lmkit::eval::{classify_scores, first_sentences, macro_f1, tldr_prompt};

fn close(a: f64, b: f64) {
    assert!((a - b).abs() < 1e-12, "{a} vs {b}");
}

fn prf(s: lmkit::eval::RougeScore, p: f64, r: f64, f: f64) {
    close(s.precision, p);
    close(s.recall, r);
    close(s.fmeasure, f);
}

#[test]
fn rouge_hand_computed() {
    // pred [the cat sat on the mat], ref [the cat was on the mat]:
    // unigram overlap the×2 + cat + on + mat = 5 of 6 each side; bigrams
    // {the cat, on the, the mat} = 3 of 5; LCS "the cat on the mat" = 5.
    let s = rouge("the cat sat on the mat", "the cat was on the mat");
    prf(s.rouge1, 5.0 / 6.0, 5.0 / 6.0, 5.0 / 6.0);
    prf(s.rouge2, 0.6, 0.6, 0.6);
    prf(s.rouge_l, 5.0 / 6.0, 5.0 / 6.0, 5.0 / 6.0);

    // Case and punctuation vanish in tokenisation. pred [police killed the gunman] (4),
    // ref [the gunman was shot dead by police] (7): overlap 3 → P 3/4, R 3/7, F 6/11;
    // bigram "the gunman" 1 of 3 / 6 → F 2/9; LCS "the gunman" 2 → P 1/2, R 2/7, F 4/11.
    let s = rouge(
        "Police killed the gunman!",
        "The gunman was shot dead by police.",
    );
    prf(s.rouge1, 0.75, 3.0 / 7.0, 6.0 / 11.0);
    prf(s.rouge2, 1.0 / 3.0, 1.0 / 6.0, 2.0 / 9.0);
    prf(s.rouge_l, 0.5, 2.0 / 7.0, 4.0 / 11.0);

    // Clipped counts: "the" ×4 against one "the".
    let s = rouge("the the the the", "the cat");
    prf(s.rouge1, 0.25, 0.5, 1.0 / 3.0);
    prf(s.rouge2, 0.0, 0.0, 0.0);
    prf(s.rouge_l, 0.25, 0.5, 1.0 / 3.0);

    // No stemming: cats ≠ cat, dogs ≠ dog; only "and" matches.
    let s = rouge("Cats and dogs", "cat and dog");
    prf(s.rouge1, 1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0);

    // Empty after tokenisation: all zero.
    for (p, r) in [("", "abc"), ("!!!", "!!!")] {
        let s = rouge(p, r);
        prf(s.rouge1, 0.0, 0.0, 0.0);
        prf(s.rouge_l, 0.0, 0.0, 0.0);
    }
}

#[test]
fn rouge_tokenizer_drops_non_ascii_alphanumerics() {
    assert_eq!(
        tokenize("Café-au-lait, n'est-ce pas? 42x"),
        ["caf", "au", "lait", "n", "est", "ce", "pas", "42x"]
    );
    // pred [caf au lait n est ce pas] vs [cafe au lait n est ce pas]: 6/7, bigrams 5/6.
    let s = rouge("Café-au-lait, n'est-ce pas?", "cafe au lait n est ce pas");
    prf(s.rouge1, 6.0 / 7.0, 6.0 / 7.0, 6.0 / 7.0);
    prf(s.rouge2, 5.0 / 6.0, 5.0 / 6.0, 5.0 / 6.0);
}

#[test]
fn rouge_corpus_means_are_percent() {
    let a = rouge("the cat sat on the mat", "the cat was on the mat");
    let b = rouge("the the the the", "the cat");
    let m = rouge_means(&[a, b]);
    close(m.rouge1, 100.0 * (5.0 / 6.0 + 1.0 / 3.0) / 2.0);
    close(m.rouge2, 100.0 * 0.6 / 2.0);
    assert_eq!(m.count, 2);
}

#[test]
fn squad_normalisation_and_scores() {
    assert_eq!(
        normalize_answer("l'amour_the the_x a1 a"),
        "lamourthe thex a1"
    );
    assert_eq!(normalize_answer("The Norman  Conquest."), "norman conquest");
    // pred [norman, conquest, of, england] vs gold [norman, conquest]: P 1/2, R 1 → 2/3.
    close(
        f1_score("The Norman conquest of England", "Norman Conquest"),
        2.0 / 3.0,
    );
    let g1 = vec!["Denver Broncos".to_string(), "the Broncos".to_string()];
    let g2 = vec!["Santa Clara, California".to_string()];
    let g3 = vec!["1066".to_string()];
    let s = squad_scores([
        ("Broncos", g1.as_slice()),
        ("Santa Clara", g2.as_slice()),
        ("in 1066.", g3.as_slice()),
    ]);
    // EM: 1, 0, 0. F1: 1, 0.8, (P 1/2, R 1 → 2/3).
    close(s.exact_match, 100.0 / 3.0);
    close(s.f1, 100.0 * (1.0 + 0.8 + 2.0 / 3.0) / 3.0);
}

#[test]
fn classification_accuracy_and_macro_f1() {
    // Class 0: TP 1, FP 1, FN 1 → 0.5; class 1: TP 2, FP 1 → 0.8; class 2: FN 1 → 0.
    let s = classify_scores(&[0, 0, 1, 1, 2], &[0, 1, 1, 1, 0], 3);
    close(s.accuracy, 0.6);
    close(s.f1, (0.5 + 0.8 + 0.0) / 3.0);
    // A class in neither gold nor predictions is left out (scikit-learn's default).
    close(macro_f1(&[0, 0, 0], &[0, 0, 2], 5), 0.4);
    close(macro_f1(&[0, 1], &[0, 1], 4), 1.0);
}

#[test]
fn lambada_split_rule_and_scores() {
    assert_eq!(
        split_last_word("He looked at the door and said goodbye to  Anna \n"),
        Some(("He looked at the door and said goodbye to", "Anna"))
    );
    assert_eq!(split_last_word("single"), None);
    assert_eq!(split_last_word("   "), None);
    // Two target tokens; the word counts as correct only if both are the argmax.
    let r1 = [-0.1f32, -3.0, -4.0];
    let r2 = [-2.0f32, -0.2, -5.0];
    let o = score_target(&[&r1, &r2], &[0, 1]);
    assert!(o.greedy_correct);
    close(o.logprob, (-0.1f32) as f64 + (-0.2f32) as f64);
    let o2 = score_target(&[&r1, &r2], &[0, 0]);
    assert!(!o2.greedy_correct);
    let s = lambada_scores(&[
        LambadaOutcome {
            logprob: -1.0,
            greedy_correct: true,
        },
        LambadaOutcome {
            logprob: -3.0,
            greedy_correct: false,
        },
    ]);
    close(s.accuracy, 0.5);
    close(s.perplexity, (2.0f64).exp());
}

#[test]
fn summarize_prompt_and_sentence_cut() {
    assert_eq!(tldr_prompt("An article.\n"), "An article.\nTL;DR:");
    assert_eq!(
        first_sentences(" One. Two!  Three? Four. Five", 3),
        "One. Two! Three?"
    );
    assert_eq!(first_sentences("v1.2 is out. More", 1), "v1.2 is out.");
    assert_eq!(first_sentences("no end in sight", 3), "no end in sight");
    assert_eq!(first_sentences("First.\n\nUnrelated. Text.", 3), "First.");
}
