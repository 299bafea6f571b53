//! One module per subcommand.

use std::path::Path;

use anyhow::{Context, Result};
use lmkit::data::source::SourceBytes;
use lmkit::models::auto_dtype::DtypeRequest;
use lmkit::models::gpt2::{Gpt2Engine, WeightDtype};
use lmkit_tokenizers::BpeTokenizer;

pub mod classify;
pub mod embed;
pub mod eval;
pub mod fill_mask;
pub mod finetune;
pub mod generate;
pub mod ner;
pub mod overlap;
pub mod perplexity;
pub mod plot;
pub mod pretrain;
pub mod probe;
pub mod qa;
pub mod quickstart;
pub mod rerank;
pub mod serve;
pub mod tokenize;
pub mod train_tokenizer;

/// The bytes of an input file argument (decompressed if `.gz`/`.zst`,
/// mapped if a plain file): `None` or `-` is stdin.
pub(crate) fn read_input(path: Option<&Path>) -> Result<SourceBytes> {
    match path {
        Some(p) if p.as_os_str() != "-" => Ok(lmkit::data::source::map_source(p)?),
        _ => read_stdin().map(SourceBytes::Read),
    }
}

fn read_stdin() -> Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::new();
    std::io::stdin()
        .read_to_end(&mut buf)
        .context("reading stdin")?;
    Ok(buf)
}

/// An input file argument as UTF-8 text, as [`read_input`] names it; the
/// error names the input and the byte.
pub(crate) fn read_input_text(path: Option<&Path>) -> Result<String> {
    let bytes = match path {
        Some(p) if p.as_os_str() != "-" => lmkit::data::source::read_source(p)?,
        _ => read_stdin()?,
    };
    String::from_utf8(bytes).map_err(|e| {
        let name = match path {
            Some(p) if p.as_os_str() != "-" => p.display().to_string(),
            _ => "stdin".to_string(),
        };
        anyhow::anyhow!(
            "{name}: invalid UTF-8 at byte {}",
            e.utf8_error().valid_up_to()
        )
    })
}

/// Refuses an output file that exists (outputs are new files; `-` is stdout).
pub(crate) fn check_new_output(path: &Path) -> Result<()> {
    if path.as_os_str() != "-" && path.exists() {
        anyhow::bail!("{} exists: choose a new file name", path.display());
    }
    Ok(())
}

/// Writes an output file argument: `-` is stdout (refused for `binary`
/// output when stdout is a terminal), any other path a new file written
/// atomically.
pub(crate) fn write_output(
    path: &Path,
    binary: bool,
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<()> {
    use std::io::{IsTerminal, Write};
    if path.as_os_str() == "-" {
        let stdout = std::io::stdout();
        if binary && stdout.is_terminal() {
            anyhow::bail!(
                "refusing to write binary output to a terminal: redirect stdout or name a file"
            );
        }
        let mut w = std::io::BufWriter::new(stdout.lock());
        write(&mut w).context("writing to stdout")?;
        w.flush().context("writing to stdout")?;
        return Ok(());
    }
    check_new_output(path)?;
    lmkit::util::fs::atomic_write_with(path, write)?;
    Ok(())
}

/// Whether an input is JSONL: `--jsonl`, or a `.jsonl` file (compressed or not).
pub(crate) fn jsonl_input(flag: bool, input: Option<&Path>) -> bool {
    flag || input.is_some_and(|f| f.as_os_str() != "-" && lmkit::data::source::is_jsonl(f))
}

/// The rows of a JSONL input (a file or stdin), blank lines skipped: the
/// input's name for messages, and `(1-based line, row)`.
pub(crate) fn read_jsonl_input(
    input: Option<&Path>,
) -> Result<(String, Vec<(usize, serde_json::Value)>)> {
    let text = read_input_text(input)?;
    let name = match input {
        Some(p) if p.as_os_str() != "-" => p.display().to_string(),
        _ => "stdin".to_string(),
    };
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v = serde_json::from_str(line)
            .map_err(|e| anyhow::anyhow!("{name}:{}: invalid JSON: {e}", i + 1))?;
        rows.push((i + 1, v));
    }
    Ok((name, rows))
}

/// A GPT-2 model for `generate` / `perplexity` ([`lmkit::models::load::load_gpt2`]).
pub(crate) fn load_gpt2(
    command: &str,
    model: &str,
    tokenizer: Option<&Path>,
    dtype: &str,
) -> Result<(BpeTokenizer, Gpt2Engine)> {
    Ok(lmkit::models::load::load_gpt2(
        command,
        model,
        tokenizer,
        dtype.parse::<DtypeRequest<WeightDtype>>()?,
    )?)
}
