//! Regression metrics, as HF's `run_glue` scores STS-B: Pearson's r and
//! Spearman's ρ of predictions against gold scores (`scipy.stats.pearsonr`,
//! `spearmanr`), and the mean squared error.
//!
//! Spearman's ρ is Pearson's r of the ranks, ties taking the average of the
//! ranks they span (scipy's `rankdata(method="average")`). Both are in f64,
//! centred before the products (scipy's order), and clipped to [−1, 1].
//! Where scipy gives NaN — fewer than two items, a constant vector, a
//! non-finite value — these give `None` (JSON `null`).

/// Pearson, Spearman and MSE of predictions against gold scores.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct RegressionScores {
    pub pearson: Option<f64>,
    pub spearmanr: Option<f64>,
    /// Mean of (prediction − gold)², f64.
    pub mse: f64,
    pub count: usize,
}

/// Pearson's correlation coefficient of `x` and `y` (equal lengths).
pub fn pearson(x: &[f64], y: &[f64]) -> Option<f64> {
    assert_eq!(x.len(), y.len(), "x and y differ in length");
    let n = x.len();
    if n < 2 || x.iter().chain(y).any(|v| !v.is_finite()) {
        return None;
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / n as f64;
    let (mx, my) = (mean(x), mean(y));
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (&a, &b) in x.iter().zip(y) {
        let (dx, dy) = (a - mx, b - my);
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    if sxx == 0.0 || syy == 0.0 {
        return None;
    }
    Some((sxy / (sxx.sqrt() * syy.sqrt())).clamp(-1.0, 1.0))
}

/// Ranks 1..=n of `x`, ties averaged (scipy `rankdata(method="average")`).
/// `x` must be free of NaN.
pub fn average_ranks(x: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..x.len()).collect();
    order.sort_by(|&a, &b| x[a].total_cmp(&x[b]));
    let mut ranks = vec![0.0; x.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i + 1;
        while j < order.len() && x[order[j]] == x[order[i]] {
            j += 1;
        }
        // Positions i..j (0-based) hold one value: ranks i+1..=j, mean (i+1+j)/2.
        let r = (i + 1 + j) as f64 / 2.0;
        for &k in &order[i..j] {
            ranks[k] = r;
        }
        i = j;
    }
    ranks
}

/// Spearman's rank correlation of `x` and `y` (equal lengths).
pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    assert_eq!(x.len(), y.len(), "x and y differ in length");
    if x.iter().chain(y).any(|v| !v.is_finite()) {
        return None;
    }
    pearson(&average_ranks(x), &average_ranks(y))
}

/// Pearson, Spearman and MSE of `pred` against `gold`.
pub fn regression_scores(gold: &[f32], pred: &[f32]) -> RegressionScores {
    assert_eq!(
        gold.len(),
        pred.len(),
        "gold and predictions differ in length"
    );
    let g: Vec<f64> = gold.iter().map(|&v| v as f64).collect();
    let p: Vec<f64> = pred.iter().map(|&v| v as f64).collect();
    let se: f64 = g.iter().zip(&p).map(|(a, b)| (b - a) * (b - a)).sum();
    RegressionScores {
        pearson: pearson(&p, &g),
        spearmanr: spearman(&p, &g),
        mse: se / g.len().max(1) as f64,
        count: g.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_average_ties() {
        assert_eq!(
            average_ranks(&[3.0, 1.0, 3.0, 2.0, 3.0]),
            [4.0, 1.0, 4.0, 2.0, 4.0]
        );
        assert!(average_ranks(&[]).is_empty());
    }

    #[test]
    fn undefined_cases_are_none() {
        assert_eq!(pearson(&[1.0], &[2.0]), None);
        assert_eq!(pearson(&[1.0, 1.0], &[2.0, 3.0]), None);
        assert_eq!(spearman(&[1.0, f64::NAN], &[2.0, 3.0]), None);
        assert!((pearson(&[1.0, 2.0], &[2.0, 4.0]).unwrap() - 1.0).abs() < 1e-15);
    }
}
