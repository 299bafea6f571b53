//! `lmkit`: tokenize, train, evaluate, generate and serve GPT-2 and BERT models.
//!
//! Each subcommand lives in its own module under `cmd/`; this file only wires
//! them into clap.

use clap::{Parser, Subcommand};

mod cmd;

#[derive(Parser)]
#[command(name = "lmkit", version, about = "GPT-2 and BERT in Rust, end to end")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Sentence embeddings (one JSON array per input line).
    Embed(cmd::embed::Args),
    /// Top-k tokens for each [MASK] of a text.
    FillMask(cmd::fill_mask::Args),
    /// Sequence classification, one result per input line.
    Classify(cmd::classify::Args),
    /// Extractive question answering over a context file.
    Qa(cmd::qa::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Embed(a) => cmd::embed::run(a),
        Command::FillMask(a) => cmd::fill_mask::run(a),
        Command::Classify(a) => cmd::classify::run(a),
        Command::Qa(a) => cmd::qa::run(a),
    }
}
