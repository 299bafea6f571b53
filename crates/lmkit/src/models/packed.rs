//! Sequences of a right-padded batch laid end to end without their padding
//! (BERT's unpadded forward, GPT-2's task pass): each one's length and
//! first row.

use std::ops::Range;

/// The real-token lengths of a batch's sequences and where each starts
/// among the packed rows; empty when the batch is not packed.
#[derive(Debug, Clone, Default)]
pub(crate) struct PackedSeqs {
    lens: Vec<usize>,
    offs: Vec<usize>,
}

impl PackedSeqs {
    /// Packs sequences of `lens` tokens; returns the rows, Σ lens.
    pub(crate) fn set(&mut self, lens: &[usize]) -> usize {
        self.clear();
        let mut rows = 0;
        for &len in lens {
            self.offs.push(rows);
            rows += len;
        }
        self.lens.extend_from_slice(lens);
        rows
    }

    /// Not packed.
    pub(crate) fn clear(&mut self) {
        self.lens.clear();
        self.offs.clear();
    }

    /// Each sequence's length, when packed.
    pub(crate) fn lens(&self) -> Option<&[usize]> {
        (!self.lens.is_empty()).then_some(&self.lens[..])
    }

    /// Each sequence's first row.
    pub(crate) fn offs(&self) -> &[usize] {
        &self.offs
    }

    /// The row of token `i` of sequence `s`; `None` past its length.
    pub(crate) fn row(&self, s: usize, i: usize) -> Option<usize> {
        (i < self.lens[s]).then(|| self.offs[s] + i)
    }

    /// Each sequence's rows, in order.
    pub(crate) fn spans(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        self.offs.iter().zip(&self.lens).map(|(&o, &l)| o..o + l)
    }
}
