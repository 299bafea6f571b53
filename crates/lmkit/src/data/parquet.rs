//! Parquet files as rows of named values (how HF datasets store text):
//! every flat column of strings, integers, floats or booleans, any number of
//! row groups, compressed with Snappy, Zstandard or gzip as pyarrow writes
//! them. A row reads as a JSON object, so everything that takes JSONL rows
//! (`classify_data::read_jsonl_objects`) takes Parquet too; nested columns
//! (lists, structs) are left out.
//!
//! The `parquet` crate's column readers do the decoding, without arrow. A
//! malformed file is an error naming it; a panic inside the decoder is
//! caught and reported as one too.

use std::path::Path;

use ::parquet::basic::Type as Physical;
use ::parquet::column::page::Page;
use ::parquet::column::reader::{ColumnReader, ColumnReaderImpl};
use ::parquet::data_type::DataType;
use ::parquet::file::reader::{ChunkReader, FileReader, RowGroupReader, SerializedFileReader};
use ::parquet::schema::types::ColumnDescriptor;
use serde_json::{Map, Value};

use super::{io_err, DataError, Result};

/// `(1-based row, row)` of a file.
pub type Rows = Vec<(usize, Map<String, Value>)>;

/// Values read per call of the column reader.
const BATCH: usize = 4096;

/// The rows of a Parquet file, `(1-based row, row)`; `columns` limits the
/// columns read (all flat columns when `None`; a name that is not a column
/// is an error listing those there are).
pub fn read_parquet_rows(
    path: &Path,
    columns: Option<&[&str]>,
) -> Result<Vec<(usize, Map<String, Value>)>> {
    let file = std::fs::File::open(path).map_err(io_err(path))?;
    rows_of(file, columns).map_err(|message| DataError::Parse {
        path: path.to_path_buf(),
        line: 0,
        message,
    })
}

/// [`read_parquet_rows`] over a file's bytes (for fuzzing and tests).
pub fn parse_parquet_rows(
    bytes: Vec<u8>,
    columns: Option<&[&str]>,
) -> std::result::Result<Rows, String> {
    rows_of(bytes::Bytes::from(bytes), columns)
}

fn rows_of<R: ChunkReader + 'static>(
    source: R,
    columns: Option<&[&str]>,
) -> std::result::Result<Rows, String> {
    // The decoder is outside code: a panic on a hostile file becomes an error.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read_rows(source, columns)))
        .unwrap_or_else(|_| Err("malformed Parquet file (the decoder failed)".into()))
}

fn read_rows<R: ChunkReader + 'static>(
    source: R,
    columns: Option<&[&str]>,
) -> std::result::Result<Rows, String> {
    let reader =
        SerializedFileReader::new(source).map_err(|e| format!("not a Parquet file: {e}"))?;
    let schema = reader.metadata().file_metadata().schema_descr_ptr();
    // (index, name, max definition level) of each flat column read.
    let flat: Vec<(usize, String, i16)> = schema
        .columns()
        .iter()
        .enumerate()
        .filter(|(_, c)| c.path().parts().len() == 1 && c.max_rep_level() == 0)
        .map(|(i, c)| (i, c.name().to_string(), c.max_def_level()))
        .collect();
    let chosen: Vec<&(usize, String, i16)> = match columns {
        None => flat.iter().collect(),
        Some(names) => names
            .iter()
            .map(|n| {
                flat.iter().find(|(_, name, _)| name == n).ok_or_else(|| {
                    let have: Vec<&str> = flat.iter().map(|(_, n, _)| n.as_str()).collect();
                    format!("no column `{n}` (columns: {})", have.join(", "))
                })
            })
            .collect::<std::result::Result<_, _>>()?,
    };
    if chosen.is_empty() {
        return Err("no flat column of strings or numbers".into());
    }
    let mut rows = Vec::new();
    for g in 0..reader.num_row_groups() {
        let group = reader
            .get_row_group(g)
            .map_err(|e| format!("row group {g}: {e}"))?;
        let n = usize::try_from(group.metadata().num_rows())
            .map_err(|_| format!("row group {g}: negative row count"))?;
        let first = rows.len();
        let mut group_rows: Vec<Map<String, Value>> = Vec::new();
        for &&(col, ref name, max_def) in &chosen {
            let bad = |e: String| format!("row group {g}, column `{name}`: {e}");
            check_dictionaries(&*group, col, schema.column(col).as_ref()).map_err(bad)?;
            let reader = group
                .get_column_reader(col)
                .map_err(|e| bad(e.to_string()))?;
            let values = match reader {
                ColumnReader::BoolColumnReader(mut r) => {
                    read_column(&mut r, n, max_def, |v| Ok(Value::Bool(*v)))
                }
                ColumnReader::Int32ColumnReader(mut r) => {
                    read_column(&mut r, n, max_def, |v| Ok(Value::from(*v)))
                }
                ColumnReader::Int64ColumnReader(mut r) => {
                    read_column(&mut r, n, max_def, |v| Ok(Value::from(*v)))
                }
                ColumnReader::FloatColumnReader(mut r) => {
                    read_column(&mut r, n, max_def, |v| Ok(Value::from(*v as f64)))
                }
                ColumnReader::DoubleColumnReader(mut r) => {
                    read_column(&mut r, n, max_def, |v| Ok(Value::from(*v)))
                }
                ColumnReader::ByteArrayColumnReader(mut r) => {
                    read_column(&mut r, n, max_def, |v| {
                        v.as_utf8()
                            .map(|s| Value::String(s.to_string()))
                            .map_err(|_| "a value is not UTF-8 text".to_string())
                    })
                }
                // INT96 timestamps and fixed-size binary are no text.
                _ if columns.is_none() => continue,
                _ => Err("not a column of strings or numbers".to_string()),
            }
            .map_err(bad)?;
            if group_rows.is_empty() {
                group_rows = (0..values.len()).map(|_| Map::new()).collect();
            }
            for (row, v) in group_rows.iter_mut().zip(values) {
                row.insert(name.clone(), v);
            }
        }
        rows.extend(
            group_rows
                .into_iter()
                .enumerate()
                .map(|(k, r)| (first + k + 1, r)),
        );
    }
    Ok(rows)
}

/// Checks every dictionary page of column `col` of a row group against its
/// bytes. The decoder sizes a dictionary by its page header's value count
/// before reading a value, so a hostile count (4 bytes of the file) asks for
/// tens of gigabytes and aborts the process; a plain-encoded dictionary
/// takes at least a value's fixed width (4 bytes of length for a string, one
/// bit for a boolean) per value. Only headers are read for data pages.
fn check_dictionaries(
    group: &dyn RowGroupReader,
    col: usize,
    descr: &ColumnDescriptor,
) -> std::result::Result<(), String> {
    let least_bits: u64 = match descr.physical_type() {
        Physical::BOOLEAN => 1,
        Physical::INT32 | Physical::FLOAT | Physical::BYTE_ARRAY => 32,
        Physical::INT64 | Physical::DOUBLE => 64,
        Physical::INT96 => 96,
        Physical::FIXED_LEN_BYTE_ARRAY => 8 * descr.type_length().max(1) as u64,
    };
    let mut pages = group
        .get_column_page_reader(col)
        .map_err(|e| e.to_string())?;
    while let Some(page) = pages.peek_next_page().map_err(|e| e.to_string())? {
        if !page.is_dict {
            pages.skip_next_page().map_err(|e| e.to_string())?;
            continue;
        }
        if let Some(Page::DictionaryPage {
            buf, num_values, ..
        }) = pages.get_next_page().map_err(|e| e.to_string())?
        {
            if u64::from(num_values) * least_bits > buf.len() as u64 * 8 {
                return Err(format!(
                    "a dictionary page claims {num_values} values in {} bytes",
                    buf.len()
                ));
            }
        }
    }
    Ok(())
}

/// The `rows` values of one column chunk (null where the definition level
/// says so), each converted by `convert`.
fn read_column<T: DataType>(
    r: &mut ColumnReaderImpl<T>,
    rows: usize,
    max_def: i16,
    convert: impl Fn(&T::T) -> std::result::Result<Value, String>,
) -> std::result::Result<Vec<Value>, String> {
    let mut out = Vec::new();
    let (mut defs, mut values) = (Vec::new(), Vec::new());
    while out.len() < rows {
        defs.clear();
        values.clear();
        let want = (rows - out.len()).min(BATCH);
        let (records, _, _) = r
            .read_records(want, (max_def > 0).then_some(&mut defs), None, &mut values)
            .map_err(|e| e.to_string())?;
        if records == 0 {
            return Err(format!(
                "{} values where the row group has {rows} rows",
                out.len()
            ));
        }
        // A run-length-encoded page can claim more rows than memory holds:
        // an error, not an abort.
        out.try_reserve(records)
            .map_err(|_| format!("{rows} rows do not fit in memory"))?;
        if max_def == 0 {
            for v in values.iter().take(records) {
                out.push(convert(v)?);
            }
            continue;
        }
        let mut next = values.iter();
        for &d in defs.iter().take(records) {
            if d == max_def {
                let v = next.next().ok_or("fewer values than definition levels")?;
                out.push(convert(v)?);
            } else {
                out.push(Value::Null);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bytes in [
            Vec::new(),
            b"PAR1".to_vec(),
            b"PAR1garbagegarbagePAR1".to_vec(),
            [
                b"PAR1".as_slice(),
                &[0xff; 64],
                &40u32.to_le_bytes(),
                b"PAR1",
            ]
            .concat(),
        ] {
            assert!(parse_parquet_rows(bytes, None).is_err());
        }
    }
}
