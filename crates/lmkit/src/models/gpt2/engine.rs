//! The GPT-2 inference engine: weights in an inference format, a forward pass
//! over new tokens that appends to a [`KvCache`], and logits on demand.
//!
//! Shape legend: B batch rows, T new tokens per row, N = B·T, C channels,
//! NH heads, HS = C/NH, I MLP width, V vocabulary, P positions.
//!
//! One block (pre-LayerNorm, as HF's `GPT2Block`):
//! `x += c_proj(attn(ln_1(x)))`, `x += mlp.c_proj(gelu(c_fc(ln_2(x))))`;
//! after the last block `h = ln_f(x)` and `logits = h · wteᵀ` (tied), or
//! `h · lm_headᵀ` with `tie_word_embeddings: false`.
//! This is the inference path only: no saved activations, no backward.
//!
//! The tensors come in through `source` (a checkpoint file or a parameter
//! buffer).

mod source;

use std::cell::RefCell;
use std::path::Path;
use std::sync::Arc;

use crate::checkpoint::open_model_dir_for;
use crate::error::{Error, Result};
use crate::kernels::kv_cache::KvCache;
use crate::kernels::quant::SourceLayout;
use crate::kernels::{add_inplace, gelu_in_place, layernorm_forward, Gelu};
use crate::models::gpt2::weights::{trim_heap, F32Slice, Matrix, WeightDtype, MATVEC_MAX_ROWS};
use crate::spec::config::{Activation, AnyConfig, Gpt2Config};
use crate::spec::layout::{gpt2_block_prefix, gpt2_layout, ParamLayout};
use crate::spec::names::Family;
use crate::util::alloc::huge_copy;
use crate::util::alloc::resize_scratch;
use crate::util::parallel::on_pool;
use crate::util::profile::{timed, Phase};
use rayon::prelude::*;

use self::source::{resolve_file_keys, FileSource, ParamSource, Source};

/// Parameters of one transformer block.
#[derive(Debug)]
struct Block {
    ln_1_w: F32Slice,
    ln_1_b: F32Slice,
    c_attn: Matrix,
    c_attn_b: F32Slice,
    attn_c_proj: Matrix,
    attn_c_proj_b: F32Slice,
    ln_2_w: F32Slice,
    ln_2_b: F32Slice,
    c_fc: Matrix,
    c_fc_b: F32Slice,
    mlp_c_proj: Matrix,
    mlp_c_proj_b: F32Slice,
}

/// Activation buffers, grown to the largest N seen.
#[derive(Default)]
struct Scratch {
    /// Residual stream `[N, C]`.
    x: Vec<f32>,
    /// LayerNorm output `[N, C]`; after the last block, `ln_f(x)`.
    xn: Vec<f32>,
    /// `[N, 3C]`
    qkv: Vec<f32>,
    /// Attention output `[N, C]`.
    att: Vec<f32>,
    /// Sub-block output before the residual add `[N, C]`.
    y: Vec<f32>,
    /// MLP hidden after GELU `[N, I]` (the GELU runs in place or inside
    /// the product).
    fc: Vec<f32>,
    /// LayerNorm statistics `[N]` (required by the kernel, unused here).
    mean: Vec<f32>,
    rstd: Vec<f32>,
    /// Matrix kernels' scratch (partial sums, widened weight tiles).
    mat: Vec<f32>,
    /// Hidden rows gathered for the LM head `[M, C]`.
    gather: Vec<f32>,
}

/// A GPT-2 language model ready for inference.
pub struct Gpt2Engine {
    cfg: Gpt2Config,
    dtype: WeightDtype,
    gelu: Gelu,
    /// `[V, C]`: token embeddings and the tied LM head.
    wte: Matrix,
    /// `[V, C]`: the untied LM head (`tie_word_embeddings: false`).
    lm_head: Option<Matrix>,
    /// `[P, C]`
    wpe: F32Slice,
    blocks: Vec<Block>,
    ln_f_w: F32Slice,
    ln_f_b: F32Slice,
    s: Scratch,
    /// Rows of the last forward call (N) held in `s.xn`.
    rows: usize,
}

impl std::fmt::Debug for Gpt2Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpt2Engine")
            .field("n_layer", &self.cfg.n_layer)
            .field("n_embd", &self.cfg.n_embd)
            .field("vocab_size", &self.cfg.vocab_size)
            .field("dtype", &self.dtype)
            .field("weight_bytes", &self.weight_bytes())
            .finish_non_exhaustive()
    }
}

impl Gpt2Engine {
    /// Loads an HF GPT-2 directory (`config.json`, `model.safetensors`, keys
    /// with or without `transformer.`, `lm_head.weight` tied or absent).
    /// f32 matrices are copied from the memory map into huge pages (as
    /// stored), their mapped pages released; vectors stay mapped.
    pub fn load(model_dir: impl AsRef<Path>, dtype: WeightDtype) -> Result<Self> {
        trim_heap();
        let dir = model_dir.as_ref();
        let (config, file) = open_model_dir_for(dir, Some((Family::Gpt2, "the GPT-2 engine")))?;
        let cfg = match config {
            AnyConfig::Gpt2(c) => c,
            AnyConfig::Bert(_) => {
                return Err(Error::InvalidInput(format!(
                    "{} holds a BERT model, not GPT-2",
                    dir.display()
                )))
            }
        };
        let layout = gpt2_layout(&cfg)?;
        let keys = resolve_file_keys(&layout, &file)?;
        let source = FileSource {
            file: Arc::new(file),
            keys,
            converted: RefCell::new(Vec::new()),
        };
        Self::build(cfg, dtype, &source)
    }

    /// Builds an engine from a flat parameter buffer laid out by
    /// `gpt2_layout(cfg)` (e.g. the trainer's weights, for samples). The
    /// weights are copied (f32) or converted, so `params` may change afterwards.
    pub fn from_params(
        cfg: &Gpt2Config,
        layout: &ParamLayout,
        params: &[f32],
        dtype: WeightDtype,
    ) -> Result<Self> {
        let expected = gpt2_layout(cfg)?;
        let same = expected.specs().len() == layout.specs().len()
            && expected
                .specs()
                .iter()
                .zip(layout.specs())
                .all(|(a, b)| a.name == b.name && a.shape == b.shape);
        if !same {
            return Err(Error::InvalidInput(
                "the parameter layout does not match the GPT-2 config".into(),
            ));
        }
        if params.len() != layout.total_len() {
            return Err(Error::InvalidInput(format!(
                "parameter buffer has {} f32s, layout needs {}",
                params.len(),
                layout.total_len()
            )));
        }
        // In huge pages for the same reason as FileSource::keep_matrix.
        let shared = (dtype == WeightDtype::F32).then(|| Arc::new(huge_copy(params)));
        let source = ParamSource {
            layout,
            params,
            shared,
        };
        Self::build(cfg.clone(), dtype, &source)
    }

    fn build(cfg: Gpt2Config, dtype: WeightDtype, src: &dyn Source) -> Result<Self> {
        cfg.validate()?;
        let (v, c, i) = (cfg.vocab_size, cfg.n_embd, cfg.inner());
        dtype.check_inputs(c.max(i))?;
        let matrix = |name: &str, layout: SourceLayout, ic: usize, oc: usize| -> Result<Matrix> {
            if dtype == WeightDtype::F32 {
                let w = src.keep_matrix(name)?;
                return Ok(match layout {
                    SourceLayout::InOut => Matrix::F32InOut { w, ic, oc },
                    SourceLayout::OutIn => Matrix::F32OutIn { w, ic, oc },
                });
            }
            let mut out = None;
            src.convert(name, &mut |data, release| {
                out = Some(Matrix::quantize(data, layout, ic, oc, dtype, release));
            })?;
            out.ok_or_else(|| {
                Error::InvalidInput(format!("tensor `{name}` could not be converted"))
            })
        };
        // wte first: the largest tensor, converted while little else is resident.
        let wte = matrix("wte.weight", SourceLayout::OutIn, c, v)?;
        let lm_head = if cfg.tie_word_embeddings {
            None
        } else {
            Some(matrix("lm_head.weight", SourceLayout::OutIn, c, v)?)
        };
        let mut blocks = Vec::with_capacity(cfg.n_layer);
        for l in 0..cfg.n_layer {
            let p = gpt2_block_prefix(l);
            let n = |s: &str| format!("{p}{s}");
            blocks.push(Block {
                ln_1_w: src.keep(&n("ln_1.weight"))?,
                ln_1_b: src.keep(&n("ln_1.bias"))?,
                c_attn: matrix(&n("attn.c_attn.weight"), SourceLayout::InOut, c, 3 * c)?,
                c_attn_b: src.keep(&n("attn.c_attn.bias"))?,
                attn_c_proj: matrix(&n("attn.c_proj.weight"), SourceLayout::InOut, c, c)?,
                attn_c_proj_b: src.keep(&n("attn.c_proj.bias"))?,
                ln_2_w: src.keep(&n("ln_2.weight"))?,
                ln_2_b: src.keep(&n("ln_2.bias"))?,
                c_fc: matrix(&n("mlp.c_fc.weight"), SourceLayout::InOut, c, i)?,
                c_fc_b: src.keep(&n("mlp.c_fc.bias"))?,
                mlp_c_proj: matrix(&n("mlp.c_proj.weight"), SourceLayout::InOut, i, c)?,
                mlp_c_proj_b: src.keep(&n("mlp.c_proj.bias"))?,
            });
        }
        let (wpe, ln_f_w, ln_f_b) = (
            src.keep_rows("wpe.weight")?,
            src.keep("ln_f.weight")?,
            src.keep("ln_f.bias")?,
        );
        src.finish();
        Ok(Gpt2Engine {
            gelu: match cfg.activation() {
                Activation::GeluTanh => Gelu::Tanh,
                Activation::GeluErf => Gelu::Erf,
            },
            wpe,
            ln_f_w,
            ln_f_b,
            cfg,
            dtype,
            wte,
            lm_head,
            blocks,
            s: Scratch::default(),
            rows: 0,
        })
    }

    pub fn config(&self) -> &Gpt2Config {
        &self.cfg
    }

    pub fn dtype(&self) -> WeightDtype {
        self.dtype
    }

    /// Bytes of the weights in their inference format (matrices, vectors, `wpe`).
    pub fn weight_bytes(&self) -> usize {
        let vectors = |b: &Block| {
            [
                &b.ln_1_w,
                &b.ln_1_b,
                &b.c_attn_b,
                &b.attn_c_proj_b,
                &b.ln_2_w,
                &b.ln_2_b,
                &b.c_fc_b,
                &b.mlp_c_proj_b,
            ]
            .iter()
            .map(|s| s.len() * 4)
            .sum::<usize>()
        };
        self.wte.bytes()
            + self.lm_head.as_ref().map_or(0, Matrix::bytes)
            + self.wpe.len() * 4
            + (self.ln_f_w.len() + self.ln_f_b.len()) * 4
            + self
                .blocks
                .iter()
                .map(|b| {
                    b.c_attn.bytes()
                        + b.attn_c_proj.bytes()
                        + b.c_fc.bytes()
                        + b.mlp_c_proj.bytes()
                        + vectors(b)
                })
                .sum::<usize>()
    }

    /// Fewest rows a forward call may hold for each row's results not to
    /// depend on how many rows it holds: smaller calls take matrix-vector
    /// kernels, which sum in another order. A prefill resumed after a
    /// cached prefix feeds at least this many tokens, so it computes what a
    /// full prefill computes, bit for bit.
    pub fn min_exact_rows(&self) -> usize {
        MATVEC_MAX_ROWS + 1
    }

    /// A cache for `batch` rows of up to `capacity` positions (padding
    /// included); bf16 for engines with bf16 or int8 weights.
    pub fn new_cache(&self, batch: usize, capacity: usize) -> Result<KvCache> {
        if batch == 0 || capacity == 0 {
            return Err(Error::InvalidInput(
                "a KV cache needs at least one row and one position".into(),
            ));
        }
        let c = &self.cfg;
        Ok(KvCache::new(
            c.n_layer,
            batch,
            capacity,
            c.n_head,
            c.head_size(),
            self.dtype != WeightDtype::F32,
        ))
    }

    /// Runs `T = ids.len() / B` new tokens of each of the cache's B rows
    /// (`ids` is `[B, T]`) through the model, appending their keys and values
    /// to `cache`. `mask` (`[B, T]`, 1 = token, 0 = padding) marks LEFT
    /// padding; `None` means no padding. Position ids continue each row's
    /// count of real tokens. The final hidden states (after `ln_f`) are kept
    /// for [`Self::logits`] / [`Self::hidden`].
    pub fn forward(&mut self, cache: &mut KvCache, ids: &[u32], mask: Option<&[u8]>) -> Result<()> {
        let cfg = &self.cfg;
        let b = cache.batch;
        if cache.n_layer != cfg.n_layer
            || cache.n_head != cfg.n_head
            || cache.head_size != cfg.head_size()
        {
            return Err(Error::InvalidInput(
                "the KV cache was made for a different model".into(),
            ));
        }
        if ids.is_empty() || !ids.len().is_multiple_of(b) {
            return Err(Error::InvalidInput(format!(
                "{} token ids do not form {b} rows of at least one token",
                ids.len()
            )));
        }
        let t = ids.len() / b;
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= cfg.vocab_size) {
            return Err(Error::TokenIdOutOfRange {
                id,
                vocab: cfg.vocab_size,
            });
        }
        if let Some(m) = mask {
            if m.len() != ids.len() {
                return Err(Error::InvalidInput(format!(
                    "attention mask has {} entries for {} token ids",
                    m.len(),
                    ids.len()
                )));
            }
            if m.iter().any(|&x| x > 1) {
                return Err(Error::InvalidInput(
                    "attention mask values must be 0 or 1".into(),
                ));
            }
        }
        if cache.len + t > cache.capacity {
            return Err(Error::ContextTooLong {
                len: cache.len + t,
                max: cache.capacity,
            });
        }
        // Position ids: HF's cumsum(mask) - 1 continued from the cache; 1 on padding.
        let mut pos = vec![1usize; b * t];
        let mut next = cache.next_pos.clone();
        for r in 0..b {
            for i in 0..t {
                if mask.is_none_or(|m| m[r * t + i] == 1) {
                    pos[r * t + i] = next[r];
                    next[r] += 1;
                }
            }
        }
        if let Some(&max) = next.iter().max() {
            if max > cfg.n_positions {
                return Err(Error::ContextTooLong {
                    len: max,
                    max: cfg.n_positions,
                });
            }
        }
        // Validated: from here on nothing fails, so the cache stays consistent.
        for r in 0..b {
            for i in 0..t {
                cache.key_mask[r * cache.capacity + cache.len + i] =
                    mask.map_or(1, |m| m[r * t + i]);
            }
        }
        cache.next_pos = next;
        on_pool(|| self.run(ids, &pos, &mut [cache], &[t]));
        Ok(())
    }

    /// Continuous batching: runs several independent sequences in one pass.
    /// Sequence `i` feeds `ids[i]` (at least one token) into `caches[i]`, a
    /// one-row cache of its own, so sequences of any lengths may join or
    /// leave between calls. The matrix products run over all `N = Σ
    /// ids[i].len()` rows at once; attention runs per sequence over its own
    /// cache. Rows are concatenated in order: sequence `i`'s last row is
    /// `Σ_{j<=i} ids[j].len() - 1` for [`Self::logits`]. Each sequence gets
    /// what [`Self::forward`] would give it alone, up to the rounding of
    /// matrix products over more rows.
    pub fn forward_many(&mut self, caches: &mut [&mut KvCache], ids: &[&[u32]]) -> Result<()> {
        let cfg = &self.cfg;
        if caches.len() != ids.len() || caches.is_empty() {
            return Err(Error::InvalidInput(format!(
                "{} caches for {} sequences (at least one of each, as many of one as of the other)",
                caches.len(),
                ids.len()
            )));
        }
        let mut pos = Vec::with_capacity(ids.iter().map(|s| s.len()).sum());
        for (cache, seq) in caches.iter().zip(ids) {
            if cache.batch != 1
                || cache.n_layer != cfg.n_layer
                || cache.n_head != cfg.n_head
                || cache.head_size != cfg.head_size()
            {
                return Err(Error::InvalidInput(
                    "forward_many needs one-row KV caches made for this model".into(),
                ));
            }
            if seq.is_empty() {
                return Err(Error::InvalidInput(
                    "every sequence of forward_many feeds at least one token".into(),
                ));
            }
            if let Some(&id) = seq.iter().find(|&&id| id as usize >= cfg.vocab_size) {
                return Err(Error::TokenIdOutOfRange {
                    id,
                    vocab: cfg.vocab_size,
                });
            }
            let t = seq.len();
            if cache.len + t > cache.capacity {
                return Err(Error::ContextTooLong {
                    len: cache.len + t,
                    max: cache.capacity,
                });
            }
            if cache.next_pos[0] + t > cfg.n_positions {
                return Err(Error::ContextTooLong {
                    len: cache.next_pos[0] + t,
                    max: cfg.n_positions,
                });
            }
            pos.extend(cache.next_pos[0]..cache.next_pos[0] + t);
        }
        // Validated: from here on nothing fails.
        let flat: Vec<u32> = ids.iter().flat_map(|s| s.iter().copied()).collect();
        for (cache, seq) in caches.iter_mut().zip(ids) {
            let (at, t) = (cache.len, seq.len());
            cache.key_mask[at..at + t].fill(1);
            cache.next_pos[0] += t;
        }
        let ts: Vec<usize> = ids.iter().map(|s| s.len()).collect();
        on_pool(|| self.run(&flat, &pos, caches, &ts));
        Ok(())
    }

    /// The model over `ids` (`[N]`, position ids `pos[N]`), made of one
    /// segment per cache, in order: `cache.batch · ts[i]` rows, `ts[i]` new
    /// positions per cache row. Appends keys and values to each cache and
    /// advances its `len`; leaves the final hidden states in `s.xn`.
    /// Callers have validated everything (ids, capacities, masks, positions).
    fn run(&mut self, ids: &[u32], pos: &[usize], caches: &mut [&mut KvCache], ts: &[usize]) {
        let cfg = &self.cfg;
        let (c, inner) = (cfg.n_embd, cfg.inner());
        let n = ids.len();
        let eps = cfg.layer_norm_epsilon as f32;
        let s = &mut self.s;
        for (buf, len) in [
            (&mut s.x, n * c),
            (&mut s.xn, n * c),
            (&mut s.qkv, n * 3 * c),
            (&mut s.att, n * c),
            (&mut s.y, n * c),
            (&mut s.fc, n * inner),
            (&mut s.mean, n),
            (&mut s.rstd, n),
        ] {
            // Dead contents: a bigger batch replaces the buffer (no copy).
            resize_scratch(buf, len, len);
        }
        let (x, xn, qkv, att, y, fc) = (
            &mut s.x[..n * c],
            &mut s.xn[..n * c],
            &mut s.qkv[..n * 3 * c],
            &mut s.att[..n * c],
            &mut s.y[..n * c],
            &mut s.fc[..n * inner],
        );
        let (mean, rstd) = (&mut s.mean[..n], &mut s.rstd[..n]);
        // x = wte[id] + wpe[pos]
        timed(Phase::Embedding, || {
            for (row, (&id, &p)) in x.chunks_exact_mut(c).zip(ids.iter().zip(pos)) {
                self.wte.row_into(id as usize, row);
                for (xv, pv) in row.iter_mut().zip(&self.wpe[p * c..(p + 1) * c]) {
                    *xv += pv;
                }
            }
        });
        let ln = |xn: &mut [f32], mean: &mut [f32], rstd: &mut [f32], x: &[f32], w, b| {
            timed(Phase::LayerNorm, || {
                layernorm_forward(xn, mean, rstd, x, w, b, n, c, eps)
            })
        };
        for (l, blk) in self.blocks.iter().enumerate() {
            ln(xn, mean, rstd, x, &blk.ln_1_w, &blk.ln_1_b);
            let mat = &mut s.mat;
            timed(Phase::Matmul, || {
                blk.c_attn.forward(qkv, xn, Some(&blk.c_attn_b), n, mat)
            });
            timed(Phase::Attention, || {
                attend_segments(caches, ts, l, qkv, att, c)
            });
            timed(Phase::Matmul, || {
                blk.attn_c_proj
                    .forward(y, att, Some(&blk.attn_c_proj_b), n, mat)
            });
            timed(Phase::Residual, || add_inplace(x, y));
            ln(xn, mean, rstd, x, &blk.ln_2_w, &blk.ln_2_b);
            let fused = timed(Phase::Matmul, || {
                let b = Some(&blk.c_fc_b[..]);
                blk.c_fc.forward_gelu_fused(fc, xn, b, n, mat, self.gelu)
            });
            if !fused {
                timed(Phase::Gelu, || gelu_in_place(fc, self.gelu));
            }
            timed(Phase::Matmul, || {
                blk.mlp_c_proj
                    .forward(y, fc, Some(&blk.mlp_c_proj_b), n, mat)
            });
            timed(Phase::Residual, || add_inplace(x, y));
        }
        ln(xn, mean, rstd, x, &self.ln_f_w, &self.ln_f_b);
        for (cache, &t) in caches.iter_mut().zip(ts) {
            cache.len += t;
        }
        self.rows = n;
    }

    /// Final hidden states `[N, C]` (after `ln_f`) of the last forward call.
    pub fn hidden(&self) -> &[f32] {
        &self.s.xn[..self.rows * self.cfg.n_embd]
    }

    /// `out[rows.len(), V]` = logits of the given rows (indices into the
    /// `N = B·T` rows of the last forward call, row-major `[B, T]`).
    pub fn logits(&mut self, rows: &[usize], out: &mut [f32]) -> Result<()> {
        let (c, v) = (self.cfg.n_embd, self.cfg.vocab_size);
        if out.len() != rows.len() * v {
            return Err(Error::InvalidInput(format!(
                "logits buffer has {} entries, {} rows need {}",
                out.len(),
                rows.len(),
                rows.len() * v
            )));
        }
        if let Some(&r) = rows.iter().find(|&&r| r >= self.rows) {
            return Err(Error::InvalidInput(format!(
                "row {r} is not among the {} rows of the last forward",
                self.rows
            )));
        }
        let s = &mut self.s;
        s.gather.clear();
        for &r in rows {
            s.gather.extend_from_slice(&s.xn[r * c..(r + 1) * c]);
        }
        self.head_of_gathered(out, rows.len());
        Ok(())
    }

    /// `out[M, V]` = logits of final hidden states `hidden[M, C]` (after
    /// `ln_f`) the caller kept, e.g. a prefix cache: what [`Self::logits`]
    /// gives for rows with those hidden states, bit for bit.
    pub fn logits_of_hidden(&mut self, hidden: &[f32], out: &mut [f32]) -> Result<()> {
        let (c, v) = (self.cfg.n_embd, self.cfg.vocab_size);
        let m = hidden.len() / c;
        if !hidden.len().is_multiple_of(c) || out.len() != m * v {
            return Err(Error::InvalidInput(format!(
                "{} hidden values and a logits buffer of {} entries do not form rows of {c} and {v}",
                hidden.len(),
                out.len()
            )));
        }
        self.s.gather.clear();
        self.s.gather.extend_from_slice(hidden);
        self.head_of_gathered(out, m);
        Ok(())
    }

    /// The LM head over the `m` rows in `s.gather`.
    fn head_of_gathered(&mut self, out: &mut [f32], m: usize) {
        let s = &mut self.s;
        let head = self.lm_head.as_ref().unwrap_or(&self.wte);
        timed(Phase::LmHeadMatmul, || {
            head.forward(out, &s.gather, None, m, &mut s.mat)
        });
    }

    /// Convenience: a fresh cache, one forward over `ids` (`[B, T]`, `mask`
    /// as in [`Self::forward`]), and the logits of every position `[B, T, V]`.
    pub fn forward_all_logits(
        &mut self,
        ids: &[u32],
        batch: usize,
        mask: Option<&[u8]>,
    ) -> Result<Vec<f32>> {
        if batch == 0 || !ids.len().is_multiple_of(batch) {
            return Err(Error::InvalidInput(format!(
                "{} ids do not split into {batch} rows",
                ids.len()
            )));
        }
        let mut cache = self.new_cache(batch, ids.len() / batch)?;
        self.forward(&mut cache, ids, mask)?;
        let rows: Vec<usize> = (0..ids.len()).collect();
        let mut out = vec![0.0; ids.len() * self.cfg.vocab_size];
        self.logits(&rows, &mut out)?;
        Ok(out)
    }
}

/// One layer's attention for every segment of [`Gpt2Engine::run`]: stores
/// the new keys and values (`qkv[N, 3C]`) in each segment's cache, then
/// `att[N, C]` = each segment's attention over its own cache, the segments
/// in parallel (each also parallel over its heads).
fn attend_segments(
    caches: &mut [&mut KvCache],
    ts: &[usize],
    layer: usize,
    qkv: &[f32],
    att: &mut [f32],
    c: usize,
) {
    if let ([cache], [t]) = (&mut *caches, ts) {
        cache.store(layer, qkv, *t);
        cache.attend(att, qkv, layer, *t);
        return;
    }
    let mut parts = Vec::with_capacity(caches.len());
    let (mut qkv_rest, mut att_rest) = (qkv, att);
    for (cache, &t) in caches.iter_mut().zip(ts) {
        let rows = cache.batch * t;
        let (q, qr) = qkv_rest.split_at(rows * 3 * c);
        let (a, ar) = std::mem::take(&mut att_rest).split_at_mut(rows * c);
        (qkv_rest, att_rest) = (qr, ar);
        cache.store(layer, q, t);
        parts.push((&**cache, q, a, t));
    }
    parts
        .into_par_iter()
        .for_each(|(cache, q, a, t)| cache.attend(a, q, layer, t));
}
