//! Length bucketing: group texts of similar token length so a batch pads
//! little, and cap each batch by rows and by padded tokens.

/// Splits item indices into batches: items sorted by length (longest first,
/// ties by index), then cut greedily so a batch has at most `max_batch` rows
/// and `rows × longest ≤ max_tokens` (a single longer item still gets its own
/// batch). Every index appears exactly once; callers restore input order.
pub fn plan_batches(lens: &[usize], max_batch: usize, max_tokens: usize) -> Vec<Vec<usize>> {
    let max_batch = max_batch.max(1);
    let mut order: Vec<usize> = (0..lens.len()).collect();
    order.sort_by(|&a, &b| lens[b].cmp(&lens[a]).then(a.cmp(&b)));
    let mut batches: Vec<Vec<usize>> = Vec::new();
    let mut cur: Vec<usize> = Vec::new();
    let mut longest = 0;
    for i in order {
        let l = lens[i].max(1);
        let would = (cur.len() + 1) * longest.max(l);
        if !cur.is_empty() && (cur.len() == max_batch || would > max_tokens) {
            batches.push(std::mem::take(&mut cur));
            longest = 0;
        }
        longest = longest.max(l);
        cur.push(i);
    }
    if !cur.is_empty() {
        batches.push(cur);
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_each_index_once_within_limits() {
        let lens = [5, 100, 7, 6, 99, 1, 0, 50];
        let b = plan_batches(&lens, 3, 200);
        let mut all: Vec<usize> = b.iter().flatten().copied().collect();
        all.sort();
        assert_eq!(all, (0..lens.len()).collect::<Vec<_>>());
        for batch in &b {
            let longest = batch.iter().map(|&i| lens[i].max(1)).max().unwrap();
            assert!(batch.len() <= 3);
            assert!(batch.len() == 1 || batch.len() * longest <= 200);
        }
        // Longest first: the two ~100-token items share a batch.
        assert_eq!(b[0], vec![1, 4]);
        assert!(plan_batches(&[], 4, 10).is_empty());
    }
}
