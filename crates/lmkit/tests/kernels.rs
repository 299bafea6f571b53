//! Fast kernels vs their plain reference twins on random shapes (odd sizes
//! included), finite-difference checks of every backward, AdamW against
//! PyTorch, and determinism.
//!
//! Shape legend: B batch, T sequence, C channels, NH heads, V vocabulary,
//! OC output channels, N = B·T rows.

use lmkit::kernels::AttentionProducts::{self, F32};
use lmkit::kernels::{self, reference, AdamW, AttentionShape, Gelu, GradWrite, WeightLayout};

/// splitmix64: small, seeded, good enough for test data.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.unit() * scale).collect()
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

#[track_caller]
fn assert_close(what: &str, got: &[f32], want: &[f32], atol: f32, rtol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= atol + rtol * w.abs();
        assert!(
            ok,
            "{what}[{i}]: got {g}, want {w} (|diff| {})",
            (g - w).abs()
        );
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// An input gradient written with [`GradWrite::Set`] over garbage is the
/// same bits as one accumulated onto zeros (`run` writes `len` values).
fn set_equals_add(len: usize, what: &str, mut run: impl FnMut(&mut [f32], GradWrite)) {
    let (mut set, mut add) = (vec![f32::NAN; len], vec![0.0; len]);
    run(&mut set, GradWrite::Set);
    run(&mut add, GradWrite::Add);
    assert_eq!(
        bits(&set),
        bits(&add),
        "{what}: Set differs from Add onto zeros"
    );
}

/// Checks `grad` = ∂f/∂x by central differences on up to 24 coordinates.
#[track_caller]
fn fd_check(what: &str, x: &[f32], grad: &[f32], f: impl Fn(&[f32]) -> f64, rng: &mut Rng) {
    assert_eq!(x.len(), grad.len(), "{what}: grad length");
    let mut x = x.to_vec();
    let coords: Vec<usize> = if x.len() <= 24 {
        (0..x.len()).collect()
    } else {
        (0..24).map(|_| rng.below(x.len())).collect()
    };
    for i in coords {
        let x0 = x[i];
        let h = 1e-2f32;
        x[i] = x0 + h;
        let (fp, hp) = (f(&x), x[i] - x0);
        x[i] = x0 - h;
        let (fm, hm) = (f(&x), x0 - x[i]);
        x[i] = x0;
        let num = (fp - fm) / (hp + hm) as f64;
        let ana = grad[i] as f64;
        let ok = (num - ana).abs() <= 3e-3 + 2e-2 * ana.abs().max(num.abs());
        assert!(
            ok,
            "{what}: d/dx[{i}] finite difference {num} vs backward {ana}"
        );
    }
}

/// Σ out·r in f64: a scalar loss whose gradient w.r.t. `out` is `r`.
fn dot64(out: &[f32], r: &[f32]) -> f64 {
    out.iter().zip(r).map(|(a, b)| *a as f64 * *b as f64).sum()
}

const LAYOUTS: [WeightLayout; 2] = [WeightLayout::InOut, WeightLayout::OutIn];

#[test]
fn matmul_matches_reference() {
    let mut rng = Rng(1);
    for &(n, c, oc) in &[
        (7, 13, 33),
        (1, 1, 1),
        (3, 64, 5),
        (33, 257, 65),
        (256, 128, 96),
    ] {
        for layout in LAYOUTS {
            for with_bias in [false, true] {
                let inp = rng.vec(n * c, 1.0);
                let w = rng.vec(c * oc, 0.5);
                let bias = rng.vec(oc, 1.0);
                let b = with_bias.then_some(&bias[..]);
                let mut got = vec![f32::NAN; n * oc];
                let mut want = vec![0.0; n * oc];
                kernels::matmul_forward(&mut got, &inp, &w, b, n, c, oc, layout);
                reference::matmul_forward(&mut want, &inp, &w, b, n, c, oc, layout);
                let tag = format!("matmul fwd {n}x{c}x{oc} {layout:?} bias={with_bias}");
                assert_close(&tag, &got, &want, 1e-5, 1e-5);

                // Backward accumulates onto existing gradients.
                let dout = rng.vec(n * oc, 1.0);
                let (dx0, dw0, db0) = (rng.vec(n * c, 1.0), rng.vec(c * oc, 1.0), rng.vec(oc, 1.0));
                let (mut dx, mut dw, mut db) = (dx0.clone(), dw0.clone(), db0.clone());
                let (mut rdx, mut rdw, mut rdb) = (dx0, dw0, db0);
                kernels::matmul_backward(
                    Some((&mut dx, GradWrite::Add)),
                    Some(&mut dw),
                    Some(&mut db),
                    &dout,
                    &inp,
                    &w,
                    n,
                    c,
                    oc,
                    layout,
                );
                reference::matmul_backward(
                    Some(&mut rdx),
                    Some(&mut rdw),
                    Some(&mut rdb),
                    &dout,
                    &inp,
                    &w,
                    n,
                    c,
                    oc,
                    layout,
                );
                assert_close(&format!("{tag} dinp"), &dx, &rdx, 1e-5, 1e-5);
                assert_close(&format!("{tag} dweight"), &dw, &rdw, 1e-4, 1e-5);
                assert_close(&format!("{tag} dbias"), &db, &rdb, 1e-4, 1e-5);

                set_equals_add(n * c, &format!("{tag} dinp"), |d, write| {
                    kernels::matmul_backward(
                        Some((d, write)),
                        None,
                        None,
                        &dout,
                        &inp,
                        &w,
                        n,
                        c,
                        oc,
                        layout,
                    )
                });
            }
        }
    }
}

#[test]
fn matmul_backward_finite_differences() {
    let mut rng = Rng(2);
    let (n, c, oc) = (5, 7, 9);
    for layout in LAYOUTS {
        let inp = rng.vec(n * c, 1.0);
        let w = rng.vec(c * oc, 1.0);
        let bias = rng.vec(oc, 1.0);
        let r = rng.vec(n * oc, 1.0);
        let loss = |inp: &[f32], w: &[f32], b: &[f32]| {
            let mut out = vec![0.0; n * oc];
            kernels::matmul_forward(&mut out, inp, w, Some(b), n, c, oc, layout);
            dot64(&out, &r)
        };
        let (mut dx, mut dw, mut db) = (vec![0.0; n * c], vec![0.0; c * oc], vec![0.0; oc]);
        kernels::matmul_backward(
            Some((&mut dx, GradWrite::Add)),
            Some(&mut dw),
            Some(&mut db),
            &r,
            &inp,
            &w,
            n,
            c,
            oc,
            layout,
        );
        fd_check("matmul dinp", &inp, &dx, |x| loss(x, &w, &bias), &mut rng);
        fd_check(
            "matmul dweight",
            &w,
            &dw,
            |x| loss(&inp, x, &bias),
            &mut rng,
        );
        fd_check("matmul dbias", &bias, &db, |x| loss(&inp, &w, x), &mut rng);
    }
}

#[test]
fn layernorm_matches_reference_and_finite_differences() {
    let mut rng = Rng(3);
    for &(n, c) in &[(7, 13), (1, 1), (5, 64), (70, 257), (64, 768)] {
        let inp: Vec<f32> = rng.vec(n * c, 2.0).iter().map(|x| x + 0.5).collect();
        let w = rng.vec(c, 1.0);
        let b = rng.vec(c, 1.0);
        let (mut out, mut mean, mut rstd) = (vec![0.0; n * c], vec![0.0; n], vec![0.0; n]);
        let (mut rout, mut rmean, mut rrstd) = (vec![0.0; n * c], vec![0.0; n], vec![0.0; n]);
        kernels::layernorm_forward(&mut out, &mut mean, &mut rstd, &inp, &w, &b, n, c, 1e-5);
        reference::layernorm_forward(&mut rout, &mut rmean, &mut rrstd, &inp, &w, &b, n, c, 1e-5);
        let tag = format!("layernorm {n}x{c}");
        assert_close(&format!("{tag} out"), &out, &rout, 2e-5, 1e-4);
        assert_close(&format!("{tag} mean"), &mean, &rmean, 1e-6, 1e-5);
        assert_close(&format!("{tag} rstd"), &rstd, &rrstd, 1e-6, 1e-4);
        // Recomputed from the saved statistics: the same floats.
        let mut again = vec![f32::NAN; n * c];
        kernels::layernorm_apply(&mut again, &inp, &mean, &rstd, &w, &b, n, c);
        assert!(
            again
                .iter()
                .zip(&out)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{tag}: layernorm_apply differs from forward"
        );

        let dout = rng.vec(n * c, 1.0);
        let (g0, gw0, gb0) = (rng.vec(n * c, 1.0), rng.vec(c, 1.0), rng.vec(c, 1.0));
        let (mut dx, mut dw, mut db) = (g0.clone(), gw0.clone(), gb0.clone());
        let (mut rdx, mut rdw, mut rdb) = (g0, gw0, gb0);
        kernels::layernorm_backward(
            &mut dx, &mut dw, &mut db, &dout, &inp, &w, &mean, &rstd, n, c,
        );
        reference::layernorm_backward(
            &mut rdx, &mut rdw, &mut rdb, &dout, &inp, &w, &mean, &rstd, n, c,
        );
        assert_close(&format!("{tag} dinp"), &dx, &rdx, 1e-4, 1e-4);
        assert_close(&format!("{tag} dweight"), &dw, &rdw, 1e-4, 1e-4);
        assert_close(&format!("{tag} dbias"), &db, &rdb, 1e-4, 1e-4);
    }
    let (n, c) = (4, 11);
    let inp = rng.vec(n * c, 1.0);
    let w = rng.vec(c, 1.0);
    let b = rng.vec(c, 1.0);
    let r = rng.vec(n * c, 1.0);
    let loss = |x: &[f32], w: &[f32], b: &[f32]| {
        let (mut out, mut m, mut s) = (vec![0.0; n * c], vec![0.0; n], vec![0.0; n]);
        kernels::layernorm_forward(&mut out, &mut m, &mut s, x, w, b, n, c, 1e-5);
        dot64(&out, &r)
    };
    let (mut out, mut mean, mut rstd) = (vec![0.0; n * c], vec![0.0; n], vec![0.0; n]);
    kernels::layernorm_forward(&mut out, &mut mean, &mut rstd, &inp, &w, &b, n, c, 1e-5);
    let (mut dx, mut dw, mut db) = (vec![0.0; n * c], vec![0.0; c], vec![0.0; c]);
    kernels::layernorm_backward(&mut dx, &mut dw, &mut db, &r, &inp, &w, &mean, &rstd, n, c);
    fd_check("layernorm dinp", &inp, &dx, |x| loss(x, &w, &b), &mut rng);
    fd_check(
        "layernorm dweight",
        &w,
        &dw,
        |x| loss(&inp, x, &b),
        &mut rng,
    );
    fd_check("layernorm dbias", &b, &db, |x| loss(&inp, &w, x), &mut rng);
}

#[test]
fn activations_match_reference_and_finite_differences() {
    let mut rng = Rng(4);
    for kind in [Gelu::Tanh, Gelu::Erf] {
        for &len in &[1usize, 13, 100_003] {
            let x = rng.vec(len, 6.0);
            let (mut got, mut want) = (vec![0.0; len], vec![0.0; len]);
            kernels::gelu_forward(&mut got, &x, kind);
            reference::gelu_forward(&mut want, &x, kind);
            assert_close(&format!("gelu {kind:?} fwd {len}"), &got, &want, 1e-6, 1e-6);
            // In place: the output gradient in, the input gradient out.
            let dout = rng.vec(len, 1.0);
            let (mut got, mut want) = (dout.clone(), dout);
            kernels::gelu_backward(&mut got, &x, kind);
            reference::gelu_backward(&mut want, &x, kind);
            assert_close(&format!("gelu {kind:?} bwd {len}"), &got, &want, 1e-6, 1e-5);
        }
        let x = rng.vec(40, 3.0);
        let r = rng.vec(40, 1.0);
        let mut d = r.clone();
        kernels::gelu_backward(&mut d, &x, kind);
        let loss = |x: &[f32]| {
            let mut out = vec![0.0; x.len()];
            kernels::gelu_forward(&mut out, x, kind);
            dot64(&out, &r)
        };
        fd_check(&format!("gelu {kind:?}"), &x, &d, loss, &mut rng);
    }
    // Known values: gelu_erf(1) = 0.8413447, gelu_tanh(1) = 0.8411920.
    let mut out = [0.0f32; 1];
    kernels::gelu_forward(&mut out, &[1.0], Gelu::Erf);
    assert!(
        (out[0] - 0.841_344_7).abs() < 1e-6,
        "gelu erf(1) = {}",
        out[0]
    );
    kernels::gelu_forward(&mut out, &[1.0], Gelu::Tanh);
    assert!(
        (out[0] - 0.841_192).abs() < 1e-6,
        "gelu tanh(1) = {}",
        out[0]
    );

    let x = rng.vec(37, 3.0);
    let (mut y, mut ry) = (vec![0.0; 37], vec![0.0; 37]);
    kernels::tanh_forward(&mut y, &x);
    reference::tanh_forward(&mut ry, &x);
    assert_close("tanh fwd", &y, &ry, 1e-7, 1e-6);
    let r = rng.vec(37, 1.0);
    let (mut d, mut rd) = (vec![0.5; 37], vec![0.5; 37]);
    kernels::tanh_backward(&mut d, &y, &r);
    reference::tanh_backward(&mut rd, &y, &r);
    assert_close("tanh bwd", &d, &rd, 1e-6, 1e-6);
    let mut d = vec![0.0; 37];
    kernels::tanh_backward(&mut d, &y, &r);
    let loss = |x: &[f32]| {
        let mut out = vec![0.0; x.len()];
        kernels::tanh_forward(&mut out, x);
        dot64(&out, &r)
    };
    fd_check("tanh", &x, &d, loss, &mut rng);
}

/// A key mask with padding at both ends of some sequences, and one row whose
/// keys are all padding.
fn key_mask(b: usize, t: usize, rng: &mut Rng) -> Vec<u8> {
    let mut m = vec![1u8; b * t];
    for bi in 0..b {
        match bi % 3 {
            0 => {}
            1 => (t / 2..t).for_each(|j| m[bi * t + j] = 0), // right padding
            _ => (0..=rng.below(t)).for_each(|j| m[bi * t + j] = 0), // left padding
        }
    }
    if b > 2 {
        m[2 * t..3 * t].fill(0);
    }
    m
}

#[test]
fn attention_matches_reference() {
    let mut rng = Rng(5);
    let shapes = [
        (1, 5, 9, 3),
        (2, 7, 12, 3),
        (3, 1, 4, 2),
        (3, 70, 24, 2),
        (2, 130, 32, 4),
    ];
    // bf16 products (operands rounded to 8 bits of mantissa, f32 sums)
    // within bf16 tolerance of the f32 reference; a lost 1/√HS or a wrong
    // operand would be off by far more.
    let products = [
        (AttentionProducts::F32, [1e-5, 1e-6, 1e-4, 1e-4]),
        (AttentionProducts::Bf16, [3e-2, 1e-2, 2e-2, 3e-2]),
    ];
    for &(b, t, c, nh) in &shapes {
        let shape = AttentionShape { b, t, c, nh };
        for causal in [false, true] {
            for (masked, (products, [out_tol, att_tol, rtol, dqkv_tol])) in [false, true]
                .into_iter()
                .flat_map(|m| products.map(|p| (m, p)))
            {
                let qkv = rng.vec(b * t * 3 * c, 2.0);
                let mask = key_mask(b, t, &mut rng);
                let km = masked.then_some(&mask[..]);
                let (mut out, mut att) =
                    (vec![f32::NAN; b * t * c], vec![f32::NAN; b * nh * t * t]);
                let (mut rout, mut ratt) = (vec![0.0; b * t * c], vec![0.0; b * nh * t * t]);
                kernels::attention_forward(&mut out, &mut att, &qkv, shape, causal, km, products);
                reference::attention_forward(&mut rout, &mut ratt, &qkv, shape, causal, km);
                let tag =
                    format!("attention {shape:?} causal={causal} masked={masked} {products:?}");
                assert_close(&format!("{tag} out"), &out, &rout, out_tol, rtol);
                assert_close(&format!("{tag} att"), &att, &ratt, att_tol, rtol);

                let dout = rng.vec(b * t * c, 1.0);
                let d0 = rng.vec(b * t * 3 * c, 1.0);
                let (mut dqkv, mut rdqkv) = (d0.clone(), d0);
                let (mut datt, mut rdatt) = (vec![0.0; b * nh * t * t], vec![0.0; b * nh * t * t]);
                let (dq, da) = (&mut dqkv, &mut datt);
                kernels::attention_backward(dq, da, &dout, &qkv, &att, shape, products);
                reference::attention_backward(&mut rdqkv, &mut rdatt, &dout, &qkv, &att, shape);
                assert_close(&format!("{tag} dqkv"), &dqkv, &rdqkv, dqkv_tol, rtol);
            }
        }
    }
}

/// Packed sequences without padding: each sequence's rows against the
/// reference on that sequence alone (bidirectional or causal, no mask), and
/// against the padded kernel under a right-padding key mask on the real
/// rows: what BERT's and GPT-2's unpadded forward and backward rely on.
#[test]
fn attention_varlen_matches_reference_per_sequence() {
    let mut rng = Rng(8);
    let (c, nh) = (24, 3);
    let cases = [
        vec![5, 0, 17, 1, 70],
        vec![1],
        vec![33, 33],
        vec![],
        vec![2, 130, 64],
    ];
    for (lens, causal) in cases
        .into_iter()
        .flat_map(|l| [(l.clone(), false), (l, true)])
    {
        let rows: usize = lens.iter().sum();
        let att_len: usize = lens.iter().map(|&t| nh * t * t).sum();
        let qkv = rng.vec(rows * 3 * c, 2.0);
        let dout = rng.vec(rows * c, 1.0);
        let d0 = rng.vec(rows * 3 * c, 1.0);
        let (mut out, mut att) = (vec![f32::NAN; rows * c], vec![f32::NAN; att_len]);
        kernels::attention_forward_varlen(&mut out, &mut att, &qkv, &lens, c, nh, causal, F32);
        let mut dqkv = d0.clone();
        let mut datt = vec![f32::NAN; att_len];
        kernels::attention_backward_varlen(
            &mut dqkv, &mut datt, &dout, &qkv, &att, &lens, c, nh, F32,
        );
        let (mut row, mut off) = (0, 0);
        for &t in &lens {
            let shape = AttentionShape { b: 1, t, c, nh };
            let sq = &qkv[row * 3 * c..(row + t) * 3 * c];
            let (mut rout, mut ratt) = (vec![0.0; t * c], vec![0.0; nh * t * t]);
            reference::attention_forward(&mut rout, &mut ratt, sq, shape, causal, None);
            let tag = format!("varlen {lens:?} causal={causal} sequence at row {row} (T = {t})");
            assert_close(
                &format!("{tag} out"),
                &out[row * c..(row + t) * c],
                &rout,
                1e-5,
                1e-4,
            );
            let a = &att[off..off + nh * t * t];
            assert_close(&format!("{tag} att"), a, &ratt, 1e-6, 1e-4);
            let mut rdqkv = d0[row * 3 * c..(row + t) * 3 * c].to_vec();
            let mut rdatt = vec![0.0; nh * t * t];
            let sd = &dout[row * c..(row + t) * c];
            reference::attention_backward(&mut rdqkv, &mut rdatt, sd, sq, a, shape);
            let got = &dqkv[row * 3 * c..(row + t) * 3 * c];
            assert_close(&format!("{tag} dqkv"), got, &rdqkv, 1e-4, 1e-4);

            // The same sequence right-padded to T + 3 under a key mask.
            let tp = t + 3;
            let shape = AttentionShape { b: 1, t: tp, c, nh };
            let mut pq = rng.vec(tp * 3 * c, 2.0);
            pq[..t * 3 * c].copy_from_slice(sq);
            let mask: Vec<u8> = (0..tp).map(|j| u8::from(j < t)).collect();
            let (mut pout, mut patt) = (vec![0.0; tp * c], vec![0.0; nh * tp * tp]);
            kernels::attention_forward(&mut pout, &mut patt, &pq, shape, causal, Some(&mask), F32);
            assert_close(
                &format!("{tag} out vs padded"),
                &out[row * c..(row + t) * c],
                &pout[..t * c],
                1e-5,
                1e-4,
            );
            row += t;
            off += nh * t * t;
        }
    }
}

#[test]
fn attention_fully_masked_rows_are_zero() {
    let (b, t, c, nh) = (1, 4, 4, 2);
    let shape = AttentionShape { b, t, c, nh };
    let qkv = Rng(6).vec(b * t * 3 * c, 1.0);
    // Left padding of 2 under a causal mask: queries 0 and 1 see no real key.
    let mask = [0u8, 0, 1, 1];
    let (mut out, mut att) = (vec![f32::NAN; b * t * c], vec![f32::NAN; b * nh * t * t]);
    kernels::attention_forward(&mut out, &mut att, &qkv, shape, true, Some(&mask), F32);
    assert!(
        out[..2 * c].iter().all(|&x| x == 0.0),
        "outputs of fully masked queries"
    );
    for h in 0..nh {
        let p = &att[h * t * t..(h + 1) * t * t];
        assert!(
            p[..2 * t].iter().all(|&x| x == 0.0),
            "probabilities of fully masked queries"
        );
        for i in 2..t {
            let s: f32 = p[i * t..(i + 1) * t].iter().sum();
            assert!((s - 1.0).abs() < 1e-6, "row {i} sums to {s}");
            assert_eq!(p[i * t], 0.0);
            assert_eq!(p[i * t + 1], 0.0);
        }
    }
}

#[test]
fn attention_backward_finite_differences() {
    let mut rng = Rng(7);
    let (b, t, c, nh) = (2, 5, 6, 2);
    let shape = AttentionShape { b, t, c, nh };
    for causal in [false, true] {
        for masked in [false, true] {
            let qkv = rng.vec(b * t * 3 * c, 1.0);
            let mask: Vec<u8> = vec![1, 1, 1, 0, 0, 0, 1, 1, 1, 1];
            let km = masked.then_some(&mask[..]);
            let r = rng.vec(b * t * c, 1.0);
            let forward = |qkv: &[f32]| {
                let (mut out, mut att) = (vec![0.0; b * t * c], vec![0.0; b * nh * t * t]);
                kernels::attention_forward(&mut out, &mut att, qkv, shape, causal, km, F32);
                (out, att)
            };
            let (_, att) = forward(&qkv);
            let mut dqkv = vec![0.0; b * t * 3 * c];
            let mut datt = vec![0.0; b * nh * t * t];
            kernels::attention_backward(&mut dqkv, &mut datt, &r, &qkv, &att, shape, F32);
            let tag = format!("attention causal={causal} masked={masked}");
            fd_check(&tag, &qkv, &dqkv, |x| dot64(&forward(x).0, &r), &mut rng);
        }
    }
}

#[test]
fn softmax_and_cross_entropy_match_reference() {
    let mut rng = Rng(8);
    for &(n, v) in &[(7, 33), (1, 1), (5, 2), (33, 1000), (9, 50_257)] {
        // Large logits check the max-shift.
        let logits = rng.vec(n * v, 30.0);
        let targets: Vec<i32> = (0..n)
            .map(|i| {
                if i % 4 == 1 {
                    -100
                } else {
                    rng.below(v) as i32
                }
            })
            .collect();
        let tag = format!("ce {n}x{v}");
        let (mut p, mut rp) = (vec![0.0; n * v], vec![0.0; n * v]);
        kernels::softmax_rows(&mut p, &logits, n, v);
        reference::softmax_rows(&mut rp, &logits, n, v);
        assert_close(&format!("{tag} softmax"), &p, &rp, 1e-7, 1e-5);

        let (mut l, mut rl) = (vec![f32::NAN; n], vec![0.0; n]);
        let (s, k) = kernels::cross_entropy_forward(&mut l, &logits, &targets, n, v, -100);
        let (rs, rk) = reference::cross_entropy_forward(&mut rl, &logits, &targets, n, v, -100);
        assert_close(&format!("{tag} losses"), &l, &rl, 1e-5, 1e-5);
        assert_eq!(k, rk);
        assert!(
            (s - rs).abs() <= 1e-5 * (1.0 + rs.abs()),
            "{tag}: sum {s} vs {rs}"
        );

        let scale = 1.0 / k.max(1) as f32;
        let d0 = rng.vec(n * v, 1.0);
        let (mut d, mut rd) = (d0.clone(), d0);
        kernels::cross_entropy_backward(&mut d, &logits, &targets, n, v, -100, scale);
        reference::cross_entropy_backward(&mut rd, &logits, &targets, n, v, -100, scale);
        assert_close(&format!("{tag} dlogits"), &d, &rd, 1e-6, 1e-5);

        let mut fused = logits.clone();
        let mut fl = vec![f32::NAN; n];
        let (fs, fk) =
            kernels::cross_entropy_fused(&mut fused, &mut fl, &targets, n, v, -100, scale);
        let mut rfused = logits.clone();
        let mut rfl = vec![0.0; n];
        reference::cross_entropy_fused(&mut rfused, &mut rfl, &targets, n, v, -100, scale);
        assert_close(&format!("{tag} fused dlogits"), &fused, &rfused, 1e-7, 1e-5);
        assert_close(&format!("{tag} fused losses"), &fl, &l, 1e-5, 1e-5);
        assert_eq!(
            (fs.to_bits(), fk),
            (s.to_bits(), k),
            "{tag}: fused and plain loss sums"
        );
    }
}

#[test]
fn softmax_handles_masked_logits() {
    // −∞ logits (masked vocabulary) spanning whole internal chunks.
    let mut rng = Rng(14);
    let (n, v) = (3, 5000);
    let mut logits = rng.vec(n * v, 10.0);
    logits[..2100].fill(f32::NEG_INFINITY);
    logits[v + 3000..2 * v].fill(f32::NEG_INFINITY);
    let (mut p, mut rp) = (vec![f32::NAN; n * v], vec![0.0; n * v]);
    kernels::softmax_rows(&mut p, &logits, n, v);
    reference::softmax_rows(&mut rp, &logits, n, v);
    assert_close("masked softmax", &p, &rp, 1e-7, 1e-5);
    assert!(p[..2100].iter().all(|&x| x == 0.0));
    let targets = [2500, 10, -100];
    let mut fused = logits.clone();
    let (mut l, mut rl) = (vec![0.0; n], vec![0.0; n]);
    kernels::cross_entropy_fused(&mut fused, &mut l, &targets, n, v, -100, 0.5);
    reference::cross_entropy_forward(&mut rl, &logits, &targets, n, v, -100);
    assert_close("masked ce losses", &l, &rl, 1e-5, 1e-5);
    let mut rd = vec![0.0; n * v];
    reference::cross_entropy_backward(&mut rd, &logits, &targets, n, v, -100, 0.5);
    assert_close("masked ce dlogits", &fused, &rd, 1e-7, 1e-5);
}

#[test]
fn cross_entropy_backward_finite_differences() {
    let mut rng = Rng(9);
    let (n, v) = (4, 7);
    let logits = rng.vec(n * v, 2.0);
    let targets = vec![3, -1, 0, 6];
    let loss = |x: &[f32]| {
        let mut l = vec![0.0; n];
        kernels::cross_entropy_forward(&mut l, x, &targets, n, v, -1).0
    };
    let mut d = vec![0.0; n * v];
    kernels::cross_entropy_backward(&mut d, &logits, &targets, n, v, -1, 1.0);
    fd_check("cross entropy", &logits, &d, loss, &mut rng);
    assert!(
        d[v..2 * v].iter().all(|&x| x == 0.0),
        "ignored row has zero gradient"
    );
    let mut fused = logits.clone();
    let mut l = vec![0.0; n];
    kernels::cross_entropy_fused(&mut fused, &mut l, &targets, n, v, -1, 1.0);
    fd_check("cross entropy fused", &logits, &fused, loss, &mut rng);
}

/// Targets for the LM head tests: every third row ignored (-100), the rest
/// random classes; a run of ignored rows makes later chunks non-contiguous.
fn lm_targets(n: usize, v: usize, rng: &mut Rng) -> Vec<i32> {
    (0..n)
        .map(|i| {
            if i % 3 == 1 || (5..9).contains(&i) {
                -100
            } else {
                rng.below(v) as i32
            }
        })
        .collect()
}

/// The unfused path the model used before: materialised logits,
/// `cross_entropy_fused`, then `matmul_backward` into dx and dW.
#[allow(clippy::too_many_arguments)]
fn lm_head_unfused(
    x: &[f32],
    w: &[f32],
    targets: &[i32],
    n: usize,
    c: usize,
    v: usize,
    scale: f32,
    dx: &mut [f32],
    dw: &mut [f32],
) -> (Vec<f32>, (f64, usize)) {
    let mut logits = vec![0.0; n * v];
    kernels::matmul_forward(&mut logits, x, w, None, n, c, v, WeightLayout::OutIn);
    let mut losses = vec![0.0; n];
    let r = kernels::cross_entropy_fused(&mut logits, &mut losses, targets, n, v, -100, scale);
    kernels::matmul_backward(
        Some((dx, GradWrite::Add)),
        Some(dw),
        None,
        &logits,
        x,
        w,
        n,
        c,
        v,
        WeightLayout::OutIn,
    );
    (losses, r)
}

#[test]
fn lm_head_fused_matches_unfused_and_reference() {
    let mut rng = Rng(21);
    // (N, C, V, rows per chunk): N not a multiple of the chunk, one chunk
    // larger than N, one row per chunk, a GPT-2-sized vocabulary.
    for &(n, c, v, rows) in &[
        (37, 16, 53, 8),
        (10, 8, 7, 64),
        (9, 5, 11, 1),
        (130, 24, 50_257, 128),
    ] {
        let tag = format!("lm_head n={n} c={c} v={v} rows={rows}");
        let x = rng.vec(n * c, 1.0);
        let w = rng.vec(v * c, 0.5);
        let targets = lm_targets(n, v, &mut rng);
        let count = targets.iter().filter(|&&t| t != -100).count();
        let scale = 0.7 / count as f32;
        let mut scratch = vec![f32::NAN; rows * v];

        // Forward only.
        let mut l = vec![f32::NAN; n];
        let (s, k) = kernels::lm_head_loss(&mut scratch, &mut l, &x, &w, &targets, n, c, v, -100);
        let mut logits = vec![0.0; n * v];
        kernels::matmul_forward(&mut logits, &x, &w, None, n, c, v, WeightLayout::OutIn);
        let mut ul = vec![0.0; n];
        let (us, uk) = kernels::cross_entropy_forward(&mut ul, &logits, &targets, n, v, -100);
        assert_eq!(k, uk, "{tag}: count");
        assert_eq!(k, count);
        assert_close(&format!("{tag} losses"), &l, &ul, 1e-5, 1e-5);
        assert!(
            (s - us).abs() <= 1e-5 * (1.0 + us.abs()),
            "{tag}: {s} vs {us}"
        );
        assert!(
            targets.iter().zip(&l).all(|(&t, &x)| t != -100 || x == 0.0),
            "{tag}: ignored rows have loss 0"
        );

        // Training: accumulates onto what dx and dW already hold.
        let dx0 = rng.vec(n * c, 0.1);
        let dw0 = rng.vec(v * c, 0.1);
        let (mut dx, mut dw) = (dx0.clone(), dw0.clone());
        let mut fl = vec![f32::NAN; n];
        let (fs, fk) = kernels::lm_head_loss_backward(
            &mut scratch,
            &mut fl,
            &mut dx,
            &mut dw,
            &x,
            &w,
            &targets,
            n,
            c,
            v,
            -100,
            scale,
        );
        let (mut udx, mut udw) = (dx0.clone(), dw0.clone());
        let (ufl, (ufs, ufk)) =
            lm_head_unfused(&x, &w, &targets, n, c, v, scale, &mut udx, &mut udw);
        assert_eq!(fk, ufk, "{tag}: training count");
        assert_close(&format!("{tag} training losses"), &fl, &ufl, 1e-5, 1e-5);
        // The two variants' log-sum-exps combine their partial sums in
        // another order (as cross_entropy_forward and _fused do): ≤ 1 ulp.
        assert_close(&format!("{tag} both variants"), &fl, &l, 0.0, 2e-7);
        assert!(
            (fs - ufs).abs() <= 1e-5 * (1.0 + ufs.abs()),
            "{tag}: {fs} vs {ufs}"
        );
        assert_close(&format!("{tag} dx"), &dx, &udx, 1e-6, 1e-4);
        assert_close(&format!("{tag} dW"), &dw, &udw, 1e-6, 1e-4);
        for (i, &t) in targets.iter().enumerate() {
            if t == -100 {
                assert_eq!(
                    bits(&dx[i * c..(i + 1) * c]),
                    bits(&dx0[i * c..(i + 1) * c]),
                    "{tag}: ignored row {i} gets no gradient"
                );
            }
        }

        // The f64 reference twin, on the small shapes.
        if v < 1000 {
            let (mut rdx, mut rdw, mut rl) = (dx0.clone(), dw0.clone(), vec![0.0; n]);
            let (rs, rk) = reference::lm_head_loss_backward(
                &mut [],
                &mut rl,
                &mut rdx,
                &mut rdw,
                &x,
                &w,
                &targets,
                n,
                c,
                v,
                -100,
                scale,
            );
            assert_eq!(fk, rk);
            assert_close(&format!("{tag} ref losses"), &fl, &rl, 1e-5, 1e-5);
            assert!(
                (fs - rs).abs() <= 1e-5 * (1.0 + rs.abs()),
                "{tag}: {fs} vs ref {rs}"
            );
            assert_close(&format!("{tag} ref dx"), &dx, &rdx, 1e-6, 1e-4);
            assert_close(&format!("{tag} ref dW"), &dw, &rdw, 1e-6, 1e-4);
            let mut rl2 = vec![0.0; n];
            reference::lm_head_loss(&mut [], &mut rl2, &x, &w, &targets, n, c, v, -100);
            assert_close(&format!("{tag} ref fwd losses"), &l, &rl2, 1e-5, 1e-5);
        }
    }
}

/// Mixed precision: the fused head on a packed bf16 weight equals the
/// unfused bf16 products (logits, then dx and dW) on the same rounded
/// operands, chunk by chunk.
#[test]
fn lm_head_fused_bf16_matches_unfused_bf16() {
    let mut rng = Rng(23);
    for &(n, c, v, rows) in &[(37, 16, 53, 8), (130, 24, 1000, 64)] {
        let tag = format!("lm_head bf16 n={n} c={c} v={v} rows={rows}");
        let x = rng.vec(n * c, 1.0);
        let w = rng.vec(v * c, 0.5);
        let pw = kernels::Bf16Weight::pack(&w, c, v, WeightLayout::OutIn);
        let targets = lm_targets(n, v, &mut rng);
        let count = targets.iter().filter(|&&t| t != -100).count();
        let scale = 0.7 / count as f32;
        let mut scratch = vec![f32::NAN; rows * v];
        let (mut dx, mut dw) = (vec![0.0; n * c], vec![0.0; v * c]);
        let mut fl = vec![f32::NAN; n];
        let (fs, fk) = kernels::lm_head_loss_backward_packed(
            &mut scratch,
            &mut fl,
            &mut dx,
            &mut dw,
            &x,
            (&w, Some(&pw)),
            &targets,
            [n, c, v],
            -100,
            scale,
        );
        let mut logits = vec![0.0; n * v];
        kernels::matmul_forward_bf16(&mut logits, &x, &pw, None, n);
        let mut ul = vec![0.0; n];
        let (us, uk) =
            kernels::cross_entropy_fused(&mut logits, &mut ul, &targets, n, v, -100, scale);
        let (mut udx, mut udw) = (vec![0.0; n * c], vec![0.0; v * c]);
        kernels::matmul_backward_bf16(
            Some((&mut udx, GradWrite::Add)),
            Some(&mut udw),
            None,
            &logits,
            &x,
            &pw,
            n,
        );
        assert_eq!(fk, uk, "{tag}: count");
        assert!(
            (fs - us).abs() <= 1e-5 * (1.0 + us.abs()),
            "{tag}: {fs} vs {us}"
        );
        assert_close(&format!("{tag} losses"), &fl, &ul, 1e-5, 1e-5);
        assert_close(&format!("{tag} dx"), &dx, &udx, 1e-6, 1e-4);
        assert_close(&format!("{tag} dW"), &dw, &udw, 1e-6, 1e-4);
        // And the f32 head within bf16's tolerance.
        let (mut fdx, mut fdw) = (vec![0.0; n * c], vec![0.0; v * c]);
        let mut l32 = vec![0.0; n];
        let (s32, _) = kernels::lm_head_loss_backward(
            &mut scratch,
            &mut l32,
            &mut fdx,
            &mut fdw,
            &x,
            &w,
            &targets,
            n,
            c,
            v,
            -100,
            scale,
        );
        assert!(
            (fs - s32).abs() <= 2e-2 * (1.0 + s32.abs()),
            "{tag}: bf16 {fs} vs f32 {s32}"
        );
    }
}

#[test]
fn lm_head_with_every_row_ignored_is_zero() {
    let (n, c, v) = (4, 3, 5);
    let mut rng = Rng(22);
    let (x, w) = (rng.vec(n * c, 1.0), rng.vec(v * c, 1.0));
    let targets = [-100; 4];
    let (mut dx, mut dw, mut l) = (vec![0.0; n * c], vec![0.0; v * c], vec![f32::NAN; n]);
    let r = kernels::lm_head_loss_backward(
        &mut [],
        &mut l,
        &mut dx,
        &mut dw,
        &x,
        &w,
        &targets,
        n,
        c,
        v,
        -100,
        1.0,
    );
    assert_eq!(r, (0.0, 0));
    assert!(l.iter().chain(&dx).chain(&dw).all(|&x| x == 0.0));
}

#[test]
fn lm_head_finite_differences() {
    let mut rng = Rng(23);
    let (n, c, v) = (7, 4, 9);
    let x = rng.vec(n * c, 1.0);
    let w = rng.vec(v * c, 1.0);
    let targets = lm_targets(n, v, &mut rng);
    // Mean loss over the scored rows; chunks of 2 rows.
    let count = targets.iter().filter(|&&t| t != -100).count();
    let mean = |x: &[f32], w: &[f32]| {
        let mut l = vec![0.0; n];
        let mut scratch = vec![0.0; 2 * v];
        kernels::lm_head_loss(&mut scratch, &mut l, x, w, &targets, n, c, v, -100).0 / count as f64
    };
    let (mut dx, mut dw, mut l) = (vec![0.0; n * c], vec![0.0; v * c], vec![0.0; n]);
    let mut scratch = vec![0.0; 2 * v];
    kernels::lm_head_loss_backward(
        &mut scratch,
        &mut l,
        &mut dx,
        &mut dw,
        &x,
        &w,
        &targets,
        n,
        c,
        v,
        -100,
        1.0 / count as f32,
    );
    fd_check("lm_head dx", &x, &dx, |xp| mean(xp, &w), &mut rng);
    fd_check("lm_head dW", &w, &dw, |wp| mean(&x, wp), &mut rng);
}

#[test]
fn embeddings_match_reference_and_finite_differences() {
    let mut rng = Rng(10);
    let (n, c) = (37, 13);
    let (vocab, npos, ntype) = (50, 40, 2);
    let wte = rng.vec(vocab * c, 1.0);
    let wpe = rng.vec(npos * c, 1.0);
    let tte = rng.vec(ntype * c, 1.0);
    let tok: Vec<u32> = (0..n).map(|_| rng.below(vocab) as u32).collect();
    let pos: Vec<u32> = (0..n as u32).collect();
    let typ: Vec<u32> = (0..n).map(|i| (i > n / 2) as u32).collect();
    let lookups = [
        (&tok[..], &wte[..]),
        (&pos[..], &wpe[..]),
        (&typ[..], &tte[..]),
    ];
    let (mut out, mut rout) = (vec![f32::NAN; n * c], vec![0.0; n * c]);
    kernels::embeddings_forward(&mut out, &lookups, c);
    reference::embeddings_forward(&mut rout, &lookups, c);
    assert_close("embeddings fwd", &out, &rout, 1e-6, 1e-6);

    // Repeated ids exercise the scatter-add.
    let tok2: Vec<u32> = (0..n).map(|i| (i % 5) as u32).collect();
    for (ids, rows) in [(&tok2, vocab), (&tok, vocab), (&pos, npos)] {
        let dout = rng.vec(n * c, 1.0);
        let d0 = rng.vec(rows * c, 1.0);
        let (mut d, mut rd) = (d0.clone(), d0);
        kernels::embedding_backward(&mut d, &dout, ids, c);
        reference::embedding_backward(&mut rd, &dout, ids, c);
        assert_close("embedding bwd", &d, &rd, 1e-6, 1e-6);
    }
    let r = rng.vec(n * c, 1.0);
    let mut d = vec![0.0; vocab * c];
    kernels::embedding_backward(&mut d, &r, &tok2, c);
    let loss = |t: &[f32]| {
        let mut out = vec![0.0; n * c];
        kernels::embeddings_forward(&mut out, &[(&tok2[..], t), (&pos[..], &wpe[..])], c);
        dot64(&out, &r)
    };
    fd_check("embedding wte", &wte, &d, loss, &mut rng);
    // Large enough to run the parallel path.
    let (n, c, rows) = (1024, 96, 300);
    let ids: Vec<u32> = (0..n).map(|_| rng.below(rows) as u32).collect();
    let dout = rng.vec(n * c, 1.0);
    let (mut d, mut rd) = (vec![0.0; rows * c], vec![0.0; rows * c]);
    kernels::embedding_backward(&mut d, &dout, &ids, c);
    reference::embedding_backward(&mut rd, &dout, &ids, c);
    assert_eq!(bits(&d), bits(&rd), "embedding backward adds rows in order");
}

#[test]
fn elementwise_match_reference() {
    let mut rng = Rng(11);
    for &len in &[0usize, 1, 17, 70_001] {
        let a = rng.vec(len, 1.0);
        let b = rng.vec(len, 1.0);
        let (mut o, mut ro) = (vec![0.0; len], vec![0.0; len]);
        kernels::residual_forward(&mut o, &a, &b);
        reference::residual_forward(&mut ro, &a, &b);
        assert_eq!(bits(&o), bits(&ro));
        kernels::add_inplace(&mut o, &a);
        reference::add_inplace(&mut ro, &a);
        assert_eq!(bits(&o), bits(&ro));
        kernels::scale_inplace(&mut o, 0.37);
        reference::scale_inplace(&mut ro, 0.37);
        assert_eq!(bits(&o), bits(&ro));
        let g = kernels::global_norm(&a);
        let rg = reference::global_norm(&a);
        assert!(
            (g - rg).abs() <= 1e-6 * rg.max(1e-30),
            "global_norm {g} vs {rg}"
        );
    }
    assert_eq!(kernels::global_norm(&[3.0, 4.0]), 5.0);
}

#[test]
fn adamw_matches_pytorch() {
    // torch.optim.AdamW(lr=1e-2, betas=(0.9, 0.95), eps=1e-8), three steps;
    // weight_decay=0.1 on the first three entries, none on the rest.
    let cfg = AdamW {
        lr: 1e-2,
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.1,
    };
    let grads = [
        [0.1, -0.2, 0.3, -0.4, 0.5, -0.6],
        [-0.05, 0.25, 0.0, 1.5, -2.0, 0.125],
        [0.3, 0.3, -0.3, -0.3, 0.01, -0.01],
    ];
    // Values printed by PyTorch 2 (float32 tensors, shown exactly as f64).
    let want_decayed = [0.4792644679546356, -1.2431479692459106, 1.9781049489974976];
    let want_plain = [0.03290606290102005, -0.7501639723777771, 1.5192002058029175];
    let want_m = [
        0.03360000252723694,
        0.03630000352859497,
        -0.005700001958757639,
        0.07259999215602875,
        -0.13850000500679016,
        -0.038350000977516174,
    ];
    let want_v = [
        0.005070000421255827,
        0.009273750707507133,
        0.008561250753700733,
        0.11859500408172607,
        0.20128625631332397,
        0.01699218712747097,
    ];
    let f32s = |x: &[f64]| x.iter().map(|&v| v as f32).collect::<Vec<f32>>();
    let decay = [(0..3, true), (3..6, false)];
    let mut p = vec![0.5, -1.25, 2.0, 0.031_25, -0.75, 1.5];
    let (mut m, mut v) = (vec![0.0; 6], vec![0.0; 6]);
    let mut rp = p.clone();
    let (mut rm, mut rv) = (m.clone(), v.clone());
    for (i, g) in grads.iter().enumerate() {
        kernels::adamw_update(&mut p, g, &mut m, &mut v, i as u64 + 1, &cfg, &decay);
        reference::adamw_update(&mut rp, g, &mut rm, &mut rv, i as u64 + 1, &cfg, &decay);
    }
    let want_p = f32s(&[want_decayed, want_plain].concat());
    // Same f64 scalars, f32 operations and FMAs as PyTorch: bit-exact.
    assert_eq!(bits(&p), bits(&want_p), "adamw params {p:?}");
    assert_eq!(bits(&m), bits(&f32s(&want_m)), "adamw m {m:?}");
    assert_eq!(bits(&v), bits(&f32s(&want_v)), "adamw v {v:?}");
    assert_eq!(bits(&rp), bits(&want_p), "adamw reference params {rp:?}");

    // Larger buffers through the parallel path agree with the reference.
    let mut rng = Rng(12);
    let len = 50_001;
    let decay = [
        (0..20_000, true),
        (20_000..20_013, false),
        (20_013..len, true),
    ];
    let mut p = rng.vec(len, 1.0);
    let (mut m, mut v) = (vec![0.0; len], vec![0.0; len]);
    let (mut rp, mut rm, mut rv) = (p.clone(), m.clone(), v.clone());
    for step in 1..=4 {
        let g = rng.vec(len, 0.1);
        kernels::adamw_update(&mut p, &g, &mut m, &mut v, step, &cfg, &decay);
        reference::adamw_update(&mut rp, &g, &mut rm, &mut rv, step, &cfg, &decay);
    }
    assert_eq!(bits(&p), bits(&rp), "adamw large params");
    assert_eq!(bits(&v), bits(&rv), "adamw large v");

    // Clipping folded into the update: the same bits as scaling the
    // gradient in place first (clip_grad_norm_), the gradient untouched.
    for coef in [0.123_456_7f32, 1.0] {
        let (mut sp, mut sm, mut sv) = (p.clone(), m.clone(), v.clone());
        let (mut rp, mut rm, mut rv) = (p.clone(), m.clone(), v.clone());
        let g = rng.vec(len, 0.1);
        let kept = g.clone();
        kernels::adamw_update_scaled(&mut sp, &g, coef, &mut sm, &mut sv, 5, &cfg, &decay, None);
        let mut scaled = g.clone();
        reference::scale_inplace(&mut scaled, coef);
        reference::adamw_update(&mut rp, &scaled, &mut rm, &mut rv, 5, &cfg, &decay);
        assert_eq!(bits(&sp), bits(&rp), "scaled adamw params, coef {coef}");
        assert_eq!(bits(&sm), bits(&rm), "scaled adamw m, coef {coef}");
        assert_eq!(bits(&sv), bits(&rv), "scaled adamw v, coef {coef}");
        assert_eq!(bits(&g), bits(&kept), "the gradient is left as it was");
    }

    // With a hook: chunks cut at its aligned ranges (and across the decay
    // spans), the same bits; `after` sees each chunk once, updated.
    let aligned = [(100..20_100, 3 * 1000), (30_000..45_000, 7)];
    let chunks = kernels::chunk_plan(len, &aligned);
    for (r, unit) in &aligned {
        for ch in chunks
            .iter()
            .filter(|ch| ch.start >= r.start && ch.end <= r.end)
        {
            assert!(
                (ch.start - r.start) % unit == 0,
                "chunk {ch:?} unaligned in {r:?}"
            );
        }
    }
    let seen = std::sync::Mutex::new(vec![0u32; len]);
    let (mut hp, mut hm, mut hv) = (p.clone(), m.clone(), v.clone());
    let (mut sp, mut sm, mut sv) = (p.clone(), m.clone(), v.clone());
    let g = rng.vec(len, 0.1);
    let hook = kernels::UpdateHook {
        chunks,
        after: Box::new(|r: std::ops::Range<usize>, vals: &[f32]| {
            let mut seen = seen.lock().expect("lock");
            for (s, x) in seen[r].iter_mut().zip(vals) {
                assert_eq!(*s, 0, "a chunk was handed over twice");
                *s = x.to_bits();
            }
        }),
    };
    kernels::adamw_update_scaled(
        &mut hp,
        &g,
        0.5,
        &mut hm,
        &mut hv,
        6,
        &cfg,
        &decay,
        Some(&hook),
    );
    kernels::adamw_update_scaled(&mut sp, &g, 0.5, &mut sm, &mut sv, 6, &cfg, &decay, None);
    assert_eq!(bits(&hp), bits(&sp), "hooked adamw params");
    assert_eq!(bits(&hm), bits(&sm), "hooked adamw m");
    assert_eq!(bits(&hv), bits(&sv), "hooked adamw v");
    drop(hook);
    assert_eq!(
        seen.into_inner().expect("lock"),
        bits(&hp),
        "after saw the new values"
    );
}

/// Runs `f` on a dedicated rayon pool with `threads` threads.
fn with_threads<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("rayon pool")
        .install(f)
}

/// Every kernel's outputs, as bits, on GPT-2-like shapes big enough to
/// split across threads.
fn run_all(seed: u64) -> Vec<Vec<u32>> {
    let mut rng = Rng(seed);
    let (n, c, oc) = (96, 64, 192);
    let mut res = Vec::new();
    let inp = rng.vec(n * c, 1.0);
    let w = rng.vec(c * oc, 0.1);
    let dout = rng.vec(n * oc, 1.0);
    for layout in LAYOUTS {
        let mut out = vec![0.0; n * oc];
        kernels::matmul_forward(&mut out, &inp, &w, Some(&w[..oc]), n, c, oc, layout);
        let (mut dx, mut dw, mut db) = (vec![0.0; n * c], vec![0.0; c * oc], vec![0.0; oc]);
        kernels::matmul_backward(
            Some((&mut dx, GradWrite::Add)),
            Some(&mut dw),
            Some(&mut db),
            &dout,
            &inp,
            &w,
            n,
            c,
            oc,
            layout,
        );
        res.extend([bits(&out), bits(&dx), bits(&dw), bits(&db)]);
    }
    let (n, c) = (300, 96);
    let x = rng.vec(n * c, 1.0);
    let (mut out, mut mean, mut rstd) = (vec![0.0; n * c], vec![0.0; n], vec![0.0; n]);
    kernels::layernorm_forward(
        &mut out,
        &mut mean,
        &mut rstd,
        &x,
        &w[..c],
        &w[c..2 * c],
        n,
        c,
        1e-5,
    );
    let (mut dx, mut dw, mut db) = (vec![0.0; n * c], vec![0.0; c], vec![0.0; c]);
    kernels::layernorm_backward(
        &mut dx,
        &mut dw,
        &mut db,
        &x,
        &x,
        &w[..c],
        &mean,
        &rstd,
        n,
        c,
    );
    res.extend([bits(&out), bits(&dx), bits(&dw), bits(&db)]);
    let shape = AttentionShape {
        b: 2,
        t: 70,
        c: 24,
        nh: 3,
    };
    let qkv = rng.vec(2 * 70 * 72, 1.0);
    let (mut out, mut att) = (vec![0.0; 2 * 70 * 24], vec![0.0; 2 * 3 * 70 * 70]);
    kernels::attention_forward(&mut out, &mut att, &qkv, shape, true, None, F32);
    let (mut dqkv, mut datt) = (vec![0.0; qkv.len()], vec![0.0; att.len()]);
    kernels::attention_backward(&mut dqkv, &mut datt, &out, &qkv, &att, shape, F32);
    res.extend([bits(&out), bits(&att), bits(&dqkv)]);
    let (n, v) = (40, 1001);
    let mut logits = rng.vec(n * v, 5.0);
    let targets: Vec<i32> = (0..n).map(|i| (i * 7 % v) as i32).collect();
    let mut losses = vec![0.0; n];
    let (s, _) = kernels::cross_entropy_fused(&mut logits, &mut losses, &targets, n, v, -100, 0.1);
    res.extend([
        bits(&logits),
        bits(&losses),
        vec![s.to_bits() as u32, (s.to_bits() >> 32) as u32],
    ]);
    // The fused LM head: several chunks, one non-contiguous, dW over them all.
    let (n, c, v) = (300, 64, 1003);
    let x = rng.vec(n * c, 1.0);
    let w = rng.vec(v * c, 0.3);
    let targets: Vec<i32> = (0..n)
        .map(|i| {
            if i % 7 == 3 {
                -100
            } else {
                (i * 13 % v) as i32
            }
        })
        .collect();
    let mut scratch = vec![0.0; kernels::lm_head_scratch_len(n, v)];
    let (mut dx, mut dw, mut losses) = (vec![0.0; n * c], vec![0.0; v * c], vec![0.0; n]);
    let (s, _) = kernels::lm_head_loss_backward(
        &mut scratch,
        &mut losses,
        &mut dx,
        &mut dw,
        &x,
        &w,
        &targets,
        n,
        c,
        v,
        -100,
        0.01,
    );
    res.extend([
        bits(&dx),
        bits(&dw),
        bits(&losses),
        vec![s.to_bits() as u32, (s.to_bits() >> 32) as u32],
    ]);
    let big = rng.vec(300_001, 1.0);
    res.push(vec![kernels::global_norm(&big).to_bits()]);
    res
}

#[test]
fn kernels_are_deterministic() {
    let first = run_all(13);
    assert_eq!(first, run_all(13), "two runs on the same pool differ");
    for threads in [1, 2, 3] {
        assert_eq!(
            first,
            with_threads(threads, || run_all(13)),
            "{threads} threads differ"
        );
    }
}

// ---- bf16 matmuls with f32 accumulation (mixed-precision training) ----

/// Every bf16 kernel this CPU runs: the portable one, and AVX-512 BF16 where
/// present (even where `detect` prefers the portable one as faster).
fn bf16_kernels() -> Vec<kernels::Bf16Kernel> {
    let mut k = vec![kernels::Bf16Kernel::Portable];
    if kernels::bf16_gemm::has_avx512bf16() {
        k.push(kernels::Bf16Kernel::Avx512);
    }
    k
}

fn round_bf16(v: &[f32]) -> Vec<f32> {
    use lmkit::util::bf16::{bf16_to_f32, f32_to_bf16};
    v.iter().map(|&x| bf16_to_f32(f32_to_bf16(x))).collect()
}

/// `base + lhs[m,k]·rhs[k,n]` in f64 (element (i, j) of each operand at
/// `get(i, j)`), and `Σ|terms|` per element: the scale of the rounding error.
fn product_f64(
    m: usize,
    n: usize,
    k: usize,
    base: &[f32],
    lhs: impl Fn(usize, usize) -> f32,
    rhs: impl Fn(usize, usize) -> f32,
) -> (Vec<f64>, Vec<f64>) {
    let mut out = vec![0.0; m * n];
    let mut mag = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let (mut s, mut a) = (base[i * n + j] as f64, 0.0f64);
            for kk in 0..k {
                let t = lhs(i, kk) as f64 * rhs(kk, j) as f64;
                s += t;
                a += t.abs();
            }
            out[i * n + j] = s;
            mag[i * n + j] = a;
        }
    }
    (out, mag)
}

/// `got` within `rel · Σ|terms| + 1e-6` of `want`.
#[track_caller]
fn assert_within(what: &str, got: &[f32], want: &[f64], mag: &[f64], rel: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for (i, ((&g, &w), &m)) in got.iter().zip(want).zip(mag).enumerate() {
        let tol = rel * m + 1e-6;
        assert!(
            (g as f64 - w).abs() <= tol,
            "{what}[{i}]: got {g}, want {w} (|diff| {:e} > {tol:e})",
            (g as f64 - w).abs()
        );
    }
}

/// Forward, input gradient and weight gradient of the bf16 matmul, each
/// against (a) the f64 product of the bf16-rounded operands within f32
/// accumulation error and (b) the f64 product of the f32 operands within
/// bf16 rounding error (operands carry 2⁻⁹ relative error each), for both
/// weight layouts and every kernel this CPU has; shapes off the 14×32 tile
/// and across the K block (512). Gradients accumulate onto what was there;
/// the bias gradient is the unrounded f32 column sum in row order, exactly.
#[test]
fn bf16_matmul_matches_rounded_and_f32_products() {
    const F32_ACC: f64 = 1e-5;
    const BF16: f64 = 1.0 / 128.0;
    let mut rng = Rng(71);
    for &(n, c, oc) in &[
        (1, 1, 1),
        (14, 32, 32),
        (29, 37, 70),
        (3, 130, 33),
        (17, 600, 45),
        (600, 20, 66),
    ] {
        let inp = rng.vec(n * c, 1.0);
        let dout = rng.vec(n * oc, 1.0);
        let bias = rng.vec(oc, 0.5);
        let (inp_r, dout_r) = (round_bf16(&inp), round_bf16(&dout));
        for layout in LAYOUTS {
            let w = rng.vec(c * oc, 0.3);
            let w_r = round_bf16(&w);
            // W[c_idx, o] in either layout.
            let wat = |wv: &[f32], ci: usize, o: usize| match layout {
                WeightLayout::InOut => wv[ci * oc + o],
                WeightLayout::OutIn => wv[o * c + ci],
            };
            let dinp0 = rng.vec(n * c, 0.5);
            let dw0 = rng.vec(c * oc, 0.5);
            let db0 = rng.vec(oc, 0.5);
            // References: forward [N,OC], dX [N,C], dW in W's layout.
            let bias_base: Vec<f32> = (0..n * oc).map(|i| bias[i % oc]).collect();
            let refs = |x: &[f32], dy: &[f32], wv: &[f32]| {
                let fwd = product_f64(
                    n,
                    oc,
                    c,
                    &bias_base,
                    |i, k| x[i * c + k],
                    |k, j| wat(wv, k, j),
                );
                let dx = product_f64(
                    n,
                    c,
                    oc,
                    &dinp0,
                    |i, k| dy[i * oc + k],
                    |k, j| wat(wv, j, k),
                );
                let dw = match layout {
                    WeightLayout::InOut => {
                        product_f64(c, oc, n, &dw0, |i, k| x[k * c + i], |k, j| dy[k * oc + j])
                    }
                    WeightLayout::OutIn => {
                        product_f64(oc, c, n, &dw0, |i, k| dy[k * oc + i], |k, j| x[k * c + j])
                    }
                };
                (fwd, dx, dw)
            };
            let rounded_refs = refs(&inp_r, &dout_r, &w_r);
            let f32_refs = refs(&inp, &dout, &w);
            let mut outs = Vec::new();
            for kernel in bf16_kernels() {
                let what = format!("{n}x{c}x{oc} {layout:?} {kernel:?}");
                let pw = kernels::Bf16Weight::pack_with(&w, c, oc, layout, kernel, true);
                assert_eq!(pw.kernel(), kernel);
                let mut out = vec![f32::NAN; n * oc];
                kernels::matmul_forward_bf16(&mut out, &inp, &pw, Some(&bias), n);
                let (mut dinp, mut dw, mut db) = (dinp0.clone(), dw0.clone(), db0.clone());
                kernels::matmul_backward_bf16(
                    Some((&mut dinp, GradWrite::Add)),
                    Some(&mut dw),
                    Some(&mut db),
                    &dout,
                    &inp,
                    &pw,
                    n,
                );
                for (name, got, (want, mag), (want32, mag32)) in [
                    ("forward", &out, &rounded_refs.0, &f32_refs.0),
                    ("dinp", &dinp, &rounded_refs.1, &f32_refs.1),
                    ("dweight", &dw, &rounded_refs.2, &f32_refs.2),
                ] {
                    assert_within(
                        &format!("{what} {name} vs rounded"),
                        got,
                        want,
                        mag,
                        F32_ACC,
                    );
                    assert_within(&format!("{what} {name} vs f32"), got, want32, mag32, BF16);
                }
                let mut db_want = db0.clone();
                for row in dout.chunks_exact(oc) {
                    for (d, x) in db_want.iter_mut().zip(row) {
                        *d += x;
                    }
                }
                // Bit for bit: summed in row order, by its own pass or as
                // the weight gradient packs dY (AVX-512, Conv1D layout).
                assert_eq!(db, db_want, "{what} dbias");
                set_equals_add(n * c, &format!("{what} dinp"), |d, write| {
                    kernels::matmul_backward_bf16(Some((d, write)), None, None, &dout, &inp, &pw, n)
                });
                outs.push((out, dinp, dw));
            }
            // A portable weight packed for inference only (an `[OC,C]` one is
            // kept transposed): the same products, the weight gradient still
            // in W's layout.
            let pi = kernels::Bf16Weight::pack_with(
                &w,
                c,
                oc,
                layout,
                kernels::Bf16Kernel::Portable,
                false,
            );
            let mut out = vec![f32::NAN; n * oc];
            kernels::matmul_forward_bf16(&mut out, &inp, &pi, Some(&bias), n);
            let (mut dinp, mut dw) = (dinp0.clone(), dw0.clone());
            kernels::matmul_backward_bf16(
                Some((&mut dinp, GradWrite::Add)),
                Some(&mut dw),
                None,
                &dout,
                &inp,
                &pi,
                n,
            );
            for (name, got, (want, mag)) in [
                ("forward", &out, &rounded_refs.0),
                ("dinp", &dinp, &rounded_refs.1),
                ("dweight", &dw, &rounded_refs.2),
            ] {
                let what = format!("{n}x{c}x{oc} {layout:?} inference-only portable {name}");
                assert_within(&what, got, want, mag, F32_ACC);
            }
            // The AVX-512 kernel agrees with the portable one (summation order aside).
            if let [(o0, x0, w0), (o1, x1, w1)] = &outs[..] {
                assert_close("avx512 vs portable forward", o1, o0, 1e-5, 1e-5);
                assert_close("avx512 vs portable dinp", x1, x0, 1e-5, 1e-5);
                assert_close("avx512 vs portable dweight", w1, w0, 1e-5, 1e-5);
            }
        }
    }
}

/// The engines' bf16 weights, kept in the gemm's packed panels: prefill's
/// matmul and decode's matvec (row groups of 1-4 and beyond, with a bias)
/// against the f64 product of the rounded operands, converted from either
/// orientation, with odd IC and a partial last panel (the matmul on both
/// routes: the bf16 gemm, and bands widened to f32); the matvec is
/// bit-identical on 1 and 2 threads. Where the CPU lacks AVX-512 BF16 no
/// panels are made (the engine keeps bf16 rows instead).
#[test]
fn bf16_panels_match_rounded_product() {
    use lmkit::kernels::quant::SourceLayout;
    let mut rng = Rng(17);
    let avx512 = !bf16_kernels()
        .iter()
        .all(|k| *k == kernels::Bf16Kernel::Portable);
    for &(n, ic, oc) in &[
        (1, 768, 70),
        (2, 37, 33),
        (4, 64, 96),
        (5, 1100, 40),
        (29, 3, 100),
        // Odd IC over two bands of the widened route, the last panel partial.
        (3, 1101, 1000),
    ] {
        let x = rng.vec(n * ic, 1.0);
        let w = rng.vec(oc * ic, 0.3);
        let wt: Vec<f32> = (0..oc * ic).map(|i| w[(i % oc) * ic + i / oc]).collect();
        let bias = rng.vec(oc, 1.0);
        let (x_r, w_r) = (round_bf16(&x), round_bf16(&w));
        let product =
            |b: &[f32]| product_f64(n, oc, ic, b, |i, k| x_r[i * ic + k], |k, j| w_r[j * ic + k]);
        let (want, mag) = product(&vec![0.0; n * oc]);
        let biased: Vec<f32> = (0..n * oc).map(|i| bias[i % oc]).collect();
        let (want_b, mag_b) = product(&biased);
        for (src, layout) in [(&w, SourceLayout::OutIn), (&wt, SourceLayout::InOut)] {
            let what = format!("panels {n}x{ic}x{oc} from {layout:?}");
            let Some(p) = kernels::Bf16Panels::convert(src, ic, oc, layout, &|_| {}) else {
                assert!(!avx512, "{what}: not made on a CPU with the kernel");
                continue;
            };
            assert_eq!(p.shape(), (ic, oc));
            // Both gemm routes, whichever `matmul` takes on this CPU.
            let mut out = vec![f32::NAN; n * oc];
            p.matmul_packed(&mut out, &x, n);
            assert_within(&format!("{what} matmul"), &out, &want, &mag, 1e-5);
            let mut out = vec![f32::NAN; n * oc];
            p.matmul_widened(&mut out, &x, n);
            assert_within(&format!("{what} matmul widened"), &out, &want, &mag, 1e-5);
            fused_epilogues_match_passes(&p, &x, n, &bias, (&want_b, &mag_b), &what);
            let matvec = |threads| {
                with_threads(threads, || {
                    let mut out = vec![f32::NAN; n * oc];
                    p.matvec(&mut out, &x, Some(&bias), n);
                    out
                })
            };
            let out = matvec(1);
            assert_within(&format!("{what} matvec"), &out, &want_b, &mag_b, 1e-5);
            assert_eq!(
                out,
                matvec(2),
                "{what}: matvec differs across thread counts"
            );
        }
    }
}

/// Bias and GELU inside the product (`matmul_packed_fused`, and
/// `matmul_fused` on whichever route this CPU takes): the biased sums
/// against the f64 product, and the GELU's output bit for bit that of
/// `gelu_forward` over the biased sums (applied to each tile once, after
/// its last K block), with the tanh and the erf GELU.
fn fused_epilogues_match_passes(
    p: &kernels::Bf16Panels,
    x: &[f32],
    n: usize,
    bias: &[f32],
    (want_b, mag_b): (&[f64], &[f64]),
    what: &str,
) {
    let oc = p.shape().1;
    let run = |packed: bool, gelu: Option<kernels::Gelu>| {
        let mut out = vec![f32::NAN; n * oc];
        if packed {
            p.matmul_packed_fused(&mut out, x, n, Some(bias), gelu);
        } else {
            p.matmul_fused(&mut out, x, n, Some(bias), gelu);
        }
        out
    };
    for packed in [true, false] {
        let biased = run(packed, None);
        assert_within(
            &format!("{what} biased (packed {packed})"),
            &biased,
            want_b,
            mag_b,
            1e-5,
        );
        for kind in [kernels::Gelu::Tanh, kernels::Gelu::Erf] {
            let mut want = vec![0.0; n * oc];
            kernels::gelu_forward(&mut want, &biased, kind);
            assert_eq!(
                bits(&run(packed, Some(kind))),
                bits(&want),
                "{what}: {kind:?} inside the product (packed {packed}) differs from the pass"
            );
        }
    }
}

/// The bf16 products are bit-identical for any thread count, and without a
/// bias the forward overwrites whatever `out` held.
#[test]
fn bf16_matmul_is_deterministic() {
    let mut rng = Rng(5);
    // The second shape spans several K blocks, strip groups and panel groups.
    for (n, c, oc) in [(200, 96, 700), (260, 1100, 300)] {
        bf16_matmul_is_deterministic_at(&mut rng, n, c, oc);
    }
}

fn bf16_matmul_is_deterministic_at(rng: &mut Rng, n: usize, c: usize, oc: usize) {
    let inp = rng.vec(n * c, 1.0);
    let dout = rng.vec(n * oc, 1.0);
    let w = rng.vec(c * oc, 0.1);
    for kernel in bf16_kernels() {
        let run = || {
            let pw = kernels::Bf16Weight::pack_with(&w, c, oc, WeightLayout::InOut, kernel, true);
            let mut out = vec![f32::NAN; n * oc];
            kernels::matmul_forward_bf16(&mut out, &inp, &pw, None, n);
            let (mut dinp, mut dw) = (vec![0.0; n * c], vec![0.0; c * oc]);
            kernels::matmul_backward_bf16(
                Some((&mut dinp, GradWrite::Add)),
                Some(&mut dw),
                None,
                &dout,
                &inp,
                &pw,
                n,
            );
            assert!(
                out.iter().all(|x| x.is_finite()),
                "{kernel:?}: NaN left in out"
            );
            [bits(&out), bits(&dinp), bits(&dw)]
        };
        let one = with_threads(1, run);
        for threads in [2, 3] {
            assert_eq!(
                one,
                with_threads(threads, run),
                "{kernel:?}: {threads} threads differ"
            );
        }
    }
}
