//! The prefix cache changes nothing a sequence produces: with and without
//! it, a continuous batch gives the same tokens, the same log-probabilities
//! (prompt ones included) bit for bit with bf16 and int8 weights (whose
//! matrix kernels give each row the same result whatever the row count,
//! from 5 rows up), under greedy and seeded sampling. f32 weights go
//! through the `gemm` crate, whose summation order depends on the row
//! count: there the tokens are the same and the log-probabilities agree to
//! f32 rounding (as between continuous-batch compositions already). Prompts
//! share and diverge at block boundaries and mid-block, requests
//! run alone and together, and a tiny pool evicts within its budget.
//!
//! The model is random (GPT-2 shapes from `tests/fixtures/gpt2-tiny`, a
//! longer context) so prompts span many blocks.

use std::path::PathBuf;

use lmkit::models::gpt2::{
    BatchEvent, ContinuousBatch, GenerationConfig, Gpt2Engine, PrefixCache, SamplingParams,
    SequenceRequest, TokenLogprob, WeightDtype,
};
use lmkit::spec::layout::gpt2_layout;
use lmkit::spec::Gpt2Config;

#[path = "support/gpt2_tokenizer.rs"]
mod gpt2_tokenizer;
use gpt2_tokenizer::gpt2_tokenizer;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// gpt2-tiny's shapes with 160 positions and random weights.
fn engine(dtype: WeightDtype) -> Gpt2Engine {
    let path = repo_root().join("tests/fixtures/gpt2-tiny/config.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("config")).expect("json");
    json["n_positions"] = 160.into();
    let cfg = Gpt2Config::from_json_str(&json.to_string()).expect("config");
    let layout = gpt2_layout(&cfg).expect("layout");
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let params: Vec<f32> = (0..layout.total_len())
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.6
        })
        .collect();
    Gpt2Engine::from_params(&cfg, &layout, &params, dtype).expect("engine")
}

fn request(prompt: Vec<u32>, seed: Option<u64>, max: usize, echo: bool) -> SequenceRequest {
    let sampling = match seed {
        None => SamplingParams::greedy(),
        Some(_) => SamplingParams {
            temperature: 1.1,
            top_k: 50,
            top_p: 0.95,
            repetition_penalty: 1.1,
            ..Default::default()
        },
    };
    SequenceRequest {
        prompt,
        cfg: GenerationConfig {
            max_new_tokens: max,
            sampling,
            seed: seed.unwrap_or(0),
            ..Default::default()
        },
        stops: vec![],
        logprobs: Some(3),
        prompt_logprobs: echo,
    }
}

/// Everything a sequence produced: prompt logprobs, then (id, logprob).
type Produced = (Option<Vec<Option<TokenLogprob>>>, Vec<(u32, TokenLogprob)>);

/// Runs `reqs` through `batch`, request `i` joining before step `joins[i]`.
fn run(
    engine: &mut Gpt2Engine,
    batch: &mut ContinuousBatch,
    reqs: &[SequenceRequest],
    joins: &[usize],
) -> Vec<Produced> {
    let tok = gpt2_tokenizer();
    let mut out: Vec<Produced> = vec![(None, Vec::new()); reqs.len()];
    let mut seq_of = Vec::new();
    let mut finished = 0;
    for step in 0.. {
        for (i, _) in joins.iter().enumerate().filter(|(_, &at)| at == step) {
            seq_of.push((batch.add(engine, reqs[i].clone()).expect("add"), i));
        }
        if finished == reqs.len() {
            break;
        }
        assert!(step < 500, "the batch never finished");
        for ev in batch.step(engine, &tok).expect("step") {
            let which = |seq| seq_of.iter().find(|s| s.0 == seq).expect("known").1;
            match ev {
                BatchEvent::Prompt { seq, logprobs } => out[which(seq)].0 = Some(logprobs),
                BatchEvent::Token {
                    seq, id, logprob, ..
                } => out[which(seq)].1.push((id, logprob.expect("asked for"))),
                BatchEvent::Done { .. } => finished += 1,
            }
        }
    }
    out
}

/// Prompts over a shared 70-token head: the same prompt twice, prompts
/// diverging inside a block and at a block's end, one ending mid-block, a
/// prefix of another, one unrelated; greedy and seeded, echo or not.
fn requests() -> Vec<SequenceRequest> {
    let head: Vec<u32> = (0..70).map(|i| (i * 37 % 120) as u32 + 1).collect();
    let with = |n: usize, tail: &[u32]| {
        let mut p = head[..n].to_vec();
        p.extend_from_slice(tail);
        p
    };
    vec![
        request(with(70, &[5, 6, 7]), None, 6, true),
        request(with(70, &[5, 6, 7]), None, 6, true),
        request(with(70, &[9, 9]), Some(7), 8, false),
        request(with(45, &[3]), Some(11), 5, true),
        request(with(48, &[100, 101, 102, 103, 104, 105]), None, 7, true),
        request(with(64, &[]), Some(3), 9, true),
        request(with(16, &[]), None, 4, true),
        request((0..40).map(|i| 120 - i).collect(), Some(5), 6, false),
        request(
            with(70, &[5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]),
            None,
            6,
            true,
        ),
    ]
}

/// `exact`: bit for bit; else the same tokens and top alternatives, the
/// log-probabilities within f32 rounding of matrix products over other
/// row counts (f32 engines: see the module docs).
fn assert_same(got: &[Produced], want: &[Produced], what: &str, exact: bool) {
    let close = |g: &TokenLogprob, w: &TokenLogprob, at: &str| {
        let ids = |t: &TokenLogprob| t.top.iter().map(|x| x.0).collect::<Vec<_>>();
        assert_eq!(ids(g), ids(w), "{what}: {at}: top alternatives");
        for (a, b) in std::iter::once((g.logprob, w.logprob))
            .chain(g.top.iter().zip(&w.top).map(|(a, b)| (a.1, b.1)))
        {
            assert!((a - b).abs() < 1e-4, "{what}: {at}: {a} vs {b}");
        }
    };
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if exact {
            assert_eq!(g.0, w.0, "{what}: request {i}: prompt logprobs");
            assert_eq!(g.1, w.1, "{what}: request {i}: tokens and logprobs");
            continue;
        }
        let ids = |p: &Produced| p.1.iter().map(|t| t.0).collect::<Vec<_>>();
        assert_eq!(ids(g), ids(w), "{what}: request {i}: tokens");
        for (a, b) in g.1.iter().zip(&w.1) {
            close(&a.1, &b.1, &format!("request {i}, token"));
        }
        let (gp, wp) = (g.0.as_deref().unwrap_or(&[]), w.0.as_deref().unwrap_or(&[]));
        assert_eq!(gp.len(), wp.len(), "{what}: request {i}: prompt logprobs");
        for (p, (a, b)) in gp.iter().zip(wp).enumerate() {
            match (a, b) {
                (Some(a), Some(b)) => close(a, b, &format!("request {i}, prompt position {p}")),
                (a, b) => assert_eq!(a, b, "{what}: request {i}: prompt position {p}"),
            }
        }
    }
}

fn check(dtype: WeightDtype) {
    let exact = dtype != WeightDtype::F32;
    let mut engine = engine(dtype);
    let reqs = requests();
    let alone: Vec<usize> = (0..reqs.len()).map(|i| i * 20).collect();
    let plain = run(&mut engine, &mut ContinuousBatch::new(), &reqs, &alone);
    for block in [8, 16] {
        let pool = PrefixCache::new(64 << 20, block).expect("pool");
        let mut cached = ContinuousBatch::with_prefix_cache(pool);
        let got = run(&mut engine, &mut cached, &reqs, &alone);
        assert_same(
            &got,
            &plain,
            &format!("{dtype:?}, alone, blocks of {block}"),
            exact,
        );
        let stats = cached.prefix_cache_stats().expect("stats");
        let prompts: usize = reqs.iter().map(|r| r.prompt.len()).sum();
        assert_eq!((stats.hit_tokens + stats.miss_tokens) as usize, prompts);
        // Request 1 repeats request 0: all its full blocks but the last token's.
        assert!(stats.hit_tokens as usize >= 72 / block * block, "{stats:?}");
        assert_eq!(stats.evicted_blocks, 0);
    }
    // Together: joining in waves, as a server's batch does. The steps feed
    // fewer rows with the cache, which must not change any result.
    let waves = [0, 0, 0, 1, 1, 3, 3, 3, 6];
    let plain = run(&mut engine, &mut ContinuousBatch::new(), &reqs, &waves);
    let pool = PrefixCache::new(64 << 20, 8).expect("pool");
    let mut cached = ContinuousBatch::with_prefix_cache(pool);
    // Warm the pool with the shared head, then the waves.
    run(&mut engine, &mut cached, &reqs[..1], &[0]);
    let got = run(&mut engine, &mut cached, &reqs, &waves);
    assert_same(&got, &plain, &format!("{dtype:?}, together"), exact);
}

#[test]
fn prefix_cache_changes_nothing_f32() {
    check(WeightDtype::F32);
}

#[test]
fn prefix_cache_changes_nothing_bf16() {
    check(WeightDtype::Bf16);
}

#[test]
fn prefix_cache_changes_nothing_int8() {
    check(WeightDtype::Int8);
}

/// A pool of a few blocks evicts (least recently used first) and stays
/// within its budget; results stay the same; a pool too small for one
/// block holds nothing and still serves.
#[test]
fn tiny_pool_evicts_within_budget() {
    let mut engine = engine(WeightDtype::Bf16);
    let reqs = requests();
    let alone: Vec<usize> = (0..reqs.len()).map(|i| i * 20).collect();
    let plain = run(&mut engine, &mut ContinuousBatch::new(), &reqs, &alone);
    // One block of 8 positions: 2 layers · 2 (k, v) · 8 · 32 bf16 + hidden.
    let block_bytes = 2 * 2 * 8 * 32 * 2 + 8 * 32 * 4;
    for blocks in [0usize, 3] {
        let budget = blocks * (block_bytes + 200);
        let mut cached =
            ContinuousBatch::with_prefix_cache(PrefixCache::new(budget, 8).expect("pool"));
        let got = run(&mut engine, &mut cached, &reqs, &alone);
        assert_same(&got, &plain, &format!("pool of {blocks} blocks"), true);
        let stats = cached.prefix_cache_stats().expect("stats");
        assert!(stats.bytes <= budget, "{stats:?}");
        assert!(stats.blocks <= blocks, "{stats:?}");
        if blocks == 0 {
            assert_eq!(stats.hit_tokens, 0);
        } else {
            assert!(
                stats.evicted_blocks > 0 && stats.hit_tokens > 0,
                "{stats:?}"
            );
        }
    }
    assert!(PrefixCache::new(1 << 20, 0).is_err());
}
