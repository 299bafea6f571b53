//! Generation as text: token ids in, decoded text out as it becomes ready —
//! what `lmkit generate`, the server and the Python package show.

use std::ops::ControlFlow;

use lmkit_tokenizers::BpeTokenizer;

use crate::error::Result;
use crate::models::gpt2::engine::Gpt2Engine;
use crate::models::gpt2::generate::{GenerationConfig, GenerationOutput};
use crate::models::gpt2::stream::TextStreamer;

/// A finished text generation.
#[derive(Debug, Clone, PartialEq)]
pub struct TextCompletion {
    /// The new text: no end-of-text token, cut before a stop string.
    pub text: String,
    /// The ids and timings ([`GenerationOutput::finish_reason`] is `Stop`
    /// when a stop string or the caller ended it).
    pub output: GenerationOutput,
}

impl Gpt2Engine {
    /// The end-of-text id generation stops at: the config's
    /// `eos_token_id`, else the tokenizer's `<|endoftext|>`.
    pub fn eos_token_id(&self, tokenizer: &BpeTokenizer) -> Option<u32> {
        self.config()
            .eos_token_id
            .or_else(|| tokenizer.endoftext_id())
    }

    /// The ids of a prompt as HF's tokenizer gives them (special-token text
    /// such as `<|endoftext|>` becomes its id); an empty prompt is an error.
    pub fn prompt_ids(tokenizer: &BpeTokenizer, prompt: &str) -> Result<Vec<u32>> {
        let ids = tokenizer.encode_ids(prompt.as_bytes(), true);
        if ids.is_empty() {
            return Err(crate::Error::InvalidInput(
                "the prompt encodes to no tokens: give a non-empty `prompt`".into(),
            ));
        }
        Ok(ids)
    }

    /// Generates after `prompt` and decodes as it goes: the end-of-text
    /// token (`cfg.eos_token_id`, unless `ignore_eos`) is not text; the text
    /// ends before the first of `stops`. `on_text` gets each piece as soon
    /// as it is whole UTF-8 and cannot be the start of a stop string (the
    /// pieces add up to [`TextCompletion::text`]); `ControlFlow::Break`
    /// ends generation after the current token.
    pub fn complete(
        &mut self,
        tokenizer: &BpeTokenizer,
        prompt: &[u32],
        cfg: &GenerationConfig,
        stops: &[String],
        mut on_text: impl FnMut(&str) -> ControlFlow<()>,
    ) -> Result<TextCompletion> {
        let eos = cfg.eos_token_id.filter(|_| !cfg.ignore_eos);
        let mut streamer = TextStreamer::new(stops);
        let mut broke = false;
        let output = self.generate(prompt, cfg, |id| {
            if Some(id) == eos {
                return ControlFlow::Continue(()); // the end: not text
            }
            let piece = streamer.push(tokenizer.token_bytes(id).unwrap_or_default());
            if !piece.is_empty() && on_text(&piece).is_break() {
                broke = true;
                return ControlFlow::Break(());
            }
            if streamer.stopped() {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })?;
        let tail = streamer.finish();
        if !broke && !tail.is_empty() {
            let _ = on_text(&tail);
        }
        Ok(TextCompletion {
            text: streamer.text().to_string(),
            output,
        })
    }
}
