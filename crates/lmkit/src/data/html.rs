//! Plain text from HTML pages — enough for documentation sites such as the
//! Rust toolchain's books, the quickstart's offline corpus (the same rules as
//! `scripts/html_to_text.py`). Not a general HTML parser: tags are stripped,
//! block tags break lines, the common entities are decoded.

use super::{DataError, Result};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The books of a Rust toolchain's `share/doc/rust/html` folder used as prose.
pub const RUST_BOOKS: &[&str] = &[
    "book",
    "reference",
    "rust-by-example",
    "nomicon",
    "cargo",
    "rustc",
    "edition-guide",
    "embedded-book",
    "rustdoc",
    "unstable-book",
    "error_codes",
];

/// All books' prose under `html_root` (a toolchain's `share/doc/rust/html`),
/// documents (pages) separated by form-feed lines; paragraphs repeated across
/// pages (navigation, licence blurbs) kept once. Unreadable pages are skipped.
pub fn books_text(html_root: &Path) -> Result<String> {
    let mut seen: HashSet<String> = HashSet::new();
    let mut out = String::new();
    for book in RUST_BOOKS {
        let mut files = Vec::new();
        collect_html(&html_root.join(book), &mut files);
        files.sort();
        for f in files {
            let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if matches!(name, "print.html" | "404.html" | "toc.html") {
                continue;
            }
            let Ok(raw) = std::fs::read(&f) else { continue };
            let text = html_to_text(&String::from_utf8_lossy(&raw));
            let paras: Vec<&str> = text
                .split("\n\n")
                .filter(|p| !p.trim().is_empty() && seen.insert(p.to_string()))
                .collect();
            let doc = paras.join("\n\n");
            if doc.len() > 200 {
                out.push_str(&doc);
                out.push_str("\n\u{c}\n");
            }
        }
    }
    if out.is_empty() {
        return Err(DataError::Invalid(format!(
            "{}: no text found in the books",
            html_root.display()
        )));
    }
    Ok(out)
}

fn collect_html(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect_html(&p, out);
        } else if p.extension().is_some_and(|x| x == "html") {
            out.push(p);
        }
    }
}

/// Visible text of an HTML page: skips script/style/nav/head/..., breaks
/// lines at block tags, decodes the common entities, collapses spaces.
pub fn html_to_text(html: &str) -> String {
    const SKIP: &[&str] = &[
        "script", "style", "nav", "head", "noscript", "svg", "button",
    ];
    const BLOCK: &[&str] = &[
        "p",
        "div",
        "li",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "pre",
        "tr",
        "br",
        "blockquote",
        "dt",
        "dd",
        "section",
        "main",
        "table",
    ];
    let mut raw = String::new();
    let mut skip = 0usize;
    let mut rest = html;
    while let Some(lt) = rest.find('<') {
        if skip == 0 {
            raw.push_str(&rest[..lt]);
        }
        let Some(gt) = rest[lt..].find('>') else {
            break;
        };
        let tag = &rest[lt + 1..lt + gt];
        rest = &rest[lt + gt + 1..];
        if tag.starts_with('!') {
            continue;
        }
        let closing = tag.starts_with('/');
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        if SKIP.contains(&name.as_str()) {
            if closing {
                skip = skip.saturating_sub(1);
            } else if !tag.ends_with('/') {
                skip += 1;
            }
        } else if BLOCK.contains(&name.as_str()) {
            raw.push('\n');
        }
    }
    if skip == 0 {
        raw.push_str(rest);
    }
    let decoded = decode_entities(&raw);
    let mut lines: Vec<String> = Vec::new();
    let mut blank = false;
    for line in decoded.split('\n') {
        let l = line.split_whitespace().collect::<Vec<_>>().join(" ");
        if !l.is_empty() {
            lines.push(l);
            blank = false;
        } else if !blank && !lines.is_empty() {
            lines.push(String::new());
            blank = true;
        }
    }
    lines.join("\n").trim().to_string()
}

pub fn decode_entities(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        // Bytes, not chars: the text after '&' may be multi-byte UTF-8.
        let end = rest.as_bytes()[..rest.len().min(12)]
            .iter()
            .position(|&b| b == b';');
        let decoded = end.and_then(|e| {
            let ent = &rest[1..e];
            let c = match ent {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                "nbsp" => Some(' '),
                _ if ent.starts_with("#x") || ent.starts_with("#X") => {
                    u32::from_str_radix(&ent[2..], 16)
                        .ok()
                        .and_then(char::from_u32)
                }
                _ if ent.starts_with('#') => ent[1..].parse().ok().and_then(char::from_u32),
                _ => None,
            };
            c.map(|c| (c, e))
        });
        match decoded {
            Some((c, e)) => {
                out.push(c);
                rest = &rest[e + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_text_extraction() {
        let html = "<html><head><title>T</title><script>var x = 1;</script></head><body>\
            <nav>menu</nav><h1>Hello &amp; welcome</h1><p>A  <code>fn</code>\n  main &#x27;x&#39; &lt;3</p>\
            <p>Second</p></body></html>";
        let t = html_to_text(html);
        assert_eq!(t, "Hello & welcome\n\nA fn\nmain 'x' <3\n\nSecond");
        assert_eq!(decode_entities("a &unknown; b &amp"), "a &unknown; b &amp");
        assert_eq!(decode_entities("&gt; you’re &— x"), "> you’re &— x");
    }
}
