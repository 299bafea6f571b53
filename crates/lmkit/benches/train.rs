//! One GPT-2 training step (forward + backward + AdamW) and its MFU against
//! the matmul peak of this machine, measured in the same run with the raw
//! `gemm` crate on a 2048³ f32 product.
//!
//! Shape: the bench model, 6 layers, d 384, 6 heads, vocab 50257,
//! batch 4 × 256. Model FLOPs per token = 6·N + 12·L·C·T with N the matmul
//! parameters (blocks + the tied LM head), as in the PaLM/llm.c MFU.
//!
//! Run: `RAYON_NUM_THREADS=2 cargo bench -p lmkit --bench train`
//! (scripts/bench_train.py compares with PyTorch).

use lmkit::data::TokenBatch;
use lmkit::models::gpt2::Gpt2;
use lmkit::spec::Gpt2Config;
use lmkit::train::{train_step, LrSchedule, OptimConfig, OptimState, ScheduleKind};
use std::hint::black_box;
use std::time::Instant;

const L: usize = 6;
const C: usize = 384;
const NH: usize = 6;
const V: usize = 50257;
const B: usize = 4;
const T: usize = 256;

fn matmul_peak_gflops() -> f64 {
    let s = 2048;
    let a: Vec<f32> = (0..s * s).map(|i| ((i * 37) % 101) as f32 * 0.01).collect();
    let b = a.clone();
    let mut out = vec![0.0f32; s * s];
    let threads = rayon::current_num_threads();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t0 = Instant::now();
        // SAFETY: three row-major s×s buffers of the right size.
        unsafe {
            gemm::gemm(
                s,
                s,
                s,
                out.as_mut_ptr(),
                1,
                s as isize,
                false,
                a.as_ptr(),
                1,
                s as isize,
                b.as_ptr(),
                1,
                s as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::Rayon(threads),
            );
        }
        black_box(&out);
        best = best.min(t0.elapsed().as_secs_f64());
    }
    2.0 * (s * s * s) as f64 / best / 1e9
}

fn main() {
    // `cargo test --benches` runs this binary with `--bench` absent: keep it quick.
    let steps = if std::env::args().any(|a| a == "--bench") {
        6
    } else {
        1
    };
    let cfg = Gpt2Config {
        vocab_size: V,
        n_positions: T,
        n_embd: C,
        n_layer: L,
        n_head: NH,
        ..Gpt2Config::default()
    };
    let mut m = Gpt2::new_random(cfg, 0).expect("valid config");
    let optim = OptimConfig {
        schedule: LrSchedule {
            kind: ScheduleKind::Constant,
            max_lr: 6e-4,
            min_lr: 6e-4,
            warmup_steps: 0,
            total_steps: 1000,
        },
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.1,
        grad_clip: 1.0,
        grad_accum: 1,
    };
    let mut opt = OptimState::new(m.num_params());
    let mut batch = TokenBatch::new(B, T);
    let mut k = 0u64;
    let mut next = |b: &mut TokenBatch| {
        for (i, (x, y)) in b.inputs.iter_mut().zip(b.targets.iter_mut()).enumerate() {
            let r = (k
                .wrapping_mul(6364136223846793005)
                .wrapping_add(i as u64 * 1442695040888963407))
                >> 33;
            *x = (r % V as u64) as u32;
            *y = ((r >> 7) % V as u64) as i32;
        }
        k += 1;
    };
    let mut times = Vec::new();
    for i in 0..steps + 1 {
        let t0 = Instant::now();
        train_step(&mut m, &mut opt, &optim, &mut batch, &mut next).expect("finite loss");
        if i > 0 {
            times.push(t0.elapsed().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    let step = times[times.len() / 2];
    let peak = matmul_peak_gflops();
    let n_matmul = (L * 12 * C * C + V * C) as f64;
    let flops_per_token = 6.0 * n_matmul + (12 * L * C * T) as f64;
    let tps = (B * T) as f64 / step;
    println!(
        "gpt2 train step L{L} d{C} V{V} {B}x{T}, {} threads: {:.3} s/step, {:.0} tokens/s, \
         {:.1} GFLOP/s; matmul peak {:.1} GFLOP/s; MFU {:.1}%",
        rayon::current_num_threads(),
        step,
        tps,
        tps * flops_per_token / 1e9,
        peak,
        100.0 * tps * flops_per_token / 1e9 / peak
    );
}
