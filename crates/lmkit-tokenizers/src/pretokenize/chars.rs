//! GPT-2's character classes (cl100k's too) of text as bytes: UTF-8
//! decoding, and the classes of code points by page.

use std::sync::OnceLock;

use super::{page_of_classes, BYTE_CLASS};
use crate::pretokenize_tables::{LETTER, NUMBER, WHITE_SPACE};

/// Class (0 letter, 1 number, 2 space, 3 other) and byte length of the
/// character at `text[i]` (`i < text.len()`); a byte that starts no valid
/// UTF-8 character is an "other" character of its own.
#[inline(always)]
pub(super) fn class_at(text: &[u8], i: usize) -> (u8, usize) {
    let c = BYTE_CLASS[text[i] as usize];
    if c != 4 {
        return (c, 1);
    }
    match decode_multibyte(text, i) {
        Some((cp, len)) => (class_of(cp), len),
        None => (3, 1),
    }
}

/// Class of a code point (below 0x110000) from its page of 256, built
/// the first time one of its characters is asked about: a text touches a
/// few pages, and building the table of all 4352 at once was ~1 ms of
/// every process's first encode.
#[inline]
pub(crate) fn class_of(c: u32) -> u8 {
    static PAGES: [OnceLock<[u8; 256]>; 0x1100] = [const { OnceLock::new() }; 0x1100];
    PAGES[(c >> 8) as usize].get_or_init(|| class_page(c >> 8))[(c & 255) as usize]
}

fn class_page(page: u32) -> [u8; 256] {
    page_of_classes(page, &[(WHITE_SPACE, 2), (NUMBER, 1), (LETTER, 0)], 3)
}

#[inline]
fn is_cont(b: u8) -> bool {
    (b as i8) < -64
}

/// Decodes the character at `text[i]` (`text[i] >= 0x80`): its code point and
/// length, or `None` when no valid UTF-8 sequence starts there.
#[inline(always)]
pub(crate) fn decode_multibyte(text: &[u8], i: usize) -> Option<(u32, usize)> {
    let b0 = text[i];
    let b1 = *text.get(i + 1)?;
    match b0 {
        0xC2..=0xDF if is_cont(b1) => Some((((b0 as u32 & 0x1F) << 6) | (b1 as u32 & 0x3F), 2)),
        0xE0..=0xEF => {
            let ok1 = match b0 {
                0xE0 => (0xA0..=0xBF).contains(&b1),
                0xED => (0x80..=0x9F).contains(&b1),
                _ => is_cont(b1),
            };
            let b2 = *text.get(i + 2)?;
            (ok1 && is_cont(b2)).then_some({
                (
                    ((b0 as u32 & 0x0F) << 12) | ((b1 as u32 & 0x3F) << 6) | (b2 as u32 & 0x3F),
                    3,
                )
            })
        }
        0xF0..=0xF4 => {
            let ok1 = match b0 {
                0xF0 => (0x90..=0xBF).contains(&b1),
                0xF4 => (0x80..=0x8F).contains(&b1),
                _ => is_cont(b1),
            };
            let b2 = *text.get(i + 2)?;
            let b3 = *text.get(i + 3)?;
            (ok1 && is_cont(b2) && is_cont(b3)).then_some({
                (
                    ((b0 as u32 & 0x07) << 18)
                        | ((b1 as u32 & 0x3F) << 12)
                        | ((b2 as u32 & 0x3F) << 6)
                        | (b3 as u32 & 0x3F),
                    4,
                )
            })
        }
        _ => None,
    }
}
