//! The Unicode classes of tiktoken's pre-tokenization patterns (`\p{L}`,
//! `\p{N}`, `\s`, and o200k's `[\p{Lu}\p{Lt}]`, `\p{Ll}`, `[\p{Lm}\p{Lo}]`,
//! `\p{M}`), one generated file each: `tests/bpe_unicode_tables.rs` writes
//! them (`-- --ignored regenerate`) and checks them against the regex crate
//! on every code point.

mod letter;
mod lower;
mod mark;
mod modifier_other;
mod number;
mod upper;
mod white_space;

pub(crate) use letter::LETTER;
pub(crate) use lower::LOWER;
pub(crate) use mark::MARK;
pub(crate) use modifier_other::MODIFIER_OTHER;
pub(crate) use number::NUMBER;
pub(crate) use upper::UPPER;
pub(crate) use white_space::WHITE_SPACE;
