//! `lmkit tokenize` and `lmkit detokenize`.
//!
//! Contract (scripts depend on it): `tokenize` reads the whole input as ONE
//! text and prints its ids space-separated on one line; `--count` prints only
//! the number of tokens; `--json` prints `{"ids", "tokens", "offsets"}`.
//! `detokenize` reads whitespace-separated ids from stdin and writes the
//! decoded bytes as they are (no newline added). `tokenize --format
//! llmc|nanogpt` writes the input's documents as another trainer's token
//! file instead (`lmkit pretrain --data FILE.bin` reads it back).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use lmkit_tokenizers::Tokenizer;

#[derive(Args)]
pub struct TokenizeArgs {
    /// Tokenizer directory: vocab.json + merges.txt, vocab.txt, or
    /// tokenizer.json (a model directory works too); or, where no such
    /// directory exists, an OpenAI encoding built in: gpt2, r50k_base,
    /// p50k_base, p50k_edit, cl100k_base, o200k_base, o200k_harmony.
    #[arg(long)]
    pub tokenizer: PathBuf,
    /// Text file to encode (default: stdin). Read whole, as one text.
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Print only the number of tokens.
    #[arg(long, conflicts_with = "json")]
    pub count: bool,
    /// Use special tokens: recognise `<|endoftext|>` in the text (BPE), add
    /// `[CLS]`/`[SEP]` (WordPiece).
    #[arg(long)]
    pub special: bool,
    /// Print ids, tokens and offsets as JSON (`detokenize` reads it back).
    #[arg(long)]
    pub json: bool,
    /// With --json: offsets in bytes of the input instead of characters
    /// (characters are what HF's Python tokenizers report).
    #[arg(long, requires = "json")]
    pub byte_offsets: bool,
    /// Write a token file for another trainer instead of ids: `llmc`
    /// (llm.c: 256-int32 header, uint16 ids, end-of-text before every
    /// document) or `nanogpt` (raw uint16 ids, end-of-text after every
    /// document). Documents: the rows of a JSONL input (--text-field), the
    /// pages of a text input (between form-feed lines), else the whole text.
    #[arg(long, value_parser = ["llmc", "nanogpt"], conflicts_with_all = ["json", "count", "special"])]
    pub format: Option<String>,
    /// With --format: the JSONL field holding each document's text.
    #[arg(long, default_value = "text", requires = "format")]
    pub text_field: String,
    /// Write here instead of stdout (`-`: stdout); a new file.
    #[arg(long)]
    pub output: Option<PathBuf>,
}

#[derive(Args)]
pub struct DetokenizeArgs {
    /// Tokenizer directory (as for `tokenize`).
    #[arg(long)]
    pub tokenizer: PathBuf,
    /// Token ids: whitespace-separated, or what `tokenize --json` prints
    /// (default or `-`: stdin).
    #[arg(long)]
    pub input: Option<PathBuf>,
}

fn load(dir: &PathBuf) -> Result<Tokenizer> {
    let name = dir
        .to_str()
        .filter(|n| lmkit_tokenizers::openai::ENCODINGS.contains(n));
    if let (Some(name), false) = (name, dir.exists()) {
        let t = lmkit_tokenizers::openai::encoding(name)?;
        return Ok(Tokenizer::Bpe(Box::new(t)));
    }
    // The CLI contract is "all the ids of the whole text": no truncation or padding.
    Tokenizer::from_dir(dir)
        .map(Tokenizer::without_truncation_and_padding)
        .with_context(|| format!("loading the tokenizer in {}", dir.display()))
}

pub fn run(args: TokenizeArgs) -> Result<()> {
    let output = args.output.clone().unwrap_or_else(|| PathBuf::from("-"));
    super::check_new_output(&output)?;
    let tokenizer = load(&args.tokenizer)?;
    if let Some(format) = &args.format {
        let bytes = token_file(&tokenizer, &args, format)?;
        super::write_output(&output, true, |w| w.write_all(&bytes))?;
        return Ok(());
    }
    let text = super::read_input(args.input.as_deref())?;
    let source = args
        .input
        .as_ref()
        .filter(|p| p.as_os_str() != "-")
        .map_or("stdin".to_string(), |p| p.display().to_string());
    let mut out: Vec<u8> = Vec::new();
    if args.json {
        let enc = tokenizer
            .encode(&text, args.special)
            .with_context(|| format!("encoding {source}"))?;
        let tokens: Vec<&str> = enc
            .ids
            .iter()
            .map(|&id| tokenizer.id_to_token(id).unwrap_or(""))
            .collect();
        let offsets = if args.byte_offsets {
            enc.offsets.clone()
        } else {
            let text = std::str::from_utf8(&text).map_err(|e| {
                anyhow::anyhow!(
                    "{source}: invalid UTF-8 at byte {}: character offsets need UTF-8 (use --byte-offsets)",
                    e.valid_up_to()
                )
            })?;
            lmkit_tokenizers::char_offsets(text, &enc.offsets)
        };
        let json = serde_json::json!({
            "ids": enc.ids,
            "tokens": tokens,
            "offsets": offsets,
        });
        serde_json::to_writer(&mut out, &json)?;
        writeln!(out)?;
    } else if args.count {
        let n = tokenizer
            .count_tokens(&text, args.special)
            .with_context(|| format!("encoding {source}"))?;
        writeln!(out, "{n}")?;
    } else {
        let ids = tokenizer
            .encode_ids_parallel(&text, args.special)
            .with_context(|| format!("encoding {source}"))?;
        // Straight into the output buffer: a String per id (`to_string`)
        // made printing 10M ids take longer than encoding them.
        out.reserve(ids.len() * 6 + 1);
        let mut digits = itoa::Buffer::new();
        for (i, &id) in ids.iter().enumerate() {
            if i > 0 {
                out.push(b' ');
            }
            out.extend_from_slice(digits.format(id).as_bytes());
        }
        out.push(b'\n');
    }
    super::write_output(&output, false, |w| w.write_all(&out))
}

/// The input's documents as a token file in `format` (`llmc`, `nanogpt`).
fn token_file(tokenizer: &Tokenizer, args: &TokenizeArgs, format: &str) -> Result<Vec<u8>> {
    use lmkit::data::token_files::{join_documents, write_token_file, TokenFileFormat};
    let format: TokenFileFormat = format.parse()?;
    let eos = match tokenizer {
        Tokenizer::Bpe(t) => t.endoftext_id(),
        Tokenizer::WordPiece(_) => None,
    }
    .with_context(|| {
        format!(
            "{}: --format needs a GPT-2 style tokenizer with <|endoftext|> to join documents",
            args.tokenizer.display()
        )
    })?;
    let docs: Vec<String> = match args.input.as_deref() {
        Some(p) if p.as_os_str() != "-" => {
            lmkit::data::nsp::read_documents_field(&[p.to_path_buf()], &args.text_field)?
        }
        _ => lmkit::data::source::split_pages(&super::read_input_text(None)?)
            .map(str::to_string)
            .collect(),
    };
    let encoded = docs
        .iter()
        .map(|d| tokenizer.encode_ids_parallel(d.as_bytes(), false))
        .collect::<std::result::Result<Vec<_>, _>>()
        .context("encoding the input")?;
    let ids = join_documents(format, &encoded, eos);
    let mut bytes = Vec::new();
    write_token_file(&mut bytes, format, &ids)?;
    Ok(bytes)
}

/// Token ids from `detokenize`'s input: whitespace-separated numbers, or
/// JSON — `tokenize --json`'s object (its `ids`), or a list of ids.
fn parse_ids(input: &str, source: &str) -> Result<Vec<u32>> {
    let t = input.trim_start();
    if t.starts_with('{') || t.starts_with('[') {
        let v: serde_json::Value =
            serde_json::from_str(t).with_context(|| format!("{source}: not valid JSON"))?;
        let ids = v.get("ids").unwrap_or(&v);
        return serde_json::from_value(ids.clone()).with_context(|| {
            format!("{source}: expected a list of token ids or an object with \"ids\"")
        });
    }
    input
        .split_whitespace()
        .enumerate()
        .map(|(i, w)| {
            w.parse::<u32>()
                .map_err(|_| anyhow::anyhow!("{source}: {w:?} (item {}) is not a token id", i + 1))
        })
        .collect()
}

pub fn run_detokenize(args: DetokenizeArgs) -> Result<()> {
    let tokenizer = load(&args.tokenizer)?;
    let input = super::read_input_text(args.input.as_deref())?;
    let source = args
        .input
        .as_ref()
        .filter(|p| p.as_os_str() != "-")
        .map_or("stdin".to_string(), |p| p.display().to_string());
    let ids = parse_ids(&input, &source)?;
    let bytes = tokenizer
        .decode(&ids)
        .with_context(|| format!("decoding the ids from {source}"))?;
    let mut out = std::io::stdout().lock();
    out.write_all(&bytes)?;
    out.flush()?;
    Ok(())
}
