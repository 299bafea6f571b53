//! GPT-2's pre-tokenizer, hand-written (no regex engine on the hot path).
//!
//! It splits text exactly like tiktoken's r50k/gpt2 pattern
//! `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
//! under the `regex` crate's Unicode tables (`\p{L}`, `\p{N}`, `\s` = White_Space),
//! which `tests/bpe_unicode_tables.rs` checks for every code point.
//!
//! It works on bytes so that any byte string can be encoded. Rule for invalid
//! UTF-8 (neither tiktoken nor HF can take it): at each position a valid UTF-8
//! character is taken if one starts there, else the single byte is a character
//! of the "other" class (`[^\s\p{L}\p{N}]`), like punctuation. On valid UTF-8
//! this is exactly the pattern above; on any input the pieces tile the text.
//!
//! Piece starts are found 52 positions at a time: a 64-byte window becomes
//! one bit mask per class ([`classify_block`]: AVX-512BW or AVX2 where the
//! CPU has it, else [`classify_block_scalar`]), non-ASCII characters are decoded
//! once and their class spread over their bytes, and the pattern's rules
//! become shifts and ands on the masks (`Gpt2Pieces::region_starts`); a
//! piece's end is then a count of trailing zeros. The reference twin scans
//! one character at a time through the pattern's alternatives; the two give
//! the same pieces (property tests, and the `bpe_encode_decode` fuzz
//! target), as the SIMD masks equal the scalar ones.

use std::ops::Range;
use std::sync::OnceLock;

use crate::pretokenize_tables::{LETTER, NUMBER, WHITE_SPACE};

mod chars;
mod cl100k;
mod custom;
mod o200k;
mod scan;

use chars::class_at;
pub(crate) use chars::{class_of, decode_multibyte};

pub use cl100k::{split_cl100k, Cl100kPieces};
pub use custom::CustomPattern;
pub use o200k::{split_o200k, O200kPieces};

/// The pre-tokenization patterns: those with a hand-written scanner
/// (tiktoken's r50k/p50k (GPT-2's), cl100k_base's and o200k_base's), and
/// any other evaluated by `fancy-regex` ([`CustomPattern`], slower).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Pattern {
    Gpt2,
    Cl100k,
    O200k,
    Custom(CustomPattern),
}

impl Pattern {
    /// The pattern as tiktoken writes it (its `pat_str`).
    pub fn regex(&self) -> &str {
        match self {
            Pattern::Custom(c) => c.as_str(),
            Pattern::Gpt2 => {
                r"'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"
            }
            Pattern::Cl100k => {
                r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"
            }
            Pattern::O200k => concat!(
                r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
                "|",
                r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
                r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            ),
        }
    }

    /// The pattern whose tiktoken `pat_str` is `pat`, if one has a scanner.
    pub fn from_regex(pat: &str) -> Option<Self> {
        [Pattern::Gpt2, Pattern::Cl100k, Pattern::O200k]
            .into_iter()
            .find(|p| p.regex() == pat)
    }

    /// The pattern of tiktoken `pat_str` `pat`: its scanner when one has
    /// one, else `pat` compiled by `fancy-regex` (an error naming the
    /// problem when it does not compile).
    pub fn from_regex_or_custom(pat: &str) -> crate::Result<Self> {
        match Self::from_regex(pat) {
            Some(p) => Ok(p),
            None => CustomPattern::new(pat).map(Pattern::Custom),
        }
    }

    /// A cut position at or after `from` where this pattern's pieces of
    /// `text` always have a boundary and the pieces on each side equal
    /// those of each side alone: after a `\n` between two ASCII non-space
    /// bytes (the `\n` ends a piece: alone, or after punctuation it
    /// joins), the second not a `/` for o200k (`[\r\n/]*` would take it).
    /// None for a custom pattern (no cut is known safe).
    pub fn safe_split(&self, text: &[u8], from: usize) -> Option<usize> {
        if let Pattern::Custom(_) = self {
            return None;
        }
        let solid = |b: u8| b.is_ascii() && !b.is_ascii_whitespace() && b != 0x0B;
        (from.max(2)..text.len()).find(|&i| {
            text[i - 1] == b'\n'
                && solid(text[i - 2])
                && solid(text[i])
                && (*self != Pattern::O200k || text[i] != b'/')
        })
    }
}

/// The character classes the GPT-2 pattern distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CharClass {
    /// `\p{L}`
    Letter = 0,
    /// `\p{N}`
    Number = 1,
    /// `\s` (Unicode White_Space)
    Space = 2,
    /// everything else, including bytes that are not valid UTF-8
    Other = 3,
}

const CLASSES: [CharClass; 4] = [
    CharClass::Letter,
    CharClass::Number,
    CharClass::Space,
    CharClass::Other,
];

const fn in_ranges(ranges: &[(u32, u32)], c: u32) -> bool {
    let mut i = 0;
    while i < ranges.len() {
        if ranges[i].0 <= c && c <= ranges[i].1 {
            return true;
        }
        i += 1;
    }
    false
}

const fn slow_class(c: u32) -> u8 {
    if in_ranges(LETTER, c) {
        0
    } else if in_ranges(NUMBER, c) {
        1
    } else if in_ranges(WHITE_SPACE, c) {
        2
    } else {
        3
    }
}

/// Class of each ASCII byte; 0x80.. are marked 4 = "decode first".
pub(crate) static BYTE_CLASS: [u8; 256] = {
    let mut t = [4u8; 256];
    let mut b = 0;
    while b < 128 {
        t[b] = slow_class(b as u32);
        b += 1;
    }
    t
};

/// Bit masks of up to 64 bytes of text: bit `i` of `class[c]` is set when
/// byte `i` is an ASCII character of class `c` (0 letter, 1 number, 2 space,
/// 3 other); `non_ascii` marks bytes `>= 0x80`. Bits past the block are 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockMasks {
    pub class: [u64; 4],
    pub non_ascii: u64,
    /// Bytes equal to `b' '` (the one space that joins the piece after it).
    pub space: u64,
    /// Bytes equal to `b'\''` (where a contraction may start).
    pub apostrophe: u64,
    /// Lowercase ASCII letters `a-z` (o200k's scanner tells the cases apart).
    pub lower: u64,
}

/// [`BlockMasks`] of `block` (at most 64 bytes), one byte at a time.
pub fn classify_block_scalar(block: &[u8]) -> BlockMasks {
    let mut m = BlockMasks::default();
    for (i, &b) in block.iter().take(64).enumerate() {
        match BYTE_CLASS[b as usize] {
            4 => m.non_ascii |= 1 << i,
            c => m.class[c as usize] |= 1 << i,
        }
        m.space |= ((b == b' ') as u64) << i;
        m.apostrophe |= ((b == b'\'') as u64) << i;
        m.lower |= (b.is_ascii_lowercase() as u64) << i;
    }
    m
}

impl BlockMasks {
    /// The masks of a SIMD classifier's byte compares (any bits past the
    /// block's `valid` ones dropped; "other" is whatever valid byte is none
    /// of the rest).
    #[cfg(target_arch = "x86_64")]
    fn from_compares(
        valid: u64,
        [letter, number, white]: [u64; 3],
        non_ascii: u64,
        space: u64,
        apostrophe: u64,
        lower: u64,
    ) -> Self {
        let [letter, number, white, non_ascii] =
            [letter, number, white, non_ascii].map(|m| m & valid);
        BlockMasks {
            class: [
                letter,
                number,
                white,
                valid & !(letter | number | white | non_ascii),
            ],
            non_ascii,
            space: space & valid,
            apostrophe: apostrophe & valid,
            lower: lower & valid,
        }
    }
}

/// The block classifier this CPU runs (checked once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Classifier {
    Avx512,
    Avx2,
    Scalar,
}

fn classifier() -> Classifier {
    #[cfg(target_arch = "x86_64")]
    {
        static WHICH: OnceLock<Classifier> = OnceLock::new();
        *WHICH.get_or_init(|| {
            if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") {
                Classifier::Avx512
            } else if is_x86_feature_detected!("avx2") {
                Classifier::Avx2
            } else {
                Classifier::Scalar
            }
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Classifier::Scalar
    }
}

/// [`BlockMasks`] of `block` (at most 64 bytes): AVX-512BW or AVX2 where
/// available, else [`classify_block_scalar`]; the results are equal (tested).
#[inline]
pub fn classify_block(block: &[u8]) -> BlockMasks {
    match classifier() {
        // SAFETY: AVX-512F and AVX-512BW were detected at run time.
        #[cfg(target_arch = "x86_64")]
        Classifier::Avx512 => unsafe { avx512::classify(block) },
        // SAFETY: AVX2 was detected at run time.
        #[cfg(target_arch = "x86_64")]
        Classifier::Avx2 => unsafe { avx2::classify(block) },
        _ => classify_block_scalar(block),
    }
}

/// [`classify_block`] on AVX2, 32 bytes at a time (CPUs without AVX-512:
/// the scalar masks made pre-tokenization ~2.6x slower).
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::BlockMasks;
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn classify(block: &[u8]) -> BlockMasks {
        let n = block.len().min(64);
        let valid: u64 = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        // A short block is copied into zeros (AVX2 has no byte-masked load).
        let mut padded = [0u8; 64];
        let bytes: &[u8; 64] = match block.first_chunk::<64>() {
            Some(whole) => whole,
            None => {
                padded[..n].copy_from_slice(&block[..n]);
                &padded
            }
        };
        let splat = |b: u8| _mm256_set1_epi8(b as i8);
        let bits = |m: __m256i| _mm256_movemask_epi8(m) as u32 as u64;
        // Unsigned `x - lo < count` as `min(x - lo, count - 1) == x - lo`.
        let in_range = |x: __m256i, lo: u8, count: u8| {
            let d = _mm256_sub_epi8(x, splat(lo));
            bits(_mm256_cmpeq_epi8(_mm256_min_epu8(d, splat(count - 1)), d))
        };
        let (mut classes, mut non_ascii, mut space, mut apostrophe, mut lower) =
            ([0u64; 3], 0, 0, 0, 0);
        for (half, chunk) in bytes.chunks_exact(32).enumerate() {
            // SAFETY: `chunk` is 32 readable bytes; the load is unaligned.
            let v = unsafe { _mm256_loadu_si256(chunk.as_ptr().cast()) };
            let shift = 32 * half;
            let sp = bits(_mm256_cmpeq_epi8(v, splat(b' ')));
            classes[0] |= in_range(_mm256_or_si256(v, splat(0x20)), b'a', 26) << shift;
            classes[1] |= in_range(v, b'0', 10) << shift;
            classes[2] |= (in_range(v, b'\t', 5) | sp) << shift;
            non_ascii |= bits(v) << shift;
            space |= sp << shift;
            apostrophe |= bits(_mm256_cmpeq_epi8(v, splat(b'\''))) << shift;
            lower |= in_range(v, b'a', 26) << shift;
        }
        BlockMasks::from_compares(valid, classes, non_ascii, space, apostrophe, lower)
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::BlockMasks;
    use std::arch::x86_64::*;

    /// The ASCII classes as byte-range compares, matching `BYTE_CLASS`
    /// (letters `A-Z a-z`, digits, White_Space `\t..=\r` and space).
    ///
    /// # Safety
    /// The CPU must have AVX-512F and AVX-512BW.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn classify(block: &[u8]) -> BlockMasks {
        let n = block.len().min(64);
        let valid: u64 = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        // SAFETY: the masked load reads only the first `n` bytes of `block`,
        // which are in bounds; the other lanes are zero and never fault.
        let v = unsafe { _mm512_maskz_loadu_epi8(valid, block.as_ptr().cast()) };
        let splat = |b: u8| _mm512_set1_epi8(b as i8);
        let in_range = |x: __m512i, lo: u8, count: u8| {
            _mm512_cmplt_epu8_mask(_mm512_sub_epi8(x, splat(lo)), splat(count))
        };
        let space = _mm512_cmpeq_epi8_mask(v, splat(b' '));
        let classes = [
            in_range(_mm512_or_si512(v, splat(0x20)), b'a', 26),
            in_range(v, b'0', 10),
            in_range(v, b'\t', 5) | space,
        ];
        let apostrophe = _mm512_cmpeq_epi8_mask(v, splat(b'\''));
        let lower = in_range(v, b'a', 26);
        BlockMasks::from_compares(
            valid,
            classes,
            _mm512_movepi8_mask(v),
            space,
            apostrophe,
            lower,
        )
    }
}

/// The classes of code points `page << 8 ..= page << 8 | 255`, from the
/// ranges of each `(ranges, class)` that overlap them (`default` elsewhere;
/// a later class overrides an earlier one, and the classes the patterns
/// use do not overlap: see the tests).
pub(crate) fn page_of_classes(
    page: u32,
    classes: &[(&[(u32, u32)], u8)],
    default: u8,
) -> [u8; 256] {
    let mut block = [default; 256];
    let (lo, hi) = (page << 8, page << 8 | 255);
    for &(ranges, class) in classes {
        let first = ranges.partition_point(|&(_, end)| end < lo);
        for &(a, b) in ranges[first..].iter().take_while(|&&(a, _)| a <= hi) {
            block[(a.max(lo) - lo) as usize..=(b.min(hi) - lo) as usize].fill(class);
        }
    }
    block
}

/// The class of one character under the GPT-2 pattern.
pub fn char_class(c: char) -> CharClass {
    let c = c as u32;
    if c < 128 {
        CLASSES[BYTE_CLASS[c as usize] as usize]
    } else {
        CLASSES[class_of(c) as usize]
    }
}

/// Splits `text` into GPT-2 pre-tokenization pieces (byte ranges that tile it).
pub fn split_gpt2(text: &[u8]) -> Gpt2Pieces<'_> {
    split_gpt2_with(text, true)
}

/// [`split_gpt2`] with piece starts found on block masks (`fast`, the one
/// [`split_gpt2`] uses) or by scanning one character at a time (the
/// reference twin): the pieces are the same; both are here for the tests
/// that say so.
pub fn split_gpt2_with(text: &[u8], fast: bool) -> Gpt2Pieces<'_> {
    Gpt2Pieces {
        text,
        pos: 0,
        fast,
        // The first region is from 1 (the first piece starts at 0).
        region: 1usize.wrapping_sub(REGION),
        starts: 0,
    }
}

/// Bytes of context a region's window holds before its first position:
/// enough that the 4 bytes its rules look back at are decoded from a
/// character boundary (a character has at most 4 bytes).
const BEHIND: usize = 8;
/// Positions one window decides; the window's last 4 bytes are lookahead.
const REGION: usize = 52;
const _: () = assert!(BEHIND + REGION + 4 == 64);

/// Iterator over the pieces of [`split_gpt2`].
pub struct Gpt2Pieces<'a> {
    text: &'a [u8],
    pos: usize,
    fast: bool,
    /// Bit `k` of `starts`: a piece starts at `region + k` (`k < REGION`),
    /// after the last piece given.
    region: usize,
    starts: u64,
}

/// Length of the contraction (`'s 't 'm 'd` or `'re 've 'll`) at `text[i]`
/// (an apostrophe), 0 when there is none. It applies where a piece starts.
#[inline]
fn contraction_len(text: &[u8], i: usize) -> usize {
    match (text.get(i + 1), text.get(i + 2)) {
        (Some(b's' | b't' | b'm' | b'd'), _) => 2,
        (Some(b'r'), Some(b'e')) | (Some(b'v'), Some(b'e')) | (Some(b'l'), Some(b'l')) => 3,
        _ => 0,
    }
}

impl Gpt2Pieces<'_> {
    /// Class and byte length of the character at `i < text.len()`.
    #[inline(always)]
    fn class_at(&self, i: usize) -> (u8, usize) {
        class_at(self.text, i)
    }

    /// Where pieces start among `text[from..from + REGION]`: bit `k` for `from + k`.
    ///
    /// The pattern's pieces are decided locally. With `ws` whitespace
    /// characters, a piece starts at a character that
    /// - begins a whitespace run, or is the last of a run of 2+ followed by
    ///   a non-space (`\s+(?!\S)` leaves that one to the next match);
    /// - is a non-space after whitespace other than `' '` (a single `' '`
    ///   joins the letters, digits or other characters after it);
    /// - is a non-space after a non-space of another class (letter, number,
    ///   other);
    /// - follows a contraction (`'s`, `'ll`, ...) whose apostrophe starts a piece.
    ///
    /// These become bit operations on one 64-byte window of class masks
    /// ([`classify_block`]): bit `j` is byte `from - BEHIND + j`, bytes
    /// before the text count as a `\n` (so the text's first character starts
    /// a piece, as a match does). Characters of 2+ bytes carry their class
    /// on every byte, except whitespace, whose first byte is in `ws` and the
    /// others in `ws_tail`.
    ///
    /// Not a method: a call given `&self` kept the iterator's fields in
    /// memory, stored and loaded again for every piece.
    #[inline]
    fn region_starts(text: &[u8], from: usize) -> u64 {
        match classifier() {
            // SAFETY: AVX-512F and AVX-512BW were detected at run time.
            #[cfg(target_arch = "x86_64")]
            Classifier::Avx512 => unsafe { Self::region_starts_avx512(text, from) },
            // SAFETY: AVX2 was detected at run time.
            #[cfg(target_arch = "x86_64")]
            Classifier::Avx2 => unsafe { Self::region_starts_avx2(text, from) },
            _ => Self::region_starts_on(text, from, classify_block_scalar),
        }
    }

    /// [`Self::region_starts`] compiled for AVX2, its classifier inlined
    /// (a call returning the masks through memory was ~10% of its cost).
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn region_starts_avx2(text: &[u8], from: usize) -> u64 {
        // SAFETY: this function's caller has checked for AVX2.
        Self::region_starts_on(text, from, |b| unsafe { avx2::classify(b) })
    }

    /// [`Self::region_starts_avx2`] for AVX-512BW.
    ///
    /// # Safety
    /// The CPU must have AVX-512F and AVX-512BW.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn region_starts_avx512(text: &[u8], from: usize) -> u64 {
        // SAFETY: this function's caller has checked for AVX-512F and BW.
        Self::region_starts_on(text, from, |b| unsafe { avx512::classify(b) })
    }

    #[inline(always)]
    fn region_starts_on(text: &[u8], from: usize, classify: impl Fn(&[u8]) -> BlockMasks) -> u64 {
        let lo = from.saturating_sub(BEHIND);
        let hi = text.len().min(lo + 64);
        let m = classify(&text[lo..hi]);
        // Window bits below `virt` are before the text (`from < BEHIND`).
        let shift = BEHIND - (from - lo);
        let virt = (1u64 << shift) - 1;
        let at = |x: u64| x << shift;
        let valid = at(if hi - lo == 64 {
            !0
        } else {
            (1u64 << (hi - lo)) - 1
        }) | virt;
        let (mut letter, mut number) = (at(m.class[0]), at(m.class[1]));
        let (mut ws, mut ws_tail) = (at(m.class[2]) | virt, 0u64);
        let mut non_ascii = at(m.non_ascii);
        while non_ascii != 0 {
            let j = non_ascii.trailing_zeros() as usize;
            // `j >= shift`, so the byte is in the text. The first bytes of a
            // window may continue a character begun before it; read alone
            // they are "other", which only the context bits see.
            let (class, len) = class_at(text, from + j - BEHIND);
            let bits = ((1u64 << len) - 1) << j;
            match class {
                0 => letter |= bits,
                1 => number |= bits,
                2 => {
                    ws |= 1 << j;
                    ws_tail |= bits & !(1 << j);
                }
                _ => {} // "other": whatever is valid and none of the above
            }
            non_ascii &= !bits;
        }
        let space = at(m.space);
        let prev = |x: u64| x << 1; // bit j: x at j - 1
        let white = ws | ws_tail;
        let solid = valid & !white;
        // Last byte of a whitespace run before a non-space, then the first
        // byte of its character (whitespace has at most 3 bytes).
        let last = white & (solid >> 1);
        let last_char = (last & ws)
            | ((last & ws_tail) >> 1 & ws)
            | ((last & ws_tail & prev(ws_tail)) >> 2 & ws);
        let mut starts = (ws & !prev(white))
            | (last_char & prev(white))
            | (solid & prev(white) & !prev(space))
            | (solid & prev(solid) & ((letter ^ prev(letter)) | (number ^ prev(number))));
        // Contractions whose apostrophe starts a piece (it never sits inside
        // one, so their order does not matter); those past the region's
        // positions are left out.
        let mut apostrophes = at(m.apostrophe) & starts & ((1u64 << (BEHIND + REGION)) - 1);
        while apostrophes != 0 {
            let j = apostrophes.trailing_zeros() as usize;
            apostrophes &= apostrophes - 1;
            let len = contraction_len(text, from + j - BEHIND);
            if len > 0 {
                starts = (starts & !(1 << (j + 1))) | 1 << (j + len);
            }
        }
        (starts >> BEHIND) & ((1u64 << REGION) - 1)
    }

    /// End of the piece starting at `start < text.len()`, on region masks:
    /// the next start bit, each taken off as its piece is given (pieces
    /// are asked for in order; a shift by the offset in the region, and
    /// its bounds test, were a third of this function's instructions).
    #[inline(always)]
    fn piece_end_fast(&mut self, start: usize) -> usize {
        loop {
            if self.starts != 0 {
                let end = self.region + self.starts.trailing_zeros() as usize;
                self.starts &= self.starts - 1;
                debug_assert!(end > start);
                return end;
            }
            let from = self.region.wrapping_add(REGION);
            if from >= self.text.len() {
                return self.text.len();
            }
            self.starts = Self::region_starts(self.text, from);
            self.region = from;
        }
    }

    /// End of the maximal run of class `class` starting at `j`, and the start
    /// of its last character (`j - 1`, i.e. none, when the run is empty),
    /// one character at a time.
    #[inline(always)]
    fn run(&self, mut j: usize, class: u8) -> (usize, usize) {
        let text = self.text;
        let mut last = j.wrapping_sub(1);
        while j < text.len() {
            let c = BYTE_CLASS[text[j] as usize];
            let len = if c == class {
                1
            } else if c == 4 {
                let (c, len) = self.class_at(j);
                if c != class {
                    break;
                }
                len
            } else {
                break;
            };
            last = j;
            j += len;
        }
        (j, last)
    }

    /// End of the piece starting at `i < text.len()`, one character at a
    /// time: the pattern's alternatives in order (the reference twin of
    /// [`Self::region_starts`]).
    fn piece_end(&self, i: usize) -> usize {
        let text = self.text;
        let b = text[i];
        if b == b'\'' {
            let len = contraction_len(text, i);
            if len > 0 {
                return i + len;
            }
        }
        let (class, len) = self.class_at(i);
        if class != 2 {
            return self.run(i + len, class).0;
        }
        // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: a single space joins what follows.
        if b == b' ' && i + 1 < text.len() {
            let (next, next_len) = self.class_at(i + 1);
            if next != 2 {
                return self.run(i + 1 + next_len, next).0;
            }
        }
        // Whitespace run: `\s+(?!\S)` leaves its last character to the next
        // piece when a non-space follows; `\s+` takes a lone one.
        let (j, last) = match self.run(i + len, 2) {
            (j, _) if j == i + len => (j, i),
            run => run,
        };
        if j == text.len() || last == i {
            j
        } else {
            last
        }
    }
}

impl Iterator for Gpt2Pieces<'_> {
    type Item = Range<usize>;

    // Always inlined: left as a call in the encode loop (the compiler's
    // choice), it cost ~8% of GPT-2's one-thread encode.
    #[inline(always)]
    fn next(&mut self) -> Option<Range<usize>> {
        if self.pos >= self.text.len() {
            return None;
        }
        let start = self.pos;
        let end = if self.fast {
            self.piece_end_fast(start)
        } else {
            self.piece_end(start)
        };
        self.pos = end;
        Some(start..end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(s: &str) -> Vec<&str> {
        split_gpt2(s.as_bytes()).map(|r| &s[r]).collect()
    }

    #[test]
    fn splits_like_the_gpt2_pattern() {
        assert_eq!(
            pieces("Hello world, it's 2024!  \n\nI'LL  go"),
            [
                "Hello", " world", ",", " it", "'s", " 2024", "!", "  \n", "\n", "I", "'", "LL",
                " ", " go"
            ]
        );
        assert_eq!(pieces("don't''s"), ["don", "'t", "''", "s"]);
        assert_eq!(pieces(" 's"), [" '", "s"]);
        assert_eq!(pieces("a   "), ["a", "   "]);
        assert_eq!(pieces("\tx"), ["\t", "x"]);
        assert_eq!(pieces("x \u{3000}y"), ["x", " ", "\u{3000}", "y"]);
        assert_eq!(pieces("héllo wörld١٢"), ["héllo", " wörld", "١٢"]);
        assert_eq!(pieces(""), Vec::<&str>::new());
    }

    #[test]
    fn invalid_utf8_bytes_are_other_characters() {
        let text = b"a\xff\xfe! \x80b\xe2\x82";
        let got: Vec<&[u8]> = split_gpt2(text).map(|r| &text[r]).collect();
        assert_eq!(got, [&b"a"[..], b"\xff\xfe!", b" \x80", b"b", b"\xe2\x82"]);
    }

    /// Every classifier this CPU has gives the scalar masks, for every
    /// byte at every lane of full and short blocks.
    #[test]
    fn simd_classifiers_equal_scalar() {
        #[allow(clippy::type_complexity)]
        let mut impls: Vec<(&str, fn(&[u8]) -> BlockMasks)> = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") {
                // SAFETY: AVX2 was detected just above.
                impls.push(("avx2", |b| unsafe { avx2::classify(b) }));
            }
            if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") {
                // SAFETY: AVX-512F and AVX-512BW were detected just above.
                impls.push(("avx512", |b| unsafe { avx512::classify(b) }));
            }
        }
        if impls.is_empty() {
            eprintln!("no AVX2 or AVX-512BW here: only the scalar classifier runs");
        }
        for (name, classify) in impls {
            assert_eq!(classify(&[]), classify_block_scalar(&[]), "{name}");
            for b in 0..=255u8 {
                for len in [1usize, 31, 32, 33, 63, 64] {
                    for lane in 0..len {
                        let mut block = vec![b'x'; len];
                        block[lane] = b;
                        assert_eq!(
                            classify(&block),
                            classify_block_scalar(&block),
                            "{name}: byte {b:#x} lane {lane} of {len}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn classes() {
        assert_eq!(char_class('a'), CharClass::Letter);
        assert_eq!(char_class('é'), CharClass::Letter);
        assert_eq!(char_class('漢'), CharClass::Letter);
        assert_eq!(char_class('٣'), CharClass::Number);
        assert_eq!(char_class('Ⅻ'), CharClass::Number);
        assert_eq!(char_class('\u{85}'), CharClass::Space);
        assert_eq!(char_class('\u{200b}'), CharClass::Other);
        assert_eq!(char_class('😀'), CharClass::Other);
        assert_eq!(char_class('\u{301}'), CharClass::Other);
    }
}
