//! llm.c / nanoGPT token files: any bytes give ids or an error; ids read
//! back write and re-read to the same ids.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lmkit::data::token_files::{parse_token_bytes, write_token_file, TokenFileFormat};

fuzz_target!(|data: &[u8]| {
    if let Ok(ids) = parse_token_bytes(data) {
        let mut out = Vec::new();
        if write_token_file(&mut out, TokenFileFormat::Llmc, &ids).is_ok() {
            assert_eq!(parse_token_bytes(&out).expect("own file"), ids);
        }
    }
});
