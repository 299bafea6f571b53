//! Token shards: `meta.json` NUL `train.bin` NUL `val.bin` never panic on
//! open, and an opened shard reads every token.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use lmkit::data::open_shards;

fuzz_target!(|data: &[u8]| {
    let dir = common::scratch("shards");
    let p = common::parts(data, 3);
    std::fs::write(dir.join("meta.json"), p[0]).expect("write");
    std::fs::write(dir.join("train.bin"), p[1]).expect("write");
    std::fs::write(dir.join("val.bin"), p[2]).expect("write");
    if let Ok(d) = open_shards(&dir) {
        let mut out = vec![0u32; d.train.len().min(1 << 16)];
        d.train.read_into(0, &mut out);
    }
});
