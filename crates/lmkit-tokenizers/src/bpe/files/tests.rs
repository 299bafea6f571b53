use super::*;
use proptest::prelude::*;

/// The reference twin of [`parse_merges_txt`]: `str::lines` and
/// `split(' ')`, as the format is usually read. `Ok` holds
/// `(left, right, line)` per merge, `Err` the line of the first bad one.
fn merges_by_lines(text: &str) -> std::result::Result<Vec<(&str, &str, usize)>, usize> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if (i == 0 && line.starts_with("#version")) || line.is_empty() {
            continue;
        }
        let mut parts = line.split(' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(l), Some(r), None) if !l.is_empty() && !r.is_empty() => out.push((l, r, i + 1)),
            _ => return Err(i + 1),
        }
    }
    Ok(out)
}

proptest! {
    /// Texts from pieces that meet every corner of the line format
    /// (CR with and without LF, spaces at either end, a header on the
    /// first and a later line, multi-byte characters, no final newline).
    #[test]
    fn merges_txt_parses_as_lines_and_split(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("a"), Just("bc"), Just(" "), Just("\n"), Just("\r"),
                Just("\r\n"), Just("#version: 0.2"), Just("Ġ"), Just("  "),
            ],
            0..40,
        )
    ) {
        let text: String = parts.concat();
        let path = Path::new("merges.txt");
        let got = parse_merges_txt(path, text.clone().into_bytes());
        match (merges_by_lines(&text), got) {
            (Ok(want), Ok(got)) => {
                let want: Vec<_> =
                    want.iter().map(|&(l, r, i)| (l.as_bytes(), r.as_bytes(), i)).collect();
                let got: Vec<_> = got.iter().map(|m| (m.left, m.right, m.line)).collect();
                prop_assert_eq!(want, got);
            }
            (Err(line), Err(Error::Parse { line: got, .. })) => prop_assert_eq!(line, got),
            (want, got) => prop_assert!(false, "{:?} vs {:?}", want, got.err()),
        }
    }
}
