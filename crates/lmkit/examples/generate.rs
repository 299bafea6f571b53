//! Generate text with a GPT-2 checkpoint and its KV cache, two ways: the
//! engine's `generate` (sampling, stop conditions, streaming), and the
//! decode loop written out — one prefill over the prompt, then one token
//! per forward, each reading the keys and values cached so far.
//!
//! ```sh
//! cargo run --release -p lmkit --example generate -- MODEL_DIR "Once upon a time" [TOKENS]
//! ```
//! MODEL_DIR is an HF GPT-2 folder (config.json, model.safetensors,
//! vocab.json + merges.txt), e.g. the output of the `pretrain_gpt2` example.

use std::ops::ControlFlow;

use lmkit::models::gpt2::sampling::argmax;
use lmkit::models::gpt2::{GenerationConfig, Gpt2Engine, SamplingParams, WeightDtype};
use lmkit_tokenizers::BpeTokenizer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(dir), Some(prompt)) = (args.first(), args.get(1)) else {
        return Err("usage: generate MODEL_DIR PROMPT [TOKENS]".into());
    };
    let max_new: usize = args.get(2).map_or(Ok(20), |s| s.parse())?;
    let tok = BpeTokenizer::from_dir(dir)?;
    let mut engine = Gpt2Engine::load(dir, WeightDtype::F32)?;
    let ids = tok.encode_ids(prompt.as_bytes(), false);
    if ids.is_empty() {
        return Err("the prompt is empty".into());
    }
    let max_new = max_new.min(engine.config().n_positions.saturating_sub(ids.len()));

    // 1. The engine's generate: greedy here; SamplingParams has temperature,
    //    top-k, top-p and repetition penalty as HF's generate.
    let cfg = GenerationConfig {
        max_new_tokens: max_new,
        sampling: SamplingParams::greedy(),
        eos_token_id: tok.endoftext_id(),
        ..GenerationConfig::default()
    };
    let out = engine.generate(&ids, &cfg, |_id| ControlFlow::Continue(()))?;
    let text = String::from_utf8_lossy(&tok.decode(&out.ids)?).into_owned();
    println!("generate: {prompt}{text}");

    // 2. The same greedy decode, written out over the KV cache.
    let mut cache = engine.new_cache(1, ids.len() + max_new)?;
    let v = engine.config().vocab_size;
    let mut logits = vec![0.0f32; v];
    engine.forward(&mut cache, &ids, None)?; // prefill: every prompt token at once
    engine.logits(&[ids.len() - 1], &mut logits)?;
    let mut new = Vec::new();
    for _ in 0..max_new {
        let next = argmax(&logits);
        if Some(next) == tok.endoftext_id() {
            break;
        }
        new.push(next);
        engine.forward(&mut cache, &[next], None)?; // decode: one token, cached keys/values
        engine.logits(&[0], &mut logits)?;
    }
    println!(
        "by hand:  {prompt}{}",
        String::from_utf8_lossy(&tok.decode(&new)?)
    );
    assert_eq!(new[..], out.ids[..new.len()], "the two decodes agree");
    Ok(())
}
