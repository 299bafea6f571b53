//! Parquet: any bytes read as rows (all columns, or the `text` column) give
//! rows or an error, never a panic or an abort.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lmkit::data::parquet::parse_parquet_rows;

fuzz_target!(
    // The parquet crate's decoder can panic on a hostile file; the reader
    // catches that (`catch_unwind`) and returns an error, which is what a
    // user gets. libfuzzer-sys's hook aborts at the panic, before any catch,
    // so this target lets panics unwind: one that escapes the reader still
    // aborts in libfuzzer-sys's own catch and counts as a crash.
    init: std::panic::set_hook(Box::new(|_| {})),
    |data: &[u8]| {
    let _ = parse_parquet_rows(data.to_vec(), None);
    let _ = parse_parquet_rows(data.to_vec(), Some(&["text"]));
    }
);
