//! GPT-2 zero-shot tasks against HF transformers on the `gpt2-zeroshot`
//! fixture (a tiny random GPT2LMHeadModel with a small BPE vocabulary,
//! written by `scripts/make_fixtures.py --only gpt2-zeroshot`; the data are
//! the committed files under `tests/data/{cbt,translate,qa}`): the same
//! tokens, the same per-candidate CBT scores (to 1e-5 relative; 6e-8 measured) and exactly
//! the same choices, accuracy, greedy continuations and metrics.

use std::path::{Path, PathBuf};

use lmkit::eval::bleu::corpus_bleu;
use lmkit::eval::cbt::read_cbt;
use lmkit::eval::qa::{qa_items, read_qa};
use lmkit::eval::run::{
    eval_cbt, eval_qa, eval_translate, greedy_line, greedy_lines, GPT2_EVAL_BATCH,
};
use lmkit::eval::squad::squad_scores;
use lmkit::eval::translate::{
    read_translation_jsonl, read_translation_texts, reverse, translate_prompt,
};
use lmkit::models::gpt2::{Gpt2Engine, WeightDtype};
use lmkit_tokenizers::BpeTokenizer;
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn case() -> PathBuf {
    root().join("tests/fixtures/gpt2-zeroshot")
}

fn reference() -> Value {
    let text = std::fs::read_to_string(case().join("reference.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v["zeroshot"].clone()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn cbt_scores_and_choices_equal_hf() {
    let r = reference();
    let tok = BpeTokenizer::from_dir(case()).unwrap();
    let mut engine = Gpt2Engine::load(case(), WeightDtype::F32).unwrap();
    let items = read_cbt(&root().join("tests/data/cbt/tiny_NE.txt")).unwrap();
    let want = r["cbt"].as_array().unwrap();
    assert_eq!(items.len(), want.len());
    let mut calls = 0;
    let (scores, outs) = eval_cbt(&mut engine, &tok, &items, |d, n| {
        calls += 1;
        assert!(d <= n);
    })
    .unwrap();
    assert_eq!(calls, items.len());
    let mut worst = 0.0f64;
    let mut correct = 0;
    for ((it, o), w) in items.iter().zip(&outs).zip(want) {
        assert_eq!(
            tok.encode_ordinary(it.context_text().as_bytes()),
            ids(&w["context_ids"]),
            "line {}",
            it.line
        );
        for (c, q) in it.candidates.iter().zip(w["query_ids"].as_array().unwrap()) {
            assert_eq!(tok.encode_ordinary(it.filled_query(c).as_bytes()), ids(q));
        }
        assert_eq!(
            o.truncated_tokens as u64,
            w["truncated_tokens"].as_u64().unwrap()
        );
        for (s, ws) in o.scores.iter().zip(w["scores"].as_array().unwrap()) {
            let ws = ws.as_f64().unwrap();
            let d = (s - ws).abs() / ws.abs().max(1.0);
            worst = worst.max(d);
            assert!(d < 1e-5, "line {}: {s} vs {ws}", it.line);
        }
        assert_eq!(
            o.choice as u64,
            w["choice"].as_u64().unwrap(),
            "line {}",
            it.line
        );
        assert_eq!(o.correct, w["correct"].as_bool().unwrap());
        correct += usize::from(o.correct);
    }
    eprintln!("CBT: worst relative score difference {worst:.2e}");
    // Truncation is exercised: the 20-line story does not fit 96 positions.
    assert!(outs.iter().any(|o| o.truncated_tokens > 0));
    assert_eq!(scores.correct, correct);
    assert_eq!(scores.count, items.len());
}

/// The fixture's settings: tokens generated per answer, example pairs.
fn settings(r: &Value) -> (usize, usize) {
    (
        r["max_new_tokens"].as_u64().unwrap() as usize,
        r["shots"].as_u64().unwrap() as usize,
    )
}

#[test]
fn translations_and_bleu_equal_hf_generate() {
    let r = reference();
    let (max_new, shots) = settings(&r);
    let tok = BpeTokenizer::from_dir(case()).unwrap();
    let mut engine = Gpt2Engine::load(case(), WeightDtype::F32).unwrap();
    let jsonl = read_translation_jsonl(&root().join("tests/data/translate/en_fr.jsonl")).unwrap();
    let texts = read_translation_texts(
        &root().join("tests/data/translate/en.txt"),
        &root().join("tests/data/translate/fr.txt"),
    )
    .unwrap();
    // The two input forms hold the same pairs.
    let strip = |v: &[lmkit::eval::TranslationPair]| {
        v.iter()
            .map(|p| (p.source.clone(), p.target.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&jsonl), strip(&texts));
    for (direction, pairs) in [("en-fr", jsonl.clone()), ("fr-en", reverse(jsonl.clone()))] {
        let want = &r["translate"][direction];
        let items = want["items"].as_array().unwrap();
        for (p, w) in pairs[shots..].iter().zip(items) {
            // The same prompt tokens; HF was fed the last n_positions + 1 - max_new.
            let prompt = translate_prompt(&pairs[..shots], &p.source);
            let (all, fed) = (
                tok.encode_ordinary(prompt.as_bytes()),
                ids(&w["prompt_ids"]),
            );
            assert_eq!(
                all[all.len() - fed.len()..],
                fed[..],
                "{direction}: {prompt:?}"
            );
            let line = greedy_line(&mut engine, &tok, &prompt, max_new).unwrap();
            assert_eq!(
                line,
                w["text"].as_str().unwrap().trim(),
                "{direction}: {prompt:?}"
            );
        }
        let (bleu, hyps) = eval_translate(
            &mut engine,
            &tok,
            &pairs,
            shots,
            max_new,
            GPT2_EVAL_BATCH,
            |_, _| {},
        )
        .unwrap();
        let want_hyps: Vec<&str> = want["hypotheses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h.as_str().unwrap())
            .collect();
        assert_eq!(hyps, want_hyps, "{direction}");
        assert!((bleu.score - want["bleu"].as_f64().unwrap()).abs() < 0.01);
        assert_eq!(
            bleu.stats.counts.to_vec(),
            want["counts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as usize)
                .collect::<Vec<_>>()
        );
        assert_eq!(bleu.stats.sys_len as u64, want["sys_len"].as_u64().unwrap());
        assert_eq!(bleu.stats.ref_len as u64, want["ref_len"].as_u64().unwrap());
        // The corpus BLEU of the hypotheses is the one reported.
        let refs: Vec<Vec<&str>> = pairs[shots..]
            .iter()
            .map(|p| vec![p.target.as_str()])
            .collect();
        assert_eq!(corpus_bleu(&hyps, &refs), bleu);
    }
    // Every example pair held out: nothing left to translate.
    assert!(eval_translate(&mut engine, &tok, &jsonl, jsonl.len(), 4, 8, |_, _| {}).is_err());
}

#[test]
fn qa_answers_and_scores_equal_hf_generate() {
    let r = reference();
    let (max_new, shots) = settings(&r);
    let tok = BpeTokenizer::from_dir(case()).unwrap();
    let mut engine = Gpt2Engine::load(case(), WeightDtype::F32).unwrap();
    for (name, file) in [("coqa", "coqa_tiny.jsonl"), ("nq", "nq_tiny.jsonl")] {
        let rows = read_qa(&root().join("tests/data/qa").join(file)).unwrap();
        let items = qa_items(&rows, shots);
        let want = r["qa"][name]["items"].as_array().unwrap();
        assert_eq!(items.len(), want.len(), "{name}");
        let (scores, answers) = eval_qa(
            &mut engine,
            &tok,
            &items,
            max_new,
            GPT2_EVAL_BATCH,
            |_, _| {},
        )
        .unwrap();
        for ((it, a), w) in items.iter().zip(&answers).zip(want) {
            let fed = ids(&w["prompt_ids"]);
            let all = tok.encode_ordinary(it.prompt.as_bytes());
            // HF was fed the prompt's last tokens (n_positions + 1 - max_new).
            assert_eq!(
                all[all.len() - fed.len()..],
                fed[..],
                "{name} line {}",
                it.line
            );
            assert_eq!(
                a.answer,
                w["answer"].as_str().unwrap(),
                "{name} line {}",
                it.line
            );
        }
        let want_answers: Vec<(&str, &[String])> = answers
            .iter()
            .zip(&items)
            .map(|(a, it)| (a.answer.as_str(), it.golds.as_slice()))
            .collect();
        assert_eq!(scores, squad_scores(want_answers));
    }
}

/// Every prompt of the fixture's translation (both directions) and QA
/// (CoQA and NQ) data, decoded in batches of 2, 3 and 8 (prompts joining
/// as others finish at their newline): item by item the line each gets
/// alone, with progress reported as each finishes.
#[test]
fn batched_greedy_lines_equal_one_at_a_time() {
    let r = reference();
    let (max_new, shots) = settings(&r);
    let tok = BpeTokenizer::from_dir(case()).unwrap();
    let mut engine = Gpt2Engine::load(case(), WeightDtype::F32).unwrap();
    let pairs = read_translation_jsonl(&root().join("tests/data/translate/en_fr.jsonl")).unwrap();
    let mut prompts = Vec::new();
    for pairs in [pairs.clone(), reverse(pairs)] {
        for p in &pairs[shots..] {
            prompts.push(translate_prompt(&pairs[..shots], &p.source));
        }
    }
    for file in ["coqa_tiny.jsonl", "nq_tiny.jsonl"] {
        let rows = read_qa(&root().join("tests/data/qa").join(file)).unwrap();
        prompts.extend(qa_items(&rows, shots).into_iter().map(|it| it.prompt));
    }
    assert!(prompts.len() > 16, "{} prompts", prompts.len());
    let alone: Vec<String> = prompts
        .iter()
        .map(|p| greedy_line(&mut engine, &tok, p, max_new).unwrap())
        .collect();
    // Lines of different lengths, so sequences leave the batch at different steps.
    let lens: std::collections::BTreeSet<usize> = alone.iter().map(String::len).collect();
    assert!(lens.len() > 3, "{lens:?}");
    for bs in [1, 2, 3, 8] {
        let mut seen = Vec::new();
        let lines = greedy_lines(
            &mut engine,
            &tok,
            prompts.iter().map(String::as_str),
            max_new,
            bs,
            |d, n| {
                assert_eq!(n, prompts.len());
                seen.push(d)
            },
        )
        .unwrap();
        assert_eq!(seen, (1..=prompts.len()).collect::<Vec<_>>());
        for (k, (a, b)) in alone.iter().zip(&lines).enumerate() {
            assert_eq!(a, b, "batch {bs}: prompt {k} {:?}", prompts[k]);
        }
    }
    // A zero-token budget answers every prompt with nothing, batched or not.
    let empty = greedy_lines(
        &mut engine,
        &tok,
        prompts.iter().map(String::as_str),
        0,
        8,
        |_, _| {},
    )
    .unwrap();
    assert!(empty.iter().all(String::is_empty));
}
