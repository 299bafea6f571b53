//! Tokenizers for lmkit: GPT-2's byte-level BPE and BERT's WordPiece.
//!
//! This crate has no tensor code; it turns text into token ids and back,
//! reads and writes the Hugging Face file formats, and trains new vocabularies.
