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

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::Path;
use std::rc::Rc;

use safetensors::Dtype;

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
// The zip container

/// A stored entry: its name and its data's byte range in the file.
struct Entry {
    name: String,
    start: usize,
    len: usize,
}

fn le(b: &[u8], at: usize, n: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(n)?)?;
    Some(s.iter().rev().fold(0u64, |a, &x| (a << 8) | u64::from(x)))
}

/// The entries of a zip file (stored-only; zip64 understood).
fn zip_entries(b: &[u8]) -> std::result::Result<Vec<Entry>, String> {
    let short = || "the zip directory is truncated".to_string();
    const EOCD: u64 = 0x0605_4b50;
    if b.len() < 22 {
        return Err(format!("{} bytes is too short for a zip file", b.len()));
    }
    let lowest = (b.len() - 22).saturating_sub(0xFFFF);
    let eocd = (lowest..=b.len() - 22)
        .rev()
        .find(|&i| le(b, i, 4) == Some(EOCD))
        .ok_or("no end of zip directory (truncated file?)")?;
    let mut count = le(b, eocd + 10, 2).ok_or_else(short)?;
    let mut cd_size = le(b, eocd + 12, 4).ok_or_else(short)?;
    let mut cd_off = le(b, eocd + 16, 4).ok_or_else(short)?;
    if count == 0xFFFF || cd_size == 0xFFFF_FFFF || cd_off == 0xFFFF_FFFF {
        // zip64: a locator just before the record points at the zip64 record.
        let loc = eocd.checked_sub(20).ok_or_else(short)?;
        if le(b, loc, 4) != Some(0x0706_4b50) {
            return Err("no zip64 locator".into());
        }
        let rec = usize::try_from(le(b, loc + 8, 8).ok_or_else(short)?).map_err(|_| short())?;
        if le(b, rec, 4) != Some(0x0606_4b50) {
            return Err("no zip64 end of directory record".into());
        }
        count = le(b, rec.saturating_add(32), 8).ok_or_else(short)?;
        cd_size = le(b, rec.saturating_add(40), 8).ok_or_else(short)?;
        cd_off = le(b, rec.saturating_add(48), 8).ok_or_else(short)?;
    }
    if count > MAX_ENTRIES {
        return Err(format!(
            "{count} zip entries (more than the limit of {MAX_ENTRIES})"
        ));
    }
    let cd_end = cd_off.checked_add(cd_size).ok_or_else(short)?;
    if cd_end > b.len() as u64 {
        return Err(short());
    }
    let mut at = cd_off as usize;
    let mut out = Vec::new();
    for _ in 0..count {
        if le(b, at, 4) != Some(0x0201_4b50) {
            return Err("a bad zip directory entry".into());
        }
        let field = |off: usize, n: usize| le(b, at + off, n).ok_or_else(short);
        let flags = field(8, 2)?;
        let method = field(10, 2)?;
        let mut csize = field(20, 4)?;
        let mut usize_ = field(24, 4)?;
        let name_len = field(28, 2)? as usize;
        let extra_len = field(30, 2)? as usize;
        let comment_len = field(32, 2)? as usize;
        let mut local = field(42, 4)?;
        let name = b.get(at + 46..at + 46 + name_len).ok_or_else(short)?;
        let name = String::from_utf8_lossy(name).into_owned();
        let extra = b
            .get(at + 46 + name_len..at + 46 + name_len + extra_len)
            .ok_or_else(short)?;
        // zip64 extended information: the 64-bit values of the fields that are 0xFFFFFFFF.
        let mut e = 0;
        while e + 4 <= extra.len() {
            let id = le(extra, e, 2).unwrap_or(0);
            let n = le(extra, e + 2, 2).unwrap_or(0) as usize;
            let body = extra.get(e + 4..e + 4 + n).ok_or_else(short)?;
            if id == 1 {
                let mut k = 0;
                for v in [&mut usize_, &mut csize, &mut local] {
                    if *v == 0xFFFF_FFFF {
                        *v = le(body, k, 8).ok_or_else(short)?;
                        k += 8;
                    }
                }
            }
            e += 4 + n;
        }
        if flags & 1 != 0 {
            return Err(format!("zip entry {name:?} is encrypted"));
        }
        if method != 0 || csize != usize_ {
            return Err(format!(
                "zip entry {name:?} is compressed (method {method}); torch.save writes stored entries"
            ));
        }
        // The local header's own name and extra lengths (torch pads the extra field for alignment).
        let l = usize::try_from(local).map_err(|_| short())?;
        if le(b, l, 4) != Some(0x0403_4b50) {
            return Err(format!("zip entry {name:?}: bad local header"));
        }
        let ln = le(b, l + 26, 2).ok_or_else(short)? as usize;
        let lx = le(b, l + 28, 2).ok_or_else(short)? as usize;
        let start = l + 30 + ln + lx;
        let end = (start as u64).checked_add(csize).ok_or_else(short)?;
        if end > b.len() as u64 {
            return Err(format!(
                "zip entry {name:?} ends at byte {end}, past the end of the file ({} bytes; truncated?)",
                b.len()
            ));
        }
        out.push(Entry {
            name,
            start,
            len: csize as usize,
        });
        at += 46 + name_len + extra_len + comment_len;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// The pickle VM

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Global {
    OrderedDict,
    RebuildTensor,
    RebuildParameter,
    Storage(Dtype),
}

struct Storage {
    dtype: Dtype,
    key: String,
    numel: u64,
}

struct View {
    storage: Rc<Storage>,
    offset: u64,
    size: Vec<u64>,
    stride: Vec<u64>,
}

/// A dict (mutable until placed inside another value: then frozen, so the
/// depth recorded when it was placed stays true and no cycle can form).
struct Dict {
    items: RefCell<Vec<(Value, Value)>>,
    frozen: Cell<bool>,
    depth: Cell<u32>,
}

#[derive(Clone)]
enum Value {
    None,
    Bool,
    Int(i64),
    Str(Rc<str>),
    Tuple(Rc<(u32, Vec<Value>)>),
    Dict(Rc<Dict>),
    Global(Global),
    Storage(Rc<Storage>),
    Tensor(Rc<View>),
}

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool => "a bool",
            Value::Int(_) => "an int",
            Value::Str(_) => "a string",
            Value::Tuple(_) => "a tuple",
            Value::Dict(_) => "a dict",
            Value::Global(_) => "a global",
            Value::Storage(_) => "a storage",
            Value::Tensor(_) => "a tensor",
        }
    }

    fn depth(&self) -> u32 {
        match self {
            Value::Tuple(t) => t.0,
            Value::Dict(d) => d.depth.get(),
            _ => 0,
        }
    }

    /// Marks a dict placed inside another value as frozen.
    fn place(&self) {
        if let Value::Dict(d) = self {
            d.frozen.set(true);
        }
    }
}

fn global(module: &str, name: &str) -> std::result::Result<Global, String> {
    let g = match (module, name) {
        ("collections", "OrderedDict") => Global::OrderedDict,
        ("torch._utils", "_rebuild_tensor_v2") => Global::RebuildTensor,
        ("torch._utils", "_rebuild_parameter") => Global::RebuildParameter,
        ("torch", "FloatStorage") => Global::Storage(Dtype::F32),
        ("torch", "HalfStorage") => Global::Storage(Dtype::F16),
        ("torch", "BFloat16Storage") => Global::Storage(Dtype::BF16),
        ("torch", "DoubleStorage") => Global::Storage(Dtype::F64),
        ("torch", "LongStorage") => Global::Storage(Dtype::I64),
        ("torch", "IntStorage") => Global::Storage(Dtype::I32),
        ("torch", "ShortStorage") => Global::Storage(Dtype::I16),
        ("torch", "CharStorage") => Global::Storage(Dtype::I8),
        ("torch", "ByteStorage") => Global::Storage(Dtype::U8),
        ("torch", "BoolStorage") => Global::Storage(Dtype::BOOL),
        _ => {
            return Err(format!(
                "the pickle names the global `{module}.{name}`, which is not tensor storage; \
                 refused (only {} are allowed)",
                ALLOWED.join(", ")
            ))
        }
    };
    Ok(g)
}

struct Vm<'a> {
    code: &'a [u8],
    at: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: HashMap<u32, Value>,
}

type VmResult<T> = std::result::Result<T, String>;

impl<'a> Vm<'a> {
    fn take(&mut self, n: usize) -> VmResult<&'a [u8]> {
        let s = self
            .code
            .get(self.at..self.at.saturating_add(n))
            .ok_or("the pickle is truncated")?;
        self.at += n;
        Ok(s)
    }

    fn uint(&mut self, n: usize) -> VmResult<u64> {
        let s = self.take(n)?;
        Ok(le(s, 0, n).unwrap_or(0))
    }

    fn line(&mut self) -> VmResult<&'a str> {
        let rest = &self.code[self.at.min(self.code.len())..];
        let n = rest
            .iter()
            .take(256)
            .position(|&c| c == b'\n')
            .ok_or("a GLOBAL name is unterminated or longer than 256 bytes")?;
        self.at += n + 1;
        std::str::from_utf8(&rest[..n]).map_err(|_| "a GLOBAL name is not UTF-8".to_string())
    }

    fn push(&mut self, v: Value) -> VmResult<()> {
        if self.stack.len() >= MAX_STACK {
            return Err(format!("the pickle's stack exceeds {MAX_STACK} values"));
        }
        self.stack.push(v);
        Ok(())
    }

    fn pop(&mut self) -> VmResult<Value> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return Err("the pickle pops past a MARK".into());
        }
        self.stack
            .pop()
            .ok_or_else(|| "the pickle's stack is empty".into())
    }

    fn pop_mark(&mut self) -> VmResult<Vec<Value>> {
        let m = self.marks.pop().ok_or("no MARK on the pickle's stack")?;
        Ok(self.stack.split_off(m))
    }

    fn tuple(&mut self, items: Vec<Value>) -> VmResult<()> {
        let depth = 1 + items.iter().map(Value::depth).max().unwrap_or(0);
        if depth > MAX_DEPTH {
            return Err(format!("the pickle nests values deeper than {MAX_DEPTH}"));
        }
        items.iter().for_each(Value::place);
        self.push(Value::Tuple(Rc::new((depth, items))))
    }

    fn set_items(&mut self, kv: Vec<Value>) -> VmResult<()> {
        if !kv.len().is_multiple_of(2) {
            return Err("SETITEMS with an odd number of values".into());
        }
        let Some(Value::Dict(d)) = self.stack.last() else {
            return Err("SETITEM on something that is not a dict".into());
        };
        kv.iter().for_each(Value::place);
        if d.frozen.get() {
            return Err("SETITEM on a dict already placed inside another value".into());
        }
        let depth = 1 + kv.iter().map(Value::depth).max().unwrap_or(0);
        if depth > MAX_DEPTH {
            return Err(format!("the pickle nests values deeper than {MAX_DEPTH}"));
        }
        d.depth.set(d.depth.get().max(depth));
        let mut items = d.items.borrow_mut();
        let mut it = kv.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            items.push((k, v));
        }
        Ok(())
    }

    fn memo_put(&mut self, idx: u32) -> VmResult<()> {
        let v = self.stack.last().ok_or("PUT on an empty stack")?.clone();
        if self.memo.len() >= MAX_MEMO && !self.memo.contains_key(&idx) {
            return Err(format!("the pickle's memo exceeds {MAX_MEMO} entries"));
        }
        self.memo.insert(idx, v);
        Ok(())
    }

    fn memo_get(&mut self, idx: u32) -> VmResult<()> {
        let v = self
            .memo
            .get(&idx)
            .cloned()
            .ok_or_else(|| format!("GET of memo entry {idx}, never PUT"))?;
        self.push(v)
    }

    fn run(mut self) -> VmResult<Value> {
        loop {
            let op = self.take(1)?[0];
            match op {
                0x80 => {
                    let p = self.uint(1)?;
                    if p > 5 {
                        return Err(format!("pickle protocol {p} is unknown"));
                    }
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    let g = global(module, name)?;
                    self.push(Value::Global(g))?;
                }
                b'q' => {
                    let i = self.uint(1)? as u32;
                    self.memo_put(i)?;
                }
                b'r' => {
                    let i = self.uint(4)? as u32;
                    self.memo_put(i)?;
                }
                b'h' => {
                    let i = self.uint(1)? as u32;
                    self.memo_get(i)?;
                }
                b'j' => {
                    let i = self.uint(4)? as u32;
                    self.memo_get(i)?;
                }
                b'K' => {
                    let v = self.uint(1)? as i64;
                    self.push(Value::Int(v))?;
                }
                b'M' => {
                    let v = self.uint(2)? as i64;
                    self.push(Value::Int(v))?;
                }
                b'J' => {
                    let v = self.uint(4)? as u32 as i32 as i64;
                    self.push(Value::Int(v))?;
                }
                0x8a => {
                    // LONG1: little-endian two's complement of n bytes.
                    let n = self.uint(1)? as usize;
                    if n > 8 {
                        return Err(format!("an integer of {n} bytes (more than 64 bits)"));
                    }
                    let s = self.take(n)?;
                    let mut v = le(s, 0, n).unwrap_or(0);
                    if n > 0 && n < 8 && s[n - 1] & 0x80 != 0 {
                        v |= u64::MAX << (8 * n);
                    }
                    self.push(Value::Int(v as i64))?;
                }
                b'X' => {
                    let n = self.uint(4)? as usize;
                    let s = self.take(n)?;
                    let s = std::str::from_utf8(s).map_err(|_| "a string is not UTF-8")?;
                    self.push(Value::Str(Rc::from(s)))?;
                }
                b'N' => self.push(Value::None)?,
                0x88 | 0x89 => self.push(Value::Bool)?,
                b'(' => {
                    if self.marks.len() >= MAX_STACK {
                        return Err("too many MARKs".into());
                    }
                    self.marks.push(self.stack.len());
                }
                b't' => {
                    let items = self.pop_mark()?;
                    self.tuple(items)?;
                }
                b')' => self.tuple(Vec::new())?,
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let mut items = (0..n).map(|_| self.pop()).collect::<VmResult<Vec<_>>>()?;
                    items.reverse();
                    self.tuple(items)?;
                }
                b'}' => self.push(Value::Dict(Rc::new(Dict {
                    items: RefCell::new(Vec::new()),
                    frozen: Cell::new(false),
                    depth: Cell::new(1),
                })))?,
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    self.set_items(vec![k, v])?;
                }
                b'u' => {
                    let kv = self.pop_mark()?;
                    self.set_items(kv)?;
                }
                b'Q' => {
                    let pid = self.pop()?;
                    let s = persistent_storage(&pid)?;
                    self.push(Value::Storage(Rc::new(s)))?;
                }
                b'R' => {
                    let args = self.pop()?;
                    let f = self.pop()?;
                    let v = reduce(&f, &args)?;
                    self.push(v)?;
                }
                b'b' => {
                    // BUILD: an OrderedDict's attributes (torch's `_metadata`), dropped.
                    let _state = self.pop()?;
                    match self.stack.last() {
                        Some(Value::Dict(_)) => {}
                        _ => return Err("BUILD on something that is not a dict".into()),
                    }
                }
                b'.' => return self.pop(),
                other => {
                    return Err(format!(
                        "pickle opcode 0x{other:02x} at byte {} is not supported (a torch state \
                         dict does not use it)",
                        self.at - 1
                    ))
                }
            }
        }
    }
}

fn int(v: &Value, what: &str) -> VmResult<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        other => Err(format!("{what} is {}, not an int", other.kind())),
    }
}

fn ints(v: &Value, what: &str) -> VmResult<Vec<u64>> {
    let Value::Tuple(t) = v else {
        return Err(format!("{what} is {}, not a tuple", v.kind()));
    };
    if t.1.len() > MAX_RANK {
        return Err(format!(
            "{what} has {} dimensions (more than {MAX_RANK})",
            t.1.len()
        ));
    }
    t.1.iter()
        .map(|x| {
            let i = int(x, what)?;
            u64::try_from(i).map_err(|_| format!("{what} holds the negative value {i}"))
        })
        .collect()
}

/// A BINPERSID id: `('storage', torch.XStorage, key, location, numel)`.
fn persistent_storage(pid: &Value) -> VmResult<Storage> {
    let shape_err = || "a persistent id that is not ('storage', type, key, location, numel)";
    let Value::Tuple(t) = pid else {
        return Err(shape_err().into());
    };
    match &t.1[..] {
        [Value::Str(tag), Value::Global(Global::Storage(dtype)), Value::Str(key), Value::Str(_), n]
            if &**tag == "storage" =>
        {
            let numel = u64::try_from(int(n, "a storage's size")?)
                .map_err(|_| "a storage of negative size".to_string())?;
            if key.is_empty() || key.len() > 64 || key.contains(['/', '\\']) || key.contains("..") {
                return Err(format!("a storage key {key:?} that is not a plain name"));
            }
            Ok(Storage {
                dtype: *dtype,
                key: key.to_string(),
                numel,
            })
        }
        _ => Err(shape_err().into()),
    }
}

fn reduce(f: &Value, args: &Value) -> VmResult<Value> {
    let Value::Tuple(a) = args else {
        return Err(format!("REDUCE with {} for arguments", args.kind()));
    };
    let a = &a.1;
    let empty_hooks = |v: &Value| match v {
        Value::Dict(d) if d.items.borrow().is_empty() => Ok(()),
        _ => Err("tensor backward hooks are not an empty OrderedDict".to_string()),
    };
    match f {
        Value::Global(Global::OrderedDict) if a.is_empty() => Ok(Value::Dict(Rc::new(Dict {
            items: RefCell::new(Vec::new()),
            frozen: Cell::new(false),
            depth: Cell::new(1),
        }))),
        Value::Global(Global::RebuildTensor) if a.len() == 6 || a.len() == 7 => {
            // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
            let Value::Storage(storage) = &a[0] else {
                return Err(format!("_rebuild_tensor_v2 of {}", a[0].kind()));
            };
            let offset = u64::try_from(int(&a[1], "a storage offset")?)
                .map_err(|_| "a negative storage offset".to_string())?;
            let size = ints(&a[2], "a tensor size")?;
            let stride = ints(&a[3], "a tensor stride")?;
            if size.len() != stride.len() {
                return Err(format!(
                    "a tensor of {} dimensions with {} strides",
                    size.len(),
                    stride.len()
                ));
            }
            empty_hooks(&a[5])?;
            Ok(Value::Tensor(Rc::new(View {
                storage: storage.clone(),
                offset,
                size,
                stride,
            })))
        }
        Value::Global(Global::RebuildParameter) if a.len() == 3 => match &a[0] {
            Value::Tensor(_) => {
                empty_hooks(&a[2])?;
                Ok(a[0].clone())
            }
            other => Err(format!("_rebuild_parameter of {}", other.kind())),
        },
        Value::Global(g) => Err(format!(
            "REDUCE calls {g:?} with {} arguments, which torch never writes",
            a.len()
        )),
        other => Err(format!(
            "REDUCE calls {}, which is not callable",
            other.kind()
        )),
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
    let vm = Vm {
        code: slice(pkl),
        at: 0,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
    };
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
