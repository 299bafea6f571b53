//! Token shards and batching: tokenization into shards, the validation
//! split, reuse, bad input, and the deterministic resumable sampler.

use lmkit::data::{
    batch, open_shards, prepare_shards, BatchSampler, DataError, PrepareOptions, TokenBatch,
};
use std::path::{Path, PathBuf};

/// Bytes as tokens (ids 0..255), EOS = 256: easy to check by hand.
fn byte_encode(text: &str) -> Result<Vec<u32>, String> {
    Ok(text.bytes().map(u32::from).collect())
}

fn opts(vocab_size: usize, val_fraction: f64) -> PrepareOptions {
    PrepareOptions {
        vocab_size,
        eos_id: 256,
        val_fraction,
        tokenizer_id: "bytes".into(),
        text_field: "text".into(),
    }
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lmkit-data-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn all_tokens(dir: &Path) -> (Vec<u32>, Vec<u32>) {
    let d = open_shards(dir).unwrap();
    let read = |s: &lmkit::data::TokenShard| (0..s.len()).map(|i| s.get(i)).collect::<Vec<_>>();
    (read(&d.train), d.val.as_ref().map(read).unwrap_or_default())
}

#[test]
fn documents_are_joined_with_eos_across_files_dirs_and_jsonl() {
    let root = tmpdir("join");
    std::fs::write(root.join("a.txt"), "ab\n\u{c}\ncd").unwrap();
    std::fs::create_dir_all(root.join("dir/sub")).unwrap();
    std::fs::write(root.join("dir/sub/b.md"), "ef").unwrap();
    std::fs::write(root.join("dir/skip.bin"), "zz").unwrap();
    std::fs::write(root.join("dir/.hidden.txt"), "zz").unwrap();
    std::fs::write(
        root.join("c.jsonl"),
        "{\"text\": \"gh\"}\n\n{\"text\": \"i\", \"id\": 3}\n",
    )
    .unwrap();
    let out = root.join("shards");
    let p = prepare_shards(
        &[root.join("a.txt"), root.join("dir"), root.join("c.jsonl")],
        &out,
        &opts(257, 0.0),
        &byte_encode,
        &mut |_, _| {},
    )
    .unwrap();
    assert!(!p.reused);
    assert_eq!(p.meta.documents, 5);
    assert_eq!(p.meta.token_width, 2);
    let (train, val) = all_tokens(&out);
    assert!(val.is_empty());
    let expect: Vec<u32> = "\u{100}ab\u{100}cd\u{100}ef\u{100}gh\u{100}i"
        .chars()
        .map(|c| c as u32)
        .collect();
    assert_eq!(train, expect);
}

#[test]
fn validation_split_is_spread_and_shards_are_reused() {
    let root = tmpdir("split");
    let text: String = (0..4000)
        .map(|i| format!("line {i} of the corpus\n"))
        .collect();
    std::fs::write(root.join("corpus.txt"), &text).unwrap();
    let out = root.join("shards");
    let src = [root.join("corpus.txt")];
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let mut progress = |done: u64, total: u64| {
        assert!(done <= total);
        calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    };
    let p = prepare_shards(&src, &out, &opts(257, 0.1), &byte_encode, &mut progress).unwrap();
    assert!(calls.load(std::sync::atomic::Ordering::Relaxed) >= 2);
    let total = text.len() as u64 + 1;
    assert_eq!(p.meta.train_tokens + p.meta.val_tokens, total);
    let frac = p.meta.val_tokens as f64 / total as f64;
    assert!((0.07..0.13).contains(&frac), "val fraction {frac}");
    // Validation text comes from all over the corpus, not just its end.
    let (train, val) = all_tokens(&out);
    let val_text: String = val.iter().map(|&t| t as u8 as char).collect();
    assert!(val_text.contains("line 3"), "{}", &val_text[..200]);
    assert!(val_text.contains("line 39"));
    // Interleaving train and val chunks back gives the stream.
    let ck = p.meta.chunk_tokens as usize;
    let mut merged = Vec::new();
    let (mut ti, mut vi) = (0, 0);
    let mut chunk = 0;
    while ti < train.len() || vi < val.len() {
        if chunk % 10 == 9 {
            let e = (vi + ck).min(val.len());
            merged.extend_from_slice(&val[vi..e]);
            vi = e;
        } else {
            let e = (ti + ck).min(train.len());
            merged.extend_from_slice(&train[ti..e]);
            ti = e;
        }
        chunk += 1;
    }
    let mut expect = vec![256u32];
    expect.extend(text.bytes().map(u32::from));
    assert_eq!(merged, expect);

    // Unchanged sources and tokenizer: reused. Changed tokenizer id: rebuilt.
    let again = prepare_shards(&src, &out, &opts(257, 0.1), &byte_encode, &mut |_, _| {}).unwrap();
    assert!(again.reused);
    let mut o = opts(257, 0.1);
    o.tokenizer_id = "other".into();
    assert!(
        !prepare_shards(&src, &out, &o, &byte_encode, &mut |_, _| {})
            .unwrap()
            .reused
    );
    // Large vocabularies are stored as u32.
    let wide = prepare_shards(
        &src,
        &root.join("wide"),
        &opts(70_000, 0.1),
        &byte_encode,
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(wide.meta.token_width, 4);
    assert_eq!(all_tokens(&root.join("wide")).0, train);
}

#[test]
fn bad_input_is_a_clear_error() {
    let root = tmpdir("bad");
    let out = root.join("shards");
    let run = |files: &[PathBuf], o: PrepareOptions| {
        prepare_shards(files, &out, &o, &byte_encode, &mut |_, _| {}).map(|_| ())
    };
    // Missing file.
    let e = run(&[root.join("nope.txt")], opts(257, 0.0)).unwrap_err();
    assert!(
        matches!(e, DataError::Io { .. }) && e.to_string().contains("nope.txt"),
        "{e}"
    );
    // Empty (whitespace only) data.
    std::fs::write(root.join("empty.txt"), " \n\n").unwrap();
    let e = run(&[root.join("empty.txt")], opts(257, 0.0)).unwrap_err();
    assert!(e.to_string().contains("no text"), "{e}");
    // A directory without text files.
    std::fs::create_dir_all(root.join("imgs")).unwrap();
    std::fs::write(root.join("imgs/a.png"), "x").unwrap();
    let e = run(&[root.join("imgs")], opts(257, 0.0)).unwrap_err();
    assert!(e.to_string().contains("no text files"), "{e}");
    // JSONL: bad line and missing field, with the line number.
    std::fs::write(root.join("bad.jsonl"), "{\"text\": \"ok\"}\n{\"txt\": 1}\n").unwrap();
    let e = run(&[root.join("bad.jsonl")], opts(257, 0.0)).unwrap_err();
    assert!(
        e.to_string().contains("bad.jsonl:2") && e.to_string().contains("text"),
        "{e}"
    );
    std::fs::write(root.join("bad2.jsonl"), "{\"text\": 5}\nnot json\n").unwrap();
    let e = run(&[root.join("bad2.jsonl")], opts(257, 0.0)).unwrap_err();
    assert!(e.to_string().contains("bad2.jsonl:1"), "{e}");
    // Not UTF-8.
    std::fs::write(root.join("bin.txt"), [b'a', 0xff, 0xfe]).unwrap();
    let e = run(&[root.join("bin.txt")], opts(257, 0.0)).unwrap_err();
    assert!(e.to_string().contains("UTF-8"), "{e}");
    // Token ids the model's vocabulary cannot hold.
    std::fs::write(root.join("ok.txt"), "hello").unwrap();
    let e = run(&[root.join("ok.txt")], opts(100, 0.0)).unwrap_err();
    assert!(e.to_string().contains("outside the vocabulary"), "{e}");
    // A tokenizer error names the file.
    let failing = |_: &str| -> Result<Vec<u32>, String> { Err("boom".into()) };
    let e = prepare_shards(
        &[root.join("ok.txt")],
        &out,
        &opts(257, 0.0),
        &failing,
        &mut |_, _| {},
    )
    .map(|_| ())
    .unwrap_err();
    assert!(
        e.to_string().contains("ok.txt") && e.to_string().contains("boom"),
        "{e}"
    );
    // A truncated shard is detected.
    run(&[root.join("ok.txt")], opts(257, 0.0)).unwrap();
    let bin = out.join("train.bin");
    let bytes = std::fs::read(&bin).unwrap();
    std::fs::write(&bin, &bytes[..bytes.len() - 1]).unwrap();
    assert!(open_shards(&out).is_err());
}

fn shard_with(n: usize) -> (PathBuf, lmkit::data::TokenData) {
    let root = tmpdir(&format!("sampler{n}"));
    let text: String = (0..n - 1)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    std::fs::write(root.join("t.txt"), text).unwrap();
    prepare_shards(
        &[root.join("t.txt")],
        &root.join("s"),
        &opts(257, 0.0),
        &byte_encode,
        &mut |_, _| {},
    )
    .unwrap();
    let d = open_shards(&root.join("s")).unwrap();
    (root, d)
}

#[test]
fn sampler_is_deterministic_resumable_and_covers_each_epoch() {
    let (_root, d) = shard_with(1001); // 1000 windows of T=1 → with T=10: 100 windows
    let (b, t) = (4, 10);
    let run = |seed: u64, steps: usize| {
        let mut s = BatchSampler::new(d.train.len(), b, t, seed).unwrap();
        let mut bt = TokenBatch::new(b, t);
        let mut out = Vec::new();
        for _ in 0..steps {
            s.next_batch(&d.train, &mut bt);
            out.push((bt.inputs.clone(), bt.targets.clone()));
        }
        (out, s.position())
    };
    let (a, _) = run(7, 60);
    assert_eq!(a, run(7, 60).0);
    assert_ne!(a, run(8, 60).0);
    // Targets are the inputs shifted by one.
    for (inp, tg) in &a {
        for r in 0..b {
            for k in 0..t - 1 {
                assert_eq!(inp[r * t + k + 1] as i32, tg[r * t + k]);
            }
        }
    }
    // One epoch (25 batches) visits every window exactly once.
    let mut starts: Vec<u32> = a[..25]
        .iter()
        .flat_map(|(inp, _)| (0..b).map(move |r| inp[r * t]))
        .collect();
    assert_eq!(starts.len(), 100);
    starts.sort();
    // Window w starts at token w*10: token value is (w*10 - 1) % 26 + 'a' except w=0 (EOS).
    let mut expect: Vec<u32> = (0..100)
        .map(|w| {
            if w == 0 {
                256
            } else {
                b'a' as u32 + ((w * 10 - 1) % 26) as u32
            }
        })
        .collect();
    expect.sort();
    assert_eq!(starts, expect);
    // Epoch 2 is a different order.
    assert_ne!(a[..25], a[25..50]);
    // Resume from a saved position gives the same continuation.
    let (_, pos) = run(7, 37);
    let mut s = BatchSampler::new(d.train.len(), b, t, 7).unwrap();
    s.set_position(pos).unwrap();
    let mut bt = TokenBatch::new(b, t);
    for want in &a[37..60] {
        s.next_batch(&d.train, &mut bt);
        assert_eq!(&(bt.inputs.clone(), bt.targets.clone()), want);
    }
    assert_eq!(s.batches_per_epoch(), 25);
}

#[test]
fn too_short_for_one_batch_and_eval_batches() {
    let (_root, d) = shard_with(50);
    let e = BatchSampler::new(d.train.len(), 4, 16, 0)
        .map(|_| ())
        .unwrap_err();
    assert!(e.to_string().contains("fewer than one batch"), "{e}");
    assert!(BatchSampler::new(d.train.len(), 3, 16, 0).is_ok());
    assert_eq!(batch::eval_batch_count(&d.train, 3, 16, 10), 1);
    assert_eq!(batch::eval_batch_count(&d.train, 4, 16, 10), 0);
    let mut bt = TokenBatch::new(3, 16);
    batch::fill_eval_batch(&d.train, 0, &mut bt);
    assert_eq!(bt.inputs[16], d.train.get(16));
    assert_eq!(bt.targets[47] as u32, d.train.get(48));
    let mut s = BatchSampler::new(d.train.len(), 3, 16, 0).unwrap();
    let bad = lmkit::data::DataPosition {
        epoch: 0,
        cursor: 99,
    };
    assert!(s.set_position(bad).is_err());
}
