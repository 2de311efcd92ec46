//! The lineage: the current session and every session it was rebuilt
//! from, back to the first, from ktr's operation files (an activated
//! operation links its source session to its candidate) and from the
//! links `ktr prune` kept when it removed old operation files
//! (`<state>/lineage.jsonl`). Each member names where its text lives: the
//! live transcript (if Claude Code has not deleted it) and the frozen
//! backup (what the session held when it was rebuilt).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::operation::{Operation, Status, Store};
use ktr_base::ids::{OperationId, SessionId};
use ktr_base::open::{Links, read_capped};
use ktr_base::{Error, Result};

/// The file where pruned operations leave their link.
pub const LINKS_FILE: &str = "lineage.jsonl";
const LINKS_CAP: u64 = 16 << 20;
/// The deepest lineage followed (a loop in edited files ends here).
const DEPTH_MAX: usize = 10_000;

/// One rebuild: `source` was rebuilt onto `candidate` by `operation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    pub source: SessionId,
    pub candidate: SessionId,
    pub operation: OperationId,
    /// When the operation was created (RFC 3339).
    pub at: String,
}

/// A session of the lineage.
#[derive(Debug, Clone, Serialize)]
pub struct Member {
    pub session: String,
    /// `<project_dir>/<session>.jsonl`, if it is still there.
    pub live: Option<PathBuf>,
    /// The operation that rebuilt this session onto the next one, and its
    /// frozen backup, if that is still there.
    pub rebuilt_by: Option<OperationId>,
    pub backup: Option<PathBuf>,
    /// When it was rebuilt.
    pub rebuilt_at: Option<String>,
}

impl Member {
    /// Whether any copy of its text is left.
    pub fn readable(&self) -> bool {
        self.live.is_some() || self.backup.is_some()
    }
}

/// The links the operation files and the kept links name (one per
/// candidate: the newest operation wins).
pub fn links(store: &Store) -> Result<Vec<Link>> {
    let mut links = kept_links(store.dir())?;
    for op in store.list()? {
        links.extend(link_of(&op));
        links.extend(restore_link_of(&op));
    }
    Ok(links)
}

/// The link an operation makes, if its candidate became the session —
/// whatever happened after (a rollback, a rollback that failed): the
/// candidate ran, rebuilt from the source.
pub fn link_of(op: &Operation) -> Option<Link> {
    let switched = matches!(
        op.status,
        Status::Activated
            | Status::RollbackPending
            | Status::RollbackScheduled
            | Status::RollingBack
    ) || op.history.iter().any(|t| t.to == Status::Activated);
    let candidate = op.candidate.as_ref()?;
    if !switched {
        return None;
    }
    Some(Link {
        source: source_session(op)?,
        candidate: candidate.session_id.clone(),
        operation: op.id.clone(),
        at: op.created_at.to_string(),
    })
}

/// The link a rollback's restore session makes once the rollback ended
/// (rolled back, or failed after it built it): the restore session carries
/// the rebuilt session's turns since the switch after the old session's
/// records, so its lineage goes on through the rebuilt session to the old
/// one and further back.
pub fn restore_link_of(op: &Operation) -> Option<Link> {
    let restore = op.restore.as_ref()?;
    if !matches!(op.status, Status::RolledBack | Status::Failed) {
        return None;
    }
    Some(Link {
        source: op.candidate.as_ref()?.session_id.clone(),
        candidate: restore.session_id.clone(),
        operation: op.id.clone(),
        at: op.updated_at.to_string(),
    })
}

/// The source session: the backup's name (`artifacts/<id>/<session>.jsonl`),
/// else the operation's session, else its transcript's name.
pub fn source_session(op: &Operation) -> Option<SessionId> {
    let named = |p: &Path| SessionId::of_transcript(p).ok();
    op.backup
        .as_deref()
        .and_then(named)
        .or_else(|| op.session_id.clone())
        .or_else(|| op.transcript_path.as_deref().and_then(named))
}

/// `<state>/lineage.jsonl`: links of pruned operations.
fn kept_links(state: &Path) -> Result<Vec<Link>> {
    let path = state.join(LINKS_FILE);
    let Some(bytes) = read_capped(&path, LINKS_CAP, Links::Refuse)? else {
        return Ok(Vec::new());
    };
    Ok(bytes
        .split(|&b| b == b'\n')
        .filter_map(|line| serde_json::from_slice::<Link>(line).ok())
        .collect())
}

/// The lineage of `current`, newest first.
pub fn lineage(store: &Store, project: &Path, current: &str) -> Result<Vec<Member>> {
    let links = links(store)?;
    let by_candidate: HashMap<&str, &Link> =
        links.iter().map(|l| (l.candidate.as_str(), l)).collect();
    let mut members = vec![member(store, project, current, None)];
    let mut seen = HashSet::from([current.to_string()]);
    let mut at = current.to_string();
    while let Some(link) = by_candidate.get(at.as_str()) {
        if !seen.insert(link.source.to_string()) || members.len() >= DEPTH_MAX {
            break;
        }
        members.push(member(store, project, &link.source, Some(link)));
        at = link.source.to_string();
    }
    Ok(members)
}

fn member(store: &Store, project: &Path, session: &str, link: Option<&Link>) -> Member {
    let live = project.join(format!("{session}.jsonl"));
    let backup = link.map(|l| {
        store
            .dir()
            .join("artifacts")
            .join(&l.operation)
            .join(format!("{session}.jsonl"))
    });
    Member {
        session: session.to_string(),
        live: live.is_file().then_some(live),
        rebuilt_by: link.map(|l| l.operation.clone()),
        backup: backup.filter(|b| b.is_file()),
        rebuilt_at: link.map(|l| l.at.clone()),
    }
}

/// Append links to `<state>/lineage.jsonl` (before their operation files
/// are removed), so the lineage outlives them.
pub fn keep_links(state: &Path, links: &[Link]) -> Result<()> {
    use std::io::Write;
    if links.is_empty() {
        return Ok(());
    }
    let path = state.join(LINKS_FILE);
    let mut file = ktr_base::open::append_private(&path)?;
    let mut text = String::new();
    for l in links {
        text.push_str(
            &serde_json::to_string(l)
                .map_err(|e| Error::io(format!("cannot keep a lineage link: {e}")))?,
        );
        text.push('\n');
    }
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| Error::io_at("write", &path, &e))
}
