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
    /// Continue a prompt with a GPT-2 model (streams the text).
    Generate(cmd::generate::Args),
    /// Perplexity of a GPT-2 model on a text file (sliding window).
    Perplexity(cmd::perplexity::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Generate(a) => cmd::generate::run(a),
        Command::Perplexity(a) => cmd::perplexity::run(a),
    }
}
