//! Resume is exact: 12 steps, a checkpoint, a fresh model loaded from it and
//! 12 more steps give bit-identical losses and parameters to 24 steps
//! straight. Also: checkpoints are complete folders, old ones are pruned, a
//! failed save leaves the previous checkpoint intact, and a NaN loss stops
//! the step without touching the parameters.

use lmkit::checkpoint::{load_pretrained, save_params, LoadOptions};
use lmkit::data::{
    open_shards, prepare_shards, BatchSampler, PrepareOptions, TokenBatch, TokenData,
};
use lmkit::models::gpt2::Gpt2;
use lmkit::spec::{AnyConfig, Architecture, Gpt2Config};
use lmkit::train::{
    latest_checkpoint, list_checkpoints, load_train_state, save_checkpoint, train_step, LrSchedule,
    OptimConfig, OptimState, ScheduleKind, StepError, TrainState,
};
use std::path::{Path, PathBuf};

const B: usize = 2;
const T: usize = 16;

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lmkit-resume-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn data(root: &Path) -> TokenData {
    let text: String = (0..300)
        .map(|i| format!("The quick brown fox {i} jumps over the lazy dog.\n"))
        .collect();
    std::fs::write(root.join("c.txt"), text).unwrap();
    let opts = PrepareOptions {
        vocab_size: 257,
        eos_id: 256,
        val_fraction: 0.0,
        tokenizer_id: "b".into(),
        text_field: "text".into(),
    };
    let enc = |s: &str| -> Result<Vec<u32>, String> { Ok(s.bytes().map(u32::from).collect()) };
    prepare_shards(
        &[root.join("c.txt")],
        &root.join("data"),
        &opts,
        &enc,
        &mut |_, _| {},
    )
    .unwrap();
    open_shards(&root.join("data")).unwrap()
}

fn config() -> Gpt2Config {
    Gpt2Config {
        vocab_size: 257,
        n_positions: T,
        n_embd: 32,
        n_layer: 2,
        n_head: 4,
        ..Gpt2Config::default()
    }
}

fn optim() -> OptimConfig {
    OptimConfig {
        schedule: LrSchedule {
            kind: ScheduleKind::Cosine,
            max_lr: 3e-3,
            min_lr: 3e-4,
            warmup_steps: 4,
            total_steps: 24,
        },
        beta1: 0.9,
        beta2: 0.95,
        eps: 1e-8,
        weight_decay: 0.1,
        grad_clip: 1.0,
        grad_accum: 2,
    }
}

/// Runs steps `state.step..until`, returning each step's loss.
fn run(
    m: &mut Gpt2,
    opt: &mut OptimState,
    state: &mut TrainState,
    sampler: &mut BatchSampler,
    d: &TokenData,
    until: u64,
) -> Vec<f64> {
    let cfg = optim();
    let mut bt = TokenBatch::new(B, T);
    let mut losses = vec![];
    while state.step < until {
        let s = train_step(m, opt, &cfg, &mut bt, &mut |b| {
            sampler.next_batch(&d.train, b)
        })
        .unwrap();
        state.step = s.step;
        state.data = sampler.position();
        losses.push(s.loss);
    }
    losses
}

fn write_model(
    m: &Gpt2,
) -> impl FnMut(&Path) -> Result<(), Box<dyn std::error::Error + Send + Sync>> + '_ {
    move |dir: &Path| {
        save_params(
            &m.layout,
            &m.params,
            &m.config,
            dir,
            Architecture::Gpt2LMHeadModel,
        )?;
        Ok(())
    }
}

#[test]
fn twelve_plus_twelve_equals_twenty_four() {
    let root = tmpdir("exact");
    let d = data(&root);
    let seed = 5;
    let fresh = || {
        let m = Gpt2::new_random(config(), seed).unwrap();
        let opt = OptimState::new(m.num_params());
        let state = TrainState::new(seed, optim(), B, T, m.num_params());
        let sampler = BatchSampler::new(d.train.len(), B, T, seed).unwrap();
        (m, opt, state, sampler)
    };

    let (mut m, mut opt, mut state, mut sampler) = fresh();
    let straight = run(&mut m, &mut opt, &mut state, &mut sampler, &d, 24);
    let straight_params = m.params.clone();
    assert!(straight[23] < straight[0] - 0.5, "it learns: {straight:?}");

    let (mut m, mut opt, mut state, mut sampler) = fresh();
    let mut first = run(&mut m, &mut opt, &mut state, &mut sampler, &d, 12);
    let ckpts = root.join("checkpoints");
    let dir = save_checkpoint(&ckpts, &state, &opt, &mut write_model(&m), 2).unwrap();
    drop((m, opt, state, sampler));

    // A new process' view: everything comes from the checkpoint folder.
    assert_eq!(latest_checkpoint(&ckpts).unwrap(), Some(dir.clone()));
    let pre = load_pretrained(
        &dir.display().to_string(),
        Some(Architecture::Gpt2LMHeadModel),
        LoadOptions::default(),
    )
    .unwrap();
    let AnyConfig::Gpt2(cfg) = pre.config else {
        panic!()
    };
    let mut m = Gpt2::from_params(cfg, pre.params).unwrap();
    let (mut state, mut opt) = load_train_state(&dir).unwrap();
    assert_eq!(state.step, 12);
    let mut sampler = BatchSampler::new(d.train.len(), B, T, state.seed).unwrap();
    sampler.set_position(state.data).unwrap();
    first.extend(run(&mut m, &mut opt, &mut state, &mut sampler, &d, 24));

    assert_eq!(first.len(), 24);
    for (i, (a, b)) in first.iter().zip(&straight).enumerate() {
        assert_eq!(a.to_bits(), b.to_bits(), "step {}: {a} vs {b}", i + 1);
    }
    assert!(m
        .params
        .iter()
        .zip(&straight_params)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
}

#[test]
fn checkpoints_are_atomic_pruned_and_survive_failed_saves() {
    let root = tmpdir("atomic");
    let ckpts = root.join("checkpoints");
    let m = Gpt2::new_random(config(), 1).unwrap();
    let opt = OptimState::new(m.num_params());
    let mut state = TrainState::new(1, optim(), B, T, m.num_params());
    for step in [10, 20, 30] {
        state.step = step;
        let mut o = opt.clone();
        o.step = step;
        save_checkpoint(&ckpts, &state, &o, &mut write_model(&m), 2).unwrap();
    }
    let steps: Vec<u64> = list_checkpoints(&ckpts)
        .unwrap()
        .iter()
        .map(|c| c.0)
        .collect();
    assert_eq!(steps, vec![20, 30]);

    // A save whose model writer fails (e.g. a full disk) leaves no partial
    // folder and the newest complete checkpoint in place.
    state.step = 40;
    let mut o = opt.clone();
    o.step = 40;
    let mut failing = |_: &Path| -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Err("No space left on device".into())
    };
    let e = save_checkpoint(&ckpts, &state, &o, &mut failing, 2).unwrap_err();
    assert!(e.to_string().contains("No space left"), "{e}");
    let latest = latest_checkpoint(&ckpts).unwrap().unwrap();
    assert!(latest.ends_with("step-00000030"));
    assert_eq!(load_train_state(&latest).unwrap().0.step, 30);
    let names: Vec<String> = std::fs::read_dir(&ckpts)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");

    // A folder left half-written by a crash (no rename) is never picked.
    std::fs::create_dir_all(ckpts.join(".tmp-step-00000050")).unwrap();
    assert_eq!(latest_checkpoint(&ckpts).unwrap().unwrap(), latest);
    // The next successful save clears such leftovers.
    state.step = 60;
    let mut o = opt.clone();
    o.step = 60;
    save_checkpoint(&ckpts, &state, &o, &mut write_model(&m), 2).unwrap();
    assert!(!ckpts.join(".tmp-step-00000050").exists());
    let latest = latest_checkpoint(&ckpts).unwrap().unwrap();
    // A corrupt optimizer file is an error naming it, not a panic.
    std::fs::write(latest.join("optimizer.safetensors"), b"garbage").unwrap();
    let e = load_train_state(&latest).unwrap_err();
    assert!(e.to_string().contains("optimizer.safetensors"), "{e}");
}

#[test]
fn non_finite_loss_stops_without_updating() {
    let root = tmpdir("nan");
    let d = data(&root);
    let mut m = Gpt2::new_random(config(), 3).unwrap();
    let wte = m.layout.range("wte.weight").unwrap();
    m.params[wte.start] = f32::NAN;
    let before: Vec<u32> = m.params.iter().map(|x| x.to_bits()).collect();
    let mut opt = OptimState::new(m.num_params());
    let mut sampler = BatchSampler::new(d.train.len(), B, T, 0).unwrap();
    let mut bt = TokenBatch::new(B, T);
    // Make sure the poisoned row is used.
    let e = train_step(&mut m, &mut opt, &optim(), &mut bt, &mut |b| {
        sampler.next_batch(&d.train, b);
        b.inputs[0] = 0;
    })
    .unwrap_err();
    assert!(matches!(e, StepError::NonFinite { step: 1, .. }), "{e}");
    assert_eq!(opt.step, 0);
    assert!(m.params.iter().map(|x| x.to_bits()).eq(before));
}
