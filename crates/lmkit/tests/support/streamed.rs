//! The streamed backward (what a data-parallel step all-reduces while it
//! runs), shared by the GPT-2 and BERT gradient tests.

use lmkit::models::Trainable;

/// `m`'s streamed backward on `batch` hands out the heads' part (with the
/// final LayerNorm), each of its `layers`, then the embeddings' part, from
/// the end of the buffer down, and computes `want`, the plain backward's
/// gradients, bit for bit.
pub fn check_streamed<M: Trainable>(
    what: &str,
    mut m: M,
    batch: &M::Batch,
    layers: usize,
    want: &[f32],
) {
    let (base, n) = (m.grads().as_ptr() as usize, m.grads().len());
    let mut pieces = Vec::new();
    m.forward_backward_streamed(batch, 1.0, None, &mut |p| {
        pieces.push(((p.as_ptr() as usize - base) / 4, p.len()))
    })
    .unwrap();
    assert_eq!(pieces.len(), layers + 2, "{what}: pieces {pieces:?}");
    let mut end = n;
    for &(at, len) in &pieces {
        assert_eq!(
            at + len,
            end,
            "{what}: pieces {pieces:?} are not contiguous"
        );
        end = at;
    }
    assert_eq!(end, 0, "{what}: pieces cover the buffer");
    assert!(m.grads() == want, "{what}: streamed gradients differ");
}
