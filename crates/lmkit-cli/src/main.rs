//! `lmkit`: tokenize, train, evaluate, generate and serve GPT-2 and BERT models.
//!
//! Each subcommand lives in its own module under `cmd/`; this file only wires
//! them into clap.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use lmkit::tasks::{EvalTarget, TaskKind};
use std::process::ExitCode;

mod chart;
mod cmd;
mod distributed;
mod interrupt;
mod progress;

#[derive(Parser)]
#[command(name = "lmkit", version, about = "GPT-2 and BERT in Rust, end to end")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Worker threads of every command (default: all cores, or RAYON_NUM_THREADS).
    #[arg(long, global = true)]
    threads: Option<usize>,
}

/// The commands in the order of a workflow: start, tokenizer, train,
/// evaluate, use, serve, tools.
#[derive(Subcommand)]
enum Command {
    /// Train a tokenizer and a small GPT-2 on the Rust books in a few minutes, then sample from it.
    Quickstart(cmd::quickstart::Args),
    /// Learn a BPE or WordPiece vocabulary from text files.
    TrainTokenizer(cmd::train_tokenizer::TrainTokenizerArgs),
    /// Encode a text into token ids.
    Tokenize(cmd::tokenize::TokenizeArgs),
    /// Decode token ids (or `tokenize --json` output) into text.
    Detokenize(cmd::tokenize::DetokenizeArgs),
    /// Pretrain GPT-2 (causal LM) or BERT (masked LM + next sentence), new or from a checkpoint, on your text.
    Pretrain(Box<cmd::pretrain::Args>),
    /// Fine-tune a BERT or GPT-2 checkpoint for a task (the list: `lmkit finetune --help`).
    Finetune(Box<cmd::finetune::Args>),
    /// Score a fine-tuned model on its task, or a GPT-2 on a zero-shot benchmark.
    Eval(Box<cmd::eval::Args>),
    /// Continue a prompt with a GPT-2 model (streams the text).
    Generate(cmd::generate::Args),
    /// Perplexity of a GPT-2 model on a text file (sliding window).
    Perplexity(cmd::perplexity::Args),
    /// Sentence embeddings (one JSON array per input line).
    Embed(cmd::embed::Args),
    /// Top-k tokens for each [MASK] of a text.
    FillMask(cmd::fill_mask::Args),
    /// Sequence classification (BERT or GPT-2), one result per input line.
    Classify(cmd::classify::Args),
    /// Texts scored against a query by a cross-encoder, best first.
    Rerank(cmd::rerank::Args),
    /// Named entities (token classification), one JSON array per input line.
    Ner(cmd::ner::Args),
    /// Extractive question answering over a context file.
    Qa(cmd::qa::Args),
    /// Serve models over HTTP: OpenAI (completions, embeddings) and TEI routes.
    Serve(Box<cmd::serve::Args>),
    /// Share of an evaluation set's 8-grams found in the training text (GPT-2's Bloom-filter check).
    Overlap(Box<cmd::overlap::Args>),
    /// Chart the curves of training runs (losses, eval scores, lr, throughput) as a PNG or SVG.
    Plot(cmd::plot::Args),
    /// The CPU's true arithmetic peak per instruction (f32 FMA, bf16 and int8 dots), for benchmarks.
    #[command(hide = true)]
    Probe(cmd::probe::Args),
    /// Print a shell completion script: `lmkit completions bash > /etc/bash_completion.d/lmkit`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

/// The command line, with the task lists of `finetune` and `eval` from the
/// library's registry (so they cannot drift from what the library runs).
fn command() -> clap::Command {
    let tasks = format!("Tasks (--task):\n{}", indent(&TaskKind::help()));
    let targets = format!(
        "Tasks and benchmarks (--task), with their data:\n{}",
        indent(&EvalTarget::help())
    );
    Cli::command()
        .mut_subcommand("finetune", |c| c.after_help(tasks))
        .mut_subcommand("eval", |c| c.after_help(targets))
}

fn indent(lines: &str) -> String {
    lines
        .lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn main() -> ExitCode {
    lmkit::util::alloc::keep_freed_memory();
    let matches = command().get_matches();
    let sub = matches.subcommand_name().unwrap_or_default().to_string();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Some(n) = cli.threads {
        if n == 0 {
            eprintln!("Error: --threads must be at least 1");
            return ExitCode::from(2);
        }
        // The first pool built is the global one: nothing has built it yet.
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global();
    }
    match dispatch(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {}", flag_names(&error_text(&e), &sub));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, each cause once: library errors often carry
/// their source's text already (`path: source`), so a cause whose text is
/// part of what was printed is not printed again. No backtrace: these are
/// the user's errors, not the program's.
fn error_text(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !out.contains(&c) {
            out.push_str("\n  caused by: ");
            out.push_str(&c);
        }
    }
    out
}

/// The library names options by their field names in backticks
/// (`` `seq_len` ``); here those that are flags of `subcommand` become the
/// flags that set them (`--seq-len`). Other backticked names (data fields,
/// tensor names) stay as they are.
fn flag_names(msg: &str, subcommand: &str) -> String {
    let longs: std::collections::HashSet<String> = Cli::command()
        .find_subcommand(subcommand)
        .map(|c| {
            c.get_arguments()
                .filter_map(|a| a.get_long().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(i) = rest.find('`') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let name = after.find('`').map(|j| &after[..j]);
        match name {
            Some(n) if n == "n_*" => {
                out.push_str("--n-*");
                rest = &after[n.len() + 1..];
            }
            Some(n) if longs.contains(&n.replace('_', "-")) && !n.contains('-') => {
                out.push_str("--");
                out.push_str(&n.replace('_', "-"));
                rest = &after[n.len() + 1..];
            }
            _ => {
                out.push('`');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn dispatch(command: Command) -> anyhow::Result<()> {
    if !matches!(command, Command::Pretrain(_) | Command::Finetune(_)) {
        // N copies of one command would race on the same outputs.
        distributed::single_process_only()?;
    }
    match command {
        Command::Quickstart(a) => cmd::quickstart::run(a),
        Command::TrainTokenizer(args) => cmd::train_tokenizer::run(args),
        Command::Tokenize(args) => cmd::tokenize::run(args),
        Command::Detokenize(args) => cmd::tokenize::run_detokenize(args),
        Command::Pretrain(a) => cmd::pretrain::run(*a),
        Command::Finetune(a) => cmd::finetune::run(*a),
        Command::Eval(a) => cmd::eval::run(*a),
        Command::Generate(a) => cmd::generate::run(a),
        Command::Perplexity(a) => cmd::perplexity::run(a),
        Command::Embed(a) => cmd::embed::run(a),
        Command::FillMask(a) => cmd::fill_mask::run(a),
        Command::Classify(a) => cmd::classify::run(a),
        Command::Rerank(a) => cmd::rerank::run(a),
        Command::Ner(a) => cmd::ner::run(a),
        Command::Qa(a) => cmd::qa::run(a),
        Command::Serve(a) => cmd::serve::run(*a),
        Command::Overlap(a) => cmd::overlap::run(*a),
        Command::Plot(a) => cmd::plot::run(a),
        Command::Probe(a) => cmd::probe::run(a),
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut crate::command(),
                "lmkit",
                &mut std::io::stdout(),
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::flag_names;

    #[test]
    fn option_names_become_flags() {
        assert_eq!(
            flag_names(
                "`seq_len` 64 differs; drop `preset`, `n_*` and `init_from`",
                "pretrain"
            ),
            "--seq-len 64 differs; drop --preset, --n-* and --init-from"
        );
        // Backticks around anything that is not a flag of the command stay.
        assert_eq!(
            flag_names("key `wte.weight`, field `question` and `x", "finetune"),
            "key `wte.weight`, field `question` and `x"
        );
    }
}
