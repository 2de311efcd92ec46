//! uuids numbered in order of first sight, for the chain walk's tables.
//!
//! The keys are 64-bit hashes of the strings (see `scan::key_of`). This is
//! the scan's only table with random access, so it is built to keep memory
//! flat: a single hash table of every uuid would be touched all
//! over on every record. Instead the keys go into *generations*
//! of [`GENERATION`] keys each. The newest generation takes the inserts;
//! an older one is only read, and only when its Bloom filter says it may
//! hold the key. A transcript's links point at recent records (a parent is
//! nearly always a few lines back), so the pages in use are the newest
//! generation's and the filters' (128 KiB a generation), whatever the file.
//! The numbering is exact: a filter only lets a lookup skip a generation
//! that certainly does not hold the key.

/// A dense number for a key: `0..len`.
pub type Sym = u32;

/// Keys in one generation.
const GENERATION: usize = 1 << 16;
/// Slots of a generation's table (half full at most).
const SLOTS: usize = 2 * GENERATION;
/// Words of a generation's Bloom filter (16 bits a key). The filter is
/// blocked: a key's bits are all in one word, so a lookup that must ask
/// every generation costs one memory access each.
const FILTER_WORDS: usize = 16 * GENERATION / 64;
/// Bits set per key.
const PROBES: u32 = 4;

/// Key → symbol.
#[derive(Debug, Default)]
pub(crate) struct Symbols {
    /// Full generations, oldest first, each with its filter.
    sealed: Vec<(Table, Vec<u64>)>,
    newest: Table,
    len: usize,
}

/// One generation: open addressing, linear probing.
#[derive(Debug, Default)]
struct Table {
    /// Slot → key; 0 is an empty slot (a key of 0 is stored as 1).
    keys: Vec<u64>,
    /// Slot → symbol, meaningful where the key is not 0.
    syms: Vec<Sym>,
    len: usize,
}

impl Table {
    fn new() -> Table {
        Table {
            keys: vec![0; SLOTS],
            syms: vec![0; SLOTS],
            len: 0,
        }
    }

    /// The slot holding `key`, or the empty slot where it goes.
    fn slot(&self, key: u64) -> usize {
        // The keys are hashes already: their low bits are spread.
        #[allow(clippy::cast_possible_truncation)] // masked
        let mut i = key as usize & (SLOTS - 1);
        while self.keys[i] != 0 && self.keys[i] != key {
            i = (i + 1) & (SLOTS - 1);
        }
        i
    }

    fn get(&self, key: u64) -> Option<Sym> {
        let slot = self.slot(key);
        (self.keys[slot] == key).then(|| self.syms[slot])
    }

    /// The Bloom filter of this generation's keys.
    fn filter(&self) -> Vec<u64> {
        let mut words = vec![0u64; FILTER_WORDS];
        for &key in self.keys.iter().filter(|&&k| k != 0) {
            let (word, mask) = filter_word(key);
            words[word] |= mask;
        }
        words
    }
}

/// The filter word of `key` and its bits there: the word from the key's
/// high bits (the table slot uses the low ones), a bit from each of the
/// next four 6-bit fields.
fn filter_word(key: u64) -> (usize, u64) {
    #[allow(clippy::cast_possible_truncation)] // masked
    let word = (key >> 40) as usize & (FILTER_WORDS - 1);
    let mask = (0..PROBES).fold(0u64, |m, j| m | 1 << ((key >> (17 + 6 * j)) & 63));
    (word, mask)
}

fn may_hold(filter: &[u64], key: u64) -> bool {
    let (word, mask) = filter_word(key);
    filter[word] & mask == mask
}

impl Symbols {
    /// How many distinct keys.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The symbol of `key`, numbering it next if it is new.
    pub(crate) fn intern(&mut self, key: u64) -> Sym {
        let key = key.max(1);
        if self.newest.keys.is_empty() {
            self.newest = Table::new();
        }
        if let Some(sym) = self.newest.get(key) {
            return sym;
        }
        let older = self
            .sealed
            .iter()
            .rev()
            .filter(|(_, filter)| may_hold(filter, key))
            .find_map(|(table, _)| table.get(key));
        if let Some(sym) = older {
            return sym;
        }
        if self.newest.len == GENERATION {
            let full = std::mem::replace(&mut self.newest, Table::new());
            let filter = full.filter();
            self.sealed.push((full, filter));
        }
        let sym = u32::try_from(self.len).unwrap_or(Sym::MAX);
        let slot = self.newest.slot(key);
        self.newest.keys[slot] = key;
        self.newest.syms[slot] = sym;
        self.newest.len += 1;
        self.len += 1;
        sym
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_numbered_in_order_of_first_sight_across_generations() {
        let mut s = Symbols::default();
        let key = |i: u64| (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let n = 3 * GENERATION as u64 + 17;
        for i in 0..n {
            assert_eq!(s.intern(key(i)), u32::try_from(i).unwrap());
            // A link back to a recent record, and one far back.
            assert_eq!(s.intern(key(i / 2)), u32::try_from(i / 2).unwrap());
        }
        for i in (0..n).step_by(97) {
            assert_eq!(s.intern(key(i)), u32::try_from(i).unwrap());
        }
        assert_eq!(s.len(), usize::try_from(n).unwrap());
        // 0 is a key like any other.
        let zero = s.intern(0);
        assert_eq!(zero, u32::try_from(n).unwrap());
        assert_eq!(s.intern(0), zero);
    }
}
