//! What the current window carries, for each session of the lineage: the
//! items the rebuild carried into the current session, and in each older
//! session the records they came from — followed through the rebuilds'
//! manifests (each carried item names the source record it came from),
//! never by comparing texts. Turns before the current session's last
//! compaction boundary are not carried: a rebuild's items are the first
//! lines of its session, so once that session compacted, none of them is
//! in the window.

use std::collections::HashMap;

use super::lineage::{Member, source_session};
use crate::operation::Store;
use crate::operation::manifest::{self, Line};
use ktr_engine::recall::Window;
use ktr_engine::recall::window::last_boundary;

/// The window of each session of `lineage` (newest first), by session.
/// A manifest that is gone or changed carries nothing further back.
pub(crate) fn windows(store: &Store, lineage: &[Member]) -> HashMap<String, Window> {
    let mut out: HashMap<String, Window> = HashMap::new();
    let Some(current) = lineage.first() else {
        return out;
    };
    // The boundary is looked for only when a rebuild carried something in.
    let first = match lineage.get(1) {
        Some(older) => carried_items(store, current, older),
        None => Vec::new(),
    };
    if first.is_empty() {
        return out;
    }
    let compacted = current
        .live
        .as_deref()
        .and_then(|p| ktr_base::open::open_regular(p, ktr_base::open::Links::Refuse).ok())
        .and_then(|f| last_boundary(&f).ok())
        .is_some_and(|at| at > 0);
    if compacted {
        return out;
    }
    let mut first = Some(first);
    for (i, pair) in lineage.windows(2).enumerate() {
        let (newer, older) = (&pair[0], &pair[1]);
        let mut carried = HashMap::new();
        let mut own = HashMap::new();
        let items = first
            .take()
            .unwrap_or_else(|| carried_items(store, newer, older));
        for (item, source) in items {
            let key = if i == 0 {
                own.insert(item.clone(), item.clone());
                Some(item)
            } else {
                out.get(&newer.session)
                    .and_then(|w| w.carried.get(&item))
                    .cloned()
            };
            if let Some(key) = key {
                carried.insert(source, key);
            }
        }
        if i == 0 {
            out.insert(newer.session.clone(), Window { carried: own });
        }
        if carried.is_empty() {
            break;
        }
        out.insert(older.session.clone(), Window { carried });
    }
    out
}

/// What the rebuild of `older` onto `newer` carried: (the item's uuid in
/// `newer`, its source record's uuid in `older`), from its manifest.
fn carried_items(store: &Store, newer: &Member, older: &Member) -> Vec<(String, String)> {
    let Some(op) = older.rebuilt_by.as_ref().and_then(|id| store.load(id).ok()) else {
        return Vec::new();
    };
    // A rollback's restore link names the same operation: only the rebuild
    // itself (older → newer) has a manifest of newer's items.
    let rebuild = op
        .candidate
        .as_ref()
        .is_some_and(|c| c.session_id.as_str() == newer.session)
        && source_session(&op).is_some_and(|s| s.as_str() == older.session);
    let Some(recorded) = op.manifest_artifact.as_ref().filter(|_| rebuild) else {
        return Vec::new();
    };
    let mut items = Vec::new();
    let read = manifest::for_each(store, &op.id, recorded, |line| {
        if let Line::Item(item) = line
            && let Some(source) = item.source_uuid
        {
            items.push((item.uuid, source));
        }
        Ok(())
    });
    if read.is_err() {
        items.clear();
    }
    items
}
