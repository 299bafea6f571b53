//! Zero-shot translation the GPT-2 paper's way (section 3.7): the context
//! is example pairs `source sentence = target sentence`, one per line,
//! then `source sentence =`; the model continues greedily and its output up
//! to the first newline (trimmed) is the translation, scored with corpus
//! BLEU ([`super::bleu`], sacreBLEU's defaults).
//!
//! Input: JSONL rows `{"source": str, "target": str}`, or two aligned
//! plain-text files (line i of one translates line i of the other). The
//! example pairs are the first `shots` pairs of the data itself, held out
//! from scoring (the paper does not name its examples; this keeps one file
//! per run and the examples in-domain). Either direction: [`reverse`]
//! swaps sources and targets.

use std::io::BufRead;
use std::path::Path;

use crate::data::classify_data::{read_jsonl_objects, string_field};
use crate::data::{DataError, Result};

/// One sentence pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranslationPair {
    pub source: String,
    pub target: String,
    /// 1-based line in the source file.
    pub line: usize,
}

fn check_line(s: &str, path: &Path, line: usize) -> Result<String> {
    let t = s.trim();
    if t.is_empty() {
        return Err(crate::data::classify_data::parse_err(
            path,
            line,
            "an empty sentence",
        ));
    }
    if t.contains('\n') {
        // The prompt is one pair per line; a newline would end the example.
        return Err(crate::data::classify_data::parse_err(
            path,
            line,
            "a sentence spans lines (the prompt holds one pair per line)",
        ));
    }
    Ok(t.to_string())
}

/// Reads `{"source", "target"}` JSONL rows (errors name the line).
pub fn read_translation_jsonl(path: &Path) -> Result<Vec<TranslationPair>> {
    let mut out = Vec::new();
    for (line, row) in read_jsonl_objects(path)? {
        out.push(TranslationPair {
            source: check_line(&string_field(&row, "source", path, line)?, path, line)?,
            target: check_line(&string_field(&row, "target", path, line)?, path, line)?,
            line,
        });
    }
    if out.is_empty() {
        return Err(DataError::Invalid(format!(
            "{}: no sentence pairs",
            path.display()
        )));
    }
    Ok(out)
}

fn read_lines(path: &Path) -> Result<Vec<String>> {
    crate::data::source::open_source(path)?
        .lines()
        .map(|l| {
            l.map_err(|source| DataError::Io {
                path: path.to_path_buf(),
                source,
            })
        })
        .collect()
}

/// Reads two aligned plain-text files, one sentence per line; they must
/// have as many lines, and no line may be empty.
pub fn read_translation_texts(sources: &Path, targets: &Path) -> Result<Vec<TranslationPair>> {
    let (s, t) = (read_lines(sources)?, read_lines(targets)?);
    if s.len() != t.len() {
        return Err(DataError::Invalid(format!(
            "{} has {} lines but {} has {}: the files must be aligned line by line",
            sources.display(),
            s.len(),
            targets.display(),
            t.len()
        )));
    }
    let mut out = Vec::with_capacity(s.len());
    for (i, (a, b)) in s.iter().zip(&t).enumerate() {
        out.push(TranslationPair {
            source: check_line(a, sources, i + 1)?,
            target: check_line(b, targets, i + 1)?,
            line: i + 1,
        });
    }
    if out.is_empty() {
        return Err(DataError::Invalid(format!(
            "{}: no sentences",
            sources.display()
        )));
    }
    Ok(out)
}

/// The other direction: targets become sources.
pub fn reverse(pairs: Vec<TranslationPair>) -> Vec<TranslationPair> {
    pairs
        .into_iter()
        .map(|p| TranslationPair {
            source: p.target,
            target: p.source,
            line: p.line,
        })
        .collect()
}

/// `"{s1} = {t1}\n…{sk} = {tk}\n{source} ="`.
pub fn translate_prompt(examples: &[TranslationPair], source: &str) -> String {
    let mut p = String::new();
    for e in examples {
        p.push_str(&format!("{} = {}\n", e.source, e.target));
    }
    p.push_str(&format!("{source} ="));
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_is_the_papers() {
        let ex = [TranslationPair {
            source: "a cat".into(),
            target: "un chat".into(),
            line: 1,
        }];
        assert_eq!(translate_prompt(&ex, "a dog"), "a cat = un chat\na dog =");
        assert_eq!(translate_prompt(&[], "a dog"), "a dog =");
        let r = reverse(ex.to_vec());
        assert_eq!(
            (r[0].source.as_str(), r[0].target.as_str()),
            ("un chat", "a cat")
        );
    }
}
