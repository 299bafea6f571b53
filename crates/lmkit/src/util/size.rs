//! Byte sizes as people write them on a command line, in HF's convention
//! (`max_shard_size="5GB"`): decimal units (`KB`, `MB`, `GB`, `TB` = powers
//! of 1000), binary units (`KiB`, `MiB`, `GiB`, `TiB` = powers of 1024), or
//! a plain number of bytes; case-insensitive, a space allowed before the unit.

/// Parses `"4GiB"`, `"500MB"`, `"1.5 GB"`, `"1e9"` into bytes.
pub fn parse_byte_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
        .unwrap_or(t.len());
    let (num, unit) = (t[..split].trim(), t[split..].trim());
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?}: expected a size such as 4GiB, 500MB or 1000000"))?;
    let scale: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024f64.powi(2),
        "gib" => 1024f64.powi(3),
        "tib" => 1024f64.powi(4),
        other => {
            return Err(format!(
                "{s:?}: unknown unit {other:?} (KB, MB, GB, TB or KiB, MiB, GiB, TiB)"
            ))
        }
    };
    let bytes = value * scale;
    if !(bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64) {
        return Err(format!("{s:?}: not a size in bytes"));
    }
    Ok(bytes.round() as u64)
}

/// Deserializes a byte size given as a number or as a string
/// [`parse_byte_size`] reads (`"5GB"`), for options read from JSON.
pub fn deserialize_byte_size<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<u64>, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }
    match <Option<Size> as serde::Deserialize>::deserialize(d)? {
        None => Ok(None),
        Some(Size::Bytes(n)) => Ok(Some(n)),
        Some(Size::Text(s)) => parse_byte_size(&s)
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_byte_size;

    #[test]
    fn decimal_binary_and_plain_sizes() {
        assert_eq!(parse_byte_size("5GB"), Ok(5_000_000_000));
        assert_eq!(parse_byte_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_byte_size("1.5 mb"), Ok(1_500_000));
        assert_eq!(parse_byte_size("1e9"), Ok(1_000_000_000));
        assert_eq!(parse_byte_size("123"), Ok(123));
        for bad in ["", "GB", "-1GB", "5XB", "1e400", "nan"] {
            assert!(parse_byte_size(bad).is_err(), "{bad}");
        }
    }
}
