//! A checkpoint's `trainer_state.json` NUL `optimizer.safetensors` never
//! panic on resume.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use lmkit::train::load_train_state;

fuzz_target!(|data: &[u8]| {
    let dir = common::scratch("state");
    let p = common::parts(data, 2);
    std::fs::write(dir.join("trainer_state.json"), p[0]).expect("write");
    std::fs::write(dir.join("optimizer.safetensors"), p[1]).expect("write");
    let _ = load_train_state(&dir);
});
