//! Where an engine's tensors come from while it is built ([`Source`]): a
//! memory-mapped safetensors file, its keys resolved and checked, or a
//! flat parameter buffer.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use crate::checkpoint::SafeTensors;
use crate::error::{Error, Result};
use crate::models::gpt2::weights::{prefault_mapped, release_mapped, F32Slice};
use crate::spec::layout::ParamLayout;
use crate::spec::names::{resolve_key, Family, KeyRole};
use crate::util::alloc::huge_copy;

/// Called on each part of a source tensor once it has been converted.
pub(super) type Release<'a> = &'a (dyn Fn(&[f32]) + Sync);
/// Converts a source tensor, given its data and a [`Release`].
pub(super) type ConvertFn<'a> = dyn FnMut(&[f32], Release<'_>) + 'a;

/// Where the tensors come from while an engine is built.
pub(super) trait Source {
    /// Tensor `name` as an f32 slice the engine may keep.
    fn keep(&self, name: &str) -> Result<F32Slice>;
    /// As `keep`, for a tensor read a few rows at a time: a mapped file's
    /// pages come in only as rows are used (`wpe`: a short generation reads
    /// a few of its 1024 rows, not its 3 MB).
    fn keep_rows(&self, name: &str) -> Result<F32Slice> {
        self.keep(name)
    }
    /// As `keep`, for an f32 matrix that decode streams end to end once per
    /// token.
    fn keep_matrix(&self, name: &str) -> Result<F32Slice> {
        self.keep(name)
    }
    /// Converts tensor `name` with `f`, which gets the data and a function
    /// to call on each part of it that is no longer needed.
    fn convert(&self, name: &str, f: &mut ConvertFn<'_>) -> Result<()>;
    /// Called once every tensor is kept or converted.
    fn finish(&self) {}
}

/// A memory-mapped safetensors file; `keys` maps canonical names to file keys.
pub(super) struct FileSource {
    pub(super) file: Arc<SafeTensors>,
    pub(super) keys: HashMap<String, String>,
    /// Tensors converted so far, released again by `finish`.
    pub(super) converted: RefCell<Vec<String>>,
}

impl FileSource {
    fn key(&self, name: &str) -> Result<&str> {
        self.keys
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| Error::MissingTensor {
                file: self.file.path().to_path_buf(),
                key: name.to_string(),
            })
    }

    fn tensor(&self, name: &str) -> Result<Cow<'_, [f32]>> {
        self.file.tensor_f32(self.key(name)?)
    }
}

impl Source for FileSource {
    fn keep(&self, name: &str) -> Result<F32Slice> {
        Ok(match self.tensor(name)? {
            Cow::Borrowed(s) => {
                prefault_mapped(s);
                F32Slice::borrowed(self.file.clone(), s)
            }
            Cow::Owned(v) => F32Slice::owned(v),
        })
    }

    fn keep_rows(&self, name: &str) -> Result<F32Slice> {
        Ok(match self.tensor(name)? {
            Cow::Borrowed(s) => F32Slice::borrowed(self.file.clone(), s),
            Cow::Owned(v) => F32Slice::owned(v),
        })
    }

    /// A mapped matrix is copied into huge pages ([`huge_copy`]) and its
    /// mapped pages released: the page cache's 4 KiB pages stop the
    /// prefetchers at every page boundary and cost a TLB walk each. Measured
    /// on 124M f32, 2 threads, Intel Xeon (Emerald Rapids): decode 36 → 43
    /// tokens/s; start-up 0.16 → 0.26 s for the copy; peak resident memory
    /// 503 → 506 MB.
    fn keep_matrix(&self, name: &str) -> Result<F32Slice> {
        Ok(match self.tensor(name)? {
            Cow::Borrowed(s) if self.file.is_mapped() => {
                let copy = huge_copy(s);
                release_mapped(s);
                self.converted.borrow_mut().push(name.to_string());
                F32Slice::owned(copy)
            }
            Cow::Borrowed(s) => F32Slice::borrowed(self.file.clone(), s),
            Cow::Owned(v) => F32Slice::owned(v),
        })
    }

    fn convert(&self, name: &str, f: &mut ConvertFn<'_>) -> Result<()> {
        let key = self.key(name)?;
        match self.file.tensor_f32_unchecked(key)? {
            // Borrowed = straight from the read-only file map: pages may be
            // dropped. Checked finite band by band, each band released after
            // its check so the scan does not make the whole tensor resident.
            Cow::Borrowed(s) if self.file.is_mapped() => {
                for band in s.chunks(1 << 20) {
                    self.file.check_finite(key, band)?;
                    release_mapped(band);
                }
                f(s, &release_mapped);
                self.converted.borrow_mut().push(name.to_string());
            }
            // Borrowed from memory the process owns (a converted
            // pytorch_model.bin): dropping its pages would zero them.
            Cow::Borrowed(s) => {
                self.file.check_finite(key, s)?;
                f(s, &|_| {});
            }
            Cow::Owned(v) => f(&v, &|_| {}),
        }
        Ok(())
    }

    /// Faulting a page of a file maps its neighbours too (Linux's 64 KiB
    /// fault-around), so keeping a bias re-maps pages of the matrix next to
    /// it that were already converted and released: drop them for good.
    /// (Unchecked: the check would read, so map, each tensor once more,
    /// which made 124M bf16 peak at 470 MB instead of 285; every name here
    /// was checked and is F32 in the map, so nothing is converted either.)
    fn finish(&self) {
        for name in self.converted.borrow().iter() {
            let data = self
                .key(name)
                .and_then(|key| self.file.tensor_f32_unchecked(key));
            if let Ok(Cow::Borrowed(s)) = data {
                release_mapped(s);
            }
        }
    }
}

/// A flat parameter buffer laid out by `layout`.
pub(super) struct ParamSource<'a> {
    pub(super) layout: &'a ParamLayout,
    pub(super) params: &'a [f32],
    /// For f32 engines: one shared copy of the whole buffer.
    pub(super) shared: Option<Arc<Vec<f32>>>,
}

impl Source for ParamSource<'_> {
    fn keep(&self, name: &str) -> Result<F32Slice> {
        let range = self.layout.range(name).ok_or_else(|| {
            Error::InvalidInput(format!("parameter `{name}` is not in the layout"))
        })?;
        Ok(match &self.shared {
            Some(all) => F32Slice::borrowed(all.clone(), &all[range]),
            None => F32Slice::owned(self.params[range].to_vec()),
        })
    }

    fn convert(&self, name: &str, f: &mut ConvertFn<'_>) -> Result<()> {
        let range = self.layout.range(name).ok_or_else(|| {
            Error::InvalidInput(format!("parameter `{name}` is not in the layout"))
        })?;
        f(&self.params[range], &|_| {});
        Ok(())
    }
}

/// Maps every canonical parameter name to its key in `file`, rejecting what
/// `checkpoint::load_params` rejects: missing, unexpected, duplicated or
/// mis-shaped tensors (tied `lm_head.weight` must have `wte`'s shape).
pub(super) fn resolve_file_keys(
    layout: &ParamLayout,
    file: &SafeTensors,
) -> Result<HashMap<String, String>> {
    let path = file.path().to_path_buf();
    let mut keys: HashMap<String, String> = HashMap::new();
    for key in file.names() {
        let found = file.shape(key).unwrap_or(&[]).to_vec();
        let check = |name: &str| -> Result<()> {
            let spec = layout.get(name).ok_or_else(|| Error::UnexpectedTensor {
                file: path.clone(),
                key: key.clone(),
            })?;
            if spec.shape != found {
                return Err(Error::ShapeMismatch {
                    file: path.clone(),
                    key: key.clone(),
                    expected: spec.shape.clone(),
                    found: found.clone(),
                });
            }
            Ok(())
        };
        let role = match resolve_key(Family::Gpt2, key) {
            // Untied: `lm_head.weight` is a parameter of its own.
            KeyRole::Tied { name, .. } if layout.contains(&name) => KeyRole::Param(name),
            role => role,
        };
        match role {
            KeyRole::Buffer => {}
            KeyRole::Tied { target, .. } => check(&target)?,
            KeyRole::Param(name) => {
                check(&name)?;
                if let Some(prev) = keys.insert(name.clone(), key.clone()) {
                    return Err(Error::InvalidInput(format!(
                        "{}: tensors `{prev}` and `{key}` both hold parameter `{name}`",
                        path.display()
                    )));
                }
            }
        }
    }
    if let Some(spec) = layout.specs().iter().find(|s| !keys.contains_key(&s.name)) {
        return Err(Error::MissingTensor {
            file: path,
            key: spec.name.clone(),
        });
    }
    Ok(keys)
}
