//! Token spellings in one buffer, and an open-addressing table from spelling to id that points
//! into it: building it for a 262k vocabulary allocates a handful of vectors, not one per token.
use std::hash::Hasher;

/// Variable-length byte strings in one buffer: entry `i` is `bytes[ends[i-1]..ends[i]]`.
#[derive(Default)]
pub(crate) struct Arena {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

impl Arena {
    pub(crate) fn with_capacity(entries: usize, bytes: usize) -> Self {
        Arena {
            bytes: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(entries),
        }
    }

    /// Appends bytes to the entry being built; `finish_entry` closes it.
    pub(crate) fn extend(&mut self, b: &[u8]) {
        self.bytes.extend_from_slice(b);
    }

    pub(crate) fn finish_entry(&mut self) {
        self.ends.push(self.bytes.len() as u32);
    }

    pub(crate) fn push(&mut self, b: &[u8]) {
        self.extend(b);
        self.finish_entry();
    }

    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    pub(crate) fn get(&self, i: usize) -> Option<&[u8]> {
        let end = *self.ends.get(i)? as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        Some(&self.bytes[start..end])
    }
}

const EMPTY: u32 = u32::MAX;

/// Spelling -> id over the entries of an `Arena`; with equal spellings the later id wins, as in
/// a Python dict built in vocabulary order.
pub(crate) struct VocabTable {
    slots: Vec<u32>,
    mask: usize,
}

fn hash(bytes: &[u8]) -> usize {
    let mut h = rustc_hash::FxHasher::default();
    h.write(bytes);
    h.write_usize(bytes.len());
    h.finish() as usize
}

impl VocabTable {
    pub(crate) fn new(spellings: &Arena) -> Self {
        let capacity = (spellings.len() * 2).next_power_of_two().max(16);
        let mut table = VocabTable {
            slots: vec![EMPTY; capacity],
            mask: capacity - 1,
        };
        for id in 0..spellings.len() {
            let key = spellings.get(id).unwrap_or_default();
            let mut at = hash(key) & table.mask;
            loop {
                let slot = table.slots[at];
                if slot == EMPTY || spellings.get(slot as usize) == Some(key) {
                    table.slots[at] = id as u32;
                    break;
                }
                at = (at + 1) & table.mask;
            }
        }
        table
    }

    pub(crate) fn get(&self, spellings: &Arena, key: &[u8]) -> Option<u32> {
        let mut at = hash(key) & self.mask;
        loop {
            let slot = self.slots[at];
            if slot == EMPTY {
                return None;
            }
            if spellings.get(slot as usize) == Some(key) {
                return Some(slot);
            }
            at = (at + 1) & self.mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_duplicate_wins_and_missing_is_none() {
        let mut a = Arena::default();
        for s in ["a", "bb", "", "a", "ccc"] {
            a.push(s.as_bytes());
        }
        let t = VocabTable::new(&a);
        assert_eq!(t.get(&a, b"a"), Some(3));
        assert_eq!(t.get(&a, b"bb"), Some(1));
        assert_eq!(t.get(&a, b""), Some(2));
        assert_eq!(t.get(&a, b"ccc"), Some(4));
        assert_eq!(t.get(&a, b"cc"), None);
    }
}
