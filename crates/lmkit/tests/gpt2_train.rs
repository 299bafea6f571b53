//! The training GPT-2 against PyTorch (tests/fixtures/gpt2-tiny, written by
//! HF transformers): loss, logits, every gradient, and one AdamW step of the
//! trainer (lr 1e-2, betas (0.9, 0.95), eps 1e-8, wd 0.1 on matmul weights).

use lmkit::checkpoint::{load_pretrained, LoadOptions};
use lmkit::data::TokenBatch;
use lmkit::models::gpt2::Gpt2;
use lmkit::spec::IGNORE_INDEX;
use lmkit::spec::{AnyConfig, Architecture, Gpt2Config, Precision};
use lmkit::train::{train_step, LrSchedule, OptimConfig, OptimState, ScheduleKind, Trainable};
use std::path::PathBuf;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gpt2-tiny")
}

struct Reference {
    bytes: Vec<u8>,
    json: serde_json::Value,
}

impl Reference {
    fn load() -> Self {
        let dir = fixture_dir();
        let bytes = std::fs::read(dir.join("reference.safetensors")).expect("fixture present");
        let json =
            serde_json::from_slice(&std::fs::read(dir.join("reference.json")).unwrap()).unwrap();
        Reference { bytes, json }
    }

    fn st(&self) -> safetensors::SafeTensors<'_> {
        safetensors::SafeTensors::deserialize(&self.bytes).unwrap()
    }

    fn f32(&self, name: &str) -> Vec<f32> {
        let st = self.st();
        let t = st
            .tensor(name)
            .unwrap_or_else(|_| panic!("no tensor {name}"));
        assert_eq!(t.dtype(), safetensors::Dtype::F32);
        t.data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn i64(&self, name: &str) -> Vec<i64> {
        let st = self.st();
        let t = st.tensor(name).unwrap();
        assert_eq!(t.dtype(), safetensors::Dtype::I64);
        t.data()
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn scalar(&self, name: &str) -> f64 {
        self.json["scalars"][name]["value"].as_f64().unwrap()
    }
}

fn load_model() -> Gpt2 {
    let pre = load_pretrained(
        &fixture_dir().display().to_string(),
        Some(Architecture::Gpt2LMHeadModel),
        LoadOptions::default(),
    )
    .unwrap();
    let AnyConfig::Gpt2(cfg) = pre.config else {
        panic!("not gpt2")
    };
    Gpt2::from_params(cfg, pre.params).unwrap()
}

/// inputs [2, 12] and next-token targets (HF labels shifted left, last = ignored).
fn batch(r: &Reference) -> TokenBatch {
    let ids = r.i64("input_ids");
    let labels = r.i64("labels");
    let (b, t) = (2, 12);
    let mut bt = TokenBatch::new(b, t);
    for i in 0..b {
        for j in 0..t {
            bt.inputs[i * t + j] = ids[i * t + j] as u32;
            bt.targets[i * t + j] = if j + 1 < t {
                labels[i * t + j + 1] as i32
            } else {
                IGNORE_INDEX
            };
        }
    }
    bt
}

fn assert_close(name: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    let scale = want.iter().fold(1.0f32, |m, x| m.max(x.abs()));
    let worst = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(
        worst <= tol * scale,
        "{name}: max |diff| {worst:e} > {tol:e}·{scale}"
    );
}

/// Selective recomputation (attention probabilities and GELU outputs
/// recomputed in backward) gives the same loss and gradients bit for bit,
/// in f32 and in bf16, and the f32 ones still match PyTorch's.
#[test]
fn recompute_gives_the_same_gradients_bit_for_bit() {
    let r = Reference::load();
    let bt = batch(&r);
    for precision in [Precision::F32, Precision::Bf16] {
        let mut m = load_model();
        m.set_precision(precision);
        let run = |m: &mut Gpt2, recompute: bool| {
            m.set_recompute(recompute);
            assert_eq!(m.recompute(), recompute);
            m.zero_grad();
            let lp = m
                .forward_backward(&bt.inputs, &bt.targets, 2, 12, 1.0)
                .unwrap();
            (lp.mean(), m.grads.clone())
        };
        let (l_kept, g_kept) = run(&mut m, false);
        let (l_re, g_re) = run(&mut m, true);
        assert_eq!(l_re.to_bits(), l_kept.to_bits(), "{precision:?} loss");
        assert!(
            g_re.iter()
                .zip(&g_kept)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{precision:?}: recomputed gradients differ"
        );
        assert!(g_re.iter().any(|&g| g != 0.0));
        if precision == Precision::F32 {
            for spec in m.layout.specs() {
                let key = format!("grad.transformer.{}", spec.name);
                assert_close(&key, &g_re[spec.range()], &r.f32(&key), 1e-5);
            }
        }
    }
}

#[test]
fn loss_logits_and_every_gradient_match_pytorch() {
    let r = Reference::load();
    let mut m = load_model();
    let bt = batch(&r);
    let fwd = m.forward(&bt.inputs, Some(&bt.targets), 2, 12).unwrap();
    assert_eq!(fwd.count, r.scalar("loss_targets") as usize);
    assert!(
        (fwd.mean() - r.scalar("loss")).abs() < 1e-5,
        "{} vs {}",
        fwd.mean(),
        r.scalar("loss")
    );
    assert_close("logits", m.logits(), &r.f32("logits"), 1e-5);
    // The loss alone: the LM head fused with the loss, no [N, V] logits.
    let fused = m.loss(&bt.inputs, &bt.targets, 2, 12).unwrap();
    assert_eq!(fused.count, fwd.count);
    assert!((fused.mean() - r.scalar("loss")).abs() < 1e-5);
    assert_eq!(
        m.evaluate(&bt).unwrap(),
        fused,
        "validation uses the fused loss"
    );

    m.zero_grad();
    let lp = m
        .forward_backward(&bt.inputs, &bt.targets, 2, 12, 1.0)
        .unwrap();
    assert_eq!(lp.count, 20);
    assert!((lp.mean() - r.scalar("loss")).abs() < 1e-5);
    let mut checked = 0;
    for spec in m.layout.specs() {
        let key = format!("grad.transformer.{}", spec.name);
        assert_close(&key, &m.grads[spec.range()], &r.f32(&key), 1e-5);
        checked += 1;
    }
    assert_eq!(checked, 28);
    // Backward accumulates: a second pass doubles every gradient.
    let g1 = m.grads.clone();
    m.forward_backward(&bt.inputs, &bt.targets, 2, 12, 1.0)
        .unwrap();
    for (a, b) in m.grads.iter().zip(&g1) {
        assert!((a - 2.0 * b).abs() <= 1e-6 * (1.0 + b.abs()));
    }
}

#[test]
fn one_adamw_step_matches_pytorch() {
    let r = Reference::load();
    let mut m = load_model();
    // The fixture's decay group is exactly the 2-D matmul weights.
    let decay: Vec<String> = r.json["adamw"]["decay"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            v.as_str()
                .unwrap()
                .trim_start_matches("transformer.")
                .to_string()
        })
        .collect();
    for spec in m.layout.specs() {
        assert_eq!(spec.decay, decay.contains(&spec.name), "{}", spec.name);
    }
    let cfg = OptimConfig {
        schedule: LrSchedule {
            kind: ScheduleKind::Constant,
            max_lr: 1e-2,
            min_lr: 1e-2,
            warmup_steps: 0,
            total_steps: 1,
        },
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.1,
        grad_clip: 0.0,
        grad_accum: 1,
    };
    let mut opt = OptimState::new(m.num_params());
    let mut bt = batch(&r);
    let fixed = bt.clone();
    let stats = train_step(&mut m, &mut opt, &cfg, &mut bt, &mut |b| *b = fixed.clone()).unwrap();
    assert_eq!(stats.step, 1);
    assert!((stats.loss - r.scalar("loss")).abs() < 1e-5);
    assert_eq!(stats.lr, 1e-2);
    assert_eq!(stats.tokens, 24);
    let mut compared = 0usize;
    for spec in m.layout.specs() {
        let want = r.f32(&format!("adamw.transformer.{}", spec.name));
        let grad = r.f32(&format!("grad.transformer.{}", spec.name));
        let got = &m.params[spec.range()];
        for i in 0..want.len() {
            // A gradient ~0 can flip the sign of the ±lr update (see fixtures README).
            if grad[i].abs() > 1e-6 {
                assert!(
                    (got[i] - want[i]).abs() <= 1e-5,
                    "{}[{i}]: {} vs {}",
                    spec.name,
                    got[i],
                    want[i]
                );
                compared += 1;
            }
        }
    }
    assert!(compared > 9000, "{compared}");
    // The global norm the trainer reports is that of the fixture's gradients.
    let norm: f64 = m
        .layout
        .specs()
        .iter()
        .flat_map(|s| r.f32(&format!("grad.transformer.{}", s.name)))
        .map(|g| (g as f64) * (g as f64))
        .sum::<f64>()
        .sqrt();
    assert!((stats.grad_norm as f64 - norm).abs() < 1e-4 * norm);
}

#[test]
fn gpt2_init_statistics() {
    let cfg = Gpt2Config {
        vocab_size: 500,
        n_positions: 64,
        n_embd: 64,
        n_layer: 4,
        n_head: 4,
        ..Gpt2Config::default()
    };
    let m = Gpt2::new_random(cfg.clone(), 1).unwrap();
    let again = Gpt2::new_random(cfg.clone(), 1).unwrap();
    assert_eq!(m.params, again.params);
    assert_ne!(m.params, Gpt2::new_random(cfg, 2).unwrap().params);
    let std = |name: &str| {
        let x = m.layout.view(&m.params, name);
        let mean = x.iter().map(|&v| v as f64).sum::<f64>() / x.len() as f64;
        (x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / x.len() as f64).sqrt()
    };
    let proj = 0.02 / (8.0f64).sqrt();
    for (name, want) in [
        ("wte.weight", 0.02),
        ("wpe.weight", 0.02),
        ("h.0.attn.c_attn.weight", 0.02),
        ("h.3.mlp.c_fc.weight", 0.02),
        ("h.1.attn.c_proj.weight", proj),
        ("h.2.mlp.c_proj.weight", proj),
    ] {
        let s = std(name);
        assert!((s / want - 1.0).abs() < 0.05, "{name}: std {s} want {want}");
    }
    assert!(m
        .layout
        .view(&m.params, "h.0.ln_1.weight")
        .iter()
        .all(|&v| v == 1.0));
    assert!(m
        .layout
        .view(&m.params, "ln_f.bias")
        .iter()
        .all(|&v| v == 0.0));
    assert!(m
        .layout
        .view(&m.params, "h.1.mlp.c_fc.bias")
        .iter()
        .all(|&v| v == 0.0));
}
