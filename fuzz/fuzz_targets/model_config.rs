//! `config.json` of either family, a sentence-transformers folder
//! (`modules.json` NUL `1_Pooling/config.json`), and a `--dtype auto`
//! timings cache file never panic; an accepted config yields a layout or an
//! error, never an unbounded allocation.
#![no_main]

#[path = "common.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use lmkit::models::bert::SentenceConfig;
use lmkit::spec::{AnyConfig, HasLayout, ModelConfig};

fuzz_target!(|data: &[u8]| {
    let _ = lmkit::models::auto_dtype::cached_timings(data, "k");
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(cfg) = AnyConfig::from_json_str(text) {
            let _ = cfg.layout(cfg.architecture());
            let _ = cfg.to_json();
        }
    }
    let dir = common::scratch("st-config");
    let p = common::parts(data, 2);
    std::fs::create_dir_all(dir.join("1_Pooling")).expect("dir");
    std::fs::write(dir.join("modules.json"), p[0]).expect("write");
    std::fs::write(dir.join("1_Pooling/config.json"), p[1]).expect("write");
    let _ = SentenceConfig::from_dir(&dir);
});
