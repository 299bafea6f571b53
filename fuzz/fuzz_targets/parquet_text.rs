//! Parquet: any bytes read as rows (all columns, or the `text` column) give
//! rows or an error, never a panic or an abort.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lmkit::data::parquet::parse_parquet_rows;

fuzz_target!(|data: &[u8]| {
    let _ = parse_parquet_rows(data.to_vec(), None);
    let _ = parse_parquet_rows(data.to_vec(), Some(&["text"]));
});
