//! The four GPT-2 sizes (124M, 355M, 774M, 1.5B) from their config alone:
//! the `pretrain` presets and the hub's config.json fields give layouts with
//! exactly HF's parameter counts.
//!
//! The counts are `GPT2LMHeadModel(GPT2Config(n_layer=…, n_embd=…,
//! n_head=…)).num_parameters()` (tied `lm_head` counted once, as in the
//! layout), computed once with transformers 5.23 / torch 2.15 on the meta
//! device:
//!
//! ```python
//! with torch.device("meta"):
//!     GPT2LMHeadModel(GPT2Config(n_layer=48, n_embd=1600, n_head=25)).num_parameters()
//! ```

use lmkit::recipes::pretrain_options::preset;
use lmkit::spec::{gpt2_layout, Family, Gpt2Config};

/// (preset, n_layer, n_embd, n_head, HF's num_parameters()).
const SIZES: [(&str, usize, usize, usize, usize); 4] = [
    ("gpt2", 12, 768, 12, 124_439_808),
    ("gpt2-medium", 24, 1024, 16, 354_823_168),
    ("gpt2-large", 36, 1280, 20, 774_030_080),
    ("gpt2-xl", 48, 1600, 25, 1_557_611_200),
];

#[test]
fn presets_and_hub_configs_give_hf_parameter_counts() {
    for (name, l, c, h, hf) in SIZES {
        let (pl, pc, ph, pp) = preset(Family::Gpt2, name).unwrap();
        assert_eq!((pl, pc, ph, pp), (l, c, h, 1024), "{name}");
        let cfg = Gpt2Config {
            n_layer: pl,
            n_embd: pc,
            n_head: ph,
            n_positions: pp,
            ..Default::default()
        };
        cfg.validate().unwrap();
        let layout = gpt2_layout(&cfg).unwrap();
        assert_eq!(layout.total_len(), hf, "{name}: layout vs HF");
        // The hub's config.json for that size (its own field names).
        let json = format!(
            r#"{{"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 50257,
                "n_ctx": 1024, "n_positions": 1024, "n_embd": {c}, "n_layer": {l}, "n_head": {h},
                "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05}}"#
        );
        let hub = Gpt2Config::from_json_str(&json).unwrap();
        assert_eq!(hub.inner(), 4 * c, "{name}");
        assert_eq!(
            gpt2_layout(&hub).unwrap().total_len(),
            hf,
            "{name}: hub config"
        );
    }
}
