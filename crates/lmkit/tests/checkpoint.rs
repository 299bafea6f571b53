//! Checkpoint round trips and every way a checkpoint can be wrong.
//! All checkpoints are built in Rust in temp dirs (no Python needed).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lmkit::checkpoint::{
    load_params, load_pretrained, open_model_dir, save_params, save_params_sharded,
    write_safetensors, LoadOptions, SafeTensors, TensorRef,
};
use lmkit::spec::{
    AnyConfig, Architecture, BertConfig, Family, Gpt2Config, HasLayout, ModelConfig, ParamLayout,
};
use lmkit::Error;

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "lmkit-ckpt-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tiny_gpt2() -> Gpt2Config {
    Gpt2Config {
        vocab_size: 17,
        n_positions: 9,
        n_embd: 8,
        n_layer: 2,
        n_head: 2,
        ..Default::default()
    }
}

fn tiny_bert() -> BertConfig {
    BertConfig {
        vocab_size: 19,
        hidden_size: 8,
        num_hidden_layers: 2,
        num_attention_heads: 2,
        intermediate_size: 12,
        max_position_embeddings: 11,
        ..Default::default()
    }
}

/// Distinct, exactly representable values so any misplaced copy shows.
fn pattern(layout: &ParamLayout) -> Vec<f32> {
    (0..layout.total_len())
        .map(|i| (i % 4096) as f32 * 0.25 - 512.0 + (i / 4096) as f32)
        .collect()
}

/// Writes `tensors` (name, shape, data) as F32 safetensors to `dir/model.safetensors`.
fn write_raw(dir: &Path, tensors: &[(String, Vec<usize>, Vec<f32>)]) -> PathBuf {
    let refs: Vec<TensorRef> = tensors
        .iter()
        .map(|(n, s, d)| TensorRef {
            name: n.clone(),
            shape: s.clone(),
            data: d,
        })
        .collect();
    let p = dir.join("model.safetensors");
    write_safetensors(&p, &refs, &BTreeMap::new()).unwrap();
    p
}

/// The tensors of a saved checkpoint, to tamper with.
fn read_all(path: &Path) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let st = SafeTensors::open(path).unwrap();
    st.names()
        .iter()
        .map(|n| {
            (
                n.clone(),
                st.shape(n).unwrap().to_vec(),
                st.tensor_f32(n).unwrap().into_owned(),
            )
        })
        .collect()
}

fn load(
    layout: &ParamLayout,
    path: &Path,
    family: Family,
    opts: LoadOptions,
) -> Result<Vec<f32>, Error> {
    let st = SafeTensors::open(path)?;
    let mut p = layout.zeros();
    load_params(layout, &mut p, &st, family, opts)?;
    Ok(p)
}

#[test]
fn gpt2_save_load_round_trip() {
    let dir = TempDir::new("gpt2");
    let cfg = tiny_gpt2();
    let arch = Architecture::Gpt2LMHeadModel;
    let layout = cfg.layout(arch).unwrap();
    let params = pattern(&layout);
    save_params(&layout, &params, &cfg, &dir.0, arch).unwrap();

    let st = SafeTensors::open(dir.0.join("model.safetensors")).unwrap();
    assert!(
        st.names().iter().all(|n| n.starts_with("transformer.")),
        "{:?}",
        st.names()
    );
    assert_eq!(
        st.metadata().unwrap().get("format").map(String::as_str),
        Some("pt")
    );
    assert_eq!(
        st.shape("transformer.h.1.attn.c_attn.weight"),
        Some(&[8usize, 24][..])
    );

    let p = load_pretrained(dir.0.to_str().unwrap(), None, LoadOptions::default()).unwrap();
    assert_eq!(p.arch, arch);
    assert_eq!(p.params, params);
    assert!(p.report.ignored.is_empty() && p.report.missing_heads.is_empty());
    let mut expect = cfg.clone();
    expect.architectures = vec!["GPT2LMHeadModel".into()];
    assert_eq!(p.config, AnyConfig::Gpt2(expect));

    // Saved without prefix (GPT2Model) it loads into the same layout.
    let dir2 = TempDir::new("gpt2-base");
    save_params(&layout, &params, &cfg, &dir2.0, Architecture::Gpt2Model).unwrap();
    let st = SafeTensors::open(dir2.0.join("model.safetensors")).unwrap();
    assert!(st.contains("wte.weight") && !st.contains("transformer.wte.weight"));
    assert_eq!(
        load(
            &layout,
            &dir2.0.join("model.safetensors"),
            Family::Gpt2,
            Default::default()
        )
        .unwrap(),
        params
    );
}

#[test]
fn gpt2_tied_head_and_buffers_are_checked_then_ignored() {
    let dir = TempDir::new("gpt2-extra");
    let cfg = tiny_gpt2();
    let layout = cfg.layout(Architecture::Gpt2LMHeadModel).unwrap();
    let params = pattern(&layout);
    save_params(
        &layout,
        &params,
        &cfg,
        &dir.0,
        Architecture::Gpt2LMHeadModel,
    )
    .unwrap();
    let path = dir.0.join("model.safetensors");
    let mut t = read_all(&path);
    t.push(("lm_head.weight".into(), vec![17, 8], vec![0.0; 17 * 8]));
    t.push((
        "transformer.h.0.attn.bias".into(),
        vec![1, 1, 9, 9],
        vec![1.0; 81],
    ));
    t.push(("h.1.attn.masked_bias".into(), vec![], vec![-1e4]));
    write_raw(&dir.0, &t);
    let st = SafeTensors::open(&path).unwrap();
    let mut p = layout.zeros();
    let report = load_params(&layout, &mut p, &st, Family::Gpt2, Default::default()).unwrap();
    assert_eq!(p, params);
    assert_eq!(report.ignored.len(), 3);

    // A tied copy of the wrong shape is an error naming it.
    let n = t.len();
    t[n - 3] = ("lm_head.weight".into(), vec![16, 8], vec![0.0; 16 * 8]);
    write_raw(&dir.0, &t);
    let e = load(&layout, &path, Family::Gpt2, Default::default()).unwrap_err();
    assert!(
        matches!(&e, Error::ShapeMismatch { key, .. } if key == "lm_head.weight"),
        "{e}"
    );
}

#[test]
fn missing_unexpected_misshaped_duplicate_and_dtype_errors_name_the_key() {
    let dir = TempDir::new("errors");
    let cfg = tiny_gpt2();
    let layout = cfg.layout(Architecture::Gpt2LMHeadModel).unwrap();
    save_params(
        &layout,
        &pattern(&layout),
        &cfg,
        &dir.0,
        Architecture::Gpt2LMHeadModel,
    )
    .unwrap();
    let path = dir.0.join("model.safetensors");
    let good = read_all(&path);
    let opts = LoadOptions {
        allow_missing_heads: true,
        ignore_unused_heads: true,
    };

    let mut t = good.clone();
    t.retain(|(n, _, _)| n != "transformer.h.1.mlp.c_fc.bias");
    write_raw(&dir.0, &t);
    let e = load(&layout, &path, Family::Gpt2, opts).unwrap_err();
    assert!(
        matches!(&e, Error::MissingTensor { key, .. } if key == "h.1.mlp.c_fc.bias"),
        "{e}"
    );
    assert!(e.to_string().contains("model.safetensors"), "{e}");

    let mut t = good.clone();
    t.push(("transformer.h.2.ln_1.weight".into(), vec![8], vec![0.0; 8]));
    write_raw(&dir.0, &t);
    let e = load(&layout, &path, Family::Gpt2, opts).unwrap_err();
    assert!(
        matches!(&e, Error::UnexpectedTensor { key, .. } if key == "transformer.h.2.ln_1.weight"),
        "{e}"
    );

    let mut t = good.clone();
    let i = t
        .iter()
        .position(|(n, _, _)| n == "transformer.h.0.mlp.c_fc.weight")
        .unwrap();
    t[i].1 = vec![32, 8]; // transposed: the [out, in] a Linear would store
    write_raw(&dir.0, &t);
    let e = load(&layout, &path, Family::Gpt2, opts).unwrap_err();
    match &e {
        Error::ShapeMismatch {
            key,
            expected,
            found,
            ..
        } => {
            assert_eq!(
                (key.as_str(), expected.as_slice(), found.as_slice()),
                (
                    "transformer.h.0.mlp.c_fc.weight",
                    &[8, 32][..],
                    &[32, 8][..]
                )
            )
        }
        _ => panic!("{e}"),
    }

    let mut t = good.clone();
    let dup = t
        .iter()
        .find(|(n, _, _)| n == "transformer.ln_f.bias")
        .unwrap()
        .clone();
    t.push(("ln_f.bias".into(), dup.1, dup.2));
    write_raw(&dir.0, &t);
    let e = load(&layout, &path, Family::Gpt2, opts).unwrap_err();
    assert!(e.to_string().contains("ln_f.bias"), "{e}");

    // Wrong dtype: an I32 tensor where a parameter should be.
    let bytes = raw_file(&[("wpe.weight", "I32", vec![9, 8], vec![0u8; 9 * 8 * 4])]);
    let st = SafeTensors::from_bytes(bytes, "mem.safetensors").unwrap();
    let mut p = layout.zeros();
    let e = load_params(&layout, &mut p, &st, Family::Gpt2, opts).unwrap_err();
    assert!(
        matches!(&e, Error::Dtype { key, dtype, .. } if key == "wpe.weight" && dtype == "I32"),
        "{e}"
    );

    // Truncated file on disk.
    write_raw(&dir.0, &good);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 5]).unwrap();
    let e = SafeTensors::open(&path).unwrap_err();
    assert!(
        matches!(&e, Error::Safetensors { path: p, .. } if p == &path),
        "{e}"
    );
    std::fs::write(&path, &bytes[..3]).unwrap();
    assert!(matches!(
        SafeTensors::open(&path).unwrap_err(),
        Error::Safetensors { .. }
    ));
}

/// A safetensors file of arbitrary dtypes: (name, dtype, shape, raw bytes).
fn raw_file(tensors: &[(&str, &str, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut off = 0;
    for (n, d, s, b) in tensors {
        header.insert(
            n.to_string(),
            serde_json::json!({"dtype": d, "shape": s, "data_offsets": [off, off + b.len()]}),
        );
        off += b.len();
    }
    let h = serde_json::to_vec(&header).unwrap();
    let mut v = (h.len() as u64).to_le_bytes().to_vec();
    v.extend(h);
    for (_, _, _, b) in tensors {
        v.extend(b);
    }
    v
}

#[test]
fn half_precision_checkpoints_load() {
    let cfg = tiny_gpt2();
    let layout = cfg.layout(Architecture::Gpt2Model).unwrap();
    let params = pattern(&layout);
    for dtype in ["F16", "BF16"] {
        let tensors: Vec<(&str, &str, Vec<usize>, Vec<u8>)> = layout
            .specs()
            .iter()
            .map(|s| {
                let bytes = params[s.range()]
                    .iter()
                    .flat_map(|&x| match dtype {
                        "F16" => half::f16::from_f32(x).to_le_bytes(),
                        _ => half::bf16::from_f32(x).to_le_bytes(),
                    })
                    .collect();
                (s.name.as_str(), dtype, s.shape.clone(), bytes)
            })
            .collect();
        let st = SafeTensors::from_bytes(raw_file(&tensors), "half.safetensors").unwrap();
        let mut p = layout.zeros();
        load_params(&layout, &mut p, &st, Family::Gpt2, Default::default()).unwrap();
        for (a, b) in p.iter().zip(&params) {
            let tol = if dtype == "F16" { 1e-3 } else { 1e-2 };
            assert!(
                (a - b).abs() <= tol * b.abs().max(1.0),
                "{dtype}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn bert_heads_round_trip_and_cross_loading() {
    let dir = TempDir::new("bert");
    let cfg = tiny_bert();
    let pre = Architecture::BertForPreTraining;
    let layout = cfg.layout(pre).unwrap();
    let params = pattern(&layout);
    save_params(&layout, &params, &cfg, &dir.0, pre).unwrap();
    let path = dir.0.join("model.safetensors");
    let st = SafeTensors::open(&path).unwrap();
    for k in [
        "bert.pooler.dense.weight",
        "cls.predictions.bias",
        "cls.seq_relationship.weight",
        "bert.encoder.layer.1.attention.self.value.bias",
    ] {
        assert!(st.contains(k), "{k} not in {:?}", st.names());
    }
    let p = load_pretrained(dir.0.to_str().unwrap(), None, LoadOptions::default()).unwrap();
    assert_eq!((p.arch, &p.params), (pre, &params));

    // Base model from a pretraining checkpoint: the heads are unexpected unless ignored.
    let base = cfg.layout(Architecture::BertModel).unwrap();
    let e = load(&base, &path, Family::Bert, LoadOptions::default()).unwrap_err();
    assert!(
        matches!(&e, Error::UnexpectedTensor { key, .. } if key.starts_with("cls.")),
        "{e}"
    );
    let got = load(
        &base,
        &path,
        Family::Bert,
        LoadOptions {
            ignore_unused_heads: true,
            ..Default::default()
        },
    )
    .unwrap();
    for s in base.specs() {
        assert_eq!(
            base.view(&got, &s.name),
            layout.view(&params, &s.name),
            "{}",
            s.name
        );
    }

    // Classifier from a pretraining checkpoint: the classifier is missing unless allowed.
    let mut cls_cfg = cfg.clone();
    cls_cfg.set_num_labels(3);
    let cls = cls_cfg
        .layout(Architecture::BertForSequenceClassification)
        .unwrap();
    let e = load(
        &cls,
        &path,
        Family::Bert,
        LoadOptions {
            ignore_unused_heads: true,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::MissingTensor { key, .. } if key.starts_with("classifier.")),
        "{e}"
    );
    let st = SafeTensors::open(&path).unwrap();
    let mut got = cls.zeros();
    let opts = LoadOptions {
        allow_missing_heads: true,
        ignore_unused_heads: true,
    };
    let report = load_params(&cls, &mut got, &st, Family::Bert, opts).unwrap();
    assert_eq!(
        report.missing_heads,
        vec!["classifier.weight", "classifier.bias"]
    );
    assert!(
        report.unused_heads.iter().all(|k| k.starts_with("cls.")) && report.unused_heads.len() == 7,
        "{:?}",
        report.unused_heads
    );
    assert_eq!(
        cls.view(&got, "pooler.dense.bias"),
        layout.view(&params, "pooler.dense.bias")
    );
}

#[test]
fn bert_legacy_names_tied_decoder_and_position_ids() {
    let dir = TempDir::new("bert-legacy");
    let cfg = tiny_bert();
    let arch = Architecture::BertForMaskedLM;
    let layout = cfg.layout(arch).unwrap();
    let params = pattern(&layout);
    save_params(&layout, &params, &cfg, &dir.0, arch).unwrap();
    let path = dir.0.join("model.safetensors");
    let mut t: Vec<_> = read_all(&path)
        .into_iter()
        .map(|(n, s, d)| {
            (
                n.replace("LayerNorm.weight", "LayerNorm.gamma")
                    .replace("LayerNorm.bias", "LayerNorm.beta"),
                s,
                d,
            )
        })
        .collect();
    t.push((
        "cls.predictions.decoder.weight".into(),
        vec![19, 8],
        vec![0.0; 19 * 8],
    ));
    t.push((
        "cls.predictions.decoder.bias".into(),
        vec![19],
        vec![0.0; 19],
    ));
    t.push((
        "bert.embeddings.position_ids".into(),
        vec![1, 11],
        vec![0.0; 11],
    ));
    write_raw(&dir.0, &t);
    assert_eq!(
        load(&layout, &path, Family::Bert, Default::default()).unwrap(),
        params
    );
}

#[test]
fn save_rejects_mismatched_layout_and_family() {
    let dir = TempDir::new("save-bad");
    let cfg = tiny_gpt2();
    let layout = cfg.layout(Architecture::Gpt2Model).unwrap();
    let params = layout.zeros();
    let other = Gpt2Config {
        n_layer: 3,
        ..tiny_gpt2()
    };
    assert!(matches!(
        save_params(&layout, &params, &other, &dir.0, Architecture::Gpt2Model),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        save_params(&layout, &params, &cfg, &dir.0, Architecture::BertModel),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        save_params(&layout, &params[1..], &cfg, &dir.0, Architecture::Gpt2Model),
        Err(Error::InvalidInput(_))
    ));
    assert!(!dir.0.join("model.safetensors").exists());
}

#[test]
fn bad_config_files_name_file_and_field() {
    let dir = TempDir::new("config");
    let p = dir.0.join("config.json");
    std::fs::write(&p, r#"{"model_type": "gpt2", "n_embd": 10, "n_head": 3}"#).unwrap();
    let e = AnyConfig::from_file(&p).unwrap_err();
    assert!(
        matches!(&e, Error::Config { path: Some(f), field, .. } if f == &p && field == "n_embd"),
        "{e}"
    );
    std::fs::write(&p, "{\"model_type\": \"bert\",\n \"hidden_size\": \"big\"}").unwrap();
    let e = AnyConfig::from_file(&p).unwrap_err();
    assert!(
        matches!(&e, Error::Config { field, .. } if field == "hidden_size"),
        "{e}"
    );
    std::fs::write(&p, "{\"model_type\": \"bert\",\n \"hidden_size\": }").unwrap();
    let e = AnyConfig::from_file(&p).unwrap_err();
    assert!(matches!(&e, Error::Json { line: 2, .. }), "{e}");
    let e = AnyConfig::from_file(dir.0.join("nope.json")).unwrap_err();
    assert!(matches!(&e, Error::Io { .. }), "{e}");
    let e = open_model_dir(&dir.0).unwrap_err();
    assert!(e.to_string().contains("config.json"), "{e}");
}

/// The real all-MiniLM-L6-v2 (assets/minilm, fetched by scripts/fetch-assets.sh)
/// loads strictly as a BertModel: every key resolves, `position_ids` is ignored.
#[test]
fn real_minilm_loads_strictly() -> Result<(), String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/minilm");
    if !dir.join("model.safetensors").exists() {
        return Err(format!(
            "{} is missing: run scripts/fetch-assets.sh",
            dir.display()
        ));
    }
    let p = load_pretrained(dir.to_str().unwrap(), None, LoadOptions::default())
        .map_err(|e| e.to_string())?;
    assert_eq!(p.arch, Architecture::BertModel);
    assert_eq!(p.layout.total_len(), 22_713_216);
    assert_eq!(p.report.ignored, vec!["embeddings.position_ids"]);
    // LayerNorm weights of a trained model are not all zero or one.
    let g = p
        .layout
        .view(&p.params, "encoder.layer.5.output.LayerNorm.weight");
    assert!(g.iter().any(|&x| x != 1.0 && x != 0.0));
    Ok(())
}

/// A `config.json` exactly as transformers 5.23 `GPT2LMHeadModel.save_pretrained` wrote it.
const HF_GPT2_CONFIG: &str = r#"{
  "activation_function": "gelu_new", "add_cross_attention": false, "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1, "bos_token_id": 50256, "dtype": "float32", "embd_pdrop": 0.1, "eos_token_id": 50256,
  "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_embd": 8, "n_head": 2,
  "n_inner": null, "n_layer": 1, "n_positions": 16, "pad_token_id": null, "reorder_and_upcast_attn": false,
  "resid_pdrop": 0.1, "scale_attn_by_inverse_layer_idx": false, "scale_attn_weights": true,
  "summary_activation": null, "summary_first_dropout": 0.1, "summary_proj_to_labels": true,
  "summary_type": "cls_index", "summary_use_proj": true, "tie_word_embeddings": true,
  "transformers_version": "5.23.0", "use_cache": true, "vocab_size": 11
}"#;

#[test]
fn hf_written_config_round_trips_every_model_key() {
    let AnyConfig::Gpt2(c) = AnyConfig::from_json_str(HF_GPT2_CONFIG).unwrap() else {
        panic!("not GPT-2")
    };
    assert_eq!(
        (
            c.n_embd,
            c.n_head,
            c.n_layer,
            c.n_positions,
            c.vocab_size,
            c.inner()
        ),
        (8, 2, 1, 16, 11, 32)
    );
    assert_eq!(
        (c.layer_norm_epsilon, c.pad_token_id, c.eos_token_id),
        (1e-5, None, Some(50256))
    );
    let original: serde_json::Value = serde_json::from_str(HF_GPT2_CONFIG).unwrap();
    let written = c.to_json_value();
    for (k, v) in original.as_object().unwrap() {
        if k == "dtype" || k == "transformers_version" {
            assert!(
                written.get(k).is_none(),
                "{k} describes the file, not the model"
            );
        } else {
            assert_eq!(written.get(k), Some(v), "key {k}");
        }
    }
}

/// Saving in shards (HF's layout: model-0000K-of-0000N.safetensors and the
/// index) loads back the same weights; re-saving in the other form, or in
/// another number of shards, leaves no stale file behind.
#[test]
fn sharded_save_round_trip_and_stale_files() {
    let dir = TempDir::new("shards");
    for (cfg, arch) in [
        (AnyConfig::Gpt2(tiny_gpt2()), Architecture::Gpt2LMHeadModel),
        (
            AnyConfig::Bert(tiny_bert()),
            Architecture::BertForPreTraining,
        ),
    ] {
        let d = dir.0.join(arch.hf_name());
        let layout = cfg.layout(arch).unwrap();
        let params = pattern(&layout);
        let files = |d: &Path| -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| n.contains("safetensors"))
                .collect();
            v.sort();
            v
        };
        let total = layout.total_len() as u64 * 4;
        let save = |max: Option<u64>| match &cfg {
            AnyConfig::Gpt2(c) => save_params_sharded(&layout, &params, c, &d, arch, max),
            AnyConfig::Bert(c) => save_params_sharded(&layout, &params, c, &d, arch, max),
        };
        save(Some(total / 3)).unwrap();
        let shards = files(&d);
        assert!(shards.len() >= 4, "{shards:?}"); // 3+ shards and the index
        assert!(shards.contains(&"model.safetensors.index.json".to_string()));
        let n = shards.len() - 1;
        assert!(
            shards.contains(&format!("model-00001-of-{n:05}.safetensors")),
            "{shards:?}"
        );
        let p = load_pretrained(d.to_str().unwrap(), Some(arch), LoadOptions::default()).unwrap();
        assert_eq!(p.params, params, "{arch}: sharded round trip");
        // Fewer, larger shards: the earlier ones are gone.
        save(Some(total / 2)).unwrap();
        let fewer = files(&d);
        assert!(fewer.len() < shards.len() && fewer.len() >= 3, "{fewer:?}");
        assert!(
            fewer.iter().all(|f| !f.contains(&format!("-of-{n:05}"))),
            "{fewer:?}"
        );
        // One file again: no index, no shard.
        save(None).unwrap();
        assert_eq!(files(&d), ["model.safetensors"]);
        let p = load_pretrained(d.to_str().unwrap(), Some(arch), LoadOptions::default()).unwrap();
        assert_eq!(p.params, params);
        assert!(save(Some(0)).is_err());
    }
}
