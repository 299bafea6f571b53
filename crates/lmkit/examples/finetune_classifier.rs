//! Fine-tune a BERT checkpoint into a sequence classifier, then use it:
//! the fine-tuning recipe (new head initialised as HF does, AdamW with
//! linear decay, evaluation after each epoch) and the inference pipeline.
//!
//! ```sh
//! cargo run --release -p lmkit --example finetune_classifier -- BERT_DIR TRAIN.jsonl EVAL.jsonl OUT_DIR [EXAMPLES]
//! ```
//! `TRAIN.jsonl`/`EVAL.jsonl` hold `{"text": ..., "label": ...}` rows; OUT_DIR
//! becomes a `transformers` `BertForSequenceClassification` folder. EXAMPLES
//! (default 128) caps the training rows used, to keep the run tiny.

use std::io::Write;
use std::path::{Path, PathBuf};

use lmkit::models::bert::BertPipeline;
use lmkit::recipes::finetune::{finetune, FinetuneEvent, FinetuneOptions, FinetuneTask};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, train, eval, out, ..] = args.as_slice() else {
        return Err(
            "usage: finetune_classifier BERT_DIR TRAIN.jsonl EVAL.jsonl OUT_DIR [EXAMPLES]".into(),
        );
    };
    let n: usize = args.get(4).map_or(Ok(128), |s| s.parse())?;
    // The subsets go beside the model folder: fine-tuning refuses to write
    // into a folder that already holds files.
    let root = PathBuf::from(out);
    let (data, out) = (root.join("data"), root.join("model"));
    std::fs::create_dir_all(&data)?;
    let train = head(Path::new(train), n, &data.join("train.jsonl"))?;
    let eval = head(Path::new(eval), n / 2, &data.join("eval.jsonl"))?;

    let opts = FinetuneOptions {
        epochs: 2,
        batch_size: 16,
        max_seq_len: 64,
        lr: 1e-4,
        ..FinetuneOptions::default()
    };
    let summary = finetune(
        FinetuneTask::CLASSIFY,
        Path::new(model),
        &train,
        Some(&eval),
        &out,
        &opts,
        &mut |event| match event {
            FinetuneEvent::Start { description, .. } => println!("{description}"),
            FinetuneEvent::Eval { epoch, row } => println!(
                "epoch {}: held-out accuracy {:.3}, loss {:.3}",
                epoch + 1,
                row["eval_accuracy"].as_f64().unwrap_or(f64::NAN),
                row["eval_loss"].as_f64().unwrap_or(f64::NAN)
            ),
            _ => {}
        },
    )?;
    println!(
        "{} steps at {:.1} examples/s; model in {}",
        summary.steps,
        summary.examples_per_s,
        out.display()
    );

    // The fine-tuned folder, used for inference.
    let pipeline = BertPipeline::from_dir(&out)?;
    let texts = [
        "fn main() { println!(\"hi\"); }",
        "Ownership is Rust's most unique feature.",
    ];
    for (text, labels) in texts.iter().zip(pipeline.classify(&texts, 8, true)?) {
        println!("{:>8} {:.3}  {text}", labels[0].label, labels[0].score);
    }
    Ok(())
}

/// The first `n` lines of `src`, written to `dst`.
fn head(src: &Path, n: usize, dst: &Path) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(src)?;
    let mut f = std::fs::File::create(dst)?;
    for line in text.lines().filter(|l| !l.trim().is_empty()).take(n.max(2)) {
        writeln!(f, "{line}")?;
    }
    Ok(dst.to_path_buf())
}
