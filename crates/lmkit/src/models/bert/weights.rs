//! Inference copies of BERT's encoder matmul weights (`Bert::set_dtype`):
//! f32 transposed to `[K, OC]`, the orientation the `gemm` crate multiplies
//! in place; bf16 packed for [`crate::kernels::bf16_gemm::PackedBf16`]
//! (inference and mixed-precision training); or int8 per output channel for
//! [`crate::kernels::int8_gemm`] (inference, activations quantized per row as
//! ONNX Runtime's dynamically quantized BERT does).

use crate::kernels::bf16_gemm::PackedBf16;
use crate::kernels::quant::{to_f32_in_out, SourceLayout};
use crate::kernels::{matmul_forward, PackedInt8, WeightLayout};
use crate::spec::config::BertConfig;
use crate::spec::layout::{
    bert_layer_prefix, bert_qkv_bias_range, bert_qkv_weight_range, ParamLayout,
};
use std::sync::Arc;

/// An `nn.Linear` in a reduced format: `out[N,OC] = inp[N,K]·Wᵀ + b`.
pub(crate) trait PackedLinear {
    fn forward(&self, out: &mut [f32], inp: &[f32], n: usize);
}

impl PackedLinear for PackedBf16 {
    fn forward(&self, out: &mut [f32], inp: &[f32], n: usize) {
        PackedBf16::forward(self, out, inp, n)
    }
}

/// An f32 weight transposed to `[K, OC]` (at `at` in a buffer all the
/// encoder's matrices share), and its bias. `nn.Linear`'s `[OC, K]` the
/// `gemm` crate repacks on every call: 2–6× the time of the product itself
/// for a few short texts (criterion `kernels/matmul_fwd_16x*`).
#[derive(Debug, Clone)]
pub(crate) struct F32Linear {
    buf: Arc<Vec<f32>>,
    at: usize,
    bias: Vec<f32>,
    k: usize,
}

impl PackedLinear for F32Linear {
    fn forward(&self, out: &mut [f32], inp: &[f32], n: usize) {
        let oc = self.bias.len();
        let w = &self.buf[self.at..self.at + self.k * oc];
        matmul_forward(
            out,
            inp,
            w,
            Some(&self.bias),
            n,
            self.k,
            oc,
            WeightLayout::InOut,
        )
    }
}

/// An int8 weight and its f32 bias.
#[derive(Debug, Clone)]
pub(crate) struct Int8Linear {
    w: PackedInt8,
    bias: Vec<f32>,
}

impl PackedLinear for Int8Linear {
    fn forward(&self, out: &mut [f32], inp: &[f32], n: usize) {
        self.w.forward(out, inp, Some(&self.bias), n)
    }
}

/// The four matmuls of an encoder layer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum EncoderMatmul {
    /// Query, key and value, fused: `[3C, C]`.
    Qkv,
    /// `attention.output.dense`: `[C, C]`.
    AttnOut,
    /// `intermediate.dense`: `[I, C]`.
    Inter,
    /// `output.dense`: `[C, I]`.
    Out,
}

#[derive(Debug, Clone)]
struct Layer<P> {
    qkv: P,
    attn_out: P,
    inter: P,
    out: P,
}

/// Every encoder layer's matmul weights in one format.
#[derive(Debug, Clone)]
pub(crate) struct EncoderWeights<P> {
    layers: Vec<Layer<P>>,
}

pub(crate) type F32Weights = EncoderWeights<F32Linear>;
pub(crate) type Bf16Weights = EncoderWeights<PackedBf16>;
pub(crate) type Int8Weights = EncoderWeights<Int8Linear>;

impl<P> EncoderWeights<P> {
    /// `pack(w[OC,K], bias[OC], OC, K)` for each matmul of `params` (laid
    /// out by `layout` for `cfg`).
    fn build<'p>(
        cfg: &BertConfig,
        layout: &ParamLayout,
        params: &'p [f32],
        pack: impl Fn(&'p [f32], &'p [f32], usize, usize) -> P,
    ) -> Self {
        let (c, i) = (cfg.hidden_size, cfg.intermediate_size);
        let layers = (0..cfg.num_hidden_layers)
            .map(|l| {
                let p = bert_layer_prefix(l);
                // Ranges are checked when the model is built.
                let wr = bert_qkv_weight_range(layout, l).unwrap_or_default();
                let br = bert_qkv_bias_range(layout, l).unwrap_or_default();
                let lin = |name: &str, oc: usize, k: usize| {
                    pack(
                        layout.view(params, &format!("{p}{name}.weight")),
                        layout.view(params, &format!("{p}{name}.bias")),
                        oc,
                        k,
                    )
                };
                Layer {
                    qkv: pack(&params[wr], &params[br], 3 * c, c),
                    attn_out: lin("attention.output.dense", c, c),
                    inter: lin("intermediate.dense", i, c),
                    out: lin("output.dense", c, i),
                }
            })
            .collect();
        EncoderWeights { layers }
    }

    /// The same matmuls through `f`, called in layer order and within a
    /// layer as qkv, attention output, intermediate, output.
    fn map<Q>(self, mut f: impl FnMut(P) -> Q) -> EncoderWeights<Q> {
        let layers = self
            .layers
            .into_iter()
            .map(|l| Layer {
                qkv: f(l.qkv),
                attn_out: f(l.attn_out),
                inter: f(l.inter),
                out: f(l.out),
            })
            .collect();
        EncoderWeights { layers }
    }

    /// Layer `l`'s matmul `m`.
    pub(crate) fn get(&self, l: usize, m: EncoderMatmul) -> &P {
        let layer = &self.layers[l];
        match m {
            EncoderMatmul::Qkv => &layer.qkv,
            EncoderMatmul::AttnOut => &layer.attn_out,
            EncoderMatmul::Inter => &layer.inter,
            EncoderMatmul::Out => &layer.out,
        }
    }
}

impl F32Weights {
    /// Transposes the encoder weights to `[K, OC]`, into one buffer (20–40
    /// ms for MiniLM's 42 MB, about half of it page faults; huge pages made
    /// it slower here, the kernel compacting memory to find them).
    pub(crate) fn new(cfg: &BertConfig, layout: &ParamLayout, params: &[f32]) -> F32Weights {
        let src = EncoderWeights::build(cfg, layout, params, |w, b, oc, k| (w, b, oc, k));
        let total = src.layers.iter().fold(0, |n, l| {
            n + l.qkv.0.len() + l.attn_out.0.len() + l.inter.0.len() + l.out.0.len()
        });
        let mut buf = vec![0f32; total];
        let mut at = 0;
        let placed = src.map(|(w, b, oc, k)| {
            to_f32_in_out(&mut buf[at..at + w.len()], w, k, oc);
            at += w.len();
            (at - w.len(), b.to_vec(), k)
        });
        let buf = Arc::new(buf);
        placed.map(|(at, bias, k)| F32Linear {
            buf: Arc::clone(&buf),
            at,
            bias,
            k,
        })
    }
}

impl Bf16Weights {
    /// Packs the encoder weights in bf16, for the input gradients too with
    /// `backward` (training).
    pub(crate) fn new(
        cfg: &BertConfig,
        layout: &ParamLayout,
        params: &[f32],
        backward: bool,
    ) -> Bf16Weights {
        Self::build(cfg, layout, params, |w, b, oc, k| {
            PackedBf16::pack_for(w, Some(b), oc, k, backward)
        })
    }

    /// Packs the (changed) encoder weights of `params` again into these
    /// buffers: training's per-step copy, without fresh allocations.
    pub(crate) fn repack(&mut self, cfg: &BertConfig, layout: &ParamLayout, params: &[f32]) {
        let src = EncoderWeights::build(cfg, layout, params, |w, b, _, _| (w, b));
        for (dst, s) in self.layers.iter_mut().zip(&src.layers) {
            for (d, (w, b)) in [
                (&mut dst.qkv, s.qkv),
                (&mut dst.attn_out, s.attn_out),
                (&mut dst.inter, s.inter),
                (&mut dst.out, s.out),
            ] {
                d.repack(w, Some(b));
            }
        }
    }
}

impl Int8Weights {
    /// Quantizes the encoder weights to int8 per output channel.
    pub(crate) fn new(cfg: &BertConfig, layout: &ParamLayout, params: &[f32]) -> Int8Weights {
        Self::build(cfg, layout, params, |w, b, oc, k| Int8Linear {
            w: PackedInt8::quantize(w, k, oc, SourceLayout::OutIn),
            bias: b.to_vec(),
        })
    }
}
