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
    /// Draw the loss and learning-rate curves of a training run into a PNG.
    Plot(cmd::plot::Args),
    /// Pretrain GPT-2 from scratch (or from an HF checkpoint) on your text.
    Pretrain(Box<cmd::pretrain::Args>),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Plot(a) => cmd::plot::run(a),
        Command::Pretrain(a) => cmd::pretrain::run(*a),
    }
}
