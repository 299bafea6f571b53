//! The pickle VM: runs a state dict's `data.pkl` on the opcodes a state
//! dict uses, knowing only the globals that rebuild tensors
//! ([`ALLOWED`]); memo, stack and nesting bounded.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use safetensors::Dtype;

use super::zip::le;
use super::{ALLOWED, MAX_DEPTH, MAX_MEMO, MAX_RANK, MAX_STACK};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Global {
    OrderedDict,
    RebuildTensor,
    RebuildParameter,
    Storage(Dtype),
}

pub(super) struct Storage {
    pub(super) dtype: Dtype,
    pub(super) key: String,
    pub(super) numel: u64,
}

pub(super) struct View {
    pub(super) storage: Rc<Storage>,
    pub(super) offset: u64,
    pub(super) size: Vec<u64>,
    pub(super) stride: Vec<u64>,
}

/// A dict (mutable until placed inside another value: then frozen, so the
/// depth recorded when it was placed stays true and no cycle can form).
pub(super) struct Dict {
    pub(super) items: RefCell<Vec<(Value, Value)>>,
    frozen: Cell<bool>,
    depth: Cell<u32>,
}

#[derive(Clone)]
pub(super) enum Value {
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
    pub(super) fn kind(&self) -> &'static str {
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

pub(super) struct Vm<'a> {
    code: &'a [u8],
    at: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: HashMap<u32, Value>,
}

type VmResult<T> = std::result::Result<T, String>;

impl<'a> Vm<'a> {
    /// A VM about to run the pickle `code`.
    pub(super) fn new(code: &'a [u8]) -> Self {
        Vm {
            code,
            at: 0,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::new(),
        }
    }

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

    pub(super) fn run(mut self) -> VmResult<Value> {
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
