//! Prompt lookup: the longest n-gram ending the sequence that also occurs earlier (the most
//! recent occurrence on ties) proposes the tokens that followed it there. A code edit's reply
//! copies its prompt, so most of its tokens are found this way.
use super::{Draft, DraftSource, MAX_DRAFT};
use crate::sampler::SamplerConfig;

/// Longest and shortest suffix matched.
const MAX_NGRAM: usize = 8;
const MIN_NGRAM: usize = 2;
/// Draft length at the start of a sequence.
const START_LEN: usize = 4;

#[derive(Debug, Default)]
pub struct PromptLookup {
    /// The sequence so far: prompt, then every kept token.
    tokens: Vec<u32>,
    /// Draft length now: doubles on a full accept, halves when nothing is kept.
    len: usize,
    /// The last draft, until `accept` says how much of it stays.
    last: Vec<u32>,
}

impl PromptLookup {
    pub fn new() -> Self {
        Self::default()
    }

    /// Start of the most recent earlier occurrence of the last `n` tokens (one with at least one
    /// token after it).
    fn find(&self, n: usize) -> Option<usize> {
        let t = &self.tokens;
        let suffix = &t[t.len() - n..];
        (0..t.len() - n).rev().find(|&i| &t[i..i + n] == suffix)
    }

    /// What followed the longest (then most recent) earlier match of the sequence's end.
    fn propose(&mut self, n_max: usize) -> Vec<u32> {
        self.last.clear();
        let want = self.len.min(n_max).min(MAX_DRAFT);
        let longest = MAX_NGRAM.min(self.tokens.len().saturating_sub(1));
        if want == 0 || longest < MIN_NGRAM {
            return Vec::new();
        }
        if let Some((n, start)) = (MIN_NGRAM..=longest)
            .rev()
            .find_map(|n| self.find(n).map(|s| (n, s)))
        {
            let from = start + n;
            let to = (from + want).min(self.tokens.len());
            self.last.extend_from_slice(&self.tokens[from..to]);
        }
        self.last.clone()
    }
}

impl DraftSource for PromptLookup {
    fn name(&self) -> &'static str {
        "lookup"
    }

    fn begin(&mut self, prompt: &[u32], _: &SamplerConfig) {
        self.tokens.clear();
        self.tokens.extend_from_slice(prompt);
        self.len = START_LEN;
        self.last.clear();
    }

    fn draft(&mut self, n_max: usize) -> Draft {
        Draft::certain(self.propose(n_max))
    }

    fn accept(&mut self, n: usize, next: u32) {
        let n = n.min(self.last.len());
        if !self.last.is_empty() {
            if n == self.last.len() {
                self.len = (self.len * 2).min(MAX_DRAFT);
            } else if n == 0 {
                self.len = (self.len / 2).max(1);
            }
        }
        self.tokens.extend_from_slice(&self.last[..n]);
        self.tokens.push(next);
        self.last.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(prompt: &[u32]) -> PromptLookup {
        let mut l = PromptLookup::new();
        l.begin(prompt, &SamplerConfig::greedy());
        l
    }

    #[test]
    fn proposes_what_followed_the_suffix_earlier() {
        let mut l = lookup(&[1, 2, 3, 4, 5, 6, 9, 1, 2]);
        assert_eq!(l.draft(16).tokens, vec![3, 4, 5, 6]);
    }

    #[test]
    fn longest_match_wins_then_the_most_recent() {
        // [7, 1, 2] occurs once (followed by 30); [1, 2] alone most recently by 40
        let mut l = lookup(&[7, 1, 2, 30, 31, 5, 1, 2, 40, 41, 7, 1, 2]);
        assert_eq!(l.draft(2).tokens, vec![30, 31]);
        let mut l = lookup(&[1, 2, 30, 5, 1, 2, 40, 6, 1, 2]);
        assert_eq!(l.draft(1).tokens, vec![40]);
    }

    #[test]
    fn nothing_to_draft_without_a_match() {
        assert!(lookup(&[1, 2, 3, 4, 5]).draft(16).tokens.is_empty());
        assert!(lookup(&[1]).draft(16).tokens.is_empty());
        assert!(lookup(&[]).draft(16).tokens.is_empty());
        assert!(lookup(&[1, 2, 1, 2]).draft(0).tokens.is_empty());
    }

    #[test]
    fn the_draft_stops_at_the_end_of_the_sequence() {
        let mut l = lookup(&[5, 6, 7, 5, 6]);
        assert_eq!(l.draft(16).tokens, vec![7, 5, 6]);
    }

    #[test]
    fn length_grows_on_full_accepts_and_shrinks_on_rejects() {
        let text: Vec<u32> = (0..100).collect();
        let mut prompt = text.clone();
        prompt.extend_from_slice(&text[..3]);
        let mut l = lookup(&prompt);
        let d = l.draft(16).tokens;
        assert_eq!(d, vec![3, 4, 5, 6]);
        l.accept(4, 7);
        let d = l.draft(16).tokens;
        assert_eq!(d, (8..16).collect::<Vec<_>>());
        l.accept(8, 16);
        assert_eq!(l.draft(16).len(), 16);
        l.accept(0, 999);
        // the sequence now ends ..., 16, 999: no earlier [16, 999]
        assert!(l.draft(16).tokens.is_empty());
        l.accept(0, 17);
        assert!(l.draft(16).tokens.is_empty(), "[999, 17] never occurred");
    }

    #[test]
    fn kept_tokens_and_the_next_one_join_the_sequence() {
        let mut l = lookup(&[1, 2, 3, 4, 8, 1, 2]);
        assert_eq!(l.draft(16).tokens, vec![3, 4, 8, 1]);
        l.accept(2, 9); // 1 2 3 4 8 1 2 3 4 9
        assert_eq!(l.tokens, vec![1, 2, 3, 4, 8, 1, 2, 3, 4, 9]);
        assert_eq!(l.len, START_LEN);
    }
}
