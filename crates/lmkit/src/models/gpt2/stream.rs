//! Turning generated token bytes into text as it is produced.
//!
//! A byte-level BPE token can end in the middle of a UTF-8 character, so
//! [`Utf8Stream`] holds back an incomplete trailing sequence until the next
//! token completes it, and replaces invalid bytes with U+FFFD exactly as
//! decoding the whole byte string at once would (`String::from_utf8_lossy`,
//! Python's `errors="replace"`). [`StopMatcher`] holds back text that might
//! be the start of a stop string, and cuts the text before the first stop
//! string found. [`TextStreamer`] chains the two.

/// Incremental UTF-8 decoder whose concatenated output equals
/// `String::from_utf8_lossy` of all the bytes pushed.
#[derive(Debug, Default, Clone)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends bytes; returns the text that is now complete.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(s) => {
                    out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // Validated by from_utf8 just above, so never the default.
                    out.push_str(
                        std::str::from_utf8(&self.pending[start..start + valid])
                            .unwrap_or_default(),
                    );
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            start += valid + bad;
                        }
                        None => {
                            // An incomplete sequence at the end: wait for more bytes.
                            start += valid;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        out
    }

    /// Ends the stream: an incomplete trailing sequence becomes U+FFFD.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

/// Finds stop strings in streamed text.
#[derive(Debug, Default, Clone)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    stopped: bool,
}

impl StopMatcher {
    /// Empty stop strings are ignored.
    pub fn new(stops: &[String]) -> Self {
        StopMatcher {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            ..Self::default()
        }
    }

    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Appends text; returns the part that is certainly not (the start of) a
    /// stop string. Once a stop string is complete, returns the text before
    /// it, sets [`Self::stopped`] and ignores later input.
    pub fn push(&mut self, text: &str) -> String {
        if self.stopped {
            return String::new();
        }
        self.held.push_str(text);
        if let Some(pos) = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            self.stopped = true;
            let out = self.held[..pos].to_string();
            self.held.clear();
            return out;
        }
        // Keep the earliest suffix that is a prefix of some stop string.
        let keep_from = self
            .held
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| self.stops.iter().any(|s| s.starts_with(&self.held[i..])))
            .unwrap_or(self.held.len());
        let rest = self.held.split_off(keep_from);
        std::mem::replace(&mut self.held, rest)
    }

    /// Ends the stream: returns whatever was held back.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// UTF-8 reassembly followed by stop-string matching; also keeps the full
/// text emitted so far.
#[derive(Debug, Default, Clone)]
pub struct TextStreamer {
    utf8: Utf8Stream,
    stop: StopMatcher,
    text: String,
}

impl TextStreamer {
    pub fn new(stops: &[String]) -> Self {
        TextStreamer {
            utf8: Utf8Stream::new(),
            stop: StopMatcher::new(stops),
            text: String::new(),
        }
    }

    /// Feeds one token's bytes; returns the text ready to show (possibly empty).
    pub fn push(&mut self, bytes: &[u8]) -> String {
        let piece = self.utf8.push(bytes);
        let out = self.stop.push(&piece);
        self.text.push_str(&out);
        out
    }

    /// True once a stop string has been produced.
    pub fn stopped(&self) -> bool {
        self.stop.stopped()
    }

    /// Flushes what was held back; returns it.
    pub fn finish(&mut self) -> String {
        let tail = self.utf8.finish();
        let mut out = self.stop.push(&tail);
        if !self.stop.stopped() {
            out.push_str(&self.stop.finish());
        }
        self.text.push_str(&out);
        out
    }

    /// All the text emitted so far.
    pub fn text(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn stream_all(chunks: &[Vec<u8>]) -> String {
        let mut s = Utf8Stream::new();
        let mut out: String = chunks.iter().map(|c| s.push(c)).collect();
        out.push_str(&s.finish());
        out
    }

    #[test]
    fn multibyte_characters_split_across_tokens() {
        let text = "héllo 世界 🦀";
        let bytes = text.as_bytes();
        // One byte per push: nothing partial may come out.
        let mut s = Utf8Stream::new();
        let mut pieces = Vec::new();
        for b in bytes {
            pieces.push(s.push(&[*b]));
        }
        assert!(pieces
            .iter()
            .all(|p| p.chars().all(|c| c != char::REPLACEMENT_CHARACTER)));
        assert_eq!(pieces.concat(), text);
        // The crab's four bytes produce output only with the last one.
        let crab = "🦀".as_bytes();
        let mut s = Utf8Stream::new();
        assert_eq!(s.push(&crab[..3]), "");
        assert_eq!(s.push(&crab[3..]), "🦀");
    }

    #[test]
    fn invalid_and_truncated_bytes_become_replacement_characters() {
        assert_eq!(stream_all(&[vec![b'a', 0xFF], vec![b'b']]), "a\u{FFFD}b");
        // A truncated sequence followed by ASCII.
        assert_eq!(stream_all(&[vec![0xE4, 0xB8], vec![b'x']]), "\u{FFFD}x");
        // Truncated at the very end.
        assert_eq!(stream_all(&[vec![b'z', 0xF0, 0x9F]]), "z\u{FFFD}");
    }

    proptest! {
        #[test]
        fn streaming_equals_lossy_decoding_of_the_whole(bytes in proptest::collection::vec(any::<u8>(), 0..64),
                                                        cuts in proptest::collection::vec(0usize..64, 0..8)) {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut prev = 0;
            for c in cuts.into_iter().chain([bytes.len()]) {
                chunks.push(bytes[prev..c].to_vec());
                prev = c;
            }
            prop_assert_eq!(stream_all(&chunks), String::from_utf8_lossy(&bytes).into_owned());
        }
    }

    #[test]
    fn stop_string_across_pieces_is_cut_and_held_text_released() {
        let mut m = StopMatcher::new(&["\n\n".to_string(), "END".to_string()]);
        assert_eq!(m.push("Hello E"), "Hello ");
        assert_eq!(m.push("N"), "");
        // "ENx" cannot become "END": released.
        assert_eq!(m.push("x wor"), "ENx wor");
        assert_eq!(m.push("ld\n"), "ld");
        assert_eq!(m.push("\nmore"), "");
        assert!(m.stopped());
        assert_eq!(m.push("ignored"), "");
    }

    #[test]
    fn earliest_stop_string_wins_and_finish_flushes() {
        // "abcd" starts before "bc": the text ends at the earlier one.
        let mut m = StopMatcher::new(&["bc".to_string(), "abcd".to_string()]);
        assert_eq!(m.push("xabcd"), "x");
        let mut m = StopMatcher::new(&["bc".to_string(), "abcd".to_string()]);
        assert_eq!(m.push("xabc"), "xa");
        let mut m = StopMatcher::new(&["STOP".to_string()]);
        assert_eq!(m.push("ab ST"), "ab ");
        assert_eq!(m.finish(), "ST");
    }

    #[test]
    fn streamer_combines_utf8_and_stops() {
        let mut s = TextStreamer::new(&["界".to_string()]);
        let bytes = "世界!".as_bytes();
        let mut out = String::new();
        for b in bytes {
            out.push_str(&s.push(&[*b]));
            if s.stopped() {
                break;
            }
        }
        out.push_str(&s.finish());
        assert_eq!(out, "世");
        assert_eq!(s.text(), "世");
    }
}
