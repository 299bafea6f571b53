use super::*;

/// Tokens of every length from 2 to 20 bytes (both sides of [`SHORT`]),
/// plus pairs that agree on their first 12 or 16 bytes: each is found
/// whole, under its own id, and a non-token prefix or extension is not.
#[test]
fn whole_lookup_across_key_lengths() {
    let letters = b"abcdefghijklmnopqrst";
    let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    let mut merges = Vec::new();
    let mut chain = |tokens: &mut Vec<Vec<u8>>, base: u32, prefix: &[u8], tail: &[u8]| {
        let mut left = base;
        let mut spelled = prefix.to_vec();
        for &b in tail {
            spelled.push(b);
            tokens.push(spelled.clone());
            let id = tokens.len() as u32 - 1;
            merges.push((left, b as u32, id));
            left = id;
        }
    };
    chain(&mut tokens, b'a' as u32, b"a", &letters[1..]);
    // Same first 12 (then 16) bytes as the chain's tokens, then `X`.
    let id12 = 256 + 10; // "abcdefghijkl"
    chain(&mut tokens, id12, &letters[..12], b"XYZ");
    let id16 = 256 + 14; // "abcdefghijklmnop"
    chain(&mut tokens, id16, &letters[..16], b"XY");
    let refs: Vec<&[u8]> = tokens.iter().map(Vec::as_slice).collect();
    let mut index = TokenIndex::with_capacity(0);
    for (id, t) in refs.iter().enumerate() {
        index.insert(t, id as u32).unwrap();
    }
    let bytes = tokens.concat();
    let starts: Vec<u32> = std::iter::once(0)
        .chain(tokens.iter().scan(0, |end, t| {
            *end += t.len() as u32;
            Some(*end)
        }))
        .collect();
    let pairs: Vec<(u32, u32)> = merges.iter().map(|&(l, r, _)| (l, r)).collect();
    let merged: Vec<u32> = merges.iter().map(|&(_, _, m)| m).collect();
    let model = BpeModel::new(bytes, starts, index, &pairs, &merged, None);
    for (id, t) in tokens.iter().enumerate().skip(256) {
        assert_eq!(
            model.lookup_whole(&Piece::new(t)),
            Some(id as u32),
            "{:?}",
            t
        );
    }
    let misses = [
        &b"abcdefghijkQ"[..],
        b"abcdefghQ",
        b"abcdefghijklQ",
        b"abcdefghijklmnopQ",
        b"ba",
    ];
    for miss in misses {
        assert_eq!(model.lookup_whole(&Piece::new(miss)), None, "{:?}", miss);
    }
}

/// A two-slot map: every miss probes the one entry, so each byte and
/// the length of the key must be compared.
#[test]
fn short_map_compares_whole_keys() {
    let key = b"abcdefghijkl";
    let mut map = ShortMap::with_bits(1);
    assert_eq!(map.insert(key, 7), None);
    assert_eq!(map.slots.len(), 2, "one key fills half of two slots");
    let get = |k: &[u8]| map.get(&Piece::new(k));
    assert_eq!(get(key), Some(7));
    for i in 0..key.len() {
        for b in [b'Q', 0] {
            let mut other = *key;
            other[i] = b;
            assert_eq!(get(&other), None, "{other:?}");
        }
    }
    for len in 2..key.len() {
        assert_eq!(get(&key[..len]), None, "{len}");
    }
    assert_eq!(get(b"abcdefghijklm"), None, "longer than SHORT");
}

/// A piece's key read in place (16 bytes loaded, then masked) is the one
/// copied from its bytes, at every length and wherever the text ends.
#[test]
fn piece_keys_in_place_equal_copied_ones() {
    let text: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37) | 1).collect();
    for start in 0..text.len() {
        for end in start + 1..=text.len() {
            let at = Piece::at(&text, start, end);
            let new = Piece::new(&text[start..end]);
            assert_eq!((at.lo, at.hi), (new.lo, new.hi), "{start}..{end}");
            assert_eq!(at.bytes, new.bytes);
        }
    }
}
