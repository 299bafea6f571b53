//! Every OpenAI encoding (tiktoken's `r50k_base`/`gpt2`, `p50k_base`,
//! `p50k_edit`, `cl100k_base`, `o200k_base`, `o200k_harmony`), offline: the
//! `.tiktoken` rank files are the ones the `tiktoken-rs` crate ships, built
//! into this crate (`build.rs` finds them), so no download is ever needed.

use std::path::Path;

use crate::pretokenize::Pattern;
use crate::{BpeTokenizer, Error, Result};

/// The encodings [`encoding`] knows, in tiktoken's order.
pub const ENCODINGS: [&str; 7] = [
    "gpt2",
    "r50k_base",
    "p50k_base",
    "p50k_edit",
    "cl100k_base",
    "o200k_base",
    "o200k_harmony",
];

macro_rules! rank_file {
    ($name:literal) => {
        (
            $name,
            include_bytes!(concat!(
                env!("LMKIT_TIKTOKEN_ASSETS"),
                "/",
                $name,
                ".tiktoken"
            )),
        )
    };
}

/// The rank files, by name (`r50k_base.tiktoken`: `r50k_base`).
const RANK_FILES: [(&str, &[u8]); 4] = [
    rank_file!("r50k_base"),
    rank_file!("p50k_base"),
    rank_file!("cl100k_base"),
    rank_file!("o200k_base"),
];

const ENDOFTEXT: &str = "<|endoftext|>";
const FIM: [&str; 3] = ["<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"];
const ENDOFPROMPT: &str = "<|endofprompt|>";

/// What tiktoken builds an encoding from.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Its rank file's name (`"cl100k_base"`: see [`rank_file`]).
    pub file: &'static str,
    pub pattern: Pattern,
    /// Special tokens, `(text, id)`.
    pub specials: Vec<(String, u32)>,
}

/// What tiktoken builds encoding `name` from (`None` for a name it does
/// not have).
pub fn spec(name: &str) -> Option<Spec> {
    let s = |t: &str, id: u32| (t.to_string(), id);
    let fim = |first: u32| (0..3).map(move |k| s(FIM[k], first + k as u32));
    let (file, pattern, specials) = match name {
        "gpt2" | "r50k_base" => ("r50k_base", Pattern::Gpt2, vec![s(ENDOFTEXT, 50256)]),
        "p50k_base" => ("p50k_base", Pattern::Gpt2, vec![s(ENDOFTEXT, 50256)]),
        "p50k_edit" => (
            "p50k_base",
            Pattern::Gpt2,
            std::iter::once(s(ENDOFTEXT, 50256))
                .chain(fim(50281))
                .collect(),
        ),
        "cl100k_base" => (
            "cl100k_base",
            Pattern::Cl100k,
            std::iter::once(s(ENDOFTEXT, 100257))
                .chain(fim(100258))
                .chain([s(ENDOFPROMPT, 100276)])
                .collect(),
        ),
        "o200k_base" => (
            "o200k_base",
            Pattern::O200k,
            vec![s(ENDOFTEXT, 199999), s(ENDOFPROMPT, 200018)],
        ),
        "o200k_harmony" => {
            let named = [
                (199998, "startoftext"),
                (199999, "endoftext"),
                (200002, "return"),
                (200003, "constrain"),
                (200005, "channel"),
                (200006, "start"),
                (200007, "end"),
                (200008, "message"),
                (200012, "call"),
            ];
            // tiktoken keeps o200k_base's specials, so 200018 is both
            // `<|endofprompt|>` and `<|reserved_200018|>`.
            let mut specials = vec![s(ENDOFPROMPT, 200018)];
            for id in 199998..201088u32 {
                specials.push(match named.iter().find(|&&(i, _)| i == id) {
                    Some((_, n)) => s(&format!("<|{n}|>"), id),
                    None => s(&format!("<|reserved_{id}|>"), id),
                });
            }
            ("o200k_base", Pattern::O200k, specials)
        }
        _ => return None,
    };
    Some(Spec {
        file,
        pattern,
        specials,
    })
}

/// The `.tiktoken` rank file named `file` (`"cl100k_base"`), as built in.
pub fn rank_file(file: &str) -> Option<&'static [u8]> {
    RANK_FILES.iter().find(|(n, _)| *n == file).map(|(_, d)| *d)
}

/// The OpenAI encoding `name` (one of [`ENCODINGS`]), ids equal to
/// tiktoken's. Parsing its rank file takes a few milliseconds (o200k's
/// 200k tokens: see `docs/benchmarks.md`); callers keep the tokenizer.
pub fn encoding(name: &str) -> Result<BpeTokenizer> {
    let Spec {
        file,
        pattern,
        specials,
    } = spec(name).ok_or_else(|| {
        Error::InvalidOption(format!(
            "unknown encoding {name:?}; known: {}",
            ENCODINGS.join(", ")
        ))
    })?;
    let data = rank_file(file).expect("every spec names a built-in rank file");
    let path = format!("<built-in {file}.tiktoken>");
    let ranks = crate::bpe::parse_tiktoken(Path::new(&path), data)?;
    BpeTokenizer::from_tiktoken_ranks(Path::new(&path), &ranks, &specials, pattern)
}
