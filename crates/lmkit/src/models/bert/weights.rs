//! bf16 copies of BERT's encoder matmul weights, packed for
//! [`crate::kernels::bf16_gemm::PackedBf16`] (`Bert::set_bf16`).

use crate::kernels::bf16_gemm::PackedBf16;
use crate::spec::config::BertConfig;
use crate::spec::layout::{
    bert_layer_prefix, bert_qkv_bias_range, bert_qkv_weight_range, ParamLayout,
};

/// The four encoder matmuls of one layer, packed.
#[derive(Debug, Clone)]
struct LayerBf16 {
    qkv: PackedBf16,
    attn_out: PackedBf16,
    inter: PackedBf16,
    out: PackedBf16,
}

/// bf16 copies of every encoder layer's matmul weights.
#[derive(Debug, Clone)]
pub(crate) struct Bf16Weights {
    layers: Vec<LayerBf16>,
}

impl Bf16Weights {
    /// Packs the encoder weights of `params` (laid out by `layout` for `cfg`),
    /// for the input gradients too with `backward` (training).
    pub(crate) fn new(
        cfg: &BertConfig,
        layout: &ParamLayout,
        params: &[f32],
        backward: bool,
    ) -> Bf16Weights {
        let (c, i) = (cfg.hidden_size, cfg.intermediate_size);
        let layers = (0..cfg.num_hidden_layers)
            .map(|l| {
                let p = bert_layer_prefix(l);
                // Ranges are checked when the model is built.
                let wr = bert_qkv_weight_range(layout, l).unwrap_or_default();
                let br = bert_qkv_bias_range(layout, l).unwrap_or_default();
                let lin = |name: &str, oc: usize, k: usize| {
                    PackedBf16::pack_for(
                        layout.view(params, &format!("{p}{name}.weight")),
                        Some(layout.view(params, &format!("{p}{name}.bias"))),
                        oc,
                        k,
                        backward,
                    )
                };
                LayerBf16 {
                    qkv: PackedBf16::pack_for(&params[wr], Some(&params[br]), 3 * c, c, backward),
                    attn_out: lin("attention.output.dense", c, c),
                    inter: lin("intermediate.dense", i, c),
                    out: lin("output.dense", c, i),
                }
            })
            .collect();
        Bf16Weights { layers }
    }

    pub(crate) fn qkv(&self, l: usize) -> &PackedBf16 {
        &self.layers[l].qkv
    }
    pub(crate) fn attn_out(&self, l: usize) -> &PackedBf16 {
        &self.layers[l].attn_out
    }
    pub(crate) fn inter(&self, l: usize) -> &PackedBf16 {
        &self.layers[l].inter
    }
    pub(crate) fn out(&self, l: usize) -> &PackedBf16 {
        &self.layers[l].out
    }
}
