//! Choosing the next token from a row of logits, as Hugging Face's `generate`
//! does: repetition penalty, then (when sampling) temperature → top-k →
//! top-p, then argmax (greedy) or a draw from the softmax.
//!
//! Shape legend: V vocabulary.
//!
//! The random draws come from [`Rng`] (xoshiro256** seeded through
//! splitmix64): a few lines we own, so that a seed gives the same tokens on
//! every platform and across dependency upgrades (the `rand` crate does not
//! promise stable value streams between versions).

use crate::error::{Error, Result};

/// xoshiro256** (Blackman & Vigna), seeded with splitmix64.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// How the next token is chosen.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Argmax instead of a random draw; temperature, top-k and top-p are then unused.
    pub greedy: bool,
    /// Logits are divided by this before top-k/top-p; must be > 0.
    pub temperature: f32,
    /// Keep only the k most likely tokens (ties with the k-th are kept, as in
    /// HF); 0 disables.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches
    /// `top_p`; 1.0 disables. In (0, 1].
    pub top_p: f32,
    /// HF's repetition penalty (CTRL): the logit `l` of every token already in
    /// the context becomes `l / r` if positive, `l · r` if negative. 1.0 disables.
    pub repetition_penalty: f32,
    /// OpenAI's presence penalty: subtracted once from the logit of every
    /// token this sampler has already produced (the prompt does not count,
    /// as in vLLM). In [-2, 2]; 0 disables.
    pub presence_penalty: f32,
    /// OpenAI's frequency penalty: subtracted from a token's logit once per
    /// time this sampler has produced it. In [-2, 2]; 0 disables.
    pub frequency_penalty: f32,
}

impl Default for SamplingParams {
    /// HF's `GenerationConfig` defaults with sampling on.
    fn default() -> Self {
        SamplingParams {
            greedy: false,
            temperature: 1.0,
            top_k: 50,
            top_p: 1.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
        }
    }
}

impl SamplingParams {
    pub fn greedy() -> Self {
        SamplingParams {
            greedy: true,
            ..Self::default()
        }
    }

    /// Rejects values HF would reject (or that make no sense).
    pub fn validate(&self) -> Result<()> {
        let bad = |what: &str| Err(Error::InvalidInput(what.to_string()));
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return bad("repetition penalty must be a finite number > 0");
        }
        if !(-2.0..=2.0).contains(&self.presence_penalty) {
            return bad("presence penalty must be between -2 and 2");
        }
        if !(-2.0..=2.0).contains(&self.frequency_penalty) {
            return bad("frequency penalty must be between -2 and 2");
        }
        if !self.greedy {
            if !(self.temperature.is_finite() && self.temperature > 0.0) {
                return bad("temperature must be a finite number > 0 (use greedy decoding for temperature 0)");
            }
            if !(self.top_p > 0.0 && self.top_p <= 1.0) {
                return bad("top-p must be in (0, 1]");
            }
        }
        Ok(())
    }
}

/// Applies the repetition penalty to `logits[V]` for every distinct id in
/// `context` (prompt and generated tokens), as HF's
/// `RepetitionPenaltyLogitsProcessor` (each id once, however often it occurs).
pub fn apply_repetition_penalty(
    logits: &mut [f32],
    context: &[u32],
    penalty: f32,
    seen: &mut Vec<u32>,
) {
    if penalty == 1.0 {
        return;
    }
    seen.clear();
    seen.extend_from_slice(context);
    seen.sort_unstable();
    seen.dedup();
    for &id in seen.iter() {
        if let Some(l) = logits.get_mut(id as usize) {
            *l = if *l < 0.0 { *l * penalty } else { *l / penalty };
        }
    }
}

/// A token's log-probability and the most likely alternatives at its
/// position (OpenAI's `logprobs`).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub logprob: f32,
    /// `(id, logprob)` of the `k` most likely tokens, most likely first (ties
    /// by increasing id).
    pub top: Vec<(u32, f32)>,
}

/// `log_softmax(logits)[id]` and the `k` largest entries of `log_softmax(logits[V])`.
pub fn token_logprob(logits: &[f32], id: u32, k: usize) -> TokenLogprob {
    let max = logits
        .iter()
        .filter(|l| !l.is_nan())
        .fold(f32::NEG_INFINITY, |m, &l| m.max(l));
    let sum: f64 = logits
        .iter()
        .filter(|l| !l.is_nan())
        .map(|&l| ((l - max) as f64).exp())
        .sum();
    let lse = max + sum.ln() as f32;
    let lp = |l: f32| l - lse;
    let mut top: Vec<(u32, f32)> = Vec::with_capacity(k);
    if k > 0 {
        let mut all: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .filter(|(_, l)| !l.is_nan())
            .map(|(i, &l)| (i as u32, l))
            .collect();
        let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if k < all.len() {
            all.select_nth_unstable_by(k - 1, order);
            all.truncate(k);
        }
        all.sort_unstable_by(order);
        top.extend(all.into_iter().map(|(i, l)| (i, lp(l))));
    }
    TokenLogprob {
        logprob: logits
            .get(id as usize)
            .map_or(f32::NEG_INFINITY, |&l| lp(l)),
        top,
    }
}

/// Index of the largest logit; the first one on ties (as `torch.argmax`).
/// NaN logits are never chosen.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    let mut best_val = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > best_val {
            best = i;
            best_val = v;
        }
    }
    best as u32
}

/// Picks tokens from logits rows; keeps its scratch and RNG between calls.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
    seen: Vec<u32>,
    /// (logit, id) of the candidates that survive top-k/top-p.
    cand: Vec<(f32, u32)>,
    probs: Vec<f64>,
    /// How often this sampler produced each id (presence/frequency penalties).
    produced: std::collections::HashMap<u32, u32>,
}

impl Sampler {
    pub fn new(params: SamplingParams, seed: u64) -> Result<Self> {
        params.validate()?;
        Ok(Sampler {
            params,
            rng: Rng::new(seed),
            seen: Vec::new(),
            cand: Vec::new(),
            probs: Vec::new(),
            produced: std::collections::HashMap::new(),
        })
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Chooses the next token from `logits[V]` (modified in place) given the
    /// ids so far (`context`, prompt included). Penalties come first (HF's
    /// repetition penalty, then OpenAI's presence and frequency penalties,
    /// as vLLM orders them), then temperature, top-k and top-p.
    pub fn next_token(&mut self, logits: &mut [f32], context: &[u32]) -> u32 {
        apply_repetition_penalty(
            logits,
            context,
            self.params.repetition_penalty,
            &mut self.seen,
        );
        let (pp, fp) = (self.params.presence_penalty, self.params.frequency_penalty);
        if pp != 0.0 || fp != 0.0 {
            for (&id, &n) in &self.produced {
                if let Some(l) = logits.get_mut(id as usize) {
                    *l -= pp + fp * n as f32;
                }
            }
        }
        let id = if self.params.greedy {
            argmax(logits)
        } else {
            self.filter(logits);
            self.draw()
        };
        *self.produced.entry(id).or_insert(0) += 1;
        id
    }

    /// Temperature, top-k and top-p: leaves the surviving `(logit, id)` in
    /// `self.cand`, sorted by decreasing logit (ties by increasing id).
    fn filter(&mut self, logits: &[f32]) {
        let t = self.params.temperature;
        // Shifted by the largest logit before dividing (softmax, top-k and
        // top-p do not change): a tiny temperature then tends to argmax
        // instead of overflowing every logit to +inf (1e-45 picked the
        // lowest id among the positive logits).
        let max = logits
            .iter()
            .filter(|l| !l.is_nan())
            .fold(f32::NEG_INFINITY, |m, &l| m.max(l));
        let shift = if max.is_finite() { max } else { 0.0 };
        self.cand.clear();
        self.cand.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, l)| !l.is_nan())
                .map(|(i, &l)| ((l - shift) / t, i as u32)),
        );
        let order = |a: &(f32, u32), b: &(f32, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        let k = self.params.top_k;
        if k > 0 && k < self.cand.len() {
            // HF keeps every logit >= the k-th largest, so ties may keep more than k.
            self.cand.select_nth_unstable_by(k - 1, order);
            let kth = self.cand[k - 1].0;
            self.cand.retain(|c| c.0 >= kth);
        }
        self.cand.sort_unstable_by(order);
        // HF drops -inf logits implicitly (probability 0); do it explicitly.
        while self.cand.len() > 1 && self.cand.last().is_some_and(|c| c.0 == f32::NEG_INFINITY) {
            self.cand.pop();
        }
        let p = self.params.top_p;
        if p < 1.0 && self.cand.len() > 1 {
            // HF: sort ascending, cumulative softmax, drop tokens whose
            // cumulative probability (themselves and all less likely ones) is
            // <= 1 - top_p; always keep the most likely token.
            let max = self.cand[0].0;
            let sum: f32 = self.cand.iter().map(|c| (c.0 - max).exp()).sum();
            let mut cum = 0f32;
            let mut keep = self.cand.len();
            for (idx, c) in self.cand.iter().enumerate().rev() {
                cum += (c.0 - max).exp() / sum;
                if cum > 1.0 - p || idx == 0 {
                    keep = idx + 1;
                    break;
                }
            }
            self.cand.truncate(keep);
        }
    }

    /// Draws one id from the softmax over `self.cand`.
    fn draw(&mut self) -> u32 {
        let Some(&(max, first)) = self.cand.first() else {
            return 0; // every logit was NaN: nothing to choose from
        };
        if max.is_infinite() {
            return first;
        }
        self.probs.clear();
        self.probs
            .extend(self.cand.iter().map(|c| ((c.0 - max) as f64).exp()));
        let total: f64 = self.probs.iter().sum();
        let mut u = self.rng.next_f64() * total;
        for (c, &pr) in self.cand.iter().zip(&self.probs) {
            if u < pr {
                return c.1;
            }
            u -= pr;
        }
        // Rounding left u just above the last bucket: the last candidate.
        self.cand.last().map_or(first, |c| c.1)
    }

    /// The candidates left after the last call's filtering, most likely first
    /// (exposed for tests).
    pub fn last_candidates(&self) -> Vec<u32> {
        self.cand.iter().map(|c| c.1).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(params: SamplingParams) -> Sampler {
        Sampler::new(params, 0).expect("valid params")
    }

    #[test]
    fn rng_is_reproducible_and_uniform() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        let xs: Vec<u64> = (0..100).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..100).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(Rng::new(43).next_u64(), xs[0]);
        let mut r = Rng::new(7);
        let n = 100_000;
        let mean = (0..n).map(|_| r.next_f64()).sum::<f64>() / n as f64;
        assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
    }

    #[test]
    fn repetition_penalty_matches_hf_semantics() {
        let mut logits = vec![2.0, -2.0, 1.0, 0.5];
        let mut seen = Vec::new();
        // id 0 appears twice but is penalised once; id 9 is out of range and ignored.
        apply_repetition_penalty(&mut logits, &[0, 1, 0, 9], 2.0, &mut seen);
        assert_eq!(logits, vec![1.0, -4.0, 1.0, 0.5]);
    }

    #[test]
    fn greedy_takes_first_maximum_after_penalty() {
        let mut s = sampler(SamplingParams {
            repetition_penalty: 4.0,
            ..SamplingParams::greedy()
        });
        // Token 1 wins unpenalised; with it in the context, token 2 (tied with 3) wins.
        assert_eq!(s.next_token(&mut [0.0, 3.0, 1.0, 1.0], &[]), 1);
        assert_eq!(s.next_token(&mut [0.0, 3.0, 1.0, 1.0], &[1]), 2);
    }

    #[test]
    fn presence_and_frequency_penalties_count_only_produced_tokens() {
        // vLLM / OpenAI: logit -= frequency · count + presence · (count > 0),
        // counting the tokens this sampler produced, not the prompt's.
        let row = [3.0, 2.5, 2.0];
        let mut f = sampler(SamplingParams {
            frequency_penalty: 0.3,
            ..SamplingParams::greedy()
        });
        let picks: Vec<u32> = (0..3)
            .map(|_| f.next_token(&mut row.clone(), &[0, 0, 0]))
            .collect();
        // 3.0, then 3.0 - 0.3 = 2.7 > 2.5, then 3.0 - 0.6 = 2.4 < 2.5.
        assert_eq!(picks, vec![0, 0, 1]);
        let mut p = sampler(SamplingParams {
            presence_penalty: 1.0,
            ..SamplingParams::greedy()
        });
        let row = [3.0, 2.5, 2.2];
        let picks: Vec<u32> = (0..3)
            .map(|_| p.next_token(&mut row.clone(), &[]))
            .collect();
        // 0 (3.0), then 1 (2.5 > 2.2 > 2.0), then 2 (2.2 > 2.0 > 1.5).
        assert_eq!(picks, vec![0, 1, 2]);
        let bad = SamplingParams {
            presence_penalty: 2.5,
            ..SamplingParams::greedy()
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn token_logprob_is_log_softmax_with_the_top_alternatives() {
        let logits = [1.0f32, 3.0, 2.0, 3.0];
        let lse = logits.iter().map(|&l| (l as f64).exp()).sum::<f64>().ln() as f32;
        let t = token_logprob(&logits, 2, 3);
        assert!((t.logprob - (2.0 - lse)).abs() < 1e-6);
        let ids: Vec<u32> = t.top.iter().map(|p| p.0).collect();
        assert_eq!(ids, vec![1, 3, 2]); // ties by increasing id
        assert!((t.top[0].1 - (3.0 - lse)).abs() < 1e-6);
        let probs: f32 = (0..4)
            .map(|i| token_logprob(&logits, i, 0).logprob.exp())
            .sum();
        assert!((probs - 1.0).abs() < 1e-6);
        assert!(token_logprob(&logits, 2, 0).top.is_empty());
    }

    #[test]
    fn top_k_keeps_ties_with_the_kth_value() {
        let mut s = sampler(SamplingParams {
            top_k: 2,
            ..SamplingParams::default()
        });
        s.next_token(&mut [1.0, 3.0, 2.0, 2.0, 0.0], &[]);
        assert_eq!(s.last_candidates(), vec![1, 2, 3]);
    }

    #[test]
    fn top_p_follows_hf_cumulative_rule() {
        // probs ∝ [0.5, 0.3, 0.15, 0.05]. top_p = 0.75: ascending cumulative is
        // 0.05, 0.20, 0.50, 1.0; drop those <= 0.25 → keep ids 0 and 1.
        let logits: Vec<f32> = [0.5f32, 0.3, 0.15, 0.05].iter().map(|p| p.ln()).collect();
        let mut s = sampler(SamplingParams {
            top_k: 0,
            top_p: 0.75,
            ..SamplingParams::default()
        });
        s.next_token(&mut logits.clone(), &[]);
        assert_eq!(s.last_candidates(), vec![0, 1]);
        // top_p = 0.85 (drop <= 0.15) needs the third token too.
        let mut s = sampler(SamplingParams {
            top_k: 0,
            top_p: 0.85,
            ..SamplingParams::default()
        });
        s.next_token(&mut logits.clone(), &[]);
        assert_eq!(s.last_candidates(), vec![0, 1, 2]);
        // A tiny top_p still keeps the most likely token.
        let mut s = sampler(SamplingParams {
            top_k: 0,
            top_p: 0.01,
            ..SamplingParams::default()
        });
        assert_eq!(s.next_token(&mut logits.clone(), &[]), 0);
    }

    /// A subnormal temperature overflowed every positive logit to +inf and
    /// picked the lowest such id; it now tends to argmax, as t → 0 should.
    #[test]
    fn tiny_temperature_is_argmax() {
        let logits = vec![0.5f32, 0.1, 2.0, 1.9, -3.0];
        for temperature in [1e-45f32, f32::MIN_POSITIVE, 1e-30] {
            let mut s = sampler(SamplingParams {
                top_k: 0,
                temperature,
                ..SamplingParams::default()
            });
            for _ in 0..50 {
                assert_eq!(
                    s.next_token(&mut logits.clone(), &[]),
                    2,
                    "t = {temperature}"
                );
            }
        }
    }

    #[test]
    fn temperature_sharpens_and_sampling_follows_the_distribution() {
        let logits = vec![(0.6f32).ln(), (0.3f32).ln(), (0.1f32).ln()];
        let count = |temperature: f32| {
            let mut s = sampler(SamplingParams {
                top_k: 0,
                temperature,
                ..SamplingParams::default()
            });
            let mut counts = [0usize; 3];
            for _ in 0..20_000 {
                counts[s.next_token(&mut logits.clone(), &[]) as usize] += 1;
            }
            counts.map(|c| c as f64 / 20_000.0)
        };
        let f = count(1.0);
        for (got, want) in f.iter().zip([0.6, 0.3, 0.1]) {
            assert!((got - want).abs() < 0.015, "{f:?}");
        }
        // T = 0.5 squares the probabilities: [0.36, 0.09, 0.01] / 0.46.
        let f = count(0.5);
        for (got, want) in f.iter().zip([0.36 / 0.46, 0.09 / 0.46, 0.01 / 0.46]) {
            assert!((got - want).abs() < 0.015, "{f:?}");
        }
    }

    #[test]
    fn same_seed_same_tokens() {
        let logits: Vec<f32> = (0..1000).map(|i| ((i * 37) % 101) as f32 * 0.05).collect();
        let run = |seed| {
            let mut s = Sampler::new(SamplingParams::default(), seed).expect("valid");
            (0..50)
                .map(|_| s.next_token(&mut logits.clone(), &[]))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn invalid_params_are_rejected() {
        for p in [
            SamplingParams {
                temperature: 0.0,
                ..SamplingParams::default()
            },
            SamplingParams {
                top_p: 0.0,
                ..SamplingParams::default()
            },
            SamplingParams {
                top_p: 1.5,
                ..SamplingParams::default()
            },
            SamplingParams {
                repetition_penalty: -1.0,
                ..SamplingParams::default()
            },
        ] {
            assert!(Sampler::new(p, 0).is_err());
        }
        // Temperature is unused (and so not checked) when greedy.
        assert!(Sampler::new(
            SamplingParams {
                temperature: 0.0,
                ..SamplingParams::greedy()
            },
            0
        )
        .is_ok());
    }
}
