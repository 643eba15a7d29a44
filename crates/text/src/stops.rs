//! Stop strings over streamed text: text that could be the start of a stop string is held back
//! until the next piece decides it, so a match across token boundaries is cut exactly and no
//! partial stop string ever reaches the client. Works on `char`s, so output stays valid UTF-8.

#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text received but not yet released: a possible prefix of some stop string.
    held: String,
}

/// What one piece of text released.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopScan {
    /// Text safe to emit; more may follow.
    Text(String),
    /// A stop string matched: the text before it, and the stop string itself.
    Stopped { text: String, stop: String },
}

impl StopMatcher {
    pub fn new(stops: &[String]) -> StopMatcher {
        StopMatcher {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            held: String::new(),
        }
    }

    /// Feeds decoded text; returns what can be released now.
    pub fn push(&mut self, text: &str) -> StopScan {
        self.held.push_str(text);
        if self.stops.is_empty() {
            return StopScan::Text(std::mem::take(&mut self.held));
        }
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|(at, s)| (*at, std::cmp::Reverse(s.len())));
        if let Some((at, stop)) = first {
            let stop = stop.clone();
            let text = self.held[..at].to_string();
            self.held.clear();
            return StopScan::Stopped { text, stop };
        }
        let keep = self.partial_suffix_len();
        let release = self.held.len() - keep;
        let out = self.held[..release].to_string();
        self.held.drain(..release);
        StopScan::Text(out)
    }

    /// The held text at the end of generation: no stop string can complete any more.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Bytes at the end of `held` that are a proper prefix of some stop string.
    fn partial_suffix_len(&self) -> usize {
        self.stops
            .iter()
            .map(|stop| partial_suffix_len(&self.held, stop))
            .max()
            .unwrap_or(0)
    }
}

/// The length of the longest suffix of `text` that is a proper prefix of `marker`, on a char
/// boundary: the bytes to hold back until the next piece says whether `marker` follows.
pub fn partial_suffix_len(text: &str, marker: &str) -> usize {
    let longest = marker.len().saturating_sub(1).min(text.len());
    (1..=longest)
        .rev()
        .find(|&n| {
            let start = text.len() - n;
            text.is_char_boundary(start) && marker.starts_with(&text[start..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, Option<String>) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut m = StopMatcher::new(&stops);
        let mut out = String::new();
        for p in pieces {
            match m.push(p) {
                StopScan::Text(t) => out.push_str(&t),
                StopScan::Stopped { text, stop } => {
                    out.push_str(&text);
                    return (out, Some(stop));
                }
            }
        }
        out.push_str(&m.finish());
        (out, None)
    }

    #[test]
    fn a_stop_split_across_pieces_is_cut_exactly() {
        let (text, stop) = run(&["</end>"], &["hello </", "en", "d> world"]);
        assert_eq!(text, "hello ");
        assert_eq!(stop.as_deref(), Some("</end>"));
    }

    #[test]
    fn a_partial_match_that_fails_is_released() {
        let stops = vec!["STOP".to_string()];
        let mut m = StopMatcher::new(&stops);
        assert_eq!(m.push("abc ST"), StopScan::Text("abc ".into()));
        assert_eq!(m.push("AY"), StopScan::Text("STAY".into()));
        assert_eq!(m.finish(), "");
    }

    #[test]
    fn multibyte_stops_hold_back_on_char_boundaries() {
        let (text, stop) = run(&["日本"], &["こんにちは日", "本語"]);
        assert_eq!(text, "こんにちは");
        assert_eq!(stop.as_deref(), Some("日本"));
        let (text, stop) = run(&["日本"], &["日", "x"]);
        assert_eq!((text.as_str(), stop), ("日x", None));
    }

    #[test]
    fn the_earliest_stop_wins() {
        let (text, stop) = run(&["b", "abc"], &["xxabc"]);
        assert_eq!(text, "xx");
        assert_eq!(stop.as_deref(), Some("abc"));
    }

    #[test]
    fn held_text_is_flushed_at_the_end() {
        assert_eq!(run(&["###"], &["a #", "#"]), ("a ##".into(), None));
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), None));
    }
}
