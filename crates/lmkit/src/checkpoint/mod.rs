//! Checkpoints in HF layout: `config.json` + `model.safetensors` read
//! (memory-mapped) and written so that transformers' `from_pretrained`
//! loads them with no missing or unexpected keys; atomic file writes.
//!
//! Key names go through the single table in [`crate::spec::names`].
//! Training checkpoints (optimizer moments, trainer state) are in [`state`].
//! PyTorch's `pytorch_model.bin` is read too (never written), through a
//! restricted unpickler ([`torch_bin`]).

mod hub;
mod safetensors;
pub mod state;
pub mod torch_bin;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

pub use self::hub::{hub_cache_dirs, resolve_model_dir};
pub use self::safetensors::{write_safetensors, Dtype, SafeTensors, TensorRef};

use crate::error::{Error, Result};
use crate::spec::config::{AnyConfig, ModelConfig};
use crate::spec::layout::{HasLayout, ParamLayout};
use crate::spec::names::{file_key, is_head, resolve_key, Architecture, Family, KeyRole};

/// File names inside a model directory.
pub const CONFIG_FILE: &str = "config.json";
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// The index of a sharded checkpoint (HF's name), read when
/// [`WEIGHTS_FILE`] is absent.
pub const WEIGHTS_INDEX_FILE: &str = "model.safetensors.index.json";
/// PyTorch weights (`torch.save` of the state dict), read when a folder has
/// no safetensors; and their shard index.
pub const TORCH_WEIGHTS_FILE: &str = "pytorch_model.bin";
pub const TORCH_WEIGHTS_INDEX_FILE: &str = "pytorch_model.bin.index.json";

/// How strict [`load_params`] is about head tensors (pooler, MLM, NSP,
/// classifier, QA — see `names::is_head`). Everything else is always strict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Head parameters absent from the file are left untouched and listed in
    /// [`LoadReport::missing_heads`] (fine-tuning from a base checkpoint: the
    /// caller initialises them as HF does).
    pub allow_missing_heads: bool,
    /// Head tensors in the file that the layout lacks are skipped and listed
    /// in [`LoadReport::unused_heads`] (e.g. a base model from a
    /// pretraining checkpoint).
    pub ignore_unused_heads: bool,
}

/// What [`load_params`] did besides loading.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Canonical names of head parameters not found (only with `allow_missing_heads`).
    pub missing_heads: Vec<String>,
    /// File keys of head tensors not in the layout (only with `ignore_unused_heads`).
    pub unused_heads: Vec<String>,
    /// File keys of tied copies and buffers, checked and skipped.
    pub ignored: Vec<String>,
}

/// Fills `params` (laid out by `layout`) from `file`, resolving each key with
/// or without the family prefix. Errors name the key: a layout parameter the
/// file lacks ([`Error::MissingTensor`]), a file tensor the model has no place
/// for ([`Error::UnexpectedTensor`]), a wrong shape ([`Error::ShapeMismatch`],
/// also for tied copies), an unconvertible dtype ([`Error::Dtype`]).
/// `family` is that of the target model (`arch.family()`).
pub fn load_params(
    layout: &ParamLayout,
    params: &mut [f32],
    file: &SafeTensors,
    family: Family,
    opts: LoadOptions,
) -> Result<LoadReport> {
    if params.len() != layout.total_len() {
        return Err(Error::InvalidInput(format!(
            "parameter buffer has {} f32s, layout needs {}",
            params.len(),
            layout.total_len()
        )));
    }
    let path = file.path().to_path_buf();
    let mut report = LoadReport::default();
    // canonical name -> file key it was loaded from (catches `x` and `bert.x` both present).
    let mut loaded: HashMap<String, String> = HashMap::new();
    for key in file.names() {
        let found = file.shape(key).unwrap_or(&[]).to_vec();
        let check_shape = |expected: &[usize]| -> Result<()> {
            if found != expected {
                return Err(Error::ShapeMismatch {
                    file: path.clone(),
                    key: key.clone(),
                    expected: expected.to_vec(),
                    found: found.clone(),
                });
            }
            Ok(())
        };
        let unused = |report: &mut LoadReport, name: &str| -> Result<()> {
            if opts.ignore_unused_heads && is_head(family, name) {
                report.unused_heads.push(key.clone());
                Ok(())
            } else {
                Err(Error::UnexpectedTensor {
                    file: path.clone(),
                    key: key.clone(),
                })
            }
        };
        let role = match resolve_key(family, key) {
            // Untied: the key is a parameter of its own (GPT-2 `lm_head.weight`).
            KeyRole::Tied { name, .. } if layout.contains(&name) => KeyRole::Param(name),
            role => role,
        };
        match role {
            KeyRole::Buffer => report.ignored.push(key.clone()),
            KeyRole::Tied { name, target } => match layout.get(&target) {
                Some(spec) => {
                    check_shape(&spec.shape)?;
                    report.ignored.push(key.clone());
                }
                None => unused(&mut report, &name)?,
            },
            KeyRole::Param(name) => match layout.get(&name) {
                Some(spec) => {
                    check_shape(&spec.shape)?;
                    if let Some(prev) = loaded.insert(name.clone(), key.clone()) {
                        return Err(Error::InvalidInput(format!(
                            "{}: tensors `{prev}` and `{key}` both hold parameter `{name}`",
                            path.display()
                        )));
                    }
                    file.read_f32_into(key, &mut params[spec.range()])?;
                }
                None => unused(&mut report, &name)?,
            },
        }
    }
    for spec in layout.specs() {
        if loaded.contains_key(&spec.name) {
            continue;
        }
        if opts.allow_missing_heads && is_head(family, &spec.name) {
            report.missing_heads.push(spec.name.clone());
        } else {
            return Err(Error::MissingTensor {
                file: path,
                key: spec.name.clone(),
            });
        }
    }
    Ok(report)
}

/// Writes `dir/model.safetensors` (F32, HF keys with `arch`'s prefix,
/// metadata `{"format": "pt"}`) and `dir/config.json` (with
/// `architectures: [arch]`), each atomically; creates `dir` if needed.
/// `layout` must be the layout `config` implies for `arch` (decay flags aside).
pub fn save_params(
    layout: &ParamLayout,
    params: &[f32],
    config: &impl HasLayout,
    dir: impl AsRef<Path>,
    arch: Architecture,
) -> Result<()> {
    save_params_sharded(layout, params, config, dir, arch, None)
}

/// [`save_params`] in shards of at most `max_shard_bytes` each when the
/// weights are larger (HF's `save_pretrained(max_shard_size=…)`: files
/// `model-0000K-of-0000N.safetensors` and `model.safetensors.index.json`;
/// a tensor larger than the limit gets a shard of its own). The shards,
/// then the index, are written atomically before the files of an earlier
/// save in the other form are removed, so a reader sees the old checkpoint
/// or the new one.
pub fn save_params_sharded(
    layout: &ParamLayout,
    params: &[f32],
    config: &impl HasLayout,
    dir: impl AsRef<Path>,
    arch: Architecture,
    max_shard_bytes: Option<u64>,
) -> Result<()> {
    let dir = dir.as_ref();
    if max_shard_bytes == Some(0) {
        return Err(Error::InvalidInput("a shard size of 0 bytes".into()));
    }
    if config.family() != arch.family() {
        return Err(Error::InvalidInput(format!(
            "a {:?} config cannot be saved as {arch}",
            config.family()
        )));
    }
    let expected = config.layout(arch)?;
    let same = expected.specs().len() == layout.specs().len()
        && expected
            .specs()
            .iter()
            .zip(layout.specs())
            .all(|(a, b)| a.name == b.name && a.shape == b.shape);
    if !same {
        return Err(Error::InvalidInput(format!(
            "the parameter layout does not match the config for {arch}"
        )));
    }
    if params.len() != layout.total_len() {
        return Err(Error::InvalidInput(format!(
            "parameter buffer has {} f32s, layout needs {}",
            params.len(),
            layout.total_len()
        )));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let tensors: Vec<TensorRef> = layout
        .specs()
        .iter()
        .map(|s| TensorRef {
            name: file_key(arch, &s.name),
            shape: s.shape.clone(),
            data: &params[s.range()],
        })
        .collect();
    let meta = BTreeMap::from([("format".to_string(), "pt".to_string())]);
    // Greedy groups in layout order, each at most the limit (or one tensor).
    let mut groups: Vec<Vec<&TensorRef>> = vec![Vec::new()];
    let mut filled = 0u64;
    for t in &tensors {
        let bytes = t.data.len() as u64 * 4;
        let last = groups.last_mut().expect("one group");
        if max_shard_bytes.is_some_and(|m| filled + bytes > m) && !last.is_empty() {
            groups.push(Vec::new());
            filled = 0;
        }
        groups.last_mut().expect("one group").push(t);
        filled += bytes;
    }
    let stale_shards = |keep: &[String]| -> Result<()> {
        for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
            let p = e.map_err(|e| Error::io(dir, e))?.path();
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let shard = name.starts_with("model-")
                && name.contains("-of-")
                && name.ends_with(".safetensors");
            if shard && !keep.iter().any(|k| k == name) {
                std::fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
            }
        }
        Ok(())
    };
    if groups.len() == 1 {
        write_safetensors(dir.join(WEIGHTS_FILE), &tensors, &meta)?;
        let index = dir.join(WEIGHTS_INDEX_FILE);
        if index.exists() {
            std::fs::remove_file(&index).map_err(|e| Error::io(&index, e))?;
        }
        stale_shards(&[])?;
    } else {
        let n = groups.len();
        let mut weight_map = BTreeMap::new();
        let mut names = Vec::with_capacity(n);
        for (k, g) in groups.iter().enumerate() {
            let name = format!("model-{:05}-of-{n:05}.safetensors", k + 1);
            let owned: Vec<TensorRef> = g.iter().map(|t| (*t).clone()).collect();
            write_safetensors(dir.join(&name), &owned, &meta)?;
            for t in g {
                weight_map.insert(t.name.clone(), name.clone());
            }
            names.push(name);
        }
        let total: u64 = tensors.iter().map(|t| t.data.len() as u64 * 4).sum();
        let index =
            serde_json::json!({"metadata": {"total_size": total}, "weight_map": weight_map});
        let mut text =
            serde_json::to_string_pretty(&index).map_err(|e| Error::InvalidInput(e.to_string()))?;
        text.push('\n');
        crate::util::fs::atomic_write(dir.join(WEIGHTS_INDEX_FILE), text.as_bytes())?;
        let single = dir.join(WEIGHTS_FILE);
        if single.exists() {
            std::fs::remove_file(&single).map_err(|e| Error::io(&single, e))?;
        }
        stale_shards(&names)?;
    }
    let mut json = config.to_json_value();
    if let Some(m) = json.as_object_mut() {
        m.insert("architectures".into(), serde_json::json!([arch.hf_name()]));
    }
    let mut text =
        serde_json::to_string_pretty(&json).map_err(|e| Error::InvalidInput(e.to_string()))?;
    text.push('\n');
    crate::util::fs::atomic_write(dir.join(CONFIG_FILE), text.as_bytes())
}

/// A model loaded from an HF directory: config, architecture, layout, weights.
#[derive(Debug)]
pub struct Pretrained {
    pub dir: PathBuf,
    pub config: AnyConfig,
    pub arch: Architecture,
    pub layout: ParamLayout,
    pub params: Vec<f32>,
    pub report: LoadReport,
}

/// Reads `dir/config.json`; the family comes from `model_type` (else
/// `architectures`). With `needs`, a checkpoint of another family is an
/// [`Error::WrongFamily`] naming `what` needed it, before anything else of
/// the folder is read (a tokenizer, weights).
pub fn read_config(dir: impl AsRef<Path>, needs: Option<(Family, &str)>) -> Result<AnyConfig> {
    let dir = dir.as_ref();
    let config = AnyConfig::from_file(dir.join(CONFIG_FILE))?;
    if let Some((needed, what)) = needs {
        let found = config.family();
        if found != needed {
            return Err(Error::WrongFamily {
                dir: dir.to_path_buf(),
                what: what.to_string(),
                needed: needed.name(),
                found: found.name(),
                architectures: config.architectures().join(", "),
            });
        }
    }
    Ok(config)
}

/// Opens `dir/config.json` and the weights, the first present of
/// `model.safetensors`, `model.safetensors.index.json` (shards),
/// `pytorch_model.bin`, `pytorch_model.bin.index.json` (PyTorch shards;
/// PyTorch weights are copied into memory, safetensors are memory-mapped).
pub fn open_model_dir(dir: impl AsRef<Path>) -> Result<(AnyConfig, SafeTensors)> {
    open_model_dir_for(dir, None)
}

/// [`open_model_dir`] for a caller that needs one family: a checkpoint of
/// the other is an [`Error::WrongFamily`] (see [`read_config`]).
pub fn open_model_dir_for(
    dir: impl AsRef<Path>,
    needs: Option<(Family, &str)>,
) -> Result<(AnyConfig, SafeTensors)> {
    let dir = dir.as_ref();
    let config = read_config(dir, needs)?;
    let weights = dir.join(WEIGHTS_FILE);
    let file = if weights.exists() {
        SafeTensors::open(weights)?
    } else if dir.join(WEIGHTS_INDEX_FILE).exists() {
        SafeTensors::open_sharded(dir.join(WEIGHTS_INDEX_FILE))?
    } else if dir.join(TORCH_WEIGHTS_FILE).exists() {
        torch_bin::open(&dir.join(TORCH_WEIGHTS_FILE))?
    } else if dir.join(TORCH_WEIGHTS_INDEX_FILE).exists() {
        torch_bin::open_sharded(&dir.join(TORCH_WEIGHTS_INDEX_FILE))?
    } else {
        return Err(Error::io(
            &weights,
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no model.safetensors, model.safetensors.index.json or pytorch_model.bin",
            ),
        ));
    };
    Ok((config, file))
}

/// Resolves `name_or_path` ([`resolve_model_dir`]), reads its config, builds
/// the layout of `arch` (default: the config's `architectures`) and loads the
/// weights. A given `arch` of another family than the checkpoint's is an
/// [`Error::WrongFamily`].
pub fn load_pretrained(
    name_or_path: &str,
    arch: Option<Architecture>,
    opts: LoadOptions,
) -> Result<Pretrained> {
    let dir = resolve_model_dir(name_or_path)?;
    let needs = arch.map(|a| (a.family(), a.hf_name()));
    let (config, file) = open_model_dir_for(&dir, needs)?;
    let arch = arch.unwrap_or_else(|| config.architecture());
    let layout = config.layout(arch)?;
    let mut params = layout.try_zeros()?;
    let report = load_params(&layout, &mut params, &file, arch.family(), opts)?;
    Ok(Pretrained {
        dir,
        config,
        arch,
        layout,
        params,
        report,
    })
}
