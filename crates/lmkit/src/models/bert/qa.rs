//! Extractive (SQuAD-style) question answering: from per-token start/end
//! logits over one or more windows of `[CLS] question [SEP] context [SEP]`
//! to answer spans in the context, with the semantics of HF transformers'
//! `QuestionAnsweringPipeline` (v4): per window, logits of tokens other than
//! context tokens and `[CLS]` are set to -10000 and softmaxed over the window,
//! then `[CLS]` is zeroed; a span
//! `s ≤ e < s + max_answer_len` scores `p_start[s]·p_end[e]`; spans are
//! widened to whole words; the best `top_k` over all windows are returned.
//!
//! Shape legend: T window length (tokens).

use lmkit_tokenizers::Encoding;

/// Options of [`best_answers`] (HF pipeline defaults in `Default`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QaOptions {
    /// Number of answers returned (HF `top_k`, default 1).
    pub top_k: usize,
    /// Longest answer in tokens (HF `max_answer_len`, default 15).
    pub max_answer_len: usize,
    /// Also offer the empty answer, scored by `p_start[CLS]·p_end[CLS]`
    /// (lowest over windows), as HF's `handle_impossible_answer`.
    pub handle_impossible_answer: bool,
}

/// The QA window and overlap as HF's question-answering pipeline picks
/// them: the window `min(384, max_positions)` unless given, the overlap
/// `min(128, window / 2)` unless given; given values must fit the model.
pub fn qa_windows(
    max_seq_len: Option<usize>,
    doc_stride: Option<usize>,
    max_positions: usize,
) -> crate::Result<(usize, usize)> {
    let window = max_seq_len.unwrap_or(384.min(max_positions));
    if window > max_positions {
        return Err(crate::Error::InvalidInput(format!(
            "`max_seq_len` {window} exceeds the model's max_position_embeddings {max_positions}"
        )));
    }
    let stride = doc_stride.unwrap_or(128.min(window / 2));
    if stride >= window {
        return Err(crate::Error::InvalidInput(format!(
            "`doc_stride` {stride} must be smaller than the window (`max_seq_len` {window})"
        )));
    }
    Ok((window, stride))
}

impl Default for QaOptions {
    fn default() -> Self {
        QaOptions {
            top_k: 1,
            max_answer_len: 15,
            handle_impossible_answer: false,
        }
    }
}

/// One window: its encoding (question = type 0, context = type 1, offsets
/// are byte ranges in the context) and the model's logits for it.
#[derive(Debug, Clone, Copy)]
pub struct QaWindow<'a> {
    pub encoding: &'a Encoding,
    /// `[T]`.
    pub start_logits: &'a [f32],
    /// `[T]`.
    pub end_logits: &'a [f32],
}

/// An answer span of the context.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// `p_start·p_end` within its window.
    pub score: f32,
    /// Character (Unicode scalar) index of the first answer character, as HF reports.
    pub start: usize,
    /// Character index one past the last answer character.
    pub end: usize,
    /// `context[start..end]`; empty for the impossible answer.
    pub answer: String,
    /// Byte range of the answer in the context.
    pub byte_start: usize,
    pub byte_end: usize,
}

/// Whether token `i` of `enc` may be part of an answer: a real context token.
fn is_context(enc: &Encoding, i: usize) -> bool {
    enc.type_ids[i] == 1 && enc.special_tokens_mask[i] == 0 && enc.attention_mask[i] != 0
}

/// Softmax over the window in f64 with disallowed positions at -10000.
fn masked_softmax(logits: &[f32], allowed: &[bool]) -> Vec<f64> {
    let x: Vec<f64> = logits
        .iter()
        .zip(allowed)
        .map(|(&l, &a)| if a { l as f64 } else { -10000.0 })
        .collect();
    let max = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = x.iter().map(|v| (v - max).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.into_iter().map(|v| v / sum).collect()
}

/// The best answers over all windows, best first (at most `top_k`; fewer
/// when the windows hold fewer candidate spans). `continues_word(id)` says
/// whether a token continues the previous token's word (WordPiece `##`),
/// used to widen spans to whole words as HF's `align_to_words` does.
///
/// Identical spans found in overlapping windows are reported once, with
/// their best score (HF would list them twice).
pub fn best_answers(
    windows: &[QaWindow<'_>],
    context: &str,
    continues_word: &dyn Fn(u32) -> bool,
    opts: QaOptions,
) -> Vec<Answer> {
    let mut cands: Vec<(f64, usize, usize)> = Vec::new(); // (score, byte_start, byte_end)
    let mut min_null = f64::INFINITY;
    for w in windows {
        let enc = w.encoding;
        let t = enc.len();
        assert!(
            w.start_logits.len() == t && w.end_logits.len() == t,
            "best_answers: logits must have one entry per window token"
        );
        if t == 0 {
            continue;
        }
        let allowed: Vec<bool> = (0..t).map(|i| is_context(enc, i)).collect();
        // HF keeps [CLS] (position 0) in the softmax: it carries the null score.
        let in_softmax: Vec<bool> = (0..t).map(|i| i == 0 || allowed[i]).collect();
        let mut ps = masked_softmax(w.start_logits, &in_softmax);
        let mut pe = masked_softmax(w.end_logits, &in_softmax);
        min_null = min_null.min(ps[0] * pe[0]);
        ps[0] = 0.0;
        pe[0] = 0.0;
        // Top-k spans of this window: s ≤ e < s + max_answer_len, both context.
        let mut win: Vec<(f64, usize, usize)> = Vec::new();
        for s in (0..t).filter(|&s| allowed[s]) {
            for e in (s..t.min(s.saturating_add(opts.max_answer_len))).filter(|&e| allowed[e]) {
                win.push((ps[s] * pe[e], s, e));
            }
        }
        win.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        win.truncate(opts.top_k);
        for (score, mut s, mut e) in win {
            // Widen to whole words.
            while s > 0 && continues_word(enc.ids[s]) && allowed[s - 1] {
                s -= 1;
            }
            while e + 1 < t && allowed[e + 1] && continues_word(enc.ids[e + 1]) {
                e += 1;
            }
            cands.push((score, enc.offsets[s].0, enc.offsets[e].1));
        }
    }
    cands.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut seen = std::collections::HashSet::new();
    cands.retain(|&(_, s, e)| seen.insert((s, e)));
    let mut out: Vec<Answer> = cands
        .into_iter()
        .filter_map(|(score, bs, be)| {
            let text = context.get(bs..be)?;
            Some(Answer {
                score: score as f32,
                start: context[..bs].chars().count(),
                end: context[..be].chars().count(),
                answer: text.to_string(),
                byte_start: bs,
                byte_end: be,
            })
        })
        .collect();
    if opts.handle_impossible_answer && min_null.is_finite() {
        out.push(Answer {
            score: min_null as f32,
            start: 0,
            end: 0,
            answer: String::new(),
            byte_start: 0,
            byte_end: 0,
        });
        out.sort_by(|a, b| b.score.total_cmp(&a.score));
    }
    out.truncate(opts.top_k);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[CLS] q [SEP] the cat ##s sat [SEP]` over context "the cats sat".
    fn window() -> Encoding {
        Encoding {
            ids: vec![101, 7, 102, 10, 11, 12, 13, 102],
            type_ids: vec![0, 0, 0, 1, 1, 1, 1, 1],
            offsets: vec![
                (0, 0),
                (0, 1),
                (0, 0),
                (0, 3),
                (4, 7),
                (7, 8),
                (9, 12),
                (0, 0),
            ],
            special_tokens_mask: vec![1, 0, 1, 0, 0, 0, 0, 1],
            attention_mask: vec![1; 8],
        }
    }

    fn cont(id: u32) -> bool {
        id == 12
    }

    #[test]
    fn picks_best_span_and_widens_to_words() {
        let enc = window();
        // Best start at "##s" (index 5), best end at "sat" (index 6).
        let start = [9.0, 9.0, 0.0, 0.0, 1.0, 3.0, 0.0, 9.0];
        let end = [9.0, 0.0, 0.0, 0.0, 0.0, 0.0, 3.0, 9.0];
        let w = QaWindow {
            encoding: &enc,
            start_logits: &start,
            end_logits: &end,
        };
        let a = best_answers(&[w], "the cats sat", &cont, QaOptions::default());
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].answer, "cats sat");
        assert_eq!((a[0].start, a[0].end), (4, 12));
        // Score is p_start(5)·p_end(6), softmaxed over [CLS] and the context
        // tokens (question and [SEP]s excluded).
        let ps = 3f64.exp() / (9f64.exp() + 1.0 + 1.0 + 1f64.exp() + 3f64.exp());
        let pe = 3f64.exp() / (9f64.exp() + 3.0 + 3f64.exp());
        assert!((a[0].score as f64 - ps * pe).abs() < 1e-6);
    }

    #[test]
    fn respects_max_answer_len_and_top_k_over_windows() {
        let enc = window();
        let start = [0.0, 0.0, 0.0, 5.0, 0.0, 0.0, 0.0, 0.0];
        let end = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 5.0, 0.0];
        let w = QaWindow {
            encoding: &enc,
            start_logits: &start,
            end_logits: &end,
        };
        let opts = QaOptions {
            max_answer_len: 2,
            top_k: 3,
            ..Default::default()
        };
        let a = best_answers(&[w, w], "the cats sat", &cont, opts);
        // (3,6) is too long; duplicates from the second window are merged.
        assert!(a.iter().all(|x| x.answer != "the cats sat"));
        assert_eq!(a.len(), 3);
        let spans: std::collections::HashSet<_> = a.iter().map(|x| (x.start, x.end)).collect();
        assert_eq!(spans.len(), 3);
        assert!(a.windows(2).all(|p| p[0].score >= p[1].score));
    }

    #[test]
    fn impossible_answer() {
        let enc = window();
        let start = [20.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let end = start;
        let w = QaWindow {
            encoding: &enc,
            start_logits: &start,
            end_logits: &end,
        };
        let opts = QaOptions {
            handle_impossible_answer: true,
            ..Default::default()
        };
        let a = best_answers(&[w], "the cats sat", &cont, opts);
        // [CLS] takes nearly all the mass: the empty answer wins.
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].answer, "");
        assert!(a[0].score > 0.99);
        assert!(best_answers(&[], "x", &cont, opts).is_empty());
    }

    #[test]
    fn non_ascii_context_reports_char_indices() {
        let ctx = "é cat";
        let enc = Encoding {
            ids: vec![101, 7, 102, 10, 11, 102],
            type_ids: vec![0, 0, 0, 1, 1, 1],
            offsets: vec![(0, 0), (0, 1), (0, 0), (0, 2), (3, 6), (0, 0)],
            special_tokens_mask: vec![1, 0, 1, 0, 0, 1],
            attention_mask: vec![1; 6],
        };
        let s = [0.0, 0.0, 0.0, 0.0, 5.0, 0.0];
        let w = QaWindow {
            encoding: &enc,
            start_logits: &s,
            end_logits: &s,
        };
        let a = best_answers(&[w], ctx, &|_| false, QaOptions::default());
        assert_eq!((a[0].answer.as_str(), a[0].start, a[0].end), ("cat", 2, 5));
    }
}
