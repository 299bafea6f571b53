//! The Unicode classes of tiktoken's pre-tokenization pattern (`\p{L}`,
//! `\p{N}`, `\s`), one generated file each: `tests/bpe_unicode_tables.rs`
//! writes them (`-- --ignored regenerate`) and checks them against the
//! regex crate on every code point.

mod letter;
mod number;
mod white_space;

pub(crate) use letter::LETTER;
pub(crate) use number::NUMBER;
pub(crate) use white_space::WHITE_SPACE;
