//! Truncation, the post-processing template (`[CLS] A [SEP] B [SEP]`) and
//! padding, with the semantics of HF `tokenizers` (`utils/truncation.rs`,
//! `Encoding::truncate`, `Encoding::merge_with`, `utils/padding.rs`).

use crate::{Encoding, Error, Result};

/// Which sequence(s) lose tokens when a pair is too long.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TruncationStrategy {
    /// HF's longest-first: keep the shorter sequence whole if it fits in half,
    /// otherwise split the budget in two (the second gets the odd token).
    #[default]
    LongestFirst,
    OnlyFirst,
    OnlySecond,
}

/// Which end of a sequence is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TruncationDirection {
    #[default]
    Right,
    Left,
}

/// Truncation settings; `max_length` counts the special tokens too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncation {
    pub max_length: usize,
    pub strategy: TruncationStrategy,
    /// Tokens of overlap between consecutive overflowing windows.
    pub stride: usize,
    pub direction: TruncationDirection,
}

impl Truncation {
    /// Longest-first, right side, no stride.
    pub fn new(max_length: usize) -> Self {
        Self {
            max_length,
            strategy: TruncationStrategy::LongestFirst,
            stride: 0,
            direction: TruncationDirection::Right,
        }
    }

    pub fn with_strategy(mut self, strategy: TruncationStrategy) -> Self {
        self.strategy = strategy;
        self
    }
}

/// The length padding brings encodings to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaddingLength {
    /// The longest encoding of the batch (a lone encoding is left as it is).
    Longest,
    /// A fixed length (longer encodings are left as they are).
    Fixed(usize),
}

/// Which side padding tokens go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PaddingDirection {
    #[default]
    Right,
    Left,
}

/// Padding settings; build with [`super::WordPieceTokenizer::padding_to`] to
/// get the tokenizer's `[PAD]` id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Padding {
    pub to: PaddingLength,
    /// Round the target length up to a multiple of this.
    pub pad_to_multiple_of: Option<usize>,
    pub pad_id: u32,
    pub pad_type_id: u32,
    pub direction: PaddingDirection,
}

/// One window of a question/context pair (see
/// [`super::WordPieceTokenizer::encode_pair_windows`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub encoding: Encoding,
    /// Per token: `Some(0)` first text, `Some(1)` second text (the context),
    /// `None` for `[CLS]`, `[SEP]` and padding.
    pub sequence_ids: Vec<Option<u8>>,
}

impl Window {
    /// Token positions holding context (second-sequence) tokens; their
    /// `encoding.offsets` are byte ranges into the context.
    pub fn context_range(&self) -> std::ops::Range<usize> {
        let first = self.sequence_ids.iter().position(|s| *s == Some(1));
        match first {
            None => 0..0,
            Some(start) => {
                let len = self.sequence_ids[start..]
                    .iter()
                    .take_while(|s| **s == Some(1))
                    .count();
                start..start + len
            }
        }
    }
}

/// The tokens of one input text, before the template is applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Seq {
    pub ids: Vec<u32>,
    pub offsets: Vec<(usize, usize)>,
}

impl Seq {
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    fn slice(&self, start: usize, stop: usize) -> Seq {
        Seq {
            ids: self.ids[start..stop].to_vec(),
            offsets: self.offsets[start..stop].to_vec(),
        }
    }

    /// HF `Encoding::truncate`: the kept part first, then the overflowing
    /// windows of `max_len` tokens, consecutive ones overlapping by `stride`.
    fn truncate(self, max_len: usize, stride: usize, dir: TruncationDirection) -> Result<Vec<Seq>> {
        let n = self.len();
        if max_len >= n {
            return Ok(vec![self]);
        }
        if max_len == 0 {
            return Ok(vec![Seq::default(), self]);
        }
        if stride >= max_len {
            return Err(Error::InvalidOption(format!(
                "truncation stride {stride} must be less than the room left for this sequence \
                 ({max_len} tokens once the other sequence and special tokens are counted)"
            )));
        }
        let step = max_len - stride;
        let mut ranges = Vec::new();
        match dir {
            TruncationDirection::Right => {
                let mut start = 0;
                loop {
                    let stop = (start + max_len).min(n);
                    ranges.push((start, stop));
                    if stop == n {
                        break;
                    }
                    start += step;
                }
            }
            TruncationDirection::Left => {
                // HF walks `stop` down from the end in steps, stopping after
                // the window that reaches the start.
                let mut last = n; // exclusive end of the current window
                loop {
                    let start = last.saturating_sub(max_len);
                    ranges.push((start, last));
                    if start == 0 || last <= step {
                        break;
                    }
                    last -= step;
                }
            }
        }
        Ok(ranges.into_iter().map(|(a, b)| self.slice(a, b)).collect())
    }
}

/// HF `truncate_encodings`. `max_length` already excludes the special tokens.
/// Returns the windows of each sequence, the kept part first.
pub(crate) fn truncate_pair(
    a: Seq,
    b: Option<Seq>,
    max_length: usize,
    params: &Truncation,
) -> Result<(Vec<Seq>, Option<Vec<Seq>>)> {
    let (stride, dir) = (params.stride, params.direction);
    if max_length == 0 {
        let a = a.truncate(0, stride, dir)?;
        let b = b.map(|b| b.truncate(0, stride, dir)).transpose()?;
        return Ok((a, b));
    }
    let total = a.len() + b.as_ref().map_or(0, Seq::len);
    if total <= max_length {
        return Ok((vec![a], b.map(|b| vec![b])));
    }
    let to_remove = total - max_length;
    match params.strategy {
        TruncationStrategy::LongestFirst => match b {
            Some(b) => {
                let (mut n1, mut n2) = (a.len(), b.len());
                let swap = n1 > n2;
                if swap {
                    std::mem::swap(&mut n1, &mut n2);
                }
                n2 = if n1 > max_length {
                    n1
                } else {
                    n1.max(max_length - n1)
                };
                if n1 + n2 > max_length {
                    n1 = max_length / 2;
                    n2 = n1 + max_length % 2;
                }
                if swap {
                    std::mem::swap(&mut n1, &mut n2);
                }
                Ok((
                    a.truncate(n1, stride, dir)?,
                    Some(b.truncate(n2, stride, dir)?),
                ))
            }
            None => Ok((a.truncate(total - to_remove, stride, dir)?, None)),
        },
        TruncationStrategy::OnlyFirst | TruncationStrategy::OnlySecond => {
            let first = params.strategy == TruncationStrategy::OnlyFirst;
            let (mut a, mut b) = (Some(a), b);
            let target = if first { &mut a } else { &mut b };
            let Some(seq) = target.take() else {
                return Err(Error::InvalidOption(
                    "truncation only_second needs a second sequence".into(),
                ));
            };
            if seq.len() <= to_remove {
                return Err(Error::InvalidInput(format!(
                    "cannot truncate the {} sequence enough to fit max_length {}: it has {} \
                     tokens and {to_remove} must go",
                    if first { "first" } else { "second" },
                    params.max_length,
                    seq.len()
                )));
            }
            let keep = seq.len() - to_remove;
            let windows = seq.truncate(keep, stride, dir)?;
            if first {
                Ok((windows, b.map(|b| vec![b])))
            } else {
                Ok((vec![a.unwrap_or_default()], Some(windows)))
            }
        }
    }
}

/// Order in which HF's `Encoding::merge_with` lists the window combinations:
/// the kept pair first, then each overflowing first window with every second
/// window, then the kept first window with each overflowing second window.
pub(crate) fn window_combinations(na: usize, nb: Option<usize>) -> Vec<(usize, Option<usize>)> {
    match nb {
        None => (0..na).map(|i| (i, None)).collect(),
        Some(nb) => {
            let mut v = vec![(0, Some(0))];
            for i in 1..na {
                for j in 0..nb {
                    v.push((i, Some(j)));
                }
            }
            for j in 1..nb {
                v.push((0, Some(j)));
            }
            v
        }
    }
}

/// One element of a post-processing template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    /// A special token (usually one id) such as `[CLS]`.
    Special {
        name: String,
        ids: Vec<u32>,
        type_id: u32,
    },
    /// The first (`second == false`) or second input sequence.
    Sequence { second: bool, type_id: u32 },
}

/// HF `TemplateProcessing` (BERT's `BertProcessing` is one instance of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    pub single: Vec<Piece>,
    pub pair: Vec<Piece>,
}

impl Template {
    /// `[CLS] $A [SEP]` and `[CLS] $A [SEP] $B:1 [SEP]:1`.
    pub(crate) fn bert(cls: (&str, u32), sep: (&str, u32)) -> Self {
        let special = |(name, id): (&str, u32), type_id| Piece::Special {
            name: name.to_string(),
            ids: vec![id],
            type_id,
        };
        let seq = |second, type_id| Piece::Sequence { second, type_id };
        Self {
            single: vec![special(cls, 0), seq(false, 0), special(sep, 0)],
            pair: vec![
                special(cls, 0),
                seq(false, 0),
                special(sep, 0),
                seq(true, 1),
                special(sep, 1),
            ],
        }
    }

    /// What HF does without a post-processor: the sequences with type ids 0 and 1.
    pub(crate) fn plain() -> Self {
        Self {
            single: vec![Piece::Sequence {
                second: false,
                type_id: 0,
            }],
            pair: vec![
                Piece::Sequence {
                    second: false,
                    type_id: 0,
                },
                Piece::Sequence {
                    second: true,
                    type_id: 1,
                },
            ],
        }
    }

    /// Number of special tokens the template adds.
    pub(crate) fn added_tokens(&self, pair: bool) -> usize {
        let pieces = if pair { &self.pair } else { &self.single };
        pieces
            .iter()
            .map(|p| match p {
                Piece::Special { ids, .. } => ids.len(),
                Piece::Sequence { .. } => 0,
            })
            .sum()
    }

    /// Appends the templated `a` (and `b`) to `out`.
    pub(crate) fn apply(
        &self,
        a: &Seq,
        b: Option<&Seq>,
        add_special_tokens: bool,
        out: &mut Encoding,
        seq_ids: Option<&mut Vec<Option<u8>>>,
    ) {
        let pieces = if b.is_some() {
            &self.pair
        } else {
            &self.single
        };
        let mut seq_ids = seq_ids;
        for piece in pieces {
            match piece {
                Piece::Special { ids, type_id, .. } => {
                    if !add_special_tokens {
                        continue;
                    }
                    for &id in ids {
                        out.ids.push(id);
                        out.type_ids.push(*type_id);
                        out.offsets.push((0, 0));
                        out.special_tokens_mask.push(1);
                        out.attention_mask.push(1);
                    }
                    if let Some(s) = seq_ids.as_deref_mut() {
                        s.extend(std::iter::repeat_n(None, ids.len()));
                    }
                }
                Piece::Sequence { second, type_id } => {
                    let seq = if *second {
                        match b {
                            Some(b) => b,
                            None => continue,
                        }
                    } else {
                        a
                    };
                    let n = seq.len();
                    out.ids.extend_from_slice(&seq.ids);
                    out.offsets.extend_from_slice(&seq.offsets);
                    out.type_ids.extend(std::iter::repeat_n(*type_id, n));
                    out.special_tokens_mask.extend(std::iter::repeat_n(0, n));
                    out.attention_mask.extend(std::iter::repeat_n(1, n));
                    if let Some(s) = seq_ids.as_deref_mut() {
                        s.extend(std::iter::repeat_n(Some(u8::from(*second)), n));
                    }
                }
            }
        }
    }
}

impl Encoding {
    /// Keeps at most `max_len` tokens, dropping them from the end (`Right`)
    /// or the start (`Left`): HF's `Encoding::truncate` without overflow, for
    /// tokenizers that apply truncation after encoding (byte-level BPE).
    pub fn truncate(&mut self, max_len: usize, direction: TruncationDirection) {
        let n = self.len();
        if n <= max_len {
            return;
        }
        let keep = match direction {
            TruncationDirection::Right => 0..max_len,
            TruncationDirection::Left => n - max_len..n,
        };
        fn cut<T>(v: &mut Vec<T>, keep: &std::ops::Range<usize>) {
            v.truncate(keep.end);
            v.drain(..keep.start);
        }
        cut(&mut self.ids, &keep);
        cut(&mut self.type_ids, &keep);
        cut(&mut self.offsets, &keep);
        cut(&mut self.special_tokens_mask, &keep);
        cut(&mut self.attention_mask, &keep);
    }
}

/// Pads a batch as `p` says (HF `pad_encodings`): to the longest encoding
/// or a fixed length, rounded up to `pad_to_multiple_of`.
pub fn pad_encodings(encs: &mut [Encoding], p: &Padding) {
    let len = padded_length(p, encs.iter().map(Encoding::len));
    for e in encs {
        pad(e, None, len, p);
    }
}

/// The length a batch is padded to (HF `pad_encodings`).
pub(crate) fn padded_length(p: &Padding, mut lengths: impl Iterator<Item = usize>) -> usize {
    let mut n = match p.to {
        PaddingLength::Fixed(n) => n,
        PaddingLength::Longest => lengths.by_ref().max().unwrap_or(0),
    };
    if let Some(m) = p.pad_to_multiple_of {
        if m > 0 && n % m != 0 {
            n += m - n % m;
        }
    }
    n
}

/// Pads one encoding to `len` tokens (no-op if it is already that long).
pub(crate) fn pad(
    enc: &mut Encoding,
    seq_ids: Option<&mut Vec<Option<u8>>>,
    len: usize,
    p: &Padding,
) {
    let n = enc.len();
    if n >= len {
        return;
    }
    let k = len - n;
    match p.direction {
        PaddingDirection::Right => {
            enc.ids.extend(std::iter::repeat_n(p.pad_id, k));
            enc.type_ids.extend(std::iter::repeat_n(p.pad_type_id, k));
            enc.offsets.extend(std::iter::repeat_n((0, 0), k));
            enc.special_tokens_mask.extend(std::iter::repeat_n(1, k));
            enc.attention_mask.extend(std::iter::repeat_n(0, k));
            if let Some(s) = seq_ids {
                s.extend(std::iter::repeat_n(None, k));
            }
        }
        PaddingDirection::Left => {
            fn prepend<T: Clone>(v: &mut Vec<T>, x: T, k: usize) {
                v.splice(0..0, std::iter::repeat_n(x, k));
            }
            prepend(&mut enc.ids, p.pad_id, k);
            prepend(&mut enc.type_ids, p.pad_type_id, k);
            prepend(&mut enc.offsets, (0, 0), k);
            prepend(&mut enc.special_tokens_mask, 1, k);
            prepend(&mut enc.attention_mask, 0, k);
            if let Some(s) = seq_ids {
                prepend(s, None, k);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(n: usize) -> Seq {
        Seq {
            ids: (0..n as u32).collect(),
            offsets: (0..n).map(|i| (i, i + 1)).collect(),
        }
    }

    /// HF's `truncate_encodings_longest_first` table (max_length 7).
    #[test]
    fn longest_first_matches_hf_table() {
        let cases = [
            (0, 0, 0, 0),
            (0, 2, 0, 2),
            (0, 4, 0, 4),
            (0, 8, 0, 7),
            (2, 0, 2, 0),
            (2, 2, 2, 2),
            (2, 4, 2, 4),
            (2, 8, 2, 5),
            (4, 0, 4, 0),
            (4, 2, 4, 2),
            (4, 4, 3, 4),
            (4, 8, 3, 4),
            (8, 0, 7, 0),
            (8, 2, 5, 2),
            (8, 4, 4, 3),
            (8, 8, 3, 4),
        ];
        let params = Truncation::new(7);
        for (la, lb, wa, wb) in cases {
            let (a, b) = truncate_pair(seq(la), Some(seq(lb)), 7, &params).unwrap();
            assert_eq!((a[0].len(), b.unwrap()[0].len()), (wa, wb), "{la} {lb}");
        }
    }

    #[test]
    fn windows_with_stride() {
        let w = seq(10).truncate(4, 1, TruncationDirection::Right).unwrap();
        let ids: Vec<Vec<u32>> = w.iter().map(|s| s.ids.clone()).collect();
        assert_eq!(ids, [vec![0, 1, 2, 3], vec![3, 4, 5, 6], vec![6, 7, 8, 9]]);
        let w = seq(10).truncate(4, 1, TruncationDirection::Left).unwrap();
        let ids: Vec<Vec<u32>> = w.iter().map(|s| s.ids.clone()).collect();
        assert_eq!(ids, [vec![6, 7, 8, 9], vec![3, 4, 5, 6], vec![0, 1, 2, 3]]);
        assert!(seq(10).truncate(4, 4, TruncationDirection::Right).is_err());
    }
}
