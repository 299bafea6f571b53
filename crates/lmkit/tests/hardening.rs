//! Hostile and damaged input to the library: every case here panicked,
//! aborted or allocated without bound before (issue 13); now each is an error
//! that names what is wrong, raised before anything large is allocated.

use std::path::{Path, PathBuf};

use lmkit::checkpoint::{load_pretrained, save_params, LoadOptions};
use lmkit::data::{open_shards, prepare_shards, PrepareOptions};
use lmkit::models::gpt2::Gpt2;
use lmkit::spec::{Architecture, BertConfig, Gpt2Config, HasLayout};
use lmkit::train::{
    load_train_state, save_checkpoint, LrSchedule, OptimConfig, OptimState, ScheduleKind,
    TrainState,
};

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lmkit-hard-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Peak resident set of this process so far, in MiB (Linux; 0 elsewhere).
fn peak_rss_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb / 1024)
}

fn config_error(json: &str, bert: bool) -> String {
    let e = if bert {
        BertConfig::from_json_str(json).map(|_| ()).unwrap_err()
    } else {
        Gpt2Config::from_json_str(json).map(|_| ()).unwrap_err()
    };
    e.to_string()
}

/// Item 2: sizes in `config.json` are checked against limits before anything
/// is sized by them (`num_labels` 1e9 took 24 GB, `hidden_size` 1e9 panicked
/// on capacity overflow, `n_layer` 1e6 took 2.6 GB before failing).
#[test]
fn config_sizes_are_bounded_before_allocation() {
    let before = peak_rss_mib();
    for (json, bert, field) in [
        (
            r#"{"model_type": "bert", "num_labels": 1000000000}"#,
            true,
            "num_labels",
        ),
        (
            r#"{"model_type": "bert", "hidden_size": 1000000000, "num_attention_heads": 1}"#,
            true,
            "hidden_size",
        ),
        (
            r#"{"model_type": "bert", "type_vocab_size": 4000000000}"#,
            true,
            "type_vocab_size",
        ),
        (
            r#"{"model_type": "bert", "intermediate_size": 18446744073709551615}"#,
            true,
            "intermediate_size",
        ),
        (
            r#"{"model_type": "gpt2", "n_layer": 1000000}"#,
            false,
            "n_layer",
        ),
        (
            r#"{"model_type": "gpt2", "n_embd": 1000000000, "n_head": 1}"#,
            false,
            "n_embd",
        ),
        (
            r#"{"model_type": "gpt2", "vocab_size": 4294967296}"#,
            false,
            "vocab_size",
        ),
        (
            r#"{"model_type": "gpt2", "n_positions": 1099511627776}"#,
            false,
            "n_positions",
        ),
    ] {
        let e = config_error(json, bert);
        assert!(e.contains(field) && e.contains("limit"), "{json}: {e}");
    }
    // Each size within its limit, the whole past the parameter bound: the
    // layout's checked arithmetic refuses it, naming the parameter.
    let huge = Gpt2Config {
        n_embd: 1 << 16,
        n_head: 1,
        n_layer: 1 << 10,
        ..Gpt2Config::default()
    };
    let e = huge.layout(Architecture::Gpt2LMHeadModel).unwrap_err();
    assert!(e.to_string().contains("scalar parameters"), "{e}");
    let e = Gpt2::new_random(huge, 0).err().expect("refused");
    assert!(e.to_string().contains("scalar parameters"), "{e}");
    let grew = peak_rss_mib().saturating_sub(before);
    assert!(grew < 64, "refusing the configs took {grew} MiB");
}

/// Item 2 through a checkpoint folder: the config is refused before the
/// weights are read.
#[test]
fn hostile_config_in_a_checkpoint_is_refused() {
    let dir = tmpdir("cfg");
    let cfg = Gpt2Config {
        vocab_size: 40,
        n_positions: 8,
        n_embd: 8,
        n_layer: 1,
        n_head: 2,
        ..Gpt2Config::default()
    };
    let m = Gpt2::new_random(cfg.clone(), 1).unwrap();
    save_params(
        &m.layout,
        &m.params,
        &cfg,
        &dir,
        Architecture::Gpt2LMHeadModel,
    )
    .unwrap();
    assert!(load_pretrained(dir.to_str().unwrap(), None, LoadOptions::default()).is_ok());
    let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["n_layer"] = serde_json::json!(1_000_000);
    std::fs::write(dir.join("config.json"), v.to_string()).unwrap();
    let e = load_pretrained(dir.to_str().unwrap(), None, LoadOptions::default()).unwrap_err();
    assert!(e.to_string().contains("n_layer"), "{e}");
}

/// Item 4: a token shard whose header claims 2^62 tokens wrapped the size
/// check and panicked on the first read; ids past the vocabulary panicked
/// in training.
#[test]
fn crafted_token_shards_are_refused() {
    let root = tmpdir("shards");
    std::fs::write(root.join("a.txt"), "hello world, hello shards\n".repeat(20)).unwrap();
    let out = root.join("data");
    let opts = PrepareOptions {
        vocab_size: 257,
        eos_id: 256,
        val_fraction: 0.0,
        tokenizer_id: "bytes".into(),
        text_field: "text".into(),
    };
    let enc = |s: &str| -> Result<Vec<u32>, String> { Ok(s.bytes().map(u32::from).collect()) };
    prepare_shards(&[root.join("a.txt")], &out, &opts, &enc, &mut |_, _| {}).unwrap();
    assert!(open_shards(&out).is_ok());
    let shard = out.join("train.bin");
    let good = std::fs::read(&shard).unwrap();

    // len · width + 32 wraps to the file's size.
    let mut bad = good.clone();
    let width = u32::from_le_bytes(bad[8..12].try_into().unwrap()) as u64;
    let data = (good.len() - 32) as u64;
    let wrapped = data / width + (1u64 << 63) / (width / 2);
    bad[16..24].copy_from_slice(&wrapped.to_le_bytes());
    std::fs::write(&shard, &bad).unwrap();
    let e = open_shards(&out)
        .err()
        .expect("a wrapped length is refused");
    assert!(e.to_string().contains("truncated"), "{e}");

    // A token id outside meta.json's vocabulary.
    let mut bad = good.clone();
    bad[32..34].copy_from_slice(&300u16.to_le_bytes());
    std::fs::write(&shard, &bad).unwrap();
    let e = open_shards(&out)
        .err()
        .expect("an id past the vocabulary is refused");
    assert!(e.to_string().contains("token id 300"), "{e}");
}

fn optim() -> OptimConfig {
    OptimConfig {
        schedule: LrSchedule {
            kind: ScheduleKind::Cosine,
            max_lr: 1e-3,
            min_lr: 1e-4,
            warmup_steps: 0,
            total_steps: 10,
        },
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.1,
        grad_clip: 1.0,
        grad_accum: 1,
    }
}

/// Item 4: a corrupted `optimizer.safetensors` header panicked on resume.
#[test]
fn corrupted_optimizer_state_is_an_error() {
    let root = tmpdir("optim");
    let n = 64;
    let state = TrainState::new(1, optim(), 2, 8, n);
    let opt = OptimState::new(n);
    let dir = save_checkpoint(&root, &state, &opt, &mut |_: &Path| Ok(()), 1).unwrap();
    assert!(load_train_state(&dir).is_ok());
    let path = dir.join("optimizer.safetensors");
    let good = std::fs::read(&path).unwrap();
    let hlen = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    let header = String::from_utf8(good[8..8 + hlen].to_vec()).unwrap();
    let mut cases: Vec<Vec<u8>> = vec![
        good[..good.len() - 1].to_vec(),
        good[..7].to_vec(),
        Vec::new(),
    ];
    for v in [u64::MAX, u64::MAX - 7, (hlen + 1) as u64, 1 << 40] {
        let mut c = good.clone();
        c[..8].copy_from_slice(&v.to_le_bytes());
        cases.push(c);
    }
    // Offsets that wrap, a shape whose product overflows, garbage JSON.
    for (from, to) in [
        (
            "\"data_offsets\":[0,",
            "\"data_offsets\":[18446744073709551615,",
        ),
        ("\"shape\":[64]", "\"shape\":[4294967296,4294967296]"),
        ("{", "["),
    ] {
        let patched = header.replacen(from, to, 1);
        assert_ne!(patched, header, "{from}");
        let mut c = (patched.len() as u64).to_le_bytes().to_vec();
        c.extend(patched.as_bytes());
        c.extend(&good[8 + hlen..]);
        cases.push(c);
    }
    for (i, c) in cases.iter().enumerate() {
        std::fs::write(&path, c).unwrap();
        let e = load_train_state(&dir).err();
        assert!(e.is_some(), "case {i} loaded");
        let e = e.unwrap().to_string();
        assert!(e.contains("optimizer.safetensors"), "case {i}: {e}");
    }
}

/// Item 5: an end-of-text id outside the vocabulary could never stop
/// generation; it was accepted silently.
#[test]
fn eos_outside_the_vocabulary_is_refused() {
    use lmkit::models::gpt2::{GenerationConfig, Gpt2Engine, WeightDtype};
    let cfg = Gpt2Config {
        vocab_size: 40,
        n_positions: 16,
        n_embd: 8,
        n_layer: 1,
        n_head: 2,
        ..Gpt2Config::default()
    };
    let m = Gpt2::new_random(cfg.clone(), 3).unwrap();
    let mut e = Gpt2Engine::from_params(&cfg, &m.layout, &m.params, WeightDtype::F32).unwrap();
    let mut g = GenerationConfig {
        max_new_tokens: 4,
        eos_token_id: Some(40),
        ..GenerationConfig::default()
    };
    let err = e
        .generate(&[1, 2], &g, |_| std::ops::ControlFlow::Continue(()))
        .expect_err("refused");
    assert!(err.to_string().contains("eos_token_id 40"), "{err}");
    assert!(e.generate_batch(&[vec![1, 2]], &g).is_err());
    g.eos_token_id = Some(39);
    let out = e
        .generate(&[1, 2], &g, |_| std::ops::ControlFlow::Continue(()))
        .unwrap();
    assert!(!out.ids.is_empty());
}

/// Item 10: a shard write cut short (a full disk, a tokenizer error) left
/// `train.bin.tmp` / `val.bin.tmp` behind.
#[test]
fn failed_shard_writes_leave_no_temp_files() {
    let root = tmpdir("tmpfiles");
    std::fs::write(root.join("a.txt"), "good text\n\u{c}\nBAD text\n").unwrap();
    let out = root.join("data");
    let opts = PrepareOptions {
        vocab_size: 257,
        eos_id: 256,
        val_fraction: 0.1,
        tokenizer_id: "bytes".into(),
        text_field: "text".into(),
    };
    let enc = |s: &str| -> Result<Vec<u32>, String> {
        if s.contains("BAD") {
            return Err("cannot encode this".into());
        }
        Ok(s.bytes().map(u32::from).collect())
    };
    let e = prepare_shards(&[root.join("a.txt")], &out, &opts, &enc, &mut |_, _| {})
        .err()
        .expect("the encoder's error");
    assert!(e.to_string().contains("cannot encode this"), "{e}");
    let left: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Item 10: a step folder without `trainer_state.json` was passed over
/// without a word on resume.
#[test]
fn incomplete_checkpoints_are_reported() {
    use lmkit::train::{latest_checkpoint, skipped_checkpoints};
    let root = tmpdir("skipped");
    let n = 16;
    let mut state = TrainState::new(1, optim(), 2, 8, n);
    let opt = OptimState::new(n);
    state.step = 3;
    let mut opt3 = opt.clone();
    opt3.step = 3;
    let good = save_checkpoint(&root, &state, &opt3, &mut |_: &Path| Ok(()), 5).unwrap();
    state.step = 6;
    let mut opt6 = opt.clone();
    opt6.step = 6;
    let newer = save_checkpoint(&root, &state, &opt6, &mut |_: &Path| Ok(()), 5).unwrap();
    std::fs::remove_file(newer.join("trainer_state.json")).unwrap();
    assert_eq!(latest_checkpoint(&root).unwrap(), Some(good));
    assert_eq!(skipped_checkpoints(&root).unwrap(), vec![newer]);
}

/// Item 12: BERT's text layout: one sentence per line, a blank line between
/// documents, every file a document; long lines cut into sentences; lmkit's
/// page format (form-feed lines) still read as pages.
#[test]
fn bert_documents_in_bert_layout() {
    use lmkit::data::nsp::read_bert_documents;
    let root = tmpdir("bertdocs");
    let a = root.join("a.txt");
    std::fs::write(
        &a,
        "First sentence of one.\nSecond of one.\n\n\nOnly line of two. It has two sentences.\n  \nThree.",
    )
    .unwrap();
    let b = root.join("b.txt");
    std::fs::write(&b, "File b is a document.\n").unwrap();
    let docs = read_bert_documents(&[a.clone(), b], "text").unwrap();
    assert_eq!(
        docs,
        vec![
            vec!["First sentence of one.", "Second of one."],
            vec!["Only line of two.", "It has two sentences."],
            vec!["Three."],
            vec!["File b is a document."],
        ]
    );
    let paged = root.join("p.txt");
    std::fs::write(
        &paged,
        "Page one, wrapped\nover lines. Next.\n\u{c}\nPage two.\n",
    )
    .unwrap();
    let docs = read_bert_documents(&[paged], "text").unwrap();
    assert_eq!(
        docs,
        vec![
            vec!["Page one, wrapped over lines.", "Next."],
            vec!["Page two."],
        ]
    );
    let jsonl = root.join("d.jsonl");
    std::fs::write(
        &jsonl,
        "{\"text\": \"One. Two.\\nThree.\"}\n{\"text\": \"Four.\"}\n",
    )
    .unwrap();
    let docs = read_bert_documents(&[jsonl], "text").unwrap();
    assert_eq!(docs, vec![vec!["One.", "Two.", "Three."], vec!["Four."]]);
}
