//! Finding a model directory: a path, or a name in the local HF hub cache.
//! With the `hub-download` feature a name missing from the cache is
//! downloaded into it (HF's own cache layout, shared with Python), unless
//! `HF_HUB_OFFLINE` is set; without the feature nothing is ever downloaded.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Legacy hub names that now live under an organisation; the cache may hold either.
const RENAMED: &[(&str, &str)] = &[
    ("gpt2", "openai-community/gpt2"),
    ("gpt2-medium", "openai-community/gpt2-medium"),
    ("gpt2-large", "openai-community/gpt2-large"),
    ("gpt2-xl", "openai-community/gpt2-xl"),
    ("distilgpt2", "distilbert/distilgpt2"),
    ("bert-base-uncased", "google-bert/bert-base-uncased"),
    ("bert-base-cased", "google-bert/bert-base-cased"),
    ("bert-large-uncased", "google-bert/bert-large-uncased"),
    ("bert-large-cased", "google-bert/bert-large-cased"),
    (
        "bert-base-multilingual-cased",
        "google-bert/bert-base-multilingual-cased",
    ),
];

/// The hub cache directories HF would use, in priority order:
/// `$HF_HUB_CACHE`, `$HF_HOME/hub`, `$XDG_CACHE_HOME/huggingface/hub`,
/// `~/.cache/huggingface/hub`.
pub fn hub_cache_dirs() -> Vec<PathBuf> {
    cache_dirs_from(|k| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    })
}

fn cache_dirs_from(env: impl Fn(&str) -> Option<PathBuf>) -> Vec<PathBuf> {
    if let Some(d) = env("HF_HUB_CACHE") {
        return vec![d];
    }
    if let Some(h) = env("HF_HOME") {
        return vec![h.join("hub")];
    }
    if let Some(x) = env("XDG_CACHE_HOME") {
        return vec![x.join("huggingface").join("hub")];
    }
    match env("HOME").or_else(|| env("USERPROFILE")) {
        Some(home) => vec![home.join(".cache").join("huggingface").join("hub")],
        None => vec![],
    }
}

/// A directory as is; else a hub name (`gpt2`, `org/name`) resolved to
/// `<cache>/models--org--name/snapshots/<refs/main>/`, downloaded there first
/// when the `hub-download` feature is on. Errors list every place looked at.
pub fn resolve_model_dir(name_or_path: &str) -> Result<PathBuf> {
    let caches = hub_cache_dirs();
    let found = resolve_in(name_or_path, &caches);
    #[cfg(feature = "hub-download")]
    if let (Err(Error::ModelNotFound { .. }), Some(cache)) = (&found, caches.first()) {
        let offline = std::env::var_os("HF_HUB_OFFLINE")
            .is_some_and(|v| !v.is_empty() && v != "0" && v != "false");
        if is_hub_name(name_or_path) && !offline {
            return download::model(name_or_path, cache).map_err(|why| {
                let not_found = found.unwrap_err();
                Error::InvalidInput(format!(
                    "{not_found}; downloading it from the HF hub failed: {why}"
                ))
            });
        }
    }
    found
}

#[cfg(feature = "hub-download")]
mod download {
    use std::path::{Path, PathBuf};

    use hf_hub::api::sync::ApiBuilder;
    use hf_hub::Cache;

    /// The weights, in order of preference (the first the repository has is
    /// fetched; an index brings the shards it names).
    const WEIGHTS: &[&str] = &[
        "model.safetensors",
        "model.safetensors.index.json",
        "pytorch_model.bin",
        "pytorch_model.bin.index.json",
    ];

    /// Files fetched when the repository has them; config.json is required.
    const FILES: &[&str] = &[
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "vocab.json",
        "merges.txt",
        "vocab.txt",
        // sentence-transformers: pooling and normalization (MiniLM and the
        // like embed wrongly without them).
        "modules.json",
        "sentence_bert_config.json",
        "config_sentence_transformers.json",
        "1_Pooling/config.json",
    ];

    /// Downloads the files of model `name` into `cache` (`HF_ENDPOINT` and
    /// `HF_TOKEN`, or the cache's `token` file, are honoured) and returns
    /// its snapshot folder; the error says why not.
    pub(super) fn model(name: &str, cache: &Path) -> Result<PathBuf, String> {
        let cache = Cache::new(cache.to_path_buf());
        let token = std::env::var("HF_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())
            .or_else(|| cache.token());
        let mut builder = ApiBuilder::from_cache(cache).with_token(token);
        if let Ok(endpoint) = std::env::var("HF_ENDPOINT") {
            builder = builder.with_endpoint(endpoint);
        }
        let api = builder.build().map_err(|e| e.to_string())?;
        let repo = api.model(name.to_string());
        let info = repo.info().map_err(|e| e.to_string())?;
        let present = |f: &str| info.siblings.iter().any(|s| s.rfilename == f);
        if !present("config.json") {
            return Err("the repository has no config.json".into());
        }
        let weights = WEIGHTS.iter().copied().find(|f| present(f)).ok_or(
            "the repository has no model.safetensors, pytorch_model.bin or shard index of either",
        )?;
        let mut snapshot = None;
        for file in FILES.iter().chain([&weights]).filter(|f| present(f)) {
            let path = repo.get(file).map_err(|e| format!("{file}: {e}"))?;
            if *file == "config.json" {
                // The snapshot folder (nested files such as 1_Pooling/config.json
                // have their own parent).
                snapshot = path.parent().map(Path::to_path_buf);
            }
        }
        if weights.ends_with(".index.json") {
            // The index, then every shard it names.
            let index = repo.get(weights).map_err(|e| format!("{weights}: {e}"))?;
            let text = std::fs::read_to_string(&index).map_err(|e| e.to_string())?;
            let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
            let mut shards: Vec<&str> = json["weight_map"]
                .as_object()
                .map(|m| m.values().filter_map(|v| v.as_str()).collect())
                .unwrap_or_default();
            shards.sort_unstable();
            shards.dedup();
            for f in shards {
                repo.get(f).map_err(|e| format!("{f}: {e}"))?;
            }
        }
        snapshot.ok_or_else(|| "nothing was downloaded".to_string())
    }
}

fn resolve_in(name_or_path: &str, caches: &[PathBuf]) -> Result<PathBuf> {
    let as_path = Path::new(name_or_path);
    if as_path.is_dir() {
        return Ok(as_path.to_path_buf());
    }
    let mut searched = vec![as_path.to_path_buf()];
    if is_hub_name(name_or_path) {
        let mut names = vec![name_or_path];
        if let Some((_, new)) = RENAMED.iter().find(|(old, _)| *old == name_or_path) {
            names.push(new);
        }
        for cache in caches {
            for name in &names {
                let repo = cache.join(format!("models--{}", name.replace('/', "--")));
                if let Some(dir) = snapshot(&repo) {
                    return Ok(dir);
                }
                searched.push(repo.join("snapshots"));
            }
        }
    }
    Err(Error::ModelNotFound {
        name: name_or_path.to_string(),
        searched,
    })
}

/// `name` or `org/name` with hub-legal characters.
fn is_hub_name(s: &str) -> bool {
    let parts: Vec<&str> = s.split('/').collect();
    parts.len() <= 2
        && parts.iter().all(|p| {
            !p.is_empty()
                && !p.starts_with('.')
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        })
}

/// The snapshot `refs/main` points to, or the only snapshot if there is no ref.
fn snapshot(repo: &Path) -> Option<PathBuf> {
    let snapshots = repo.join("snapshots");
    if let Ok(r) = std::fs::read_to_string(repo.join("refs").join("main")) {
        let dir = snapshots.join(r.trim());
        if dir.is_dir() {
            return Some(dir);
        }
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&snapshots)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    if dirs.len() == 1 {
        dirs.pop()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_priority() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| PathBuf::from(v))
            }
        };
        assert_eq!(
            cache_dirs_from(env(&[("HF_HUB_CACHE", "/a"), ("HF_HOME", "/b")])),
            vec![PathBuf::from("/a")]
        );
        assert_eq!(
            cache_dirs_from(env(&[("HF_HOME", "/b"), ("HOME", "/h")])),
            vec![PathBuf::from("/b/hub")]
        );
        assert_eq!(
            cache_dirs_from(env(&[("HOME", "/h")])),
            vec![PathBuf::from("/h/.cache/huggingface/hub")]
        );
    }

    #[test]
    fn finds_snapshots_and_reports_search() {
        let cache = std::env::temp_dir().join(format!("lmkit-hub-{}", std::process::id()));
        let repo = cache.join("models--openai-community--gpt2");
        std::fs::create_dir_all(repo.join("snapshots/abc123")).unwrap();
        std::fs::create_dir_all(repo.join("snapshots/old")).unwrap();
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs/main"), "abc123\n").unwrap();
        let caches = [cache.clone()];
        assert_eq!(
            resolve_in("gpt2", &caches).unwrap(),
            repo.join("snapshots/abc123")
        );
        assert_eq!(
            resolve_in("openai-community/gpt2", &caches).unwrap(),
            repo.join("snapshots/abc123")
        );
        let e = resolve_in("org/missing", &caches).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("models--org--missing"), "{msg}");
        let e = resolve_in("../not/a/name", &caches).unwrap_err();
        assert!(
            matches!(e, Error::ModelNotFound { ref searched, .. } if searched.len() == 1),
            "{e}"
        );
        std::fs::remove_dir_all(&cache).unwrap();
    }
}
