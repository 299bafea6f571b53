//! `lmkit tokenize` and `lmkit detokenize`.
//!
//! Contract (scripts depend on it): `tokenize` reads the whole input as ONE
//! text and prints its ids space-separated on one line; `--count` prints only
//! the number of tokens; `--json` prints `{"ids", "tokens", "offsets"}`.
//! `detokenize` reads whitespace-separated ids from stdin and writes the
//! decoded bytes as they are (no newline added).

use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use lmkit_tokenizers::Tokenizer;

#[derive(Args)]
pub struct TokenizeArgs {
    /// Tokenizer directory: vocab.json + merges.txt, vocab.txt, or
    /// tokenizer.json (a model directory works too).
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
    /// Print ids, tokens and byte offsets as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct DetokenizeArgs {
    /// Tokenizer directory (as for `tokenize`).
    #[arg(long)]
    pub tokenizer: PathBuf,
}

fn load(dir: &PathBuf) -> Result<Tokenizer> {
    // The CLI contract is "all the ids of the whole text": no truncation or padding.
    Tokenizer::from_dir(dir)
        .map(Tokenizer::without_truncation_and_padding)
        .with_context(|| format!("loading the tokenizer in {}", dir.display()))
}

pub fn run(args: TokenizeArgs) -> Result<()> {
    let tokenizer = load(&args.tokenizer)?;
    let text = super::read_input(args.input.as_deref())?;
    let source = args
        .input
        .as_ref()
        .map_or("stdin".to_string(), |p| p.display().to_string());
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if args.json {
        let enc = tokenizer
            .encode(&text, args.special)
            .with_context(|| format!("encoding {source}"))?;
        let tokens: Vec<&str> = enc
            .ids
            .iter()
            .map(|&id| tokenizer.id_to_token(id).unwrap_or(""))
            .collect();
        let json = serde_json::json!({
            "ids": enc.ids,
            "tokens": tokens,
            "offsets": enc.offsets,
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
        {
            let mut line = String::with_capacity(ids.len() * 6);
            for (i, id) in ids.iter().enumerate() {
                if i > 0 {
                    line.push(' ');
                }
                line.push_str(&id.to_string());
            }
            line.push('\n');
            out.write_all(line.as_bytes())?;
        }
    }
    out.flush()?;
    Ok(())
}

pub fn run_detokenize(args: DetokenizeArgs) -> Result<()> {
    let tokenizer = load(&args.tokenizer)?;
    let mut input = String::new();
    std::io::stdin()
        .read_to_string(&mut input)
        .context("reading token ids from stdin")?;
    let mut ids = Vec::new();
    for (i, word) in input.split_whitespace().enumerate() {
        match word.parse::<u32>() {
            Ok(id) => ids.push(id),
            Err(_) => bail!("stdin: {word:?} (item {}) is not a token id", i + 1),
        }
    }
    let bytes = tokenizer
        .decode(&ids)
        .context("decoding the ids from stdin")?;
    let mut out = std::io::stdout().lock();
    out.write_all(&bytes)?;
    out.flush()?;
    Ok(())
}
