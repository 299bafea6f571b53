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
    /// Encode a text into token ids.
    Tokenize(cmd::tokenize::TokenizeArgs),
    /// Decode token ids (read from stdin) into text.
    Detokenize(cmd::tokenize::DetokenizeArgs),
    /// Learn a BPE or WordPiece vocabulary from text files.
    TrainTokenizer(cmd::train_tokenizer::TrainTokenizerArgs),
    /// Continue a prompt with a GPT-2 model (streams the text).
    Generate(cmd::generate::Args),
    /// Perplexity of a GPT-2 model on a text file (sliding window).
    Perplexity(cmd::perplexity::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Tokenize(args) => cmd::tokenize::run(args),
        Command::Detokenize(args) => cmd::tokenize::run_detokenize(args),
        Command::TrainTokenizer(args) => cmd::train_tokenizer::run(args),
        Command::Generate(a) => cmd::generate::run(a),
        Command::Perplexity(a) => cmd::perplexity::run(a),
    }
}
