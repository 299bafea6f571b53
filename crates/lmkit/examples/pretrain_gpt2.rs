//! Pretrain a tiny GPT-2 from a text file, end to end, with the library
//! alone: learn a byte-level BPE vocabulary on the text, then run the
//! pretraining recipe (shards, AdamW, validation, checkpoints, the final
//! model in HF layout).
//!
//! ```sh
//! cargo run --release -p lmkit --example pretrain_gpt2 -- TEXT_FILE OUT_DIR [STEPS]
//! ```
//! OUT_DIR/tokenizer holds the vocabulary, OUT_DIR/model the run (a
//! `transformers` `GPT2LMHeadModel` folder when it ends). Run it again with
//! the same arguments and a larger STEPS to continue from the checkpoint.

use std::path::PathBuf;

use lmkit::recipes::pretrain::{
    has_checkpoint, pretrain, ModelSize, PretrainEvent, PretrainOptions,
};
use lmkit::spec::Family;
use lmkit_tokenizers::train_bpe::{BpeTrainer, BpeTrainerOptions};
use lmkit_tokenizers::BpeTokenizer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(text), Some(out)) = (args.first(), args.get(1)) else {
        return Err("usage: pretrain_gpt2 TEXT_FILE OUT_DIR [STEPS]".into());
    };
    let steps: u64 = args.get(2).map_or(Ok(200), |s| s.parse())?;
    let out = PathBuf::from(out);

    // 1. A BPE vocabulary learnt on (the first 2 MB of) the text.
    let tok_dir = out.join("tokenizer");
    if !tok_dir.join("vocab.json").exists() {
        let bytes = std::fs::read(text)?;
        let mut trainer = BpeTrainer::new(BpeTrainerOptions {
            vocab_size: 1024,
            ..BpeTrainerOptions::default()
        })?;
        trainer.feed(&bytes[..bytes.len().min(2 << 20)]);
        let tok = trainer.train(|_, _| {})?;
        tok.save(&tok_dir)?;
    }
    println!(
        "tokenizer: {} tokens in {}",
        BpeTokenizer::from_dir(&tok_dir)?.vocab_size(),
        tok_dir.display()
    );

    // 2. Pretraining: a 2-layer GPT-2 with a 64-token context.
    let run_dir = out.join("model");
    let resume = has_checkpoint(&run_dir)?;
    let opts = PretrainOptions {
        family: Family::Gpt2,
        data: vec![PathBuf::from(text)],
        output: run_dir.clone(),
        tokenizer: Some(tok_dir),
        resume,
        size: if resume {
            ModelSize::default() // the checkpoint's
        } else {
            ModelSize {
                preset: Some("tiny".into()),
                n_positions: Some(64),
                ..ModelSize::default()
            }
        },
        seq_len: Some(64),
        batch_size: Some(8),
        max_steps: Some(steps),
        lr: (!resume).then_some(3e-3),
        eval_every: (!resume).then_some(steps.div_ceil(3)),
        eval_batches: Some(4),
        sample_every: (!resume).then_some(0),
        ..PretrainOptions::default()
    };
    let summary = pretrain(
        &opts,
        &mut |event| match event {
            PretrainEvent::Start { message, .. } | PretrainEvent::Note(message) => {
                println!("{message}")
            }
            PretrainEvent::Eval { row } => {
                let loss = row["val_loss"].as_f64().unwrap_or(f64::NAN);
                println!("step {}: val loss {loss:.3}", row["step"])
            }
            PretrainEvent::Saved { path } => println!("saved {}", path.display()),
            _ => {}
        },
        &lmkit::train::StopRequest::default(),
    )?;
    println!(
        "{} steps, loss {:.3}; validation loss {:.3} -> {:.3}; model in {}",
        summary.steps,
        summary.final_loss.unwrap_or(f64::NAN),
        summary.first_val_loss.unwrap_or(f64::NAN),
        summary.last_val_loss.unwrap_or(f64::NAN),
        run_dir.display()
    );
    Ok(())
}
