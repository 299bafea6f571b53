//! Kernel throughput against this machine's peaks, measured in the same run:
//! the raw `gemm` crate on a large square product (peak GFLOP/s) and a
//! parallel streaming triad `c = a + b` (peak GB/s, from DRAM and from L3).
//!
//! Sizes follow GPT-2 small training (N = B·T = 1024 rows, C = 768,
//! OC = 2304 / 3072 / 768, V = 50257) and attention B=4, T=256, C=384, NH=6.
//! Bytes are the minimum traffic a kernel must move (each input read once,
//! each output written once, read-modify-write counted twice).
//!
//! `matmul_bf16_*` are the mixed-precision products (bf16 operands, f32
//! sums: AVX-512 BF16 where the CPU has it), against the f32 `matmul_*` of
//! the same shapes.
//!
//! Run: `cargo bench -p lmkit --bench kernels` (a criterion filter such as
//! `-- matmul` runs a subset). The last lines print every result as a
//! percentage of the peaks.

use criterion::{criterion_group, BenchmarkGroup, Criterion, Throughput};
use lmkit::kernels::AttentionProducts::{self, F32};
use lmkit::kernels::{self, AdamW, AttentionShape, Gelu, GradWrite, WeightLayout};
use rayon::prelude::*;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

const GROUP: &str = "kernels";

/// What a benchmark is measured in, and which peak it is compared with.
#[derive(Clone, Copy)]
enum Unit {
    Flops(u64),
    Bytes(u64),
}

/// Every benchmark in run order, for the summary table.
static REGISTRY: Mutex<Vec<(String, Unit)>> = Mutex::new(Vec::new());

fn register(name: &str, unit: Unit) {
    REGISTRY
        .lock()
        .expect("registry lock")
        .push((name.to_string(), unit));
}

/// Deterministic pseudo-random data in [-scale, scale).
fn data(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * scale
        })
        .collect()
}

fn bench(
    g: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    unit: Unit,
    mut f: impl FnMut(),
) {
    register(name, unit);
    g.throughput(match unit {
        Unit::Flops(n) => Throughput::Elements(n),
        Unit::Bytes(n) => Throughput::BytesDecimal(n),
    });
    g.bench_function(name, |b| b.iter(&mut f));
}

/// The streaming peak: `c = a + b` over rayon chunks (what any element-wise
/// kernel could reach at best).
fn triad(c: &mut [f32], a: &[f32], b: &[f32]) {
    c.par_chunks_mut(1 << 16)
        .zip(a.par_chunks(1 << 16).zip(b.par_chunks(1 << 16)))
        .for_each(|(c, (a, b))| {
            for ((c, a), b) in c.iter_mut().zip(a).zip(b) {
                *c = *a + *b;
            }
        });
}

fn peaks(c: &mut Criterion) {
    let mut g = c.benchmark_group(GROUP);
    let s = 1536;
    let (a, b) = (data(s * s, 1, 1.0), data(s * s, 2, 1.0));
    let mut out = vec![0.0f32; s * s];
    let threads = rayon::current_num_threads();
    bench(
        &mut g,
        "peak_gemm_1536",
        Unit::Flops(2 * (s * s * s) as u64),
        || unsafe {
            // SAFETY: three row-major s×s buffers of the right size.
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
            black_box(&out);
        },
    );
    for (name, len) in [
        ("peak_stream_dram", 16 << 20),
        ("peak_stream_l3", 768 << 10),
    ] {
        let (a, b) = (data(len, 3, 1.0), data(len, 4, 1.0));
        let mut c = vec![0.0f32; len];
        bench(&mut g, name, Unit::Bytes(12 * len as u64), || {
            triad(&mut c, &a, &b);
            black_box(&c);
        });
    }
    g.finish();
}

fn matmuls(c: &mut Criterion) {
    let mut g = c.benchmark_group(GROUP);
    let n = 1024;
    for &(cc, oc, layout) in &[
        (768, 2304, WeightLayout::InOut),
        (768, 3072, WeightLayout::InOut),
        (3072, 768, WeightLayout::InOut),
        (768, 768, WeightLayout::InOut),
        (768, 3072, WeightLayout::OutIn),
    ] {
        let inp = data(n * cc, 5, 1.0);
        let w = data(cc * oc, 6, 0.02);
        let bias = data(oc, 7, 0.1);
        let dout = data(n * oc, 8, 1.0);
        let mut out = vec![0.0; n * oc];
        let (mut dinp, mut dw, mut db) = (vec![0.0; n * cc], vec![0.0; cc * oc], vec![0.0; oc]);
        let tag = format!("{n}x{cc}x{oc}_{layout:?}");
        let flops = 2 * (n * cc * oc) as u64;
        bench(
            &mut g,
            &format!("matmul_fwd_{tag}"),
            Unit::Flops(flops),
            || {
                kernels::matmul_forward(&mut out, &inp, &w, Some(&bias), n, cc, oc, layout);
                black_box(&out);
            },
        );
        bench(
            &mut g,
            &format!("matmul_bwd_{tag}"),
            Unit::Flops(2 * flops),
            || {
                kernels::matmul_backward(
                    Some((&mut dinp, GradWrite::Set)),
                    Some(&mut dw),
                    Some(&mut db),
                    &dout,
                    &inp,
                    &w,
                    n,
                    cc,
                    oc,
                    layout,
                );
                black_box(&dw);
            },
        );
        // The inference engines' bf16 prefill: weights stored once in the
        // packed panel layout (no per-call repack), activations rounded.
        let src = match layout {
            WeightLayout::InOut => lmkit::kernels::quant::SourceLayout::InOut,
            WeightLayout::OutIn => lmkit::kernels::quant::SourceLayout::OutIn,
        };
        if let Some(panels) = kernels::Bf16Panels::convert(&w, cc, oc, src, &|_| {}) {
            // Both routes `matmul` chooses between: the bf16 gemm, and bands
            // widened to f32 for the f32 gemm (CPUs whose bf16 dot product is
            // slower than their FMAs).
            bench(
                &mut g,
                &format!("matmul_bf16_panels_{tag}"),
                Unit::Flops(flops),
                || {
                    panels.matmul_packed(&mut out, &inp, n);
                    black_box(&out);
                },
            );
            bench(
                &mut g,
                &format!("matmul_bf16_panels_widened_{tag}"),
                Unit::Flops(flops),
                || {
                    panels.matmul_widened(&mut out, &inp, n);
                    black_box(&out);
                },
            );
        }
        // int8 weights times per-row quantized activations (W8A8, VNNI
        // where the CPU has it): the quantization of the rows included.
        let w8 = kernels::PackedInt8::quantize(&w, cc, oc, src);
        bench(
            &mut g,
            &format!("matmul_int8_{tag}_{:?}", w8.kernel()),
            Unit::Flops(flops),
            || {
                w8.forward(&mut out, &inp, Some(&bias), n);
                black_box(&out);
            },
        );
        // Batch-1 decode: the whole weight streamed once per row; the
        // portable twin too (CPUs without AVX-512 VNNI).
        let mut q = vec![0i8; cc * oc];
        let mut qs = vec![0f32; oc];
        lmkit::kernels::quant::quantize_int8_out_in(&mut q, &mut qs, &w, cc, oc, src, &|_| {});
        let portable =
            kernels::PackedInt8::from_rows_with(&q, &qs, cc, oc, kernels::Int8Kernel::Portable);
        // Where the CPU has no VNNI both are the portable kernel: one row.
        let twins = if w8.kernel() == portable.kernel() {
            vec![&portable]
        } else {
            vec![&w8, &portable]
        };
        for w8 in twins {
            bench(
                &mut g,
                &format!("matvec_int8_1x{cc}x{oc}_{layout:?}_{:?}", w8.kernel()),
                Unit::Bytes((cc * oc) as u64),
                || {
                    w8.forward(&mut out[..oc], &inp[..cc], Some(&bias), 1);
                    black_box(&out);
                },
            );
        }
        // Packing itself (f32 read, two bf16 copies written), once per
        // optimizer step per weight.
        bench(
            &mut g,
            &format!("bf16_pack_weight_{tag}_{:?}", kernels::Bf16Kernel::detect()),
            Unit::Bytes(8 * (cc * oc) as u64),
            || {
                black_box(kernels::Bf16Weight::pack(&w, cc, oc, layout));
            },
        );
        // What a training step does: packing into the last step's buffers.
        let mut kept = kernels::Bf16Weight::pack(&w, cc, oc, layout);
        bench(
            &mut g,
            &format!(
                "bf16_repack_weight_{tag}_{:?}",
                kernels::Bf16Kernel::detect()
            ),
            Unit::Bytes(8 * (cc * oc) as u64),
            || {
                kept.repack(&w);
                black_box(&kept);
            },
        );
        // The same products with bf16 operands and f32 sums (mixed-precision
        // training), the weight packed once (as per optimizer step), on every
        // kernel this CPU runs, whichever `detect` picks.
        let mut bf16_kernels = vec![kernels::Bf16Kernel::Portable];
        if kernels::bf16_gemm::has_avx512bf16() {
            bf16_kernels.push(kernels::Bf16Kernel::Avx512);
        }
        for kernel in bf16_kernels {
            let pw = kernels::Bf16Weight::pack_with(&w, cc, oc, layout, kernel, true);
            bench(
                &mut g,
                &format!("matmul_bf16_fwd_{tag}_{kernel:?}"),
                Unit::Flops(flops),
                || {
                    kernels::matmul_forward_bf16(&mut out, &inp, &pw, Some(&bias), n);
                    black_box(&out);
                },
            );
            bench(
                &mut g,
                &format!("matmul_bf16_bwd_{tag}_{kernel:?}"),
                Unit::Flops(2 * flops),
                || {
                    kernels::matmul_backward_bf16(
                        Some((&mut dinp, GradWrite::Set)),
                        Some(&mut dw),
                        Some(&mut db),
                        &dout,
                        &inp,
                        &pw,
                        n,
                    );
                    black_box(&dw);
                },
            );
        }
    }
    // A few short texts through BERT (16 rows): `nn.Linear`'s `[OC, IC]` the
    // gemm repacks on every call; the inference copy transposed once at load
    // (`quant::to_f32_in_out`, benched too) it multiplies in place.
    for &(n, cc, oc) in &[(16, 384, 1536), (16, 1536, 384), (128, 768, 3072)] {
        let inp = data(n * cc, 9, 1.0);
        let w = data(cc * oc, 10, 0.02);
        let bias = data(oc, 11, 0.1);
        let mut out = vec![0.0; n * oc];
        let mut wt = vec![0.0; cc * oc];
        bench(
            &mut g,
            &format!("f32_in_out_copy_{cc}x{oc}"),
            Unit::Bytes(8 * (cc * oc) as u64),
            || {
                lmkit::kernels::quant::to_f32_in_out(&mut wt, &w, cc, oc);
                black_box(&wt);
            },
        );
        for (layout, weight) in [(WeightLayout::OutIn, &w), (WeightLayout::InOut, &wt)] {
            bench(
                &mut g,
                &format!("matmul_fwd_{n}x{cc}x{oc}_{layout:?}"),
                Unit::Flops(2 * (n * cc * oc) as u64),
                || {
                    kernels::matmul_forward(&mut out, &inp, weight, Some(&bias), n, cc, oc, layout);
                    black_box(&out);
                },
            );
        }
    }
    g.finish();
}

fn rowwise(c: &mut Criterion) {
    let mut g = c.benchmark_group(GROUP);
    let (n, cc) = (1024usize, 768usize);
    let nc = (n * cc) as u64;
    let inp = data(n * cc, 9, 1.0);
    let (w, b) = (data(cc, 10, 1.0), data(cc, 11, 1.0));
    let dout = data(n * cc, 12, 1.0);
    let (mut out, mut mean, mut rstd) = (vec![0.0; n * cc], vec![0.0; n], vec![0.0; n]);
    let (mut dinp, mut dw, mut db) = (vec![0.0; n * cc], vec![0.0; cc], vec![0.0; cc]);
    bench(
        &mut g,
        "layernorm_fwd_1024x768",
        Unit::Bytes(8 * nc),
        || {
            kernels::layernorm_forward(&mut out, &mut mean, &mut rstd, &inp, &w, &b, n, cc, 1e-5);
            black_box(&out);
        },
    );
    bench(
        &mut g,
        "layernorm_bwd_1024x768",
        Unit::Bytes(16 * nc),
        || {
            kernels::layernorm_backward(
                &mut dinp, &mut dw, &mut db, &dout, &inp, &w, &mean, &rstd, n, cc,
            );
            black_box(&dinp);
        },
    );
    bench(
        &mut g,
        "residual_fwd_1024x768",
        Unit::Bytes(12 * nc),
        || {
            kernels::residual_forward(&mut out, &inp, &dout);
            black_box(&out);
        },
    );
    bench(&mut g, "add_inplace_1024x768", Unit::Bytes(12 * nc), || {
        kernels::add_inplace(&mut dinp, &dout);
        black_box(&dinp);
    });

    let h = n * 4 * cc;
    let x = data(h, 13, 3.0);
    let dy = data(h, 14, 1.0);
    let (mut y, mut dx) = (vec![0.0; h], vec![0.0; h]);
    for kind in [Gelu::Tanh, Gelu::Erf] {
        bench(
            &mut g,
            &format!("gelu_{kind:?}_fwd_1024x3072"),
            Unit::Bytes(8 * h as u64),
            || {
                kernels::gelu_forward(&mut y, &x, kind);
                black_box(&y);
            },
        );
        bench(
            &mut g,
            &format!("gelu_{kind:?}_bwd_1024x3072"),
            // In place, so each run starts from a fresh copy of dy.
            Unit::Bytes(20 * h as u64),
            || {
                dx.copy_from_slice(&dy);
                kernels::gelu_backward(&mut dx, &x, kind);
                black_box(&dx);
            },
        );
    }

    // Embeddings: token (GPT-2 vocabulary) + position.
    let vocab = 50257;
    let wte = data(vocab * cc, 15, 0.02);
    let wpe = data(1024 * cc, 16, 0.02);
    let tok: Vec<u32> = (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761) % vocab as u32)
        .collect();
    let pos: Vec<u32> = (0..n as u32).collect();
    let mut dwte = vec![0.0; vocab * cc];
    bench(
        &mut g,
        "embeddings_fwd_1024x768",
        Unit::Bytes(12 * nc),
        || {
            kernels::embeddings_forward(&mut out, &[(&tok, &wte), (&pos, &wpe)], cc);
            black_box(&out);
        },
    );
    bench(
        &mut g,
        "embedding_bwd_1024x768",
        Unit::Bytes(12 * nc),
        || {
            kernels::embedding_backward(&mut dwte, &dout, &tok, cc);
            black_box(&dwte);
        },
    );
    g.finish();
}

fn vocab(c: &mut Criterion) {
    let mut g = c.benchmark_group(GROUP);
    let (n, v) = (1024usize, 50257usize);
    let nv = (n * v) as u64;
    let logits = data(n * v, 17, 4.0);
    let targets: Vec<i32> = (0..n)
        .map(|i| {
            if i % 50 == 0 {
                -100
            } else {
                (i * 31 % v) as i32
            }
        })
        .collect();
    let mut losses = vec![0.0; n];
    let mut buf = logits.clone();
    bench(&mut g, "ce_fwd_1024x50257", Unit::Bytes(4 * nv), || {
        black_box(kernels::cross_entropy_forward(
            &mut losses,
            &logits,
            &targets,
            n,
            v,
            -100,
        ));
    });
    bench(&mut g, "ce_bwd_1024x50257", Unit::Bytes(12 * nv), || {
        kernels::cross_entropy_backward(&mut buf, &logits, &targets, n, v, -100, 1e-3);
        black_box(&buf);
    });
    bench(&mut g, "ce_fused_1024x50257", Unit::Bytes(8 * nv), || {
        // Re-running on its own output does the same work on valid logits.
        black_box(kernels::cross_entropy_fused(
            &mut buf,
            &mut losses,
            &targets,
            n,
            v,
            -100,
            1e-3,
        ));
    });
    bench(
        &mut g,
        "softmax_rows_1024x50257",
        Unit::Bytes(8 * nv),
        || {
            kernels::softmax_rows(&mut buf, &logits, n, v);
            black_box(&buf);
        },
    );
    g.finish();
}

/// The LM head + cross-entropy of a GPT-2 small training step's rows (a
/// quarter of 4 × 512, to keep one iteration near a second on 2 cores):
/// unfused (the whole `[N, V]` logits, `cross_entropy_fused`, then the two
/// products of `matmul_backward`, as training ran before) against the
/// fused kernel at several chunk sizes (`LM_HEAD_CHUNK_ROWS` is 512), and
/// the fused loss alone.
fn lm_head(c: &mut Criterion) {
    let mut g = c.benchmark_group(GROUP);
    let (n, cc, v) = (512usize, 768usize, 50257usize);
    let x = data(n * cc, 18, 1.0);
    let w = data(v * cc, 19, 0.1);
    let targets: Vec<i32> = (0..n).map(|i| (i * 31 % v) as i32).collect();
    let (mut dx, mut dw, mut losses) = (vec![0.0; n * cc], vec![0.0; v * cc], vec![0.0; n]);
    // Three products of 2·N·C·V flops each (logits, dx, dW).
    let train = Unit::Flops(6 * (n * cc * v) as u64);
    let mut logits = vec![0.0; n * v];
    bench(&mut g, "lm_head_unfused_train_512x768x50257", train, || {
        kernels::matmul_forward(&mut logits, &x, &w, None, n, cc, v, WeightLayout::OutIn);
        kernels::cross_entropy_fused(&mut logits, &mut losses, &targets, n, v, -100, 1e-3);
        kernels::matmul_backward(
            Some((&mut dx, GradWrite::Add)),
            Some(&mut dw),
            None,
            &logits,
            &x,
            &w,
            n,
            cc,
            v,
            WeightLayout::OutIn,
        );
        black_box(&dw);
    });
    drop(logits);
    // 512 rows is one chunk: the fused kernel's own overhead.
    for rows in [64, 128, 256, 512] {
        let mut scratch = vec![0.0; rows * v];
        bench(
            &mut g,
            &format!("lm_head_fused_train_512x768x50257_r{rows}"),
            train,
            || {
                black_box(kernels::lm_head_loss_backward(
                    &mut scratch,
                    &mut losses,
                    &mut dx,
                    &mut dw,
                    &x,
                    &w,
                    &targets,
                    n,
                    cc,
                    v,
                    -100,
                    1e-3,
                ));
            },
        );
    }
    let mut scratch = vec![0.0; kernels::lm_head_scratch_len(n, v)];
    // Mixed-precision training's LM head: its three products in bf16 on
    // operands of tens of MB (the weight packed once, as once per step).
    let packed = kernels::Bf16Weight::pack(&w, cc, v, WeightLayout::OutIn);
    bench(
        &mut g,
        &format!(
            "lm_head_fused_train_bf16_512x768x50257_{:?}",
            packed.kernel()
        ),
        train,
        || {
            black_box(kernels::lm_head_loss_backward_packed(
                &mut scratch,
                &mut losses,
                &mut dx,
                &mut dw,
                &x,
                (&w, Some(&packed)),
                &targets,
                [n, cc, v],
                -100,
                1e-3,
            ));
        },
    );
    drop(packed);
    bench(
        &mut g,
        "lm_head_fused_loss_512x768x50257",
        Unit::Flops(2 * (n * cc * v) as u64),
        || {
            black_box(kernels::lm_head_loss(
                &mut scratch,
                &mut losses,
                &x,
                &w,
                &targets,
                n,
                cc,
                v,
                -100,
            ));
        },
    );
    g.finish();
}

fn attention(c: &mut Criterion) {
    let mut g = c.benchmark_group(GROUP);
    let shape = AttentionShape {
        b: 4,
        t: 256,
        c: 384,
        nh: 6,
    };
    let (b, t, cc, nh) = (shape.b, shape.t, shape.c, shape.nh);
    let qkv = data(b * t * 3 * cc, 18, 1.0);
    let dout = data(b * t * cc, 19, 1.0);
    let (mut out, mut att) = (vec![0.0; b * t * cc], vec![0.0; b * nh * t * t]);
    let (mut dqkv, mut datt) = (vec![0.0; b * t * 3 * cc], vec![0.0; b * nh * t * t]);
    // q·kᵀ and p·v, 2 FLOPs per multiply-add; causal does half the pairs.
    let full = 2 * 2 * (b * nh * t * t * (cc / nh)) as u64;
    // The f32 products, and the bf16 ones of mixed precision (f32 where the
    // CPU lacks AVX-512 BF16).
    for (causal, products) in [false, true]
        .into_iter()
        .flat_map(|c| [(c, F32), (c, AttentionProducts::Bf16)])
    {
        let flops = if causal { full / 2 } else { full };
        let tag = match (causal, products) {
            (false, F32) => "full",
            (true, F32) => "causal",
            (false, _) => "full_bf16",
            (true, _) => "causal_bf16",
        };
        bench(
            &mut g,
            &format!("attention_fwd_{tag}_4x256x384x6"),
            Unit::Flops(flops),
            || {
                kernels::attention_forward(&mut out, &mut att, &qkv, shape, causal, None, products);
                black_box(&out);
            },
        );
        // Backward: four products of the same size.
        bench(
            &mut g,
            &format!("attention_bwd_{tag}_4x256x384x6"),
            Unit::Flops(2 * flops),
            || {
                kernels::attention_backward(
                    &mut dqkv, &mut datt, &dout, &qkv, &att, shape, products,
                );
                black_box(&dqkv);
            },
        );
    }
    // Packed sequences without padding (BERT's unpadded forward): 32
    // sequences of 8..=100 tokens, bidirectional.
    let lens: Vec<usize> = (0..32).map(|i| 8 + (i * 37) % 93).collect();
    let rows: usize = lens.iter().sum();
    let att_len: usize = lens.iter().map(|&l| nh * l * l).sum();
    let qkv = data(rows * 3 * cc, 22, 1.0);
    let dout = data(rows * cc, 23, 1.0);
    let (mut out, mut att) = (vec![0.0; rows * cc], vec![0.0; att_len]);
    let (mut dqkv, mut datt) = (vec![0.0; rows * 3 * cc], vec![0.0; att_len]);
    let flops = 2 * 2 * (att_len * (cc / nh)) as u64;
    bench(
        &mut g,
        "attention_fwd_varlen_32x8..100x384x6",
        Unit::Flops(flops),
        || {
            kernels::attention_forward_varlen(&mut out, &mut att, &qkv, &lens, cc, nh, false, F32);
            black_box(&out);
        },
    );
    bench(
        &mut g,
        "attention_bwd_varlen_32x8..100x384x6",
        Unit::Flops(2 * flops),
        || {
            kernels::attention_backward_varlen(
                &mut dqkv, &mut datt, &dout, &qkv, &att, &lens, cc, nh, F32,
            );
            black_box(&dqkv);
        },
    );
    // Causal (GPT-2's unpadded task batches): about half the products.
    bench(
        &mut g,
        "attention_fwd_varlen_causal_32x8..100x384x6",
        Unit::Flops(flops / 2),
        || {
            kernels::attention_forward_varlen(&mut out, &mut att, &qkv, &lens, cc, nh, true, F32);
            black_box(&out);
        },
    );
    bench(
        &mut g,
        "attention_bwd_varlen_causal_32x8..100x384x6",
        Unit::Flops(flops),
        || {
            kernels::attention_backward_varlen(
                &mut dqkv, &mut datt, &dout, &qkv, &att, &lens, cc, nh, F32,
            );
            black_box(&dqkv);
        },
    );
    g.finish();
}

fn optimizer(c: &mut Criterion) {
    let mut g = c.benchmark_group(GROUP);
    let len = 16 << 20;
    let grads = data(len, 20, 0.01);
    let mut p = data(len, 21, 0.02);
    let (mut m, mut v) = (vec![0.0; len], vec![0.0; len]);
    let cfg = AdamW {
        lr: 6e-4,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.1,
    };
    let decay = [(0..len / 2, true), (len / 2..len, false)];
    let mut step = 0;
    bench(&mut g, "adamw_16M", Unit::Bytes(28 * len as u64), || {
        step += 1;
        kernels::adamw_update(&mut p, &grads, &mut m, &mut v, step, &cfg, &decay);
        black_box(&p);
    });
    bench(
        &mut g,
        "global_norm_16M",
        Unit::Bytes(4 * len as u64),
        || {
            black_box(kernels::global_norm(&grads));
        },
    );
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .nresamples(10_000)
        .without_plots()
        .output_directory(&output_dir())
}

/// `target/criterion`, found from this executable (`target/<profile>/deps/…`).
fn output_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            let exe = std::env::current_exe().ok()?;
            Some(exe.parent()?.parent()?.parent()?.to_path_buf())
        })
        .unwrap_or_else(|| PathBuf::from("target"))
        .join("criterion")
}

criterion_group! {
    name = benches;
    config = config();
    targets = peaks, matmuls, rowwise, vocab, lm_head, attention, optimizer
}

/// Median time of one benchmark from criterion's saved estimates, if they
/// were written by this run (a filtered-out benchmark keeps stale ones).
fn median_ns(name: &str, since: SystemTime) -> Option<f64> {
    let path = output_dir()
        .join(GROUP)
        .join(name)
        .join("new")
        .join("estimates.json");
    if std::fs::metadata(&path).ok()?.modified().ok()? < since {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json["median"]["point_estimate"].as_f64()
}

fn summary(since: SystemTime) {
    let registry = REGISTRY.lock().expect("registry lock").clone();
    let rate = |name: &str, unit: Unit| {
        let ns = median_ns(name, since)?;
        Some(match unit {
            Unit::Flops(f) | Unit::Bytes(f) => f as f64 / ns,
        })
    };
    let (peak_flops, dram, l3) = (
        rate("peak_gemm_1536", Unit::Flops(2 * 1536u64.pow(3))),
        rate("peak_stream_dram", Unit::Bytes(12 * (16 << 20))),
        rate("peak_stream_l3", Unit::Bytes(12 * (768 << 10))),
    );
    let pct =
        |x: f64, p: Option<f64>| p.map_or("-".to_string(), |p| format!("{:.0}%", 100.0 * x / p));
    println!("\nthreads: {}", rayon::current_num_threads());
    println!(
        "{:<38} {:>12} {:>10} {:>9} {:>9}",
        "kernel (median)", "rate", "% gemm", "% DRAM", "% L3"
    );
    for (name, unit) in registry {
        let Some(r) = rate(&name, unit) else { continue };
        match unit {
            Unit::Flops(_) => {
                println!(
                    "{name:<38} {:>8.1} GF/s {:>10} {:>9} {:>9}",
                    r,
                    pct(r, peak_flops),
                    "",
                    ""
                )
            }
            Unit::Bytes(_) => {
                println!(
                    "{name:<38} {:>8.1} GB/s {:>10} {:>9} {:>9}",
                    r,
                    "",
                    pct(r, dram),
                    pct(r, l3)
                )
            }
        }
    }
}

fn main() {
    let start = SystemTime::now();
    benches();
    config().configure_from_args().final_summary();
    summary(start);
}
