//! Which records are the conversation (SPEC §4).
//!
//! `chain` mode does what Claude Code does on `--resume`: walk `parentUuid`
//! back from the last user/assistant record, crossing compaction boundaries
//! through `logicalParentUuid`. Records sharing `message.id` with the chain
//! (parallel tool calls) belong to it. Speech off the chain was abandoned by
//! `/rewind` (or a new root) and is counted. When the links cannot be
//! trusted, the file order is used and the reason is stated.

use std::collections::HashMap;

use crate::scan::{Link, Node, RecordRole, Scan, Speech};
use ktr_base::config::HistoryMode;

/// The conversation's records, in order.
#[derive(Debug)]
pub(crate) struct History {
    /// Indices into `scan.events`, in conversation order.
    pub events: Vec<usize>,
    /// Chain, or file order (as asked, or as a fallback).
    pub mode: HistoryMode,
    pub fallback_reason: Option<String>,
    /// Speech-bearing user/assistant records off the chain.
    pub abandoned: Vec<usize>,
    /// Slash commands off the chain (local commands that forked the chain).
    pub off_chain_commands: Vec<usize>,
}

/// How the walk from the leaf ended.
enum WalkEnd {
    /// Reached `parentUuid: null` (or the leaf had no parent link).
    Root,
    /// A parent uuid that no record has.
    Dangling,
    /// A compaction boundary without `logicalParentUuid`.
    BoundaryWithoutLogical,
}

/// Choose the conversation from a scan.
pub fn select(scan: &Scan, mode: HistoryMode) -> History {
    if mode == HistoryMode::File {
        return file_order(scan, None);
    }
    match chain(scan) {
        Ok(h) => h,
        Err(reason) => file_order(scan, Some(reason)),
    }
}

fn file_order(scan: &Scan, reason: Option<String>) -> History {
    let events = scan
        .nodes
        .iter()
        .filter(|n| !n.sidechain())
        .filter_map(Node::event)
        .collect();
    History {
        events,
        mode: HistoryMode::File,
        fallback_reason: reason,
        abandoned: Vec::new(),
        off_chain_commands: Vec::new(),
    }
}

fn chain(scan: &Scan) -> Result<History, String> {
    if scan.unlinked_records > 0 {
        return Err(format!(
            "{} user/assistant record(s) lack uuid or parentUuid",
            scan.unlinked_records
        ));
    }
    if scan.repeated_uuids > 0 {
        return Err(format!(
            "{} user/assistant uuid(s) repeat",
            scan.repeated_uuids
        ));
    }
    let nodes = &scan.nodes;
    let by_uuid = ByUuid::new(nodes, scan.symbol_count());
    let Some(leaf) = newest_leaf(nodes, &by_uuid) else {
        return Ok(History {
            events: Vec::new(),
            mode: HistoryMode::Chain,
            fallback_reason: None,
            abandoned: Vec::new(),
            off_chain_commands: Vec::new(),
        });
    };
    // Walk back from the leaf.
    // Node indices (u32: a file has fewer than 2^32 lines) in walk order.
    let mut on_chain: Vec<u32> = Vec::new();
    // Also the set of the chain's nodes once the walk ends.
    let mut seen = vec![false; nodes.len()];
    let mut cur = leaf;
    let end = loop {
        if std::mem::replace(&mut seen[cur], true) {
            return Err(format!(
                "parentUuid links form a cycle at line {}",
                nodes[cur].line()
            ));
        }
        on_chain.push(idx(cur));
        let node = &nodes[cur];
        let next = match (node.parent(), node.boundary()) {
            (Link::To(p), _) => match by_uuid.get(p) {
                Some(i) => i,
                None => break WalkEnd::Dangling,
            },
            (_, true) => match node.logical_parent() {
                Some(lp) => match by_uuid.get(lp) {
                    Some(i) => i,
                    None => break WalkEnd::Dangling,
                },
                None => break WalkEnd::BoundaryWithoutLogical,
            },
            (Link::Root | Link::Missing, false) => break WalkEnd::Root,
        };
        cur = next;
    };
    on_chain.reverse();
    let chain_set = seen;

    // Parallel tool-call siblings: off-chain assistant lines sharing a
    // message id with the chain.
    // Sized once: a table that doubles re-inserts everything at once, and
    // the pages that touches are not given back before the copy ends.
    let mut anchor_of_message: HashMap<u64, u32> = HashMap::with_capacity(on_chain.len());
    for (pos, &i) in on_chain.iter().enumerate() {
        if let Some(m) = nodes[i as usize].message_id() {
            anchor_of_message.entry(m).or_insert(idx(pos));
        }
    }
    // (chain position, line, node) of the chain's records that hold
    // speech: in order already.
    let ordered: Vec<(u32, u32, u32)> = on_chain
        .iter()
        .enumerate()
        .filter(|&(_, &i)| nodes[i as usize].event().is_some())
        .map(|(pos, &i)| (idx(pos), idx(nodes[i as usize].line()), i))
        .collect();
    let mut siblings = Vec::new();
    let mut abandoned = Vec::new();
    let mut off_chain_commands = Vec::new();
    let first_chain_line = on_chain
        .iter()
        .map(|&i| nodes[i as usize].line())
        .min()
        .unwrap_or(0);
    let mut hidden_earlier = false;
    for (i, n) in nodes.iter().enumerate() {
        if chain_set[i] || n.sidechain() || (n.role == RecordRole::Other && n.event().is_none()) {
            continue;
        }
        if let Some(pos) = n.message_id().and_then(|m| anchor_of_message.get(&m)) {
            if n.event().is_some() {
                siblings.push((*pos, idx(n.line()), idx(i)));
            }
            continue;
        }
        match n.event().map(|e| (e, scan.events[e].speech())) {
            Some((e, Speech::User | Speech::Assistant | Speech::Summary)) => {
                abandoned.push(e);
                hidden_earlier |= n.line() < first_chain_line;
            }
            Some((e, Speech::Slash)) => off_chain_commands.push(e),
            _ => {}
        }
    }
    match end {
        WalkEnd::Dangling if hidden_earlier => {
            return Err(
                "a parentUuid points to a record not in the file, hiding earlier speech".into(),
            );
        }
        WalkEnd::BoundaryWithoutLogical if hidden_earlier => {
            return Err(
                "a compaction boundary has no logicalParentUuid, hiding earlier speech".into(),
            );
        }
        _ => {}
    }
    // Each sibling goes after its anchor (and after siblings of the same
    // anchor on earlier lines): merged in, not sorted together, so the
    // long list is only read in order.
    siblings.sort_unstable();
    let events = merged(&ordered, &siblings)
        .filter_map(|(_, _, i)| nodes[i as usize].event())
        .collect();
    Ok(History {
        events,
        mode: HistoryMode::Chain,
        fallback_reason: None,
        abandoned,
        off_chain_commands,
    })
}

/// Two sorted lists as one sorted list.
fn merged<'a, T: Ord + Copy>(a: &'a [T], b: &'a [T]) -> impl Iterator<Item = T> + 'a {
    let (mut a, mut b) = (a.iter().peekable(), b.iter().peekable());
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some(x), Some(y)) if y < x => b.next().copied(),
        (Some(_), _) => a.next().copied(),
        (None, _) => b.next().copied(),
    })
}

/// A node index, chain position or line number as the walk keeps it
/// ([`crate::scan::Scan::read`] refuses files with more lines than
/// a `u32` counts).
fn idx(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

/// Whether a record takes part in the conversation (speech or its frame).
fn is_conversation(n: &Node) -> bool {
    (n.role != RecordRole::Other || n.event().is_some()) && !n.sidechain()
}

/// The conversation's newest leaf: the last conversation record in file
/// order that no later conversation record descends from. (A reply can be
/// written before its parent; the last line is then not the leaf.)
fn newest_leaf(nodes: &[Node], by_uuid: &ByUuid) -> Option<usize> {
    let mut has_child = vec![false; nodes.len()];
    for n in nodes.iter().filter(|n| is_conversation(n)) {
        // Mark the nearest conversation ancestor, passing through frame
        // records (attachments, system, progress) in between.
        let mut link = n.parent();
        for _ in 0..nodes.len() {
            let Link::To(p) = link else { break };
            let Some(i) = by_uuid.get(p) else { break };
            if is_conversation(&nodes[i]) {
                has_child[i] = true;
                break;
            }
            link = nodes[i].parent();
        }
    }
    let mut leaves = (0..nodes.len())
        .rev()
        .filter(|&i| is_conversation(&nodes[i]));
    let last = leaves.clone().next();
    leaves.find(|&i| !has_child[i]).or(last)
}

/// uuid symbol → the first node with that uuid (duplicates of non-speech
/// records such as progress lines are harmless), one `u32` a symbol: the
/// node's index + 1, 0 for none (so the table starts zeroed).
struct ByUuid(Vec<u32>);

impl ByUuid {
    fn new(nodes: &[Node], symbols: usize) -> ByUuid {
        let mut first = vec![0; symbols];
        for (i, n) in nodes.iter().enumerate() {
            if let Some(u) = n.uuid()
                && first[u as usize] == 0
            {
                first[u as usize] = idx(i + 1);
            }
        }
        ByUuid(first)
    }

    fn get(&self, sym: u32) -> Option<usize> {
        self.0
            .get(sym as usize)
            .filter(|&&i| i != 0)
            .map(|&i| i as usize - 1)
    }
}
