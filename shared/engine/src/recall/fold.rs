//! Where a hit goes once its file is searched: what the window already
//! carries folds into one line with its older copies (it does not use the
//! limit); the rest, within its session, goes in the order the model needs
//! it — tool results, tool inputs, thinking, injections and offloaded
//! files before conversation text, file order within each.

use std::collections::HashMap;

use super::{Carried, Found, Hit, Kind, Search};

/// The fewest carried lines shown (whatever the limit; they do not use it).
const CARRIED_SHOWN: usize = 10;

/// A hit's place within its session.
pub(crate) fn rank(hit: &Hit) -> u8 {
    match (hit.kind, hit.offloaded.is_some()) {
        (Kind::ToolResult, false) => 0,
        (Kind::ToolUse, _) => 1,
        (Kind::Thinking, _) => 2,
        (Kind::Injection, _) => 3,
        (Kind::ToolResult, true) | (Kind::Image, _) => 4,
        (Kind::User | Kind::Assistant, _) => 5,
    }
}

/// Whether a hit uses the limit.
pub(crate) fn counts(s: &Search, hit: &Hit) -> bool {
    s.all_copies || hit.window.is_none()
}

/// The carried texts seen so far: window copy → its line in `found.carried`.
#[derive(Default)]
pub(crate) struct Folds {
    at: HashMap<String, usize>,
}

impl Folds {
    /// Place one session's hits (file order) into `found`.
    pub(crate) fn place(&mut self, s: &Search, found: &mut Found, mut hits: Vec<Hit>) {
        hits.sort_by_key(rank);
        for hit in hits {
            if counts(s, &hit) {
                if found.hits.len() < s.limit {
                    found.hits.push(hit);
                } else {
                    found.more_at_least += 1;
                }
                continue;
            }
            let key = hit.window.clone().unwrap_or_default();
            match self.at.get(&key) {
                Some(&i) => found.carried[i].older_copies += 1,
                None if found.carried.len() < s.limit.max(CARRIED_SHOWN) => {
                    self.at.insert(key, found.carried.len());
                    found.carried.push(Carried {
                        hit,
                        older_copies: 0,
                    });
                }
                None => found.carried_more += 1,
            }
        }
    }
}
