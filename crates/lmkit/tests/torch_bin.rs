//! PyTorch checkpoints (`pytorch_model.bin`, torch's zip format) through the
//! restricted unpickler: the HF fixtures saved with `torch.save(state_dict)`
//! (scripts/make_fixtures.py --only torch-bin) load to the same weights and
//! logits as their safetensors twins; strided and offset views read as torch
//! reads them; hostile and broken files are errors naming the problem.

use std::path::{Path, PathBuf};

use lmkit::checkpoint::{load_pretrained, open_model_dir, torch_bin, LoadOptions, SafeTensors};
use lmkit::models::gpt2::{Gpt2Engine, WeightDtype};
use lmkit::Error;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(case: &str) -> PathBuf {
    root().join("tests/fixtures").join(case)
}

fn data(name: &str) -> PathBuf {
    root().join("tests/data/torch-bin").join(name)
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("lmkit-torchbin-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `input_ids` and `logits` of gpt2-tiny's HF reference.
fn tiny_reference() -> (usize, Vec<u32>, Vec<f32>) {
    let bytes = std::fs::read(fixture("gpt2-tiny").join("reference.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let ids = st.tensor("input_ids").unwrap();
    let rows = ids.shape()[0];
    let ids = ids
        .data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as u32)
        .collect();
    let logits = st
        .tensor("logits")
        .unwrap()
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (rows, ids, logits)
}

/// gpt2-tiny-bin (one file, lm_head.weight sharing wte's storage) and
/// gpt2-tiny-bin-sharded (two files and an index) hold gpt2-tiny's weights:
/// the same parameters, HF's logits, and logits equal to the safetensors
/// checkpoint's in f32 and bf16 (bf16 converts from memory the process owns,
/// which must not be released like a file map's pages).
#[test]
fn gpt2_bin_checkpoints_give_the_safetensors_weights_and_hf_logits() {
    let (rows, ids, want) = tiny_reference();
    let st = load_pretrained(
        fixture("gpt2-tiny").to_str().unwrap(),
        None,
        LoadOptions::default(),
    )
    .unwrap();
    for case in ["gpt2-tiny-bin", "gpt2-tiny-bin-sharded"] {
        let dir = fixture(case);
        assert!(!dir.join("model.safetensors").exists());
        let p = load_pretrained(dir.to_str().unwrap(), None, LoadOptions::default()).unwrap();
        assert_eq!(p.params, st.params, "{case}: the same weights");
        assert!(
            p.report.ignored.iter().any(|k| k == "lm_head.weight"),
            "{case}: the tied head is checked and skipped: {:?}",
            p.report.ignored
        );
        for dtype in [WeightDtype::F32, WeightDtype::Bf16, WeightDtype::Int8] {
            let mut a = Gpt2Engine::load(fixture("gpt2-tiny"), dtype).unwrap();
            let mut b = Gpt2Engine::load(&dir, dtype).unwrap();
            let la = a.forward_all_logits(&ids, rows, None).unwrap();
            let lb = b.forward_all_logits(&ids, rows, None).unwrap();
            assert_eq!(la, lb, "{case} {dtype}: the same logits as safetensors");
            if dtype == WeightDtype::F32 {
                let scale = want.iter().fold(1f32, |m, x| m.max(x.abs()));
                let d = lb
                    .iter()
                    .zip(&want)
                    .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
                assert!(d <= 1e-4 * scale, "{case}: logits differ from HF by {d}");
            }
        }
    }
}

#[test]
fn bert_bin_checkpoint_gives_the_safetensors_weights() {
    let a = load_pretrained(
        fixture("bert-tiny-bare").to_str().unwrap(),
        None,
        LoadOptions::default(),
    )
    .unwrap();
    let b = load_pretrained(
        fixture("bert-tiny-bin").to_str().unwrap(),
        None,
        LoadOptions::default(),
    )
    .unwrap();
    assert_eq!(a.arch, b.arch);
    assert_eq!(a.params, b.params);
    assert!(a.params.iter().any(|&x| x != 0.0));
}

/// torch.save of views (an offset slice, a transposed view, bf16, an f16
/// Parameter, int64, a 0-d tensor) reads as their contiguous copies
/// (written by safetensors' own `save_file`).
#[test]
fn strided_offset_and_typed_views_read_as_torch_reads_them() {
    let bin = torch_bin::open(&data("views.bin")).unwrap();
    let want = SafeTensors::open(data("views.safetensors")).unwrap();
    let mut names = bin.names().to_vec();
    names.sort();
    let mut expected = want.names().to_vec();
    expected.sort();
    assert_eq!(names, expected);
    for name in &names {
        assert_eq!(bin.shape(name), want.shape(name), "{name}");
        assert_eq!(bin.dtype(name), want.dtype(name), "{name}");
        if name != "int64" {
            assert_eq!(
                bin.tensor_f32(name).unwrap(),
                want.tensor_f32(name).unwrap(),
                "{name}"
            );
        }
    }
    assert_eq!(
        &*bin.tensor_f32("transposed").unwrap(),
        &[0.0, 4.0, 8.0, 1.0, 5.0, 9.0, 2.0, 6.0, 10.0, 3.0, 7.0, 11.0]
    );
    assert_eq!(&*bin.tensor_f32("offset").unwrap(), &[2.0, 3.0, 4.0]);
    assert_eq!(bin.shape("scalar"), Some(&[][..]));
    // The hand-written pickle the hostile files are variations of reads too.
    let ok = torch_bin::open(&data("handmade.bin")).unwrap();
    assert_eq!(ok.shape("w"), Some(&[3usize, 4][..]));
    let w: Vec<f32> = (0..12).map(|x| x as f32).collect();
    assert_eq!(&*ok.tensor_f32("w").unwrap(), &w[..]);
}

/// Each hostile or unsupported file is an `Error::TorchBin` whose message
/// names the problem; nothing it names is ever called.
#[test]
fn hostile_and_unsupported_files_are_clear_errors() {
    let cases = [
        ("os_system.bin", "`os.system`"),
        ("builtins_eval.bin", "`builtins.eval`"),
        ("reduce_storage.bin", "REDUCE calls Storage"),
        ("huge_size.bin", "reaches past its storage"),
        ("overflow_size.bin", "overflows"),
        (
            "offset_out_of_range.bin",
            "reaches past its storage of 12 elements",
        ),
        ("negative_stride.bin", "negative value -1"),
        ("short_storage.bin", "declares 1073741824 elements"),
        ("missing_storage.bin", "storage 7 is not in the zip"),
        ("big_endian.bin", "only little-endian"),
        ("legacy.bin", "legacy (pre-1.6, non-zip)"),
    ];
    for (file, why) in cases {
        let e = torch_bin::open(&data(file)).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, Error::TorchBin { .. }), "{file}: {msg}");
        assert!(msg.contains(why), "{file}: {msg}");
        assert!(
            msg.contains(file),
            "{file}: the message names the file: {msg}"
        );
    }
    // Not a zip at all.
    let e = torch_bin::from_bytes(b"hello, world", Path::new("x.bin")).unwrap_err();
    assert!(e.to_string().contains("not a zip file"), "{e}");
}

/// A truncated checkpoint at any length, and random byte damage, is an error
/// or (damage to raw tensor bytes) a file that still reads; never a panic.
#[test]
fn truncated_and_damaged_files_never_panic() {
    let bytes = std::fs::read(data("views.bin")).unwrap();
    for cut in 0..bytes.len() {
        let r = torch_bin::from_bytes(&bytes[..cut], Path::new("cut.bin"));
        assert!(r.is_err(), "a file cut at {cut} of {} bytes", bytes.len());
    }
    let full = std::fs::read(fixture("gpt2-tiny-bin").join("pytorch_model.bin")).unwrap();
    for cut in [10, full.len() / 2, full.len() - 30, full.len() - 1] {
        let e = torch_bin::from_bytes(&full[..cut], Path::new("cut.bin")).unwrap_err();
        assert!(matches!(e, Error::TorchBin { .. }), "cut {cut}: {e}");
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..3000 {
        let mut b = bytes.clone();
        for _ in 0..1 + next() % 4 {
            let at = (next() % b.len() as u64) as usize;
            b[at] = next() as u8;
        }
        let _ = torch_bin::from_bytes(&b, Path::new("damaged.bin"));
    }
}

/// The weight file a folder offers is chosen in order: model.safetensors
/// before pytorch_model.bin (a hostile .bin next to it is never read), and a
/// folder with neither says what it looked for.
#[test]
fn safetensors_is_preferred_and_a_folder_without_weights_says_so() {
    let dir = TempDir::new("prefer");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture("gpt2-tiny").join(f), dir.0.join(f)).unwrap();
    }
    std::fs::copy(data("os_system.bin"), dir.0.join("pytorch_model.bin")).unwrap();
    let (_, file) = open_model_dir(&dir.0).unwrap();
    assert!(file.path().ends_with("model.safetensors"));
    std::fs::remove_file(dir.0.join("model.safetensors")).unwrap();
    let e = open_model_dir(&dir.0).unwrap_err().to_string();
    assert!(e.contains("os.system"), "{e}");
    std::fs::remove_file(dir.0.join("pytorch_model.bin")).unwrap();
    let e = open_model_dir(&dir.0).unwrap_err().to_string();
    assert!(
        e.contains("no model.safetensors") && e.contains("pytorch_model.bin"),
        "{e}"
    );
}
