//! What cl100k's and o200k's scanners share: contractions, `\p{N}{1,3}`
//! and the whitespace alternatives' run, over each scanner's own classes
//! (`len_if(j)`: the byte length of the character at `j` when it is of the
//! class asked about, else `None`).

/// Length of the case-insensitive contraction at `text[i]`
/// (`'(?i:[sdmt]|ll|ve|re)`, whose `s` also matches `ſ`, U+017F, under
/// Unicode case folding), 0 when there is none.
#[inline]
pub(super) fn contraction_len(text: &[u8], i: usize) -> usize {
    if text.get(i) != Some(&b'\'') {
        return 0;
    }
    let low = |k: usize| text.get(i + k).map(|b| b.to_ascii_lowercase());
    match (low(1), low(2)) {
        (Some(b's' | b'd' | b'm' | b't'), _) => 2,
        (Some(b'l'), Some(b'l')) | (Some(b'v'), Some(b'e')) | (Some(b'r'), Some(b'e')) => 3,
        (Some(0xC5), Some(0xBF)) => 3, // ſ
        _ => 0,
    }
}

/// End of `\p{N}{1,3}` from a number character at `i` of length `len`.
#[inline(always)]
pub(super) fn up_to_three(
    n: usize,
    i: usize,
    len: usize,
    number_len: impl Fn(usize) -> Option<usize>,
) -> usize {
    let mut j = i + len;
    for _ in 0..2 {
        match (j < n).then(|| number_len(j)).flatten() {
            Some(l) => j += l,
            None => break,
        }
    }
    j
}

/// The maximal whitespace run from `i`.
pub(super) struct SpaceRun {
    pub(super) end: usize,
    /// Start of its last character.
    pub(super) last: usize,
    /// End of its last CR or LF, if it has one.
    pub(super) crlf_end: Option<usize>,
    pub(super) chars: usize,
}

#[inline(always)]
pub(super) fn space_run(
    text: &[u8],
    i: usize,
    space_len: impl Fn(usize) -> Option<usize>,
) -> SpaceRun {
    let mut run = SpaceRun {
        end: i,
        last: i,
        crlf_end: None,
        chars: 0,
    };
    while run.end < text.len() {
        let Some(l) = space_len(run.end) else {
            break;
        };
        if text[run.end] == b'\r' || text[run.end] == b'\n' {
            run.crlf_end = Some(run.end + 1);
        }
        run.last = run.end;
        run.chars += 1;
        run.end += l;
    }
    run
}
