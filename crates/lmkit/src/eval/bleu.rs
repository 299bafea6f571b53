//! Corpus BLEU (Papineni et al. 2002) exactly as sacreBLEU 2.x computes it
//! with its defaults: `BLEU()` = 13a tokenization, case kept, n-grams of
//! order 1..=4, brevity penalty `exp(1 - r/c)` when `c < r`, `exp`
//! smoothing (mteval-v13a's: the k-th order with no match gets precision
//! `100 / (2^k · total)`), no effective order.
//!
//! Per segment: the hypothesis and its references are right-stripped and
//! tokenized; n-gram matches are clipped by the maximum count of that
//! n-gram over the references; the reference length is the one closest to
//! the hypothesis length (the shorter on a tie). Counts, totals and lengths
//! are summed over the corpus before the score is taken.

use std::collections::HashMap;

/// n-gram orders counted.
pub const MAX_ORDER: usize = 4;

/// Python's `str.isspace()`: Rust's whitespace plus the four ASCII
/// separators U+001C..U+001F, which `str.split()` also splits on.
fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `' '.join(s.split())` of Python.
fn py_split_join(s: &str) -> String {
    s.split(is_py_space)
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Applies a two-character pattern `(a)(b)` the way Python's `re.sub`
/// does: leftmost, non-overlapping matches scanned left to right.
fn sub2(
    chars: &[char],
    a: impl Fn(char) -> bool,
    b: impl Fn(char) -> bool,
    repl: impl Fn(char, char, &mut Vec<char>),
) -> Vec<char> {
    let mut out = Vec::with_capacity(chars.len() + chars.len() / 4);
    let mut i = 0;
    while i < chars.len() {
        if i + 1 < chars.len() && a(chars[i]) && b(chars[i + 1]) {
            repl(chars[i], chars[i + 1], &mut out);
            i += 2;
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// sacreBLEU's `13a` tokenizer (mteval-v13a): entities unescaped, symbols
/// split off, `.` and `,` split unless between digits, `-` split after a
/// digit, whitespace collapsed.
pub fn tokenize_13a(line: &str) -> String {
    let mut line = line
        .replace("<skipped>", "")
        .replace("-\n", "")
        .replace('\n', " ");
    if line.contains('&') {
        line = line
            .replace("&quot;", "\"")
            .replace("&amp;", "&")
            .replace("&lt;", "<")
            .replace("&gt;", ">");
    }
    let line = format!(" {line} ");
    // ([\{-\~\[-\` -\&\(-\+\:-\@\/]) -> ' \1 '
    let symbol =
        |c: char| matches!(c, '{'..='~' | '['..='`' | ' '..='&' | '('..='+' | ':'..='@' | '/');
    let mut chars: Vec<char> = Vec::with_capacity(line.len() * 2);
    for c in line.chars() {
        if symbol(c) {
            chars.extend([' ', c, ' ']);
        } else {
            chars.push(c);
        }
    }
    let digit = |c: char| c.is_ascii_digit();
    let dot_comma = |c: char| c == '.' || c == ',';
    // ([^0-9])([\.,]) -> '\1 \2 '
    let chars = sub2(
        &chars,
        |c| !digit(c),
        dot_comma,
        |x, y, o| o.extend([x, ' ', y, ' ']),
    );
    // ([\.,])([^0-9]) -> ' \1 \2'
    let chars = sub2(
        &chars,
        dot_comma,
        |c| !digit(c),
        |x, y, o| o.extend([' ', x, ' ', y]),
    );
    // ([0-9])(-) -> '\1 \2 '
    let chars = sub2(
        &chars,
        digit,
        |c| c == '-',
        |x, y, o| o.extend([x, ' ', y, ' ']),
    );
    py_split_join(&chars.into_iter().collect::<String>())
}

/// What sacreBLEU does to a segment before counting: `rstrip`, then 13a.
fn preprocess(s: &str) -> String {
    tokenize_13a(s.trim_end_matches(is_py_space))
}

/// Counts of every n-gram of order 1..=MAX_ORDER, and the token count.
fn ngrams(tokens: &[&str]) -> HashMap<Vec<String>, usize> {
    let mut m = HashMap::new();
    for n in 1..=MAX_ORDER {
        for w in tokens.windows(n) {
            *m.entry(w.iter().map(|s| s.to_string()).collect())
                .or_default() += 1;
        }
    }
    m
}

/// Sufficient statistics of BLEU: summed over segments, then scored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct BleuStats {
    /// Tokens in the hypotheses.
    pub sys_len: usize,
    /// Closest reference length per segment, summed.
    pub ref_len: usize,
    /// Clipped n-gram matches per order (1..=4).
    pub counts: [usize; MAX_ORDER],
    /// Hypothesis n-grams per order.
    pub totals: [usize; MAX_ORDER],
}

impl std::ops::AddAssign for BleuStats {
    fn add_assign(&mut self, o: BleuStats) {
        self.sys_len += o.sys_len;
        self.ref_len += o.ref_len;
        for n in 0..MAX_ORDER {
            self.counts[n] += o.counts[n];
            self.totals[n] += o.totals[n];
        }
    }
}

/// The statistics of one hypothesis against its references (at least one
/// reference; none counts as an empty reference).
pub fn segment_stats(hypothesis: &str, references: &[&str]) -> BleuStats {
    let mut ref_ngrams: HashMap<Vec<String>, usize> = HashMap::new();
    let mut ref_lens = Vec::with_capacity(references.len().max(1));
    for r in references {
        let toks = preprocess(r);
        let toks: Vec<&str> = toks.split(' ').filter(|t| !t.is_empty()).collect();
        ref_lens.push(toks.len());
        for (g, c) in ngrams(&toks) {
            let e = ref_ngrams.entry(g).or_default();
            *e = (*e).max(c);
        }
    }
    if ref_lens.is_empty() {
        ref_lens.push(0);
    }
    let hyp = preprocess(hypothesis);
    let hyp: Vec<&str> = hyp.split(' ').filter(|t| !t.is_empty()).collect();
    let h = hyp.len();
    // Closest reference length, the shorter one on a tie.
    let ref_len = ref_lens
        .iter()
        .copied()
        .min_by_key(|&r| (r.abs_diff(h), r))
        .unwrap_or(0);
    let mut s = BleuStats {
        sys_len: h,
        ref_len,
        ..BleuStats::default()
    };
    for (g, c) in ngrams(&hyp) {
        let n = g.len() - 1;
        s.totals[n] += c;
        if let Some(&rc) = ref_ngrams.get(&g) {
            s.counts[n] += c.min(rc);
        }
    }
    s
}

/// A corpus BLEU score with its parts, as sacreBLEU's `BLEUScore`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Bleu {
    /// 0..=100.
    pub score: f64,
    /// Smoothed n-gram precisions, percent.
    pub precisions: [f64; MAX_ORDER],
    /// Brevity penalty.
    pub bp: f64,
    #[serde(flatten)]
    pub stats: BleuStats,
}

/// sacreBLEU's `compute_bleu` with `smooth_method="exp"`.
pub fn bleu_from_stats(s: &BleuStats) -> Bleu {
    let (c, r) = (s.sys_len, s.ref_len);
    let mut bp = 1.0;
    if c < r {
        bp = if c > 0 {
            (1.0 - r as f64 / c as f64).exp()
        } else {
            0.0
        };
    }
    let mut precisions = [0.0; MAX_ORDER];
    let mut out = Bleu {
        score: 0.0,
        precisions,
        bp,
        stats: *s,
    };
    if s.counts.iter().all(|&x| x == 0) {
        return out;
    }
    let mut smooth = 1.0f64;
    for ((p, &count), &total) in precisions.iter_mut().zip(&s.counts).zip(&s.totals) {
        if total == 0 {
            break;
        }
        if count == 0 {
            smooth *= 2.0;
            *p = 100.0 / (smooth * total as f64);
        } else {
            *p = 100.0 * count as f64 / total as f64;
        }
    }
    // sacreBLEU's `my_log`: log(0) is floored to -9999999999.
    let my_log = |p: f64| if p == 0.0 { -9_999_999_999.0 } else { p.ln() };
    let sum = precisions.iter().fold(0.0, |a, &p| a + my_log(p));
    out.score = bp * (sum / MAX_ORDER as f64).exp();
    out.precisions = precisions;
    out
}

/// Corpus BLEU of `hypotheses[i]` against `references[i]` (one or more
/// references per segment).
pub fn corpus_bleu<H: AsRef<str>, R: AsRef<str>>(hypotheses: &[H], references: &[Vec<R>]) -> Bleu {
    let mut total = BleuStats::default();
    for (h, refs) in hypotheses.iter().zip(references) {
        let refs: Vec<&str> = refs.iter().map(AsRef::as_ref).collect();
        total += segment_stats(h.as_ref(), &refs);
    }
    bleu_from_stats(&total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_by_hand() {
        assert_eq!(tokenize_13a("Hello, world."), "Hello , world .");
        // Digits keep their separators; a dash after a digit is split.
        assert_eq!(
            tokenize_13a("3.14 and 1,000 in 2019-2020"),
            "3.14 and 1,000 in 2019 - 2020"
        );
        assert_eq!(tokenize_13a("&quot;A&amp;B&quot; (x)"), "\" A & B \" ( x )");
        assert_eq!(tokenize_13a("don't"), "don't");
    }

    #[test]
    fn perfect_and_empty() {
        let b = corpus_bleu(
            &["the cat sat on the mat"],
            &[vec!["the cat sat on the mat"]],
        );
        assert!((b.score - 100.0).abs() < 1e-12);
        let b = corpus_bleu(&[""], &[vec!["the cat"]]);
        assert_eq!(b.score, 0.0);
        assert_eq!(b.bp, 0.0);
    }
}
