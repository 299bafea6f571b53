//! GPT-2's byte-to-character alphabet: vocab.json and merges.txt spell each
//! byte as a printable character (space is `Ġ`, newline `Ċ`, …).

/// The 256 bytes in GPT-2's alphabet order (printable ranges first); GPT-2's
/// token ids 0..=255 follow this order.
pub const BYTE_ORDER: [u8; 256] = {
    let mut order = [0u8; 256];
    let mut n = 0;
    let mut b = 0;
    while b < 256 {
        if is_printable(b as u8) {
            order[n] = b as u8;
            n += 1;
        }
        b += 1;
    }
    b = 0;
    while b < 256 {
        if !is_printable(b as u8) {
            order[n] = b as u8;
            n += 1;
        }
        b += 1;
    }
    order
};

const fn is_printable(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// Character that spells byte `b`.
pub const BYTE_TO_CHAR: [char; 256] = {
    let mut table = ['\0'; 256];
    let mut shifted = 0u32;
    let mut b = 0;
    while b < 256 {
        table[b] = if is_printable(b as u8) {
            match char::from_u32(b as u32) {
                Some(c) => c,
                None => '\0',
            }
        } else {
            let c = match char::from_u32(256 + shifted) {
                Some(c) => c,
                None => '\0',
            };
            shifted += 1;
            c
        };
        b += 1;
    }
    table
};

/// Byte spelled by each code point below 324 (the alphabet's characters
/// are U+0021..=U+0143), -1 where none.
const REVERSE: [i16; 324] = {
    let mut r = [-1i16; 324];
    let mut b = 0;
    while b < 256 {
        r[BYTE_TO_CHAR[b] as usize] = b as i16;
        b += 1;
    }
    r
};

/// Byte spelled by `c`, if `c` is in the alphabet.
#[inline]
pub fn char_to_byte(c: char) -> Option<u8> {
    match REVERSE.get(c as usize) {
        Some(&b) if b >= 0 => Some(b as u8),
        _ => None,
    }
}

/// Bytes of a token spelled in the alphabet, or `None` if a character is not in it.
pub fn token_to_bytes(token: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(token.len());
    token_to_bytes_into(token, &mut out).then_some(out)
}

/// Appends the bytes of a token spelled in the alphabet to `out`; `false`
/// (with `out` partly extended) if a character is not in it.
pub fn token_to_bytes_into(token: &str, out: &mut Vec<u8>) -> bool {
    spelled_to_bytes_into(token.as_bytes(), out)
}

/// [`token_to_bytes_into`] on the UTF-8 bytes of a spelling, which need not
/// be valid UTF-8: `true` only if they are, every character in the alphabet.
/// The alphabet's characters are ASCII or two-byte sequences (U+0080..U+0143,
/// lead bytes 0xC2..=0xC5), so decoding validates as it goes: loading
/// merges.txt needs no separate UTF-8 pass.
pub fn spelled_to_bytes_into(spelled: &[u8], out: &mut Vec<u8>) -> bool {
    out.reserve(spelled.len());
    let mut i = 0;
    while let Some(&b) = spelled.get(i) {
        let code = match (b, spelled.get(i + 1)) {
            (0..=0x7F, _) => {
                i += 1;
                b as usize
            }
            (0xC2..=0xC5, Some(&c)) if c & 0xC0 == 0x80 => {
                i += 2;
                ((b as usize & 0x1F) << 6) | (c as usize & 0x3F)
            }
            _ => return false,
        };
        match REVERSE.get(code) {
            Some(&r) if r >= 0 => out.push(r as u8),
            _ => return false,
        }
    }
    true
}

/// The alphabet spelling of `bytes` (as in vocab.json).
pub fn bytes_to_token(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    bytes_to_token_into(bytes, &mut out);
    out
}

/// [`bytes_to_token`] appended to `out`.
pub fn bytes_to_token_into(bytes: &[u8], out: &mut String) {
    out.extend(bytes.iter().map(|&b| BYTE_TO_CHAR[b as usize]));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alphabet_is_gpt2s() {
        assert_eq!(BYTE_TO_CHAR[b' ' as usize], 'Ġ');
        assert_eq!(BYTE_TO_CHAR[b'\n' as usize], 'Ċ');
        assert_eq!(BYTE_TO_CHAR[b'a' as usize], 'a');
        assert_eq!(BYTE_TO_CHAR[0xAD], 'Ń');
        assert_eq!(BYTE_ORDER[0], b'!');
        assert_eq!(BYTE_ORDER[255], 0xAD);
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(BYTE_TO_CHAR[b as usize]), Some(b));
        }
        assert_eq!(char_to_byte(' '), None);
        assert_eq!(token_to_bytes("Ġthe"), Some(b" the".to_vec()));
        assert_eq!(bytes_to_token(b" the\n"), "ĠtheĊ");
    }

    /// `token_to_bytes_into` and `char_to_byte` against a search of the
    /// alphabet, for every character up to U+0FFF and a few beyond.
    #[test]
    fn token_bytes_match_the_alphabet_for_every_char() {
        let chars = (0..0x1000u32)
            .chain([0xFFFD, 0x1F600, 0x10FFFF])
            .filter_map(char::from_u32);
        for c in chars {
            let want = BYTE_TO_CHAR.iter().position(|&a| a == c).map(|b| b as u8);
            let mut out = vec![7];
            let ok = token_to_bytes_into(&format!("a{c}b"), &mut out);
            match want {
                Some(b) => assert!(ok && out == [7, b'a', b, b'b'], "{c:?}: {out:?}"),
                None => assert!(!ok, "{c:?}"),
            }
            assert_eq!(char_to_byte(c), want, "{c:?}");
        }
    }

    /// On any bytes, the decoder accepts exactly the valid UTF-8 spelled in
    /// the alphabet, with the bytes `char_to_byte` gives per character.
    #[test]
    fn spelled_bytes_decode_like_the_chars() {
        use proptest::prelude::*;
        let pieces = prop_oneof![
            Just(vec![b'a']),
            Just("Ġ".as_bytes().to_vec()),
            Just("Ń".as_bytes().to_vec()),
            Just("é".as_bytes().to_vec()),
            Just("ŉ".as_bytes().to_vec()),
            Just("€".as_bytes().to_vec()),
            Just(vec![b' ']),
            Just(vec![0xC4]),
            Just(vec![0x84]),
            Just(vec![0xC0, 0x80]),
            Just(vec![0xFF]),
            any::<u8>().prop_map(|b| vec![b]),
        ];
        proptest!(|(parts in proptest::collection::vec(pieces, 0..12))| {
            let bytes = parts.concat();
            let want = std::str::from_utf8(&bytes).ok().and_then(|s| {
                s.chars().map(char_to_byte).collect::<Option<Vec<u8>>>()
            });
            let mut out = vec![7];
            let ok = spelled_to_bytes_into(&bytes, &mut out);
            match want {
                Some(w) => prop_assert!(ok && out[1..] == w[..], "{:?}: {:?}", bytes, out),
                None => prop_assert!(!ok, "{:?}", bytes),
            }
        });
    }
}
