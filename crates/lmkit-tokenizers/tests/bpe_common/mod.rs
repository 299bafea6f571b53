//! Shared helpers for the BPE tests: the real GPT-2 assets and the tiktoken oracle.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

use lmkit_tokenizers::BpeTokenizer;

pub fn assets() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../assets"))
}

/// GPT-2's real vocabulary from assets/gpt2 (scripts/fetch-assets.sh).
pub fn gpt2() -> &'static BpeTokenizer {
    static TOK: OnceLock<BpeTokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let dir = assets().join("gpt2");
        BpeTokenizer::from_dir(&dir).unwrap_or_else(|e| {
            panic!(
                "cannot load GPT-2 from {} ({e}); run scripts/fetch-assets.sh first",
                dir.display()
            )
        })
    })
}

pub fn tiktoken() -> &'static tiktoken_rs::CoreBPE {
    tiktoken_rs::r50k_base_singleton()
}

/// tiktoken-rs's OpenAI encoding `name` (the oracle of `openai::encoding`).
pub fn tiktoken_of(name: &str) -> tiktoken_rs::CoreBPE {
    match name {
        "gpt2" | "r50k_base" => tiktoken_rs::r50k_base(),
        "p50k_base" => tiktoken_rs::p50k_base(),
        "p50k_edit" => tiktoken_rs::p50k_edit(),
        "cl100k_base" => tiktoken_rs::cl100k_base(),
        "o200k_base" => tiktoken_rs::o200k_base(),
        "o200k_harmony" => tiktoken_rs::o200k_harmony(),
        _ => panic!("tiktoken-rs has no {name}"),
    }
    .expect("tiktoken-rs builds its encodings")
}

/// The Rust books corpus, split into its documents.
pub fn corpus_docs() -> Vec<String> {
    let path = assets().join("books/corpus.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {} ({e}); run scripts/fetch-assets.sh first",
            path.display()
        )
    });
    text.split("\n\u{c}\n").map(str::to_string).collect()
}

/// Strings that stress the pre-tokenizer and the merge loop.
pub fn adversarial() -> Vec<String> {
    let mut v: Vec<String> = [
        "",
        " ",
        "  ",
        "\n",
        "\n\n\n",
        " \n ",
        "a",
        "Hello, world!",
        "I'm can't won't they're we've he'll she'd it's 'S 'LL '",
        "''''s'''t 're've ' m",
        "don’t “quoted” — dash…",
        "  leading and trailing   ",
        "tabs\tand\r\nCRLF\u{b}\u{c}\u{85}\u{a0}\u{2028}\u{3000}ideographic",
        "emoji 😀👍🏽👨‍👩‍👧‍👦🇫🇷 ❤️ and more😀😀😀",
        "combining e\u{301}\u{301} a\u{308} \u{301}start ñ n\u{303}",
        "CJK 漢字かなカナ한국어 中文，标点。 日本語の文章です",
        "mixed Русский текст ελληνικά עברית العربية हिन्दी ไทย",
        "digits 123 4567 ١٢٣ ⅫⅢ ½ ²³ 0x1F 3.14159 1,000,000",
        "control \u{0}\u{1}\u{7}\u{1b}[31m\u{7f}\u{9f} chars",
        "zero\u{200b}width\u{200d}joiner\u{feff}bom",
        "<|endoftext|> not special unless asked <|endoftext|><|endoftext|>",
        "fn main() { println!(\"{}\", x?); } // code\n    indented();",
        "https://example.com/path?q=1&r=2#frag user@example.org",
        "!!!???...,,,;;;:::---___===+++***&&&^^^%%%$$$###@@@",
        "\u{10FFFF}\u{E000}\u{FFFD}\u{1F600}\u{1D400}\u{1D7CE}",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.push("a".repeat(5000));
    v.push("ab".repeat(3000));
    v.push("abcdefghijklmnopqrstuvwxyz".repeat(300));
    v.push("Donaudampfschifffahrtsgesellschaftskapitän".repeat(100));
    v.push("1".repeat(4000));
    v.push(" ".repeat(3000) + "x");
    v.push("\n".repeat(3000));
    v.push("!".repeat(4000));
    v.push("😀".repeat(1000));
    v.push("漢".repeat(2000));
    v.push("e\u{301}".repeat(1500));
    v.push("a ".repeat(2000));
    v.push(" a".repeat(2000) + "  \n \t ");
    v
}
