//! A safetensors file (header and data) never panics, never allocates past
//! its own size, and every tensor it lists reads or fails cleanly; a shard
//! index (`model.safetensors.index.json`, input before the first NUL) over
//! that file as its only shard (`s.safetensors`) loads or fails cleanly.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use lmkit::checkpoint::SafeTensors;

fn read_all(st: &SafeTensors) {
    for name in st.names().to_vec() {
        let _ = st.tensor_f32(&name);
        let _ = st.shape(&name);
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(st) = SafeTensors::from_bytes(data.to_vec(), "fuzz.safetensors") {
        read_all(&st);
    }
    let p = common::parts(data, 2);
    let dir = common::scratch("shards");
    let index = dir.join("model.safetensors.index.json");
    std::fs::write(&index, p[0]).expect("write");
    std::fs::write(dir.join("s.safetensors"), p[1]).expect("write");
    if let Ok(st) = SafeTensors::open_sharded(&index) {
        read_all(&st);
    }
});
