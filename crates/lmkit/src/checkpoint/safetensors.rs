//! Reading (memory-mapped) and writing safetensors files.
//!
//! Reading is hardened against hostile and damaged files: the header's size
//! is checked against [`MAX_HEADER`] and the file's length before anything is
//! mapped or parsed; every tensor read is checked to be finite (the error
//! names the tensor); and the file's length is checked again before each
//! read, so a file truncated in place after it was opened is an error, not
//! a SIGBUS. (A file truncated while the f32 GPT-2 engine serves from its
//! map can still fault, as with every mmap reader: replace weight files by
//! rename, as lmkit's own writers do.)

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use safetensors::tensor::{Metadata, TensorInfo};
pub use safetensors::Dtype;

use crate::error::{Error, Result};
use crate::util::fs::atomic_write_with;

/// Length of the little-endian u64 header size that starts every file.
const N_LEN: usize = 8;

/// Largest JSON header read: 8 MiB. A 1024-layer model's header is ~1 MB;
/// parsing costs ~10x the header's size in memory, so the safetensors
/// crate's own bound (100 MB) would let one file take a gigabyte.
pub const MAX_HEADER: usize = 8 << 20;

enum Bytes {
    /// The map and the file it maps (to notice truncation in place).
    Mapped(memmap2::Mmap, File),
    Owned(Vec<u8>),
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m, _) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// One safetensors file, memory-mapped.
struct Shard {
    path: PathBuf,
    bytes: Bytes,
    /// Byte offset of the data section (8 + header length).
    data_start: usize,
    meta: Metadata,
}

/// The weights of a checkpoint: one safetensors file, or the shards of a
/// sharded checkpoint (`model.safetensors.index.json`) seen as one;
/// memory-mapped, tensors read on demand.
pub struct SafeTensors {
    /// The file opened: the weights, or the shard index.
    path: PathBuf,
    shards: Vec<Shard>,
    /// Sharded: each tensor's shard. Empty for a single file.
    index: HashMap<String, usize>,
    /// Names in file (offset) order, shard after shard.
    names: Vec<String>,
}

impl std::fmt::Debug for SafeTensors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafeTensors")
            .field("path", &self.path)
            .field("shards", &self.shards.len())
            .field("tensors", &self.names.len())
            .finish()
    }
}

/// Largest shard index read (`model.safetensors.index.json`): 64 MiB, far
/// above the ~1 MB of a 1024-layer model's.
pub const MAX_INDEX: u64 = 64 << 20;

impl SafeTensors {
    /// Maps `path` and validates its header (offsets, sizes, file length).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let shard = Shard::open(path.as_ref())?;
        Ok(Self::single(shard))
    }

    /// Parses an in-memory file; `path` is only used in error messages.
    pub fn from_bytes(bytes: Vec<u8>, path: impl Into<PathBuf>) -> Result<Self> {
        Ok(Self::single(Shard::from_storage(
            path.into(),
            Bytes::Owned(bytes),
        )?))
    }

    fn single(shard: Shard) -> Self {
        SafeTensors {
            path: shard.path.clone(),
            names: shard.meta.offset_keys(),
            shards: vec![shard],
            index: HashMap::new(),
        }
    }

    /// Opens a sharded checkpoint from its index (HF's
    /// `model.safetensors.index.json`: `{"metadata": …, "weight_map": {tensor:
    /// file}}`). Every shard must be a file name in the index's folder (no
    /// path), and every tensor the index names must be in its shard.
    pub fn open_sharded(index_path: impl AsRef<Path>) -> Result<Self> {
        let index_path = index_path.as_ref();
        let bad = |msg: String| Error::Safetensors {
            path: index_path.to_path_buf(),
            msg,
        };
        let (files, index) = read_weight_map(index_path)?;
        let dir = index_path.parent().unwrap_or(Path::new("."));
        let shards = files
            .iter()
            .map(|f| Shard::open(&dir.join(f)))
            .collect::<Result<Vec<_>>>()?;
        let mut names = Vec::with_capacity(index.len());
        for (i, shard) in shards.iter().enumerate() {
            for k in shard.meta.offset_keys() {
                if index.get(&k) == Some(&i) {
                    names.push(k);
                }
            }
        }
        if let Some((key, &i)) = index
            .iter()
            .find(|(k, &i)| shards[i].meta.info(k).is_none())
        {
            return Err(bad(format!(
                "tensor `{key}` is not in its shard {}",
                files[i]
            )));
        }
        Ok(SafeTensors {
            path: index_path.to_path_buf(),
            shards,
            index,
            names,
        })
    }

    /// Whether the tensors are read from file maps (so their pages may be
    /// dropped and re-read), not from memory the process owns.
    pub(crate) fn is_mapped(&self) -> bool {
        self.shards
            .iter()
            .all(|s| matches!(s.bytes, Bytes::Mapped(..)))
    }

    /// The file opened: the weights file, or the shard index.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The files holding the tensors (one, or every shard).
    pub fn files(&self) -> Vec<&Path> {
        self.shards.iter().map(|s| s.path.as_path()).collect()
    }

    /// Tensor names in file order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    fn find(&self, key: &str) -> Option<(&Shard, &TensorInfo)> {
        let shard = if self.index.is_empty() {
            self.shards.first()?
        } else {
            &self.shards[*self.index.get(key)?]
        };
        shard.meta.info(key).map(|i| (shard, i))
    }

    pub fn contains(&self, key: &str) -> bool {
        self.find(key).is_some()
    }

    pub fn shape(&self, key: &str) -> Option<&[usize]> {
        self.find(key).map(|(_, i)| i.shape.as_slice())
    }

    pub fn dtype(&self, key: &str) -> Option<Dtype> {
        self.find(key).map(|(_, i)| i.dtype)
    }

    /// The `__metadata__` string map of the (first) file, if any.
    pub fn metadata(&self) -> Option<&HashMap<String, String>> {
        self.shards.first()?.meta.metadata().as_ref()
    }

    fn info(&self, key: &str) -> Result<(&Shard, &TensorInfo)> {
        self.find(key).ok_or_else(|| Error::MissingTensor {
            file: self.path.clone(),
            key: key.to_string(),
        })
    }

    fn malformed(&self, msg: String) -> Error {
        Error::Safetensors {
            path: self.path.clone(),
            msg,
        }
    }

    /// Weights are finite: a NaN or infinity would silently poison every
    /// output, so it is an error naming the tensor.
    pub(crate) fn check_finite(&self, key: &str, data: &[f32]) -> Result<()> {
        // Chunked so the common case is a vectorised pass, not a branch per value.
        for (c, chunk) in data.chunks(4096).enumerate() {
            if !chunk.iter().fold(true, |ok, x| ok & x.is_finite()) {
                let i = c * 4096 + chunk.iter().position(|x| !x.is_finite()).unwrap_or(0);
                return Err(
                    self.malformed(format!("tensor `{key}` holds {} at element {i}", data[i]))
                );
            }
        }
        Ok(())
    }

    /// Tensor `key` as f32 (F32 borrowed from the map when aligned, F16/BF16/F64
    /// converted). Errors: missing key, unsupported dtype.
    pub fn tensor_f32(&self, key: &str) -> Result<Cow<'_, [f32]>> {
        let t = self.tensor_f32_unchecked(key)?;
        if let Cow::Borrowed(data) = t {
            self.check_finite(key, data)?;
        }
        Ok(t)
    }

    /// [`Self::tensor_f32`] that leaves F32 data borrowed from the map
    /// unchecked for finiteness: for a caller that checks it while streaming
    /// through it (converted data is always checked).
    pub(crate) fn tensor_f32_unchecked(&self, key: &str) -> Result<Cow<'_, [f32]>> {
        let (shard, info) = self.info(key)?;
        let raw = shard.raw(info)?;
        if info.dtype == Dtype::F32 && cfg!(target_endian = "little") {
            // SAFETY: every bit pattern is a valid f32; align_to only yields
            // the middle part at correct alignment.
            let (pre, mid, post) = unsafe { raw.align_to::<f32>() };
            if pre.is_empty() && post.is_empty() {
                return Ok(Cow::Borrowed(mid));
            }
        }
        // read_metadata checked that shape and offsets agree, so the file
        // already holds this many elements: the allocation is bounded by it.
        let mut out = vec![0.0f32; info.shape.iter().product()];
        self.convert(key, shard, info, &mut out)?;
        Ok(Cow::Owned(out))
    }

    /// Converts tensor `key` into `out`, whose length must equal its element count.
    pub fn read_f32_into(&self, key: &str, out: &mut [f32]) -> Result<()> {
        let (shard, info) = self.info(key)?;
        let numel: usize = info.shape.iter().product();
        if out.len() != numel {
            return Err(Error::InvalidInput(format!(
                "{}: tensor `{key}` has {numel} elements, destination has {}",
                self.path.display(),
                out.len()
            )));
        }
        self.convert(key, shard, info, out)
    }

    fn convert(&self, key: &str, shard: &Shard, info: &TensorInfo, out: &mut [f32]) -> Result<()> {
        let raw = shard.raw(info)?;
        match info.dtype {
            Dtype::F32 => {
                if cfg!(target_endian = "little") {
                    // SAFETY: as in `tensor_f32`; aligned data is a plain memcpy.
                    let (pre, mid, post) = unsafe { raw.align_to::<f32>() };
                    if pre.is_empty() && post.is_empty() {
                        out.copy_from_slice(mid);
                        return self.check_finite(key, out);
                    }
                }
                for (o, b) in out.iter_mut().zip(raw.chunks_exact(4)) {
                    *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
            Dtype::F16 => {
                for (o, b) in out.iter_mut().zip(raw.chunks_exact(2)) {
                    *o = f16::from_le_bytes([b[0], b[1]]).to_f32();
                }
            }
            Dtype::BF16 => {
                for (o, b) in out.iter_mut().zip(raw.chunks_exact(2)) {
                    *o = bf16::from_le_bytes([b[0], b[1]]).to_f32();
                }
            }
            Dtype::F64 => {
                for (o, b) in out.iter_mut().zip(raw.chunks_exact(8)) {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    *o = f64::from_le_bytes(a) as f32;
                }
            }
            other => {
                return Err(Error::Dtype {
                    file: shard.path.clone(),
                    key: key.to_string(),
                    dtype: format!("{other:?}"),
                })
            }
        }
        self.check_finite(key, out)
    }
}

impl Shard {
    /// Maps `path` and validates its header (offsets, sizes, file length).
    fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        if len < N_LEN as u64 {
            return Err(Error::Safetensors {
                path: path.to_path_buf(),
                msg: format!("file is {len} bytes, too short for a header"),
            });
        }
        let mut head = [0u8; N_LEN];
        (&file)
            .read_exact(&mut head)
            .map_err(|e| Error::io(path, e))?;
        check_header_len(path, u64::from_le_bytes(head), len)?;
        // SAFETY: the map is read-only; a file truncated in place later is
        // caught before each read (`raw`) rather than faulting, except under
        // a concurrent truncation (see the module docs).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        // Readers take a tensor at a time and release its pages once copied
        // or converted, keeping a few small tensors (biases) mapped. Left to
        // itself, Linux (6.18, ext4's large folios) maps whole 2-4 MiB
        // folios around those: +60 MB resident for GPT-2 124M. A hint;
        // failure changes nothing else.
        #[cfg(target_os = "linux")]
        let _ = map.advise(memmap2::Advice::NoHugePage);
        Self::from_storage(path.to_path_buf(), Bytes::Mapped(map, file))
    }

    fn from_storage(path: PathBuf, bytes: Bytes) -> Result<Self> {
        let all = bytes.as_slice();
        if all.len() >= N_LEN {
            let mut head = [0u8; N_LEN];
            head.copy_from_slice(&all[..N_LEN]);
            check_header_len(&path, u64::from_le_bytes(head), all.len() as u64)?;
        }
        let (n, meta) = safetensors::SafeTensors::read_metadata(bytes.as_slice()).map_err(|e| {
            Error::Safetensors {
                path: path.clone(),
                msg: e.to_string(),
            }
        })?;
        Ok(Shard {
            path,
            bytes,
            data_start: N_LEN + n,
            meta,
        })
    }

    fn raw(&self, info: &TensorInfo) -> Result<&[u8]> {
        let (s, e) = info.data_offsets;
        let all = self.bytes.as_slice();
        if let Bytes::Mapped(_, file) = &self.bytes {
            // Reading a page past a truncated file's end is a SIGBUS.
            let now = file.metadata().map_err(|e| Error::io(&self.path, e))?.len();
            if now != all.len() as u64 {
                return Err(Error::Safetensors {
                    path: self.path.clone(),
                    msg: format!(
                        "the file changed size on disk while open ({} bytes, now {now}); \
                         replace weight files by rename, never in place",
                        all.len()
                    ),
                });
            }
        }
        // read_metadata checked that offsets tile the data section exactly.
        Ok(&all[self.data_start + s..self.data_start + e])
    }
}

/// Reads a shard index (`{"metadata": …, "weight_map": {tensor: file}}`,
/// HF's `model.safetensors.index.json` or `pytorch_model.bin.index.json`):
/// the shard file names (plain names in the index's folder, first-use
/// order) and each tensor's shard.
pub(crate) fn read_weight_map(index_path: &Path) -> Result<(Vec<String>, HashMap<String, usize>)> {
    let bad = |msg: String| Error::Safetensors {
        path: index_path.to_path_buf(),
        msg,
    };
    let file = File::open(index_path).map_err(|e| Error::io(index_path, e))?;
    let len = file.metadata().map_err(|e| Error::io(index_path, e))?.len();
    if len > MAX_INDEX {
        return Err(bad(format!(
            "shard index of {len} bytes is larger than the limit of {MAX_INDEX}"
        )));
    }
    let mut text = String::new();
    (&file)
        .take(MAX_INDEX)
        .read_to_string(&mut text)
        .map_err(|e| Error::io(index_path, e))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("invalid JSON: {e}")))?;
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| bad("no \"weight_map\" object".into()))?;
    if map.is_empty() {
        return Err(bad("the weight_map is empty".into()));
    }
    let mut files: Vec<String> = Vec::new();
    let mut index = HashMap::with_capacity(map.len());
    for (key, f) in map {
        let f = f
            .as_str()
            .ok_or_else(|| bad(format!("tensor `{key}`: the shard is not a file name")))?;
        let plain = Path::new(f).file_name().and_then(|n| n.to_str()) == Some(f);
        if !plain || f.starts_with('.') {
            return Err(bad(format!(
                "tensor `{key}`: shard {f:?} is not a file name in the index's folder"
            )));
        }
        let at = match files.iter().position(|x| x == f) {
            Some(i) => i,
            None => {
                files.push(f.to_string());
                files.len() - 1
            }
        };
        index.insert(key.clone(), at);
    }
    Ok((files, index))
}

/// Checks a file's header size `n` (its first 8 bytes) against
/// [`MAX_HEADER`] and the file's length `len`, before the header is read.
fn check_header_len(path: &Path, n: u64, len: u64) -> Result<()> {
    let msg = if n > MAX_HEADER as u64 {
        format!("header of {n} bytes is larger than the limit of {MAX_HEADER}")
    } else if n + N_LEN as u64 > len {
        format!("header of {n} bytes does not fit in a file of {len} bytes (truncated?)")
    } else {
        return Ok(());
    };
    Err(Error::Safetensors {
        path: path.to_path_buf(),
        msg,
    })
}

/// One f32 tensor to write.
#[derive(Debug, Clone)]
pub struct TensorRef<'a> {
    pub name: String,
    pub shape: Vec<usize>,
    pub data: &'a [f32],
}

/// Writes F32 `tensors` (sorted by name, as the Python writer does) with
/// `metadata` to `path`, atomically, streaming (no full copy in memory).
pub fn write_safetensors(
    path: impl AsRef<Path>,
    tensors: &[TensorRef<'_>],
    metadata: &BTreeMap<String, String>,
) -> Result<()> {
    let path = path.as_ref();
    let mut order: Vec<&TensorRef> = tensors.iter().collect();
    order.sort_by(|a, b| a.name.cmp(&b.name));
    let mut header = serde_json::Map::new();
    if !metadata.is_empty() {
        header.insert(
            "__metadata__".into(),
            serde_json::to_value(metadata).unwrap_or_default(),
        );
    }
    let mut seen = HashSet::new();
    let mut offset = 0usize;
    for t in &order {
        if !seen.insert(t.name.as_str()) {
            return Err(Error::InvalidInput(format!(
                "tensor `{}` written twice",
                t.name
            )));
        }
        let numel: usize = t.shape.iter().product();
        if numel != t.data.len() {
            return Err(Error::InvalidInput(format!(
                "tensor `{}`: shape {:?} has {numel} elements, data has {}",
                t.name,
                t.shape,
                t.data.len()
            )));
        }
        let end = offset + 4 * numel;
        header.insert(
            t.name.clone(),
            serde_json::json!({"dtype": "F32", "shape": t.shape, "data_offsets": [offset, end]}),
        );
        offset = end;
    }
    let mut header = serde_json::to_vec(&header).map_err(|e| Error::InvalidInput(e.to_string()))?;
    // Pad with spaces so the data section starts 8-byte aligned (as the spec advises).
    while !(N_LEN + header.len()).is_multiple_of(8) {
        header.push(b' ');
    }
    atomic_write_with(path, |w| {
        w.write_all(&(header.len() as u64).to_le_bytes())?;
        w.write_all(&header)?;
        let mut buf = Vec::with_capacity(1 << 16);
        for t in &order {
            for chunk in t.data.chunks(1 << 14) {
                buf.clear();
                buf.extend(chunk.iter().flat_map(|x| x.to_le_bytes()));
                w.write_all(&buf)?;
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(dtype: &str, shape: &[usize], data: &[u8]) -> Vec<u8> {
        let header = serde_json::json!({"t": {"dtype": dtype, "shape": shape, "data_offsets": [0, data.len()]}});
        let mut h = serde_json::to_vec(&header).unwrap();
        // Force a data section that is NOT 4-byte aligned relative to the buffer.
        while (8 + h.len()) % 4 != 1 {
            h.push(b' ');
        }
        let mut v = (h.len() as u64).to_le_bytes().to_vec();
        v.extend(h);
        v.extend(data);
        v
    }

    #[test]
    fn converts_half_types_and_rejects_ints() {
        let vals = [1.5f32, -2.0, 0.25];
        let f16b: Vec<u8> = vals
            .iter()
            .flat_map(|&x| f16::from_f32(x).to_le_bytes())
            .collect();
        let st = SafeTensors::from_bytes(file_with("F16", &[3], &f16b), "x").unwrap();
        assert_eq!(&*st.tensor_f32("t").unwrap(), &vals);
        let bf: Vec<u8> = vals
            .iter()
            .flat_map(|&x| bf16::from_f32(x).to_le_bytes())
            .collect();
        let st = SafeTensors::from_bytes(file_with("BF16", &[3], &bf), "x").unwrap();
        assert_eq!(&*st.tensor_f32("t").unwrap(), &vals);
        // Misaligned F32 data (odd header length) still reads correctly.
        let f32b: Vec<u8> = vals.iter().flat_map(|x| x.to_le_bytes()).collect();
        let st = SafeTensors::from_bytes(file_with("F32", &[3], &f32b), "x").unwrap();
        assert_eq!(&*st.tensor_f32("t").unwrap(), &vals);
        let st = SafeTensors::from_bytes(file_with("I32", &[3], &f32b), "x").unwrap();
        let e = st.tensor_f32("t").unwrap_err();
        assert!(matches!(&e, Error::Dtype { key, .. } if key == "t"), "{e}");
        let e = st.tensor_f32("u").unwrap_err();
        assert!(
            matches!(&e, Error::MissingTensor { key, .. } if key == "u"),
            "{e}"
        );
    }

    #[test]
    fn rejects_truncated_and_garbage() {
        let f32b: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let full = file_with("F32", &[2], &f32b);
        for cut in [0, 4, 8, 20, full.len() - 1] {
            let e = SafeTensors::from_bytes(full[..cut].to_vec(), "cut.safetensors").unwrap_err();
            assert!(matches!(e, Error::Safetensors { .. }), "cut {cut}: {e}");
        }
        let e = SafeTensors::from_bytes(file_with("F32", &[3], &f32b), "x").unwrap_err();
        assert!(matches!(e, Error::Safetensors { .. }), "{e}");
    }

    #[test]
    fn non_finite_weights_are_an_error_naming_the_tensor() {
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let f32b: Vec<u8> = [1.0f32, bad, 3.0]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect();
            let st = SafeTensors::from_bytes(file_with("F32", &[3], &f32b), "x").unwrap();
            let e = st.tensor_f32("t").unwrap_err().to_string();
            assert!(e.contains("tensor `t`") && e.contains("element 1"), "{e}");
            let mut out = [0.0f32; 3];
            assert!(st.read_f32_into("t", &mut out).is_err());
            let bf: Vec<u8> = [1.0f32, bad, 3.0]
                .iter()
                .flat_map(|&x| bf16::from_f32(x).to_le_bytes())
                .collect();
            let st = SafeTensors::from_bytes(file_with("BF16", &[3], &bf), "x").unwrap();
            assert!(st.tensor_f32("t").is_err());
        }
    }

    #[test]
    fn oversized_header_is_refused_before_parsing() {
        let mut v = ((MAX_HEADER + 1) as u64).to_le_bytes().to_vec();
        v.extend(std::iter::repeat_n(b' ', MAX_HEADER + 1));
        let e = SafeTensors::from_bytes(v, "big.safetensors").unwrap_err();
        assert!(e.to_string().contains("larger than the limit"), "{e}");
        let path = std::env::temp_dir().join(format!("lmkit-st-head-{}", std::process::id()));
        let mut v = (u64::MAX - 3).to_le_bytes().to_vec();
        v.extend(b"{}");
        std::fs::write(&path, &v).unwrap();
        let e = SafeTensors::open(&path).unwrap_err();
        assert!(e.to_string().contains("larger than the limit"), "{e}");
        std::fs::remove_file(&path).unwrap();
    }

    /// A file truncated in place after it was mapped: reading past its new
    /// end would be a SIGBUS; it is an error instead.
    #[test]
    fn file_truncated_in_place_while_open_is_an_error() {
        let path = std::env::temp_dir().join(format!("lmkit-st-trunc-{}", std::process::id()));
        let data = vec![0.5f32; 1 << 16];
        let t = TensorRef {
            name: "w".into(),
            shape: vec![data.len()],
            data: &data,
        };
        write_safetensors(&path, &[t], &BTreeMap::new()).unwrap();
        let st = SafeTensors::open(&path).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(4096).unwrap();
        let e = st.tensor_f32("w").unwrap_err().to_string();
        assert!(e.contains("changed size on disk"), "{e}");
        std::fs::remove_file(&path).unwrap();
    }
}
