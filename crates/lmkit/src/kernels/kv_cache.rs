//! The key/value cache of incremental decoding, and attention over it.
//!
//! Shape legend: L layers, B batch rows, NH heads, HS head size, C = NH·HS,
//! S capacity (cache positions), T new tokens per row in one forward call.
//!
//! Keys and values live in two preallocated buffers `[L, B, NH, S, HS]`, so a
//! head's keys are one contiguous `[S, HS]` block (a matmul operand in
//! prefill, a stream of dot products in decode). Rows of a batch share the
//! cache positions: prompts of different lengths are LEFT-padded, padding
//! positions are masked out of every softmax (`key_mask`), and each row
//! counts its own position ids (HF's `cumsum(attention_mask) - 1`).
//!
//! Engines with bf16 or int8 weights keep keys and values in bf16 (as
//! llama.cpp keeps them in f16): half the memory, and half the bytes each
//! decode step reads, at a rounding already below their weights' own.

use rayon::prelude::*;

use crate::kernels::attention::{softmax_masked, CAUSAL_BLOCK};
use crate::kernels::bf16_gemm::has_avx512bf16;
#[cfg(target_arch = "x86_64")]
use crate::kernels::bf16_gemm::HeadOperand;
use crate::kernels::gemm::{gemm_f32_serial, MatMut, MatRef};
use crate::kernels::matmul::View;
use crate::kernels::quant::bf16_rows_to_f32;
use crate::kernels::simd::dispatch;
use crate::util::bf16::{bf16_to_f32, f32_to_bf16};

/// Preallocated per-layer keys and values for `batch` rows of up to
/// `capacity` positions.
#[derive(Clone)]
pub struct KvCache {
    pub(crate) n_layer: usize,
    pub(crate) batch: usize,
    pub(crate) capacity: usize,
    pub(crate) n_head: usize,
    pub(crate) head_size: usize,
    /// `[L, B, NH, S, HS]`
    pub(crate) k: KvBuf,
    /// `[L, B, NH, S, HS]`
    pub(crate) v: KvBuf,
    /// `[B, S]`: 1 where the position holds a real token, 0 for padding.
    pub(crate) key_mask: Vec<u8>,
    /// `[B]`: position id of each row's next real token.
    pub(crate) next_pos: Vec<usize>,
    /// Positions filled so far (the same for every row).
    pub(crate) len: usize,
}

impl std::fmt::Debug for KvCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvCache")
            .field("layers", &self.n_layer)
            .field("batch", &self.batch)
            .field("capacity", &self.capacity)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// Cached keys or values: f32, or bf16 bits.
#[derive(Clone)]
pub(crate) enum KvBuf {
    F32(Vec<f32>),
    Bf16(Vec<u16>),
}

impl KvBuf {
    fn new(elems: usize, bf16: bool) -> Self {
        if bf16 {
            KvBuf::Bf16(vec![0; elems])
        } else {
            KvBuf::F32(vec![0.0; elems])
        }
    }

    /// `f(i, block i)` for the `heads` blocks of `block` elements from `at`,
    /// on the rayon pool when `par`.
    fn store_heads(
        &mut self,
        at: usize,
        heads: usize,
        block: usize,
        par: bool,
        f: impl Fn(usize, &mut KvBlock<'_>) + Sync + Send,
    ) {
        fn each<T: Send>(
            buf: &mut [T],
            block: usize,
            par: bool,
            f: impl Fn(usize, &mut [T]) + Sync + Send,
        ) {
            if par {
                buf.par_chunks_mut(block)
                    .enumerate()
                    .for_each(|(i, c)| f(i, c));
            } else {
                buf.chunks_mut(block).enumerate().for_each(|(i, c)| f(i, c));
            }
        }
        let range = at..at + heads * block;
        match self {
            KvBuf::F32(v) => each(&mut v[range], block, par, |i, c| f(i, &mut KvBlock::F32(c))),
            KvBuf::Bf16(v) => each(&mut v[range], block, par, |i, c| {
                f(i, &mut KvBlock::Bf16(c))
            }),
        }
    }

    /// `q · row`, the row of `q.len()` elements at `at`.
    fn dot_row(&self, at: usize, q: &[f32]) -> f32 {
        match self {
            KvBuf::F32(v) => dot(q, &v[at..at + q.len()]),
            KvBuf::Bf16(v) => dot_bf16(q, &v[at..at + q.len()]),
        }
    }

    /// `acc += p · row`, the row of `acc.len()` elements at `at`.
    fn add_scaled_row(&self, at: usize, p: f32, acc: &mut [f32]) {
        let n = acc.len();
        match self {
            KvBuf::F32(v) => {
                for (a, &x) in acc.iter_mut().zip(&v[at..at + n]) {
                    *a += p * x;
                }
            }
            KvBuf::Bf16(v) => {
                for (a, &x) in acc.iter_mut().zip(&v[at..at + n]) {
                    *a += p * bf16_to_f32(x);
                }
            }
        }
    }

    /// Elements `[at, at + n)` as f32: borrowed, or widened into `scratch`.
    fn read<'a>(&'a self, at: usize, n: usize, scratch: &'a mut Vec<f32>) -> &'a [f32] {
        match self {
            KvBuf::F32(v) => &v[at..at + n],
            KvBuf::Bf16(v) => {
                scratch.resize(n, 0.0);
                bf16_rows_to_f32(scratch, &v[at..at + n]);
                scratch
            }
        }
    }
}

/// One head's block of a [`KvBuf`], borrowed.
enum KvBlock<'a> {
    F32(&'a mut [f32]),
    Bf16(&'a mut [u16]),
}

impl KvBlock<'_> {
    /// `src` at element `at`, rounded to bf16 in a bf16 block (vectorised:
    /// the same bits as [`f32_to_bf16`] one by one).
    fn write(&mut self, at: usize, src: &[f32]) {
        match self {
            KvBlock::F32(v) => v[at..at + src.len()].copy_from_slice(src),
            KvBlock::Bf16(v) => {
                let dst = &mut v[at..at + src.len()];
                dispatch(
                    #[inline(always)]
                    || {
                        for (d, &x) in dst.iter_mut().zip(src) {
                            *d = f32_to_bf16(x);
                        }
                    },
                );
            }
        }
    }
}

/// Rows (batch rows × new tokens) from which [`KvCache::store`] runs on
/// the rayon pool.
const STORE_PAR_ROWS: usize = 16;

/// Keys and values of `n` consecutive positions of a one-row [`KvCache`],
/// every layer and head (`[L, NH, n, HS]` each), in the cache's own format:
/// a copy that restores those positions bit for bit (a prefix cache's block).
#[derive(Clone)]
pub(crate) struct KvSpan {
    n: usize,
    k: KvBuf,
    v: KvBuf,
}

impl KvSpan {
    /// Bytes of the keys and values.
    pub(crate) fn bytes(&self) -> usize {
        2 * self.k.len() * self.k.elem_bytes()
    }
}

impl KvBuf {
    fn len(&self) -> usize {
        match self {
            KvBuf::F32(v) => v.len(),
            KvBuf::Bf16(v) => v.len(),
        }
    }

    fn elem_bytes(&self) -> usize {
        match self {
            KvBuf::F32(_) => 4,
            KvBuf::Bf16(_) => 2,
        }
    }

    /// Copies `n` elements from `self[at..]` to `dst[dst_at..]`; false (and
    /// nothing copied) when the two formats differ.
    fn copy_to(&self, at: usize, n: usize, dst: &mut KvBuf, dst_at: usize) -> bool {
        match (self, dst) {
            (KvBuf::F32(s), KvBuf::F32(d)) => {
                d[dst_at..dst_at + n].copy_from_slice(&s[at..at + n]);
            }
            (KvBuf::Bf16(s), KvBuf::Bf16(d)) => {
                d[dst_at..dst_at + n].copy_from_slice(&s[at..at + n]);
            }
            _ => return false,
        }
        true
    }
}

impl KvCache {
    /// `bf16`: store keys and values as bf16 instead of f32.
    pub(crate) fn new(
        n_layer: usize,
        batch: usize,
        capacity: usize,
        n_head: usize,
        head_size: usize,
        bf16: bool,
    ) -> Self {
        let elems = n_layer * batch * n_head * capacity * head_size;
        KvCache {
            n_layer,
            batch,
            capacity,
            n_head,
            head_size,
            k: KvBuf::new(elems, bf16),
            v: KvBuf::new(elems, bf16),
            key_mask: vec![0; batch * capacity],
            next_pos: vec![0; batch],
            len: 0,
        }
    }

    /// Positions filled so far.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Real (non-padding) tokens of row `b` seen so far.
    pub fn row_tokens(&self, b: usize) -> usize {
        self.next_pos[b]
    }

    /// Forgets every position (keeps the allocation).
    pub fn clear(&mut self) {
        self.len = 0;
        self.key_mask.fill(0);
        self.next_pos.fill(0);
    }

    /// A copy of positions `[start, start + n)` of a one-row cache; `None`
    /// if the cache has more rows or the positions are not all filled.
    pub(crate) fn copy_span(&self, start: usize, n: usize) -> Option<KvSpan> {
        if self.batch != 1 || start + n > self.len {
            return None;
        }
        let (nh, hs) = (self.n_head, self.head_size);
        let elems = self.n_layer * nh * n * hs;
        let bf16 = matches!(self.k, KvBuf::Bf16(_));
        let mut span = KvSpan {
            n,
            k: KvBuf::new(elems, bf16),
            v: KvBuf::new(elems, bf16),
        };
        for l in 0..self.n_layer {
            for h in 0..nh {
                let (src, dst) = (self.offset(l, 0, h, start), (l * nh + h) * n * hs);
                self.k.copy_to(src, n * hs, &mut span.k, dst);
                self.v.copy_to(src, n * hs, &mut span.v, dst);
            }
        }
        Some(span)
    }

    /// Appends `span`'s positions (real tokens, position ids continuing the
    /// row's count) to a one-row cache; false, and the cache unchanged, when
    /// the span does not fit or was copied from a cache of another shape
    /// or format.
    pub(crate) fn push_span(&mut self, span: &KvSpan) -> bool {
        let (nh, hs, n) = (self.n_head, self.head_size, span.n);
        let elems = self.n_layer * nh * n * hs;
        if self.batch != 1
            || self.len + n > self.capacity
            || span.k.len() != elems
            || span.k.elem_bytes() != self.k.elem_bytes()
        {
            return false;
        }
        for l in 0..self.n_layer {
            for h in 0..nh {
                let (dst, src) = (self.offset(l, 0, h, self.len), (l * nh + h) * n * hs);
                span.k.copy_to(src, n * hs, &mut self.k, dst);
                span.v.copy_to(src, n * hs, &mut self.v, dst);
            }
        }
        self.key_mask[self.len..self.len + n].fill(1);
        self.next_pos[0] += n;
        self.len += n;
        true
    }

    /// Offset of `[layer, b, h, pos, 0]` in `k`/`v`.
    fn offset(&self, layer: usize, b: usize, h: usize, pos: usize) -> usize {
        (((layer * self.batch + b) * self.n_head + h) * self.capacity + pos) * self.head_size
    }

    /// Copies the keys and values of `t` new tokens per row from the packed
    /// `qkv[B·T, 3C]` rows into positions `[len, len + t)` of `layer`.
    pub(crate) fn store(&mut self, layer: usize, qkv: &[f32], t: usize) {
        let (nh, hs, cap, len) = (self.n_head, self.head_size, self.capacity, self.len);
        let c = nh * hs;
        let heads = self.batch * nh;
        let layer_at = self.offset(layer, 0, 0, 0);
        // Prefill's rows on the pool, a head's block each (~0.8 ms a layer
        // of 476 tokens on one thread); decode's one row is not worth it.
        let par = self.batch * t >= STORE_PAR_ROWS;
        for (buf, part) in [(&mut self.k, 1), (&mut self.v, 2)] {
            buf.store_heads(layer_at, heads, cap * hs, par, |bh, block| {
                let (b, h) = (bh / nh, bh % nh);
                for i in 0..t {
                    let o = (b * t + i) * 3 * c + part * c + h * hs;
                    block.write((len + i) * hs, &qkv[o..o + hs]);
                }
            });
        }
    }

    /// `out[B·T, C]` = causal, masked attention of the `t` new queries of each
    /// row (in `qkv[B·T, 3C]`, already stored with [`Self::store`]) over
    /// positions `[0, len + i]` of `layer`. A query that sees no real key
    /// (a padding row) gets zeros.
    pub(crate) fn attend(&self, out: &mut [f32], qkv: &[f32], layer: usize, t: usize) {
        let (nh, hs, cap) = (self.n_head, self.head_size, self.capacity);
        let c = nh * hs;
        let past = self.len;
        let kv_len = past + t;
        let scale = (hs as f32).sqrt();
        // A bf16 cache multiplies on the bf16 kernel where the CPU has it:
        // its keys and values are bf16 already.
        let bf16 = matches!(self.k, KvBuf::Bf16(_)) && has_avx512bf16();
        let heads: Vec<Vec<f32>> = (0..self.batch * nh)
            .into_par_iter()
            .map(|bh| {
                let (b, h) = (bh / nh, bh % nh);
                let base = self.offset(layer, b, h, 0);
                let mask = &self.key_mask[b * cap..b * cap + kv_len];
                // q of token i: qkv[(b·t + i)·3C + h·HS ..][..HS]
                let q_at = |i: usize| {
                    let o = (b * t + i) * 3 * c + h * hs;
                    &qkv[o..o + hs]
                };
                let mut o = vec![0f32; t * hs];
                if t == 1 {
                    // Decode: one pass over the cached rows, bf16 widened in
                    // registers (no widened copy of the cache). Where
                    // prefill's products round q and p to bf16, so does
                    // decode: a token's logits are then the same whichever
                    // path computed them, up to the order of the sums.
                    let mut scores = vec![0f32; kv_len];
                    let round = |x: f32| if bf16 { bf16_to_f32(f32_to_bf16(x)) } else { x };
                    let q: Vec<f32> = q_at(0).iter().map(|&x| round(x)).collect();
                    for (j, s) in scores.iter_mut().enumerate() {
                        *s = self.k.dot_row(base + j * hs, &q) / scale;
                    }
                    dispatch(
                        #[inline(always)]
                        || softmax_masked(&mut scores, kv_len, Some(mask), |x| x),
                    );
                    for (j, &p) in scores.iter().enumerate() {
                        if p != 0.0 {
                            self.v.add_scaled_row(base + j * hs, round(p), &mut o);
                        }
                    }
                    return o;
                }
                let kv = base..base + kv_len * hs;
                let q_off = |i0: usize| (b * t + i0) * 3 * c + h * hs;
                #[cfg(target_arch = "x86_64")]
                if let (true, KvBuf::Bf16(k), KvBuf::Bf16(v)) = (bf16, &self.k, &self.v) {
                    // Keys and values packed once for every block's prefix.
                    let kt = HeadOperand::keys_t(&k[kv.clone()], kv_len, hs);
                    let vp = HeadOperand::values(&v[kv], kv_len, hs);
                    causal_head(
                        &mut o,
                        (t, past, hs, scale),
                        mask,
                        // SAFETY (both): the CPU has the kernel (`bf16`);
                        // `s` and `dst` are this task's own buffers.
                        |s, i0, rows, nk| unsafe {
                            kt.product(
                                s.as_mut_ptr(),
                                nk,
                                false,
                                View {
                                    data: &qkv[q_off(i0)..],
                                    rs: 3 * c,
                                    cs: 1,
                                },
                                rows,
                                nk,
                                hs,
                            )
                        },
                        |dst, p, rows, nk| unsafe {
                            let p = View {
                                data: p,
                                rs: nk,
                                cs: 1,
                            };
                            vp.product(dst.as_mut_ptr(), hs, false, p, rows, hs, nk)
                        },
                    );
                    return o;
                }
                let (mut key_scratch, mut val_scratch) = (Vec::new(), Vec::new());
                let keys = self.k.read(base, kv_len * hs, &mut key_scratch);
                let vals = self.v.read(base, kv_len * hs, &mut val_scratch);
                causal_head(
                    &mut o,
                    (t, past, hs, scale),
                    mask,
                    |s, i0, rows, nk| {
                        gemm_f32_serial(
                            MatMut::row_major(s, rows, nk),
                            MatRef::strided(&qkv[q_off(i0)..], rows, hs, 3 * c as isize, 1),
                            MatRef::transposed(&keys[..nk * hs], nk, hs),
                        )
                    },
                    |dst, p, rows, nk| {
                        gemm_f32_serial(
                            MatMut::row_major(dst, rows, hs),
                            MatRef::row_major(p, rows, nk),
                            MatRef::row_major(&vals[..nk * hs], nk, hs),
                        )
                    },
                );
                o
            })
            .collect();
        for (bh, o) in heads.iter().enumerate() {
            let (b, h) = (bh / nh, bh % nh);
            for i in 0..t {
                let dst = (b * t + i) * c + h * hs;
                out[dst..dst + hs].copy_from_slice(&o[i * hs..(i + 1) * hs]);
            }
        }
    }
}

/// One head's `t` new queries after `past` cached positions, in causal
/// blocks: block `[i0, i1)` sees keys `[0, past + i1)` only, so the upper
/// triangle is never computed. `scores(s, i0, rows, nk)` writes
/// `S[rows, nk] = Q[i0..]·K[..nk]ᵀ`; then each row becomes the masked
/// softmax of `S/√HS` (`scale` = √HS); `output(dst, p, rows, nk)` writes
/// `O[i0.., HS] = P·V[..nk]` into `dst` (`o`'s rows of the block).
fn causal_head(
    o: &mut [f32],
    (t, past, hs, scale): (usize, usize, usize, f32),
    mask: &[u8],
    mut scores: impl FnMut(&mut [f32], usize, usize, usize),
    mut output: impl FnMut(&mut [f32], &[f32], usize, usize),
) {
    let mut buf = vec![0f32; CAUSAL_BLOCK.min(t) * (past + t)];
    // Every row's keys are a prefix of these: with no padding among them,
    // no row needs its own look at the mask.
    let mask = Some(mask).filter(|m| m[..past + t].contains(&0));
    // A power-of-two √HS (64: GPT-2's heads) divides exactly as its
    // reciprocal multiplies (the same bits), without a divide per score.
    let (inv, exact) = (1.0 / scale, scale.to_bits() & 0x007F_FFFF == 0);
    for i0 in (0..t).step_by(CAUSAL_BLOCK) {
        let i1 = (i0 + CAUSAL_BLOCK).min(t);
        let (rows, nk) = (i1 - i0, past + i1);
        let s = &mut buf[..rows * nk];
        scores(s, i0, rows, nk);
        dispatch(
            #[inline(always)]
            || {
                for (r, row) in s.chunks_exact_mut(nk).enumerate() {
                    let limit = past + i0 + r + 1;
                    if exact {
                        softmax_masked(row, limit, mask, move |x| x * inv);
                    } else {
                        softmax_masked(row, limit, mask, move |x| x / scale);
                    }
                }
            },
        );
        output(&mut o[i0 * hs..i1 * hs], s, rows, nk);
    }
}

/// [`dot`] with `b` in bf16 bits (widened exactly, so the same sums).
fn dot_bf16(a: &[f32], b: &[u16]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, &y)| x * bf16_to_f32(y))
        .sum();
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] += x[l] * bf16_to_f32(y[l]);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Dot product with 8 independent lanes (vectorisable, fixed order).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Straightforward attention of one query row over `keys`/`vals` rows.
    fn naive(q: &[f32], keys: &[Vec<f32>], vals: &[Vec<f32>], visible: &[bool]) -> Vec<f32> {
        let hs = q.len();
        let scores: Vec<f64> = keys
            .iter()
            .map(|k| {
                q.iter()
                    .zip(k)
                    .map(|(a, b)| (*a as f64) * (*b as f64))
                    .sum::<f64>()
                    / (hs as f64).sqrt()
            })
            .collect();
        let max = scores
            .iter()
            .zip(visible)
            .filter(|(_, v)| **v)
            .map(|(s, _)| *s)
            .fold(f64::MIN, f64::max);
        let w: Vec<f64> = scores
            .iter()
            .zip(visible)
            .map(|(s, v)| if *v { (s - max).exp() } else { 0.0 })
            .collect();
        let z: f64 = w.iter().sum();
        (0..hs)
            .map(|d| {
                (w.iter()
                    .zip(vals)
                    .map(|(p, v)| p * v[d] as f64)
                    .sum::<f64>()
                    / z) as f32
            })
            .collect()
    }

    /// Head sizes 4 and 3: √HS a power of two (prefill scales the scores
    /// by its reciprocal) and not (it divides).
    #[test]
    fn prefill_and_decode_match_naive_attention_with_padding() {
        for bf16 in [false, true] {
            for hs in [4, 3] {
                check_against_naive(bf16, hs);
            }
        }
    }

    /// A bf16 cache must equal naive attention over bf16-rounded keys and
    /// values (rounding is the only difference).
    fn check_against_naive(bf16: bool, hs: usize) {
        let stored = |x: f32| if bf16 { bf16_to_f32(f32_to_bf16(x)) } else { x };
        let (nh, batch) = (2, 2);
        let c = nh * hs;
        let total = 5;
        // Row 0 has 2 padding positions on the left, row 1 none.
        let mask_rows = [[0u8, 0, 1, 1, 1], [1, 1, 1, 1, 1]];
        let qkv_all: Vec<f32> = (0..batch * total * 3 * c)
            .map(|i| ((i * 7919) % 23) as f32 * 0.1 - 1.1)
            .collect();
        // Prefill 3 positions, then decode one at a time.
        let mut cache = KvCache::new(1, batch, total, nh, hs, bf16);
        let mut outputs = vec![vec![0f32; c]; batch * total];
        let mut fed = 0;
        for t in [3usize, 1, 1] {
            let mut qkv = vec![0f32; batch * t * 3 * c];
            for b in 0..batch {
                for i in 0..t {
                    let src = (b * total + fed + i) * 3 * c;
                    qkv[(b * t + i) * 3 * c..(b * t + i + 1) * 3 * c]
                        .copy_from_slice(&qkv_all[src..src + 3 * c]);
                    cache.key_mask[b * total + fed + i] = mask_rows[b][fed + i];
                }
            }
            cache.store(0, &qkv, t);
            let mut out = vec![0f32; batch * t * c];
            cache.attend(&mut out, &qkv, 0, t);
            cache.len += t;
            for b in 0..batch {
                for i in 0..t {
                    outputs[b * total + fed + i] =
                        out[(b * t + i) * c..(b * t + i + 1) * c].to_vec();
                }
            }
            fed += t;
        }
        for b in 0..batch {
            for pos in 0..total {
                for h in 0..nh {
                    let row =
                        |p: usize| &qkv_all[(b * total + p) * 3 * c..(b * total + p + 1) * 3 * c];
                    let q = &row(pos)[h * hs..(h + 1) * hs];
                    let keys: Vec<Vec<f32>> = (0..=pos)
                        .map(|p| {
                            row(p)[c + h * hs..c + (h + 1) * hs]
                                .iter()
                                .map(|&x| stored(x))
                                .collect()
                        })
                        .collect();
                    let vals: Vec<Vec<f32>> = (0..=pos)
                        .map(|p| {
                            row(p)[2 * c + h * hs..2 * c + (h + 1) * hs]
                                .iter()
                                .map(|&x| stored(x))
                                .collect()
                        })
                        .collect();
                    let visible: Vec<bool> = (0..=pos).map(|p| mask_rows[b][p] == 1).collect();
                    let got = &outputs[b * total + pos][h * hs..(h + 1) * hs];
                    if visible.iter().any(|v| *v) {
                        let want = naive(q, &keys, &vals, &visible);
                        // A bf16 cache's prefill also rounds q and the
                        // probabilities (its products run in bf16).
                        let tol = if bf16 { 1e-2 } else { 1e-5 };
                        for (g, w) in got.iter().zip(&want) {
                            assert!(
                                (g - w).abs() < tol,
                                "bf16 {bf16}, b{b} pos{pos} h{h}: {got:?} vs {want:?}"
                            );
                        }
                    } else {
                        assert!(
                            got.iter().all(|v| *v == 0.0),
                            "fully masked query gives zeros"
                        );
                    }
                }
            }
        }
    }
}
