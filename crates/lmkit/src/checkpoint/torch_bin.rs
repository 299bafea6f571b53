//! Reading PyTorch checkpoints (`pytorch_model.bin`, read-only: lmkit writes
//! safetensors).
//!
//! `torch.save` (torch >= 1.6) writes a zip of stored (uncompressed) entries:
//! `<prefix>/data.pkl` (a pickle of the state dict), `<prefix>/data/<key>`
//! (one raw little-endian storage each), `<prefix>/byteorder`,
//! `<prefix>/version`. A pickle is a program: this reader runs it on a small
//! VM that implements only the opcodes a state dict uses and knows only the
//! globals that rebuild tensors ([`ALLOWED`]); any other global (`os.system`,
//! `builtins.eval`, …) is an error naming it, and nothing is ever called.
//! Every size, stride and offset is checked against its storage before use;
//! the memo, the stack and nesting are bounded. The tensors are then laid
//! out, contiguous, as one in-memory safetensors file, so every loader reads
//! them through the one [`SafeTensors`] reader.
//!
//! The zip reader is a minimal stored-only one (with zip64, which torch uses
//! past 4 GB): torch never compresses, and refusing anything else keeps the
//! parser small and every offset checked.
//!
//! `zip` reads the container, `pickle` runs the VM; this file checks the
//! state dict's tensors against their storages and lays them out.

mod pickle;
mod zip;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::Path;

use safetensors::Dtype;

use self::pickle::{Value, Vm};
use self::zip::{zip_entries, Entry};
use super::safetensors::SafeTensors;
use crate::error::{Error, Result};

/// Largest `data.pkl` read: 16 MiB (a 1.5B GPT-2's is ~40 KB, a
/// 1024-layer model's ~2 MB); what the VM builds from it is ~10x its size at most.
pub const MAX_PICKLE: usize = 16 << 20;
/// Most tensors in one file (a 1024-layer GPT-2 has ~12,000).
pub const MAX_TENSORS: usize = 1 << 18;
/// Most memo entries and stack values.
const MAX_MEMO: usize = 1 << 20;
const MAX_STACK: usize = 1 << 20;
/// Deepest nesting of tuples and dicts (a state dict needs 3).
const MAX_DEPTH: u32 = 32;
/// Most dimensions of a tensor.
const MAX_RANK: usize = 16;
/// Most zip entries.
const MAX_ENTRIES: u64 = 1 << 20;

/// The only globals a pickle may name, `module.name`.
pub const ALLOWED: &[&str] = &[
    "collections.OrderedDict",
    "torch._utils._rebuild_tensor_v2",
    "torch._utils._rebuild_parameter",
    "torch.FloatStorage",
    "torch.HalfStorage",
    "torch.BFloat16Storage",
    "torch.DoubleStorage",
    "torch.LongStorage",
    "torch.IntStorage",
    "torch.ShortStorage",
    "torch.CharStorage",
    "torch.ByteStorage",
    "torch.BoolStorage",
];

/// Opens `path`, a PyTorch zip checkpoint (`pytorch_model.bin`, as
/// `torch.save` writes it since torch 1.6), its tensors copied out,
/// contiguous, into a [`SafeTensors`] held in memory.
pub fn open(path: &Path) -> Result<SafeTensors> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    // SAFETY: read-only map; the data is copied out before this returns.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
    let parsed = parse(&map, path)?;
    to_safetensors(&[(&map[..], parsed)], path)
}

/// [`open`] on bytes in memory; `path` is used in messages only.
pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<SafeTensors> {
    let parsed = parse(bytes, path)?;
    to_safetensors(&[(bytes, parsed)], path)
}

/// Opens the shards named by `pytorch_model.bin.index.json`
/// (`{"weight_map": {tensor: file}}`), keeping from each shard the tensors
/// the index assigns to it.
pub fn open_sharded(index_path: &Path) -> Result<SafeTensors> {
    let (files, index) = super::safetensors::read_weight_map(index_path)?;
    let dir = index_path.parent().unwrap_or(Path::new("."));
    let mut maps = Vec::with_capacity(files.len());
    for f in &files {
        let p = dir.join(f);
        let file = File::open(&p).map_err(|e| Error::io(&p, e))?;
        // SAFETY: as in `open`.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(&p, e))?;
        maps.push((p, map));
    }
    let mut parts = Vec::with_capacity(maps.len());
    for (i, (p, m)) in maps.iter().enumerate() {
        let mut parsed = parse(m, p)?;
        parsed
            .tensors
            .retain(|t| index.get(&t.name).copied() == Some(i));
        parts.push((&m[..], parsed));
    }
    let found: HashSet<&str> = parts
        .iter()
        .flat_map(|(_, p)| p.tensors.iter().map(|t| t.name.as_str()))
        .collect();
    if let Some((key, &i)) = index.iter().find(|(k, _)| !found.contains(k.as_str())) {
        return Err(bad(
            index_path,
            format!("tensor `{key}` is not in its shard {}", files[i]),
        ));
    }
    to_safetensors(&parts, index_path)
}

fn bad(path: &Path, msg: impl Into<String>) -> Error {
    Error::TorchBin {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

// ---------------------------------------------------------------------------
// From views to contiguous tensors

struct Tensor {
    name: String,
    dtype: Dtype,
    shape: Vec<u64>,
    stride: Vec<u64>,
    /// Byte range of the storage in the file, and the first element's index.
    storage: (usize, usize),
    offset: u64,
    numel: u64,
}

struct Parsed {
    tensors: Vec<Tensor>,
}

fn elem_size(d: Dtype) -> u64 {
    match d {
        Dtype::F64 | Dtype::I64 => 8,
        Dtype::F32 | Dtype::I32 => 4,
        Dtype::F16 | Dtype::BF16 | Dtype::I16 => 2,
        _ => 1,
    }
}

fn parse(b: &[u8], path: &Path) -> Result<Parsed> {
    if b.starts_with(&[0x80]) {
        return Err(bad(
            path,
            "the legacy (pre-1.6, non-zip) torch.save format is not supported; re-save it \
             with torch >= 1.6 or convert it to safetensors",
        ));
    }
    if !b.starts_with(b"PK\x03\x04") {
        return Err(bad(path, "not a PyTorch checkpoint (not a zip file)"));
    }
    let entries = zip_entries(b).map_err(|m| bad(path, m))?;
    let mut pkls = entries
        .iter()
        .filter(|e| e.name.ends_with("/data.pkl") && e.name.matches('/').count() == 1);
    let pkl = pkls
        .next()
        .ok_or_else(|| bad(path, "no <name>/data.pkl in the zip"))?;
    if pkls.next().is_some() {
        return Err(bad(path, "more than one data.pkl in the zip"));
    }
    let prefix = &pkl.name[..pkl.name.len() - "data.pkl".len()];
    let by_name: HashMap<&str, &Entry> = entries.iter().map(|e| (e.name.as_str(), e)).collect();
    let slice = |e: &Entry| &b[e.start..e.start + e.len];
    if let Some(order) = by_name.get(format!("{prefix}byteorder").as_str()) {
        if slice(order) != b"little" {
            return Err(bad(
                path,
                format!(
                    "byte order {:?}: only little-endian checkpoints are supported",
                    String::from_utf8_lossy(slice(order))
                ),
            ));
        }
    }
    if pkl.len > MAX_PICKLE {
        return Err(bad(
            path,
            format!(
                "data.pkl of {} bytes is larger than the limit of {MAX_PICKLE}",
                pkl.len
            ),
        ));
    }
    let vm = Vm::new(slice(pkl));
    let top = vm.run().map_err(|m| bad(path, m))?;
    let Value::Dict(d) = top else {
        return Err(bad(
            path,
            format!("the pickle holds {}, not a state dict", top.kind()),
        ));
    };
    let items = d.items.borrow();
    if items.len() > MAX_TENSORS {
        return Err(bad(
            path,
            format!(
                "the state dict has {} entries (more than the limit of {MAX_TENSORS})",
                items.len()
            ),
        ));
    }
    let mut seen = HashSet::new();
    let mut tensors = Vec::with_capacity(items.len());
    for (k, v) in items.iter() {
        let Value::Str(name) = k else {
            return Err(bad(path, format!("a state dict key is {}", k.kind())));
        };
        let Value::Tensor(t) = v else {
            return Err(bad(path, format!("`{name}` is {}, not a tensor", v.kind())));
        };
        if !seen.insert(name.clone()) || &**name == "__metadata__" {
            return Err(bad(path, format!("tensor `{name}` appears twice")));
        }
        let s = &t.storage;
        let e = by_name
            .get(format!("{prefix}data/{}", s.key).as_str())
            .ok_or_else(|| {
                bad(
                    path,
                    format!("`{name}`: storage {} is not in the zip", s.key),
                )
            })?;
        let es = elem_size(s.dtype);
        if s.numel.checked_mul(es) != Some(e.len as u64) {
            return Err(bad(
                path,
                format!(
                    "`{name}`: storage {} declares {} elements of {es} bytes but holds {} bytes",
                    s.key, s.numel, e.len
                ),
            ));
        }
        let numel = t
            .size
            .iter()
            .try_fold(1u64, |a, &x| a.checked_mul(x))
            .ok_or_else(|| bad(path, format!("`{name}`: size {:?} overflows", t.size)))?;
        if numel > 0 {
            // The last element a view reaches must lie in its storage.
            let last = t
                .size
                .iter()
                .zip(&t.stride)
                .try_fold(t.offset, |a, (&n, &st)| {
                    a.checked_add((n - 1).checked_mul(st)?)
                });
            if last.is_none_or(|l| l >= s.numel) {
                return Err(bad(
                    path,
                    format!(
                        "`{name}`: offset {} with size {:?} and stride {:?} reaches past its \
                         storage of {} elements",
                        t.offset, t.size, t.stride, s.numel
                    ),
                ));
            }
        }
        if numel > s.numel {
            // Only an expanded (stride 0) view has more elements than its storage.
            return Err(bad(
                path,
                format!(
                    "`{name}`: {numel} elements from a storage of {} (an expanded view) is not supported",
                    s.numel
                ),
            ));
        }
        tensors.push(Tensor {
            name: name.to_string(),
            dtype: s.dtype,
            shape: t.size.clone(),
            stride: t.stride.clone(),
            storage: (e.start, e.len),
            offset: t.offset,
            numel,
        });
    }
    Ok(Parsed { tensors })
}

/// Lays the tensors of `parts` (each with the bytes its ranges index) out
/// contiguously as one safetensors file in memory.
fn to_safetensors(parts: &[(&[u8], Parsed)], path: &Path) -> Result<SafeTensors> {
    let file_bytes: u64 = parts.iter().map(|(b, _)| b.len() as u64).sum();
    // Tensors sharing a storage (tied weights) are copied once each; more
    // than twice the files' size is no checkpoint torch writes. Each size is
    // at most its file's (checked in `parse`), so the sum cannot overflow.
    let all = || parts.iter().flat_map(|(_, p)| p.tensors.iter());
    let total: u64 = all().map(|t| t.numel * elem_size(t.dtype)).sum();
    let count = all().count();
    if total > 2 * file_bytes + (1 << 20) || count > MAX_TENSORS {
        return Err(bad(
            path,
            format!(
                "its {count} tensors hold {total} bytes, more than twice the file's {file_bytes}"
            ),
        ));
    }
    let mut header = serde_json::Map::new();
    let mut at = 0u64;
    for t in all() {
        let n = t.numel * elem_size(t.dtype);
        header.insert(
            t.name.clone(),
            serde_json::json!({"dtype": t.dtype, "shape": t.shape, "data_offsets": [at, at + n]}),
        );
        at += n;
    }
    let mut head = serde_json::to_vec(&header).map_err(|e| bad(path, e.to_string()))?;
    while !(8 + head.len()).is_multiple_of(8) {
        head.push(b' ');
    }
    let len = usize::try_from(8 + head.len() as u64 + total)
        .map_err(|_| bad(path, "too large for this machine"))?;
    let mut out = Vec::new();
    out.try_reserve_exact(len)
        .map_err(|_| bad(path, format!("cannot allocate {len} bytes")))?;
    out.extend_from_slice(&(head.len() as u64).to_le_bytes());
    out.extend_from_slice(&head);
    for (b, p) in parts {
        for t in &p.tensors {
            let es = elem_size(t.dtype) as usize;
            let storage = &b[t.storage.0..t.storage.0 + t.storage.1];
            copy_view(storage, es, t, &mut out);
        }
    }
    SafeTensors::from_bytes(out, path.to_path_buf())
}

/// Appends the elements of `t` (checked to lie in `storage`) in row-major order.
fn copy_view(storage: &[u8], es: usize, t: &Tensor, out: &mut Vec<u8>) {
    if t.numel == 0 {
        return;
    }
    let rank = t.shape.len();
    // Row-major strides of the shape: a view with them is one slice.
    let mut contiguous = true;
    let mut want = 1u64;
    for d in (0..rank).rev() {
        if t.shape[d] != 1 && t.stride[d] != want {
            contiguous = false;
        }
        want *= t.shape[d];
    }
    let off = t.offset as usize * es;
    if contiguous {
        out.extend_from_slice(&storage[off..off + t.numel as usize * es]);
        return;
    }
    // An odometer over the index; every position was bounded by the last-element check.
    let mut idx = vec![0u64; rank];
    let mut pos = t.offset;
    for _ in 0..t.numel {
        let p = pos as usize * es;
        out.extend_from_slice(&storage[p..p + es]);
        for d in (0..rank).rev() {
            idx[d] += 1;
            pos += t.stride[d];
            if idx[d] < t.shape[d] {
                break;
            }
            pos -= t.stride[d] * t.shape[d];
            idx[d] = 0;
        }
    }
}
