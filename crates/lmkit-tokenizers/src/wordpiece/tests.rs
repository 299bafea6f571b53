use super::*;

fn tiny() -> WordPieceTokenizer {
    let vocab = [
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "hello", "!", "##s",
        "a", "##a",
    ];
    WordPieceTokenizer::from_vocab(
        vocab.iter().map(|s| s.to_string()).collect(),
        Default::default(),
    )
    .unwrap()
}

#[test]
fn greedy_longest_match() {
    let t = tiny();
    let e = t.encode("Unaffable hellos! xyz [SEP]", true).unwrap();
    assert_eq!(e.ids, [2, 5, 6, 7, 8, 10, 9, 1, 3, 3]);
    assert_eq!(
        e.offsets,
        [
            (0, 0),
            (0, 2),
            (2, 5),
            (5, 9),
            (10, 15),
            (15, 16),
            (16, 17),
            (18, 21),
            (22, 27),
            (0, 0)
        ]
    );
    assert_eq!(e.special_tokens_mask, [1, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    // `[UNK]` is special too, so it is skipped, as in HF.
    assert_eq!(t.decode(&e.ids, true).unwrap(), "unaffable hellos!");
    assert_eq!(
        t.decode(&e.ids, false).unwrap(),
        "[CLS] unaffable hellos! [UNK] [SEP] [SEP]"
    );
}

#[test]
fn long_word_is_unk() {
    let t = tiny();
    let e = t.encode(&"a".repeat(100), false).unwrap();
    assert_eq!(e.ids, [vec![11], vec![12; 99]].concat());
    let e = t.encode(&"a".repeat(101), false).unwrap();
    assert_eq!((e.ids, e.offsets), (vec![1], vec![(0, 101)]));
    assert!(t.decode(&[99], false).is_err());
}
