//! Decode (batch-1 matrix-vector) throughput against this machine's memory
//! bandwidth, measured in the same run.
//!
//! One "step" multiplies one activation row by every weight matrix of a
//! GPT-2 124M decode step — 12 blocks × (c_attn [768, 2304], attn.c_proj
//! [768, 768], c_fc [768, 3072], mlp.c_proj [3072, 768]) plus the tied LM
//! head [50257, 768] — each a distinct buffer (494 MB in f32), so the weights
//! come from DRAM as in real decoding. The peak is a plain parallel sum of
//! a 1 GiB buffer (no software prefetch, 4 KiB pages): the kernels, which
//! prefetch, can pass it; `scripts/bench.sh` probes the limit its table
//! uses with PyTorch. Bytes = weight bytes of the step (what must be streamed).
//!
//! Run: `cargo bench -p lmkit --bench decode`; the last lines print GB/s and
//! the fraction of the read peak for each weight format.

use std::hint::black_box;
use std::sync::Mutex;
use std::time::Duration;

use criterion::{criterion_group, Criterion, Throughput};
use lmkit::kernels::matvec::{
    in_out_partials_len, matvec_bf16, matvec_f32_in_out, matvec_f32_out_in,
};
use lmkit::kernels::quant::{to_bf16_out_in, SourceLayout};
use lmkit::kernels::{Bf16Panels, PackedInt8};
use rayon::prelude::*;

const C: usize = 768;
const V: usize = 50257;
const LAYERS: usize = 12;

/// (IC, OC) of the four matrices of a block.
const BLOCK: [(usize, usize); 4] = [(C, 3 * C), (C, C), (C, 4 * C), (4 * C, C)];

static RESULTS: Mutex<Vec<(String, f64)>> = Mutex::new(Vec::new());

fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * 0.05
        })
        .collect()
}

/// Measures `f` (one step moving `bytes`) with criterion and records GB/s.
fn bench(c: &mut Criterion, name: &str, bytes: u64, mut f: impl FnMut()) {
    let mut g = c.benchmark_group("decode");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(8))
        .warm_up_time(Duration::from_secs(2));
    g.throughput(Throughput::BytesDecimal(bytes));
    g.bench_function(name, |b| b.iter(&mut f));
    g.finish();
    // A separate timed pass for the summary (criterion keeps its estimates to itself).
    let reps = 10;
    let t = std::time::Instant::now();
    for _ in 0..reps {
        f();
    }
    let gbs = bytes as f64 * reps as f64 / t.elapsed().as_secs_f64() / 1e9;
    RESULTS
        .lock()
        .expect("results")
        .push((name.to_string(), gbs));
}

fn decode(c: &mut Criterion) {
    // Peak: parallel sum over 1 GiB.
    let big = vec![1.0f32; 1 << 28];
    bench(c, "peak_read_1GiB", (big.len() * 4) as u64, || {
        // 16 independent lanes: vectorised, so the sum is bound by memory, not by adds.
        let s: f32 = big
            .par_chunks(1 << 16)
            .map(|ch| {
                let mut acc = [0f32; 16];
                for v in ch.chunks_exact(16) {
                    for l in 0..16 {
                        acc[l] += v[l];
                    }
                }
                acc.iter().sum::<f32>()
            })
            .sum();
        black_box(s);
    });
    drop(big);

    let mut seed = 0;
    let mut mats: Vec<(Vec<f32>, usize, usize)> = Vec::new();
    for _ in 0..LAYERS {
        for &(ic, oc) in &BLOCK {
            seed += 1;
            mats.push((data(ic * oc, seed), ic, oc));
        }
    }
    let wte = data(V * C, 999);
    let x = data(4 * C, 7);
    let mut out = vec![0f32; V.max(4 * C)];
    let mut partials = vec![0f32; in_out_partials_len(1, 4 * C, 4 * C)];
    let f32_bytes = (mats.iter().map(|m| m.0.len()).sum::<usize>() + wte.len()) * 4;
    bench(c, "step_f32", f32_bytes as u64, || {
        for (w, ic, oc) in &mats {
            let p = &mut partials[..in_out_partials_len(1, *ic, *oc)];
            matvec_f32_in_out(&mut out[..*oc], p, &x[..*ic], w, None, 1, *ic, *oc);
        }
        matvec_f32_out_in(&mut out[..V], &x[..C], &wte, None, 1, C, V);
        black_box(&out);
    });

    let bf: Vec<(Vec<u16>, usize, usize)> = mats
        .iter()
        .map(|(w, ic, oc)| {
            let mut b = vec![0u16; w.len()];
            to_bf16_out_in(&mut b, w, *ic, *oc, SourceLayout::InOut, &|_| {});
            (b, *ic, *oc)
        })
        .collect();
    let mut wte_bf = vec![0u16; wte.len()];
    to_bf16_out_in(&mut wte_bf, &wte, C, V, SourceLayout::OutIn, &|_| {});
    bench(c, "step_bf16", (f32_bytes / 2) as u64, || {
        for (w, ic, oc) in &bf {
            matvec_bf16(&mut out[..*oc], &x[..*ic], w, None, 1, *ic, *oc);
        }
        matvec_bf16(&mut out[..V], &x[..C], &wte_bf, None, 1, C, V);
        black_box(&out);
    });
    drop(bf);
    drop(wte_bf);

    // The same bf16 weights in the packed panels the engine keeps where the
    // CPU has AVX-512 BF16 (one copy for prefill's gemm and decode).
    let panels: Option<Vec<Bf16Panels>> = mats
        .iter()
        .map(|(w, ic, oc)| Bf16Panels::convert(w, *ic, *oc, SourceLayout::InOut, &|_| {}))
        .chain(std::iter::once(Bf16Panels::convert(
            &wte,
            C,
            V,
            SourceLayout::OutIn,
            &|_| {},
        )))
        .collect();
    if let Some(panels) = panels {
        let bytes = panels.iter().map(Bf16Panels::bytes).sum::<usize>();
        bench(c, "step_bf16_panels", bytes as u64, || {
            for p in &panels {
                let (ic, oc) = p.shape();
                p.matvec(&mut out[..oc], &x[..ic], None, 1);
            }
            black_box(&out);
        });
    }

    // int8 weights packed for the int8 kernels; each product quantizes its
    // activation row (as the engine does).
    let q8: Vec<PackedInt8> = mats
        .iter()
        .map(|(w, ic, oc)| PackedInt8::quantize(w, *ic, *oc, SourceLayout::InOut))
        .collect();
    let wte_q = PackedInt8::quantize(&wte, C, V, SourceLayout::OutIn);
    let int8_bytes = q8.iter().map(PackedInt8::bytes).sum::<usize>() + wte_q.bytes();
    bench(c, "step_int8", int8_bytes as u64, || {
        for w in &q8 {
            let (ic, oc) = w.shape();
            w.forward(&mut out[..oc], &x[..ic], None, 1);
        }
        wte_q.forward(&mut out[..V], &x[..C], None, 1);
        black_box(&out);
    });

    let results = RESULTS.lock().expect("results");
    let peak = results.first().map_or(f64::NAN, |r| r.1);
    println!(
        "\ndecode matvec throughput ({} rayon threads):",
        rayon::current_num_threads()
    );
    for (name, gbs) in results.iter() {
        println!(
            "  {name:<16} {gbs:7.1} GB/s  {:5.1}% of the read peak",
            100.0 * gbs / peak
        );
    }
}

criterion_group!(benches, decode);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
