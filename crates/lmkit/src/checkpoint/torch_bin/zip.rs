//! The zip container of a torch checkpoint: a minimal stored-only reader
//! (zip64 understood) that lists the entries and checks every offset.

use super::MAX_ENTRIES;

/// A stored entry: its name and its data's byte range in the file.
pub(super) struct Entry {
    pub(super) name: String,
    pub(super) start: usize,
    pub(super) len: usize,
}

pub(super) fn le(b: &[u8], at: usize, n: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(n)?)?;
    Some(s.iter().rev().fold(0u64, |a, &x| (a << 8) | u64::from(x)))
}

/// The entries of a zip file (stored-only; zip64 understood).
pub(super) fn zip_entries(b: &[u8]) -> std::result::Result<Vec<Entry>, String> {
    let short = || "the zip directory is truncated".to_string();
    const EOCD: u64 = 0x0605_4b50;
    if b.len() < 22 {
        return Err(format!("{} bytes is too short for a zip file", b.len()));
    }
    let lowest = (b.len() - 22).saturating_sub(0xFFFF);
    let eocd = (lowest..=b.len() - 22)
        .rev()
        .find(|&i| le(b, i, 4) == Some(EOCD))
        .ok_or("no end of zip directory (truncated file?)")?;
    let mut count = le(b, eocd + 10, 2).ok_or_else(short)?;
    let mut cd_size = le(b, eocd + 12, 4).ok_or_else(short)?;
    let mut cd_off = le(b, eocd + 16, 4).ok_or_else(short)?;
    if count == 0xFFFF || cd_size == 0xFFFF_FFFF || cd_off == 0xFFFF_FFFF {
        // zip64: a locator just before the record points at the zip64 record.
        let loc = eocd.checked_sub(20).ok_or_else(short)?;
        if le(b, loc, 4) != Some(0x0706_4b50) {
            return Err("no zip64 locator".into());
        }
        let rec = usize::try_from(le(b, loc + 8, 8).ok_or_else(short)?).map_err(|_| short())?;
        if le(b, rec, 4) != Some(0x0606_4b50) {
            return Err("no zip64 end of directory record".into());
        }
        count = le(b, rec.saturating_add(32), 8).ok_or_else(short)?;
        cd_size = le(b, rec.saturating_add(40), 8).ok_or_else(short)?;
        cd_off = le(b, rec.saturating_add(48), 8).ok_or_else(short)?;
    }
    if count > MAX_ENTRIES {
        return Err(format!(
            "{count} zip entries (more than the limit of {MAX_ENTRIES})"
        ));
    }
    let cd_end = cd_off.checked_add(cd_size).ok_or_else(short)?;
    if cd_end > b.len() as u64 {
        return Err(short());
    }
    let mut at = cd_off as usize;
    let mut out = Vec::new();
    for _ in 0..count {
        if le(b, at, 4) != Some(0x0201_4b50) {
            return Err("a bad zip directory entry".into());
        }
        let field = |off: usize, n: usize| le(b, at + off, n).ok_or_else(short);
        let flags = field(8, 2)?;
        let method = field(10, 2)?;
        let mut csize = field(20, 4)?;
        let mut usize_ = field(24, 4)?;
        let name_len = field(28, 2)? as usize;
        let extra_len = field(30, 2)? as usize;
        let comment_len = field(32, 2)? as usize;
        let mut local = field(42, 4)?;
        let name = b.get(at + 46..at + 46 + name_len).ok_or_else(short)?;
        let name = String::from_utf8_lossy(name).into_owned();
        let extra = b
            .get(at + 46 + name_len..at + 46 + name_len + extra_len)
            .ok_or_else(short)?;
        // zip64 extended information: the 64-bit values of the fields that are 0xFFFFFFFF.
        let mut e = 0;
        while e + 4 <= extra.len() {
            let id = le(extra, e, 2).unwrap_or(0);
            let n = le(extra, e + 2, 2).unwrap_or(0) as usize;
            let body = extra.get(e + 4..e + 4 + n).ok_or_else(short)?;
            if id == 1 {
                let mut k = 0;
                for v in [&mut usize_, &mut csize, &mut local] {
                    if *v == 0xFFFF_FFFF {
                        *v = le(body, k, 8).ok_or_else(short)?;
                        k += 8;
                    }
                }
            }
            e += 4 + n;
        }
        if flags & 1 != 0 {
            return Err(format!("zip entry {name:?} is encrypted"));
        }
        if method != 0 || csize != usize_ {
            return Err(format!(
                "zip entry {name:?} is compressed (method {method}); torch.save writes stored entries"
            ));
        }
        // The local header's own name and extra lengths (torch pads the extra field for alignment).
        let l = usize::try_from(local).map_err(|_| short())?;
        if le(b, l, 4) != Some(0x0403_4b50) {
            return Err(format!("zip entry {name:?}: bad local header"));
        }
        let ln = le(b, l + 26, 2).ok_or_else(short)? as usize;
        let lx = le(b, l + 28, 2).ok_or_else(short)? as usize;
        let start = l + 30 + ln + lx;
        let end = (start as u64).checked_add(csize).ok_or_else(short)?;
        if end > b.len() as u64 {
            return Err(format!(
                "zip entry {name:?} ends at byte {end}, past the end of the file ({} bytes; truncated?)",
                b.len()
            ));
        }
        out.push(Entry {
            name,
            start,
            len: csize as usize,
        });
        at += 46 + name_len + extra_len + comment_len;
    }
    Ok(out)
}
