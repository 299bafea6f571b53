//! `lmkit embed`: sentence embeddings, one JSON array of floats per input
//! line, in input order. Pooling and normalization follow the model's
//! sentence-transformers files (mean, no normalization for plain BERT
//! checkpoints) unless overridden. An empty line gets the embedding of the
//! empty text (`[CLS] [SEP]`), as sentence-transformers gives it; a line
//! longer than the model's `max_seq_length` is truncated, refused with
//! `--no-truncate`, or with `--chunk-tokens N [--chunk-overlap K]` (or
//! `--window`: windows of the model's length) embedded whole: windows of its
//! tokens whose pooled vectors are averaged, weighted by their tokens — the
//! `truncate` and `chunking` options of `lmkit serve` and Python's `Bert.embed`.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use lmkit::models::bert::{BertPipeline, Chunking, EmbedOptions, LongInputs, Pooling};

#[derive(clap::Args)]
pub struct Args {
    /// Model: a folder in HF layout (sentence-transformers files optional) or a hub name.
    #[arg(long)]
    pub model: String,
    /// One text per line, or JSONL rows (a `.jsonl` file, or --jsonl) so
    /// that a text may span lines (default or `-`: stdin).
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Read the input as JSONL whatever its name (e.g. from stdin).
    #[arg(long)]
    pub jsonl: bool,
    /// The JSONL field holding the text.
    #[arg(long, default_value = "text")]
    pub text_field: String,
    /// Write the embeddings to this .npy file (float32, [texts, dims]; a new
    /// file, or `-` for stdout when it is not a terminal) instead of JSON
    /// lines on stdout.
    #[arg(long)]
    pub npy: Option<PathBuf>,
    /// Pooling: mean, cls or max (default: the model's sentence-transformers config, else mean).
    #[arg(long)]
    pub pooling: Option<String>,
    /// L2-normalize the embeddings (default: the model's config).
    #[arg(long, conflicts_with = "no_normalize")]
    pub normalize: bool,
    /// Do not normalize, even if the model's config does.
    #[arg(long)]
    pub no_normalize: bool,
    /// Sequences per forward pass.
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// Refuse texts longer than the model's length (an error naming the
    /// limit) instead of truncating them.
    #[arg(long)]
    pub no_truncate: bool,
    /// Embed long texts whole, in windows of N tokens ([CLS] and [SEP]
    /// included; at most the model's length) averaged by their tokens.
    #[arg(long, value_name = "N")]
    pub chunk_tokens: Option<usize>,
    /// Tokens consecutive windows share (with --chunk-tokens or --window).
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub chunk_overlap: usize,
    /// Windows of the model's length: --chunk-tokens with the model's length.
    #[arg(long)]
    pub window: bool,
    /// Keep the first D dimensions of each embedding, re-normalized when
    /// embeddings are normalized (OpenAI's `dimensions`).
    #[arg(long, value_name = "D")]
    pub dimensions: Option<usize>,
    /// Weight format: f32, or the encoder's matmuls in bf16 (faster where the CPU's bf16 dot product outruns its f32 FMAs, as on AMD Zen 4/5; ~1e-2 less exact) or int8 (fastest, activations quantized per row), or auto (the fastest on this CPU, measured once and cached).
    #[arg(long, default_value = "f32")]
    pub dtype: String,
}

/// The lines of `input` (stdin when `None`), without line terminators.
pub fn read_lines(input: Option<&Path>) -> Result<Vec<String>> {
    let text = super::read_input_text(input)?;
    Ok(text.lines().map(str::to_string).collect())
}

/// Loads a BERT pipeline for `command` from a folder or a hub name, with
/// weights as `dtype` ([`lmkit::models::load::load_bert`]).
pub fn load(command: &str, model: &str, dtype: &str) -> Result<BertPipeline> {
    Ok(lmkit::models::load::load_bert(
        command,
        model,
        dtype.parse()?,
    )?)
}

pub fn run(args: Args) -> Result<()> {
    if args.batch_size == 0 {
        bail!("--batch-size must be at least 1");
    }
    let pooling = args.pooling.as_deref().map(Pooling::parse).transpose()?;
    let normalize = match (args.normalize, args.no_normalize) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    };
    if let Some(n) = &args.npy {
        super::check_new_output(n)?;
    }
    let p = load("embed", &args.model, &args.dtype)?;
    let lines = if super::jsonl_input(args.jsonl, args.input.as_deref()) {
        read_jsonl_texts(args.input.as_deref(), &args.text_field)?
    } else {
        read_lines(args.input.as_deref())?
    };
    let texts: Vec<&str> = lines.iter().map(String::as_str).collect();
    let chunked = args.window || args.chunk_tokens.is_some() || args.chunk_overlap > 0;
    let chunking = chunked.then_some(Chunking {
        max_tokens: args.chunk_tokens,
        overlap: args.chunk_overlap,
    });
    if let Some(c) = chunking {
        c.room_and_stride(p.max_len())?;
    }
    let opts = EmbedOptions {
        pooling,
        normalize,
        batch_size: args.batch_size,
        long: LongInputs::from_flags(args.no_truncate.then_some(false), chunking, true)?,
        dimensions: args.dimensions,
    };
    let pb = crate::progress::Progress::new("{bar:40} {pos}/{len} texts ({per_sec}, {eta} left)");
    pb.set_length(texts.len() as u64);
    let step = args.batch_size.saturating_mul(64);
    if let Some(path) = &args.npy {
        let mut all: Vec<Vec<f32>> = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(step) {
            all.extend(p.embed(chunk, &opts)?);
            pb.update(all.len() as u64, || "texts embedded".into());
        }
        let dims = all.first().map_or(0, Vec::len);
        super::write_output(path, true, |w| write_npy(w, &all, dims))?;
        let to = if path.as_os_str() == "-" {
            "stdout".to_string()
        } else {
            path.display().to_string()
        };
        pb.summary(
            all.len() as u64,
            "texts",
            "embedded",
            &format!(": {dims} dimensions each, written to {to}"),
        );
        return Ok(());
    }
    let out = std::io::stdout();
    let mut w = BufWriter::new(out.lock());
    // Chunks bound memory for big inputs while keeping batches full.
    let mut done = 0;
    for chunk in texts.chunks(step) {
        for v in p.embed(chunk, &opts)? {
            serde_json::to_writer(&mut w, &v)?;
            w.write_all(b"\n")?;
        }
        done += chunk.len();
        pb.update(done as u64, || "texts embedded".into());
    }
    w.flush()?;
    pb.summary(done as u64, "texts", "embedded", "");
    Ok(())
}

/// The `field` of each JSONL row of `input` (a file or stdin).
fn read_jsonl_texts(input: Option<&Path>, field: &str) -> Result<Vec<String>> {
    let (name, rows) = super::read_jsonl_input(input)?;
    rows.into_iter()
        .map(|(line, v)| match v.get(field) {
            Some(serde_json::Value::String(s)) => Ok(s.clone()),
            _ => bail!("{name}:{line}: no string field `{field}`"),
        })
        .collect()
}

/// Writes `rows` (`[N, dims]`) in NumPy's `.npy` format, float32
/// little-endian, C order (format 1.0: magic, header dict padded to 64 bytes).
fn write_npy(w: &mut dyn Write, rows: &[Vec<f32>], dims: usize) -> std::io::Result<()> {
    let mut header = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {dims}), }}",
        rows.len()
    );
    // magic (6) + version (2) + header length (2) + header, a multiple of 64.
    let pad = 64 - (10 + header.len() + 1) % 64;
    header.push_str(&" ".repeat(pad % 64));
    header.push('\n');
    w.write_all(b"\x93NUMPY\x01\x00")?;
    w.write_all(&(header.len() as u16).to_le_bytes())?;
    w.write_all(header.as_bytes())?;
    for r in rows {
        for x in r {
            w.write_all(&x.to_le_bytes())?;
        }
    }
    Ok(())
}
