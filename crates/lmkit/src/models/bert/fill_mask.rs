//! Fill-mask result formatting: softmax over the vocabulary at each `[MASK]`
//! and the top-k tokens, as HF's `FillMaskPipeline` reports them.
//!
//! Shape legend: V vocabulary.

/// One candidate for a masked position. Serializes with the keys of HF's
/// fill-mask pipeline: `token` (the id), `token_str`, `score`, `sequence`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Prediction {
    #[serde(rename = "token")]
    pub id: u32,
    /// The vocabulary entry (`##` kept for continuation pieces, as HF's
    /// `token_str` shows a single decoded piece).
    #[serde(rename = "token_str")]
    pub token: String,
    /// Softmax probability over the vocabulary.
    pub score: f32,
    /// The input with this token in the mask's place, decoded as HF's
    /// pipeline does: without special tokens when the text has one mask,
    /// with them (the other masks shown) when it has several.
    pub sequence: String,
}

/// Softmax of `logits[V]` (computed in f64) and the `k` most probable ids,
/// best first; ties go to the lower id.
pub fn top_k(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    if logits.is_empty() || k == 0 {
        return Vec::new();
    }
    let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    let k = k.min(logits.len());
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    let cmp = |a: &u32, b: &u32| {
        logits[*b as usize]
            .total_cmp(&logits[*a as usize])
            .then(a.cmp(b))
    };
    idx.select_nth_unstable_by(k - 1, cmp);
    idx.truncate(k);
    idx.sort_by(cmp);
    idx.into_iter()
        .map(|i| (i, ((logits[i as usize] as f64 - max).exp() / sum) as f32))
        .collect()
}

/// [`top_k`] with token strings from `id_to_token`.
pub fn predictions(
    logits: &[f32],
    k: usize,
    id_to_token: &dyn Fn(u32) -> Option<String>,
) -> Vec<Prediction> {
    top_k(logits, k)
        .into_iter()
        .map(|(id, score)| Prediction {
            id,
            token: id_to_token(id).unwrap_or_else(|| format!("[{id}]")),
            score,
            sequence: String::new(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_is_sorted_softmax() {
        let logits = [1.0, 3.0, 2.0, 3.0, -1.0];
        let t = top_k(&logits, 3);
        let z: f64 = logits.iter().map(|&x| (x as f64).exp()).sum();
        assert_eq!(t.iter().map(|p| p.0).collect::<Vec<_>>(), [1, 3, 2]);
        assert!((t[0].1 as f64 - 3f64.exp() / z).abs() < 1e-7);
        assert!((t[2].1 as f64 - 2f64.exp() / z).abs() < 1e-7);
        assert_eq!(top_k(&logits, 10).len(), 5);
        assert!(top_k(&[], 3).is_empty());
    }

    #[test]
    fn predictions_name_tokens() {
        let p = predictions(&[0.0, 5.0], 1, &|id| (id == 1).then(|| "##s".to_string()));
        assert_eq!(p[0].token, "##s");
        assert_eq!(p[0].id, 1);
    }
}
