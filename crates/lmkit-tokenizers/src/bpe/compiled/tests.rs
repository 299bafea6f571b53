use super::*;

/// Bytes, `ab`, `abc`, ` a`, then `<|endoftext|>`.
fn small() -> BpeTokenizer {
    let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    tokens.extend([b"ab".to_vec(), b"abc".to_vec(), b" a".to_vec()]);
    let merges = [
        (b'a' as u32, b'b' as u32),
        (256, b'c' as u32),
        (b' ' as u32, b'a' as u32),
    ];
    BpeTokenizer::from_parts(&tokens, &merges, &[super::super::ENDOFTEXT]).unwrap()
}

/// `data` with its checksum made right again after an edit.
fn resealed(mut data: Vec<u8>) -> Vec<u8> {
    super::reseal(&mut data);
    data
}

fn error_of(data: &[u8]) -> String {
    match from_bytes(Path::new("t.lmbpe"), data) {
        Ok(_) => panic!("loaded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn round_trip_keeps_everything() {
    let t = small();
    let data = to_bytes(&t, 42);
    let (tables, key) = from_bytes(Path::new("t"), &data).unwrap();
    assert_eq!(key, 42);
    let c = BpeTokenizer::assemble(tables, None);
    let text = b"abc ab a<|endoftext|>\xff abcabc";
    for special in [false, true] {
        assert_eq!(c.encode(text, special), t.encode(text, special));
    }
    assert_eq!(c.merges(), t.merges());
    assert_eq!(c.vocab_size(), t.vocab_size());
    for id in 0..t.vocab_size() as u32 {
        assert_eq!(c.id_to_token(id), t.id_to_token(id));
        assert_eq!(c.token_bytes(id), t.token_bytes(id));
    }
    assert_eq!(c.token_to_id("<|endoftext|>"), Some(259));
    assert_eq!(c.token_to_id("Ġa"), Some(258));
    assert_eq!(
        to_bytes(&c, 42),
        data,
        "compiling again gives the same file"
    );
}

/// Offsets of the fields of `small()`'s compiled form.
struct At {
    kinds: usize,
    starts: usize,
    bytes: usize,
    merges: usize,
    table: usize,
    specials: usize,
}

fn at(t: &BpeTokenizer) -> At {
    let size = t.vocab_size();
    let kinds = HEADER;
    let starts = kinds + size;
    let bytes = starts + 4 * (size + 1);
    let merges = bytes + t.model.tables().0.len();
    let table = merges + 12 * t.merges().len();
    let specials = table + t.model.index.short_table().1.len();
    At {
        kinds,
        starts,
        bytes,
        merges,
        table,
        specials,
    }
}

#[test]
fn every_damage_is_an_error() {
    let t = small();
    let good = to_bytes(&t, 0);
    for n in 0..good.len() {
        assert!(
            from_bytes(Path::new("t"), &good[..n]).is_err(),
            "cut at {n}"
        );
    }
    for i in 0..good.len() {
        let mut bad = good.clone();
        bad[i] ^= 0x10;
        assert!(
            from_bytes(Path::new("t"), &bad).is_err(),
            "byte {i} flipped"
        );
    }
    let a = at(&t);
    let put = |edits: &[(usize, &[u8])]| {
        let mut d = good.clone();
        for &(i, b) in edits {
            d[i..i + b.len()].copy_from_slice(b);
        }
        error_of(&resealed(d))
    };
    let u32le = |v: u32| v.to_le_bytes();
    // Slot offsets in the table, the first full and the first empty one.
    let slots: Vec<usize> = (a.table..a.specials).step_by(16).collect();
    let full = |i: &&usize| good[**i + 12..**i + 16] != [0; 4];
    let first_full = *slots.iter().find(full).unwrap();
    let first_empty = *slots.iter().find(|i| !full(i)).unwrap();
    let cases: Vec<(String, &str)> = vec![
        (put(&[(0, b"lmkitXXX")]), "not a compiled"),
        (put(&[(8, &u32le(2))]), "format 2"),
        (put(&[(12, &u32le(1 << 22))]), "more than the"),
        (put(&[(36, &u32le(1))]), "header words"),
        (put(&[(16, &u32le(1000))]), "the header describes"),
        (put(&[(a.kinds + 5, &[7])]), "unknown kind 7"),
        (put(&[(a.starts, &u32le(1))]), "do not span"),
        // Byte 0x01's token given byte 0x00's byte: a repeat, and 0x01 has none.
        (put(&[(a.bytes + 1, &[0])]), "are the same token"),
        // `ab` spelled `ba`: the table's key no longer its token's.
        (
            put(&[(a.bytes + 256, b"ba")]),
            "token 256 is not in the token table under its id",
        ),
        // Merge 0 gives `abc`.
        (
            put(&[(a.merges + 8, &u32le(257))]),
            "merge 0: token 257 is not tokens 97 and 98 joined",
        ),
        (
            put(&[(first_full + 15, &[0])]),
            "in the token table under its id",
        ),
        // The slot's id changed (its length kept): the table and the
        // tokens disagree.
        (
            put(&[(first_full + 12, &[255, 0, 0])]),
            "in the token table under its id",
        ),
        (
            put(&[(32, &u32le(0))]),
            "header words 0, 0 are out of range",
        ),
        (
            put(&[(first_empty, &[1])]),
            "of the token table holds a key",
        ),
        // Moved to an empty slot: not where a lookup finds it.
        (
            put(&[
                (first_full, &[0; 16]),
                (first_empty, &good[first_full..first_full + 16]),
            ]),
            "in the token table under its id",
        ),
        // Copied to an empty slot: one slot too many.
        (
            put(&[(first_empty, &good[first_full..first_full + 16])]),
            "the token table holds 4 tokens for 3 short tokens",
        ),
        (
            put(&[(first_full, &[0; 16])]),
            "in the token table under its id",
        ),
        (put(&[(a.merges, &u32le(259))]), "not an ordinary token"),
        (
            put(&[(a.merges + 8, &u32le(9999))]),
            "not an ordinary token",
        ),
        (put(&[(a.specials, &u32le(258))]), "is not marked special"),
        (
            put(&[(a.specials + 4, &u32le(12))]),
            "do not fill their bytes",
        ),
        (put(&[(a.specials + 4, &u32le(99))]), "overrun"),
        (
            put(&[(a.kinds + 258, &[2])]),
            "not an ordinary token but has bytes",
        ),
        (put(&[(a.specials + 8, b"\xff")]), "not UTF-8"),
    ];
    for (got, want) in cases {
        assert!(got.contains(want), "{got:?} lacks {want:?}");
        assert!(got.starts_with("t.lmbpe:0: "), "{got}");
    }
}

/// A special token with no text (kept by id, never matched in text).
#[test]
fn empty_special_token_round_trips() {
    let tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    let t = BpeTokenizer::from_parts(&tokens, &[], &["", "<|x|>"]).unwrap();
    let (tables, _) = from_bytes(Path::new("t"), &to_bytes(&t, 0)).unwrap();
    let c = BpeTokenizer::assemble(tables, None);
    assert_eq!(c.id_to_token(256), Some(""));
    assert_eq!(c.id_to_token(257), Some("<|x|>"));
    assert_eq!(c.encode_ids(b"a<|x|>", true), t.encode_ids(b"a<|x|>", true));
    assert_eq!(to_bytes(&c, 0), to_bytes(&t, 0));
}

#[test]
fn special_text_spelled_as_ordinary_token_is_refused() {
    let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    tokens.push(b"ab".to_vec());
    let t = BpeTokenizer::from_parts(&tokens, &[(97, 98)], &["xy"]).unwrap();
    // Loading from text refuses it (the token would be there twice).
    let mut data = to_bytes(&t, 0);
    let n = data.len();
    assert_eq!(&data[n - 10..n - 8], b"xy");
    data[n - 10..n - 8].copy_from_slice(b"ab");
    let e = error_of(&resealed(data));
    assert!(e.contains("also spelled as an ordinary token"), "{e}");
}

#[test]
fn cache_finds_only_its_own_sound_entry() {
    let dir = std::env::temp_dir().join(format!("lmkit-cache-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let t = small();
    assert!(load_in(&dir, 7).is_none(), "empty cache");
    store_in(&dir, 7, &t).unwrap();
    let c = load_in(&dir, 7).expect("stored");
    assert_eq!(c.encode(b"abc a", false), t.encode(b"abc a", false));
    assert!(load_in(&dir, 8).is_none(), "another key");
    // An entry under the wrong name (its recorded key differs) is not used.
    std::fs::copy(entry(&dir, 7), entry(&dir, 9)).unwrap();
    assert!(load_in(&dir, 9).is_none(), "recorded key differs");
    // A damaged entry is passed over; storing again mends it.
    let path = entry(&dir, 7);
    let mut data = std::fs::read(&path).unwrap();
    data[HEADER + 3] ^= 1;
    std::fs::write(&path, &data).unwrap();
    assert!(load_in(&dir, 7).is_none(), "damaged");
    store_in(&dir, 7, &t).unwrap();
    assert!(load_in(&dir, 7).is_some(), "mended");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(left.len(), 2, "no temporary files left: {left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn digest_sees_every_word_and_length() {
    let base = vec![0u8; 100];
    let h = digest(&[&base]);
    for i in 0..100 {
        let mut d = base.clone();
        d[i] = 1;
        let g = digest(&[&d]);
        assert_ne!(g as u64, h as u64, "byte {i}, low half");
        assert_ne!(g >> 64, h >> 64, "byte {i}, high half");
    }
    assert_ne!(digest(&[&base[..99]]), h, "length");
    assert_ne!(digest(&[&base[..50], &base[50..]]), h, "split");
}
