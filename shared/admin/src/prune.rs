//! `ktr prune`: forget old finished operations.
//!
//! What may go, for a *terminal* operation whose last update is older than
//! the limit: its operation file, its artifacts dir (backup copy of the
//! source, snapshot, ack receipt), the key keeper's folders its switches
//! left (`keep/<id>-<stage>/`: keys a person typed), and — only for a
//! failed or cancelled operation that never reached `activating` — a
//! candidate transcript the stages left behind in `project_dir`, if it is
//! still byte for byte what ktr wrote (no Claude Code ever resumed it), no
//! pointer names it and no other operation used it as its source.
//!
//! What never goes without the word `FORGET`: the last copy of a session's
//! history — the only backup left of a session whose transcript Claude
//! Code has already deleted (its `cleanupPeriodDays`), whatever its
//! operation's status (a failed rollback leaves the operation `failed`);
//! the outcome names the session. A pruned operation's lineage link (source →
//! candidate) is kept in `<state>/lineage.jsonl`, so recall still finds
//! the lineage.
//!
//! What never goes: a non-terminal operation; the newest activated operation
//! of each session (the handle for rolling that session back: one per
//! session, several sessions at once); a source transcript;
//! any other file in `project_dir`; `ktr.log` and `worker.log`; anything
//! reached through a symlink. The whole decision and the deletion happen
//! under the household lock, exclusively, so no stage of any session can
//! start or finish half-way through. The operation file is removed last: an interrupted prune leaves
//! an operation that a later prune still finds.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::report::age;
use ktr_base::config::Config;
use ktr_base::digest::sha256_file;
use ktr_base::error::{Error, Result};
use ktr_base::ids::{OperationId, SessionId};
use ktr_pipeline::operation::{Operation, Stage, Status, Store};
use ktr_pipeline::recall::lineage;

/// One file or directory prune deletes (or would delete).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Doomed {
    pub path: PathBuf,
    /// `operation`, `artifacts`, `keys`, `candidate` or `prompt` (prune);
    /// `file`, `folder` or `candidate` (purge).
    pub what: &'static str,
    pub bytes: u64,
}

/// Something prune looked at and leaves alone, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Kept {
    /// The operation id.
    pub id: String,
    pub status: Status,
    /// A path when only one file of a pruned operation is kept.
    pub path: Option<PathBuf>,
    pub why: String,
}

/// One operation prune removes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pruned {
    pub id: String,
    pub status: Status,
    pub updated_at: String,
    pub files: Vec<Doomed>,
}

/// What prune did, or would do without `--yes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    pub older_than_days: u64,
    /// false: a dry run, nothing was deleted.
    pub deleted: bool,
    pub pruned: Vec<Pruned>,
    pub kept: Vec<Kept>,
    pub bytes: u64,
    /// Sessions whose last copy of history is (or would be) removed: only
    /// with the word FORGET.
    pub forgotten: Vec<String>,
    /// Kept or blocked prompts (`<state_dir>/prompts/`, the text a person
    /// typed) not written for `older_than_days`.
    pub prompts: Vec<Doomed>,
}

/// The handle to roll each session back: of the activated operations
/// whose candidate no other switch took as its source (`links`: every
/// operation's and the ones prune kept, so a pruned later rebuild still
/// counts), the newest for each source session (an older rebuild of the
/// same source left a session that no longer runs). Several sessions at
/// once: one per session, not one per household. `ops` oldest first.
fn rollback_handles(ops: &[Operation], links: &[lineage::Link]) -> Vec<OperationId> {
    let rebuilt_again = |op: &Operation| {
        op.candidate.as_ref().is_some_and(|c| {
            links
                .iter()
                .any(|l| l.operation != op.id && l.source == c.session_id)
        })
    };
    let mut sources = Vec::new();
    let mut handles = Vec::new();
    let heads = ops
        .iter()
        .rev()
        .filter(|op| op.status == Status::Activated && !rebuilt_again(op));
    for op in heads {
        let source = lineage::source_session(op);
        if !sources.contains(&source) {
            sources.push(source);
            handles.push(op.id.clone());
        }
    }
    handles
}

/// Decide, and delete when `delete`, under the coordinator lock.
pub fn prune(
    store: &Store,
    config: &Config,
    older_than_days: u64,
    now: SystemTime,
    delete: bool,
    forget: bool,
) -> Result<Outcome> {
    let limit = Duration::from_secs(older_than_days.saturating_mul(86_400));
    store.with_lock(|tx| {
        let ops = tx.store().list()?;
        let in_flight: Vec<_> = tx.store().in_flight().into_iter().map(|e| e.id).collect();
        let handles = rollback_handles(&ops, &lineage::links(tx.store())?);
        let mut outcome = Outcome {
            older_than_days,
            deleted: delete,
            pruned: Vec::new(),
            kept: Vec::new(),
            bytes: 0,
            forgotten: Vec::new(),
            prompts: old_prompts(store.dir(), now, limit),
        };
        outcome.bytes += outcome.prompts.iter().map(|f| f.bytes).sum::<u64>();
        let mut links = Vec::new();
        let mut copies = Copies::of(&ops, config);
        for op in &ops {
            let keep = |why: String| Kept {
                id: op.id.to_string(),
                status: op.status,
                path: None,
                why,
            };
            if !op.status.is_terminal() || in_flight.contains(&op.id) {
                outcome.kept.push(keep("not finished".into()));
                continue;
            }
            if handles.contains(&op.id) {
                outcome.kept.push(keep(
                    "newest activated operation of its session: the handle to roll that session back"
                        .into(),
                ));
                continue;
            }
            match age(&op.updated_at, now) {
                Some(a) if a >= limit => {}
                Some(_) => {
                    outcome
                        .kept
                        .push(keep(format!("younger than {older_than_days} days")));
                    continue;
                }
                None => {
                    outcome.kept.push(keep(format!(
                        "unreadable updated_at {:?}: age unknown",
                        op.updated_at
                    )));
                    continue;
                }
            }
            if let Some(session) = copies.last_one(op) {
                if !forget {
                    outcome.kept.push(keep(format!(
                        "its backup is the only copy left of session {session}'s history (Claude Code deleted the transcript); ktr prune --confirm FORGET removes it"
                    )));
                    continue;
                }
                outcome.forgotten.push(session);
            }
            copies.gone(op);
            links.extend(lineage::link_of(op));
            links.extend(lineage::restore_link_of(op));
            let mut files = Vec::new();
            match leftover_candidate(op, &ops, config, true) {
                Ok(Some(doomed)) => files.push(doomed),
                Ok(None) => {}
                Err(why) => outcome.kept.push(Kept {
                    path: op.candidate.as_ref().map(|c| c.path.clone()),
                    ..keep(why)
                }),
            }
            match artifacts(store, &op.id) {
                Ok(Some(doomed)) => files.push(doomed),
                Ok(None) => {}
                Err(why) => outcome.kept.push(keep(why)),
            }
            for kept_keys in keys_left(store, &op.id) {
                match kept_keys {
                    Ok(doomed) => files.push(doomed),
                    Err(why) => outcome.kept.push(keep(why)),
                }
            }
            let op_path = store.operation_path(&op.id);
            files.push(Doomed {
                bytes: fs::metadata(&op_path).map_or(0, |m| m.len()),
                path: op_path,
                what: "operation",
            });
            outcome.bytes += files.iter().map(|f| f.bytes).sum::<u64>();
            outcome.pruned.push(Pruned {
                id: op.id.to_string(),
                status: op.status,
                updated_at: op.updated_at.to_string(),
                files,
            });
        }
        if delete {
            for doomed in &outcome.prompts {
                remove(doomed)?;
            }
            lineage::keep_links(store.dir(), &links)?;
            for pruned in &outcome.pruned {
                for doomed in &pruned.files {
                    remove(doomed)?;
                }
            }
        }
        Ok(outcome)
    })
}

/// What follows the session id in the name of a prompt file ktr (or the
/// pointer runner) writes: kept, blocked, being pasted, pasted, put
/// back, being sent again. A name of any other form is not pruned (purge
/// still removes the whole folder).
const PROMPT_STATES: &[&str] = &[
    "last",
    "blocked",
    "pasting",
    "paste",
    "back",
    "blocked.resending",
];

/// The files of `<state_dir>/prompts/` in the form ktr writes them (a
/// regular file `<session id>.<state>`) last written at least `limit`
/// before `now` (a prompt kept for a paste-back that never came).
fn old_prompts(state_dir: &Path, now: SystemTime, limit: Duration) -> Vec<Doomed> {
    let Ok(entries) = fs::read_dir(ktr_pipeline::prompt_back::dir(state_dir)) else {
        return Vec::new();
    };
    let mut old: Vec<Doomed> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let (session, state) = name.to_str()?.split_once('.')?;
            SessionId::parse(session).ok()?;
            PROMPT_STATES.contains(&state).then_some(())?;
            let meta = e.metadata().ok().filter(fs::Metadata::is_file)?;
            let written = meta.modified().ok()?;
            (now.duration_since(written).ok()? >= limit).then(|| Doomed {
                path: e.path(),
                what: "prompt",
                bytes: meta.len(),
            })
        })
        .collect();
    old.sort_by(|a, b| a.path.cmp(&b.path));
    old
}

/// The copies of each session whose transcript Claude Code deleted: the
/// backups on disk that hold it (any operation, whatever its status: a
/// backup is always of a session that ran). Prune goes oldest first, so
/// the newest backup of a session (the fullest) is the one left.
struct Copies {
    project: PathBuf,
    left: std::collections::HashMap<String, usize>,
}

impl Copies {
    fn of(ops: &[Operation], config: &Config) -> Copies {
        let mut copies = Copies {
            project: config.project_dir.clone(),
            left: std::collections::HashMap::new(),
        };
        for op in ops {
            if let Some(session) = copies.backed_up(op) {
                *copies.left.entry(session).or_default() += 1;
            }
        }
        copies
    }

    /// The session `op`'s backup holds, when that backup is on disk and
    /// the session's transcript is gone from `project_dir`.
    fn backed_up(&self, op: &Operation) -> Option<String> {
        let backup = op.backup.as_ref()?;
        let session = SessionId::of_transcript(backup).ok()?;
        // Only a regular file is a copy: a link, FIFO or folder in the
        // transcript's place holds nothing of it.
        let copy = |p: &Path| fs::symlink_metadata(p).is_ok_and(|m| m.is_file());
        let live = self.project.join(format!("{session}.jsonl"));
        (copy(backup) && !copy(&live)).then(|| session.to_string())
    }

    /// The session whose only copy left is `op`'s backup.
    fn last_one(&self, op: &Operation) -> Option<String> {
        let session = self.backed_up(op)?;
        (self.left.get(&session).copied().unwrap_or(0) <= 1).then_some(session)
    }

    /// `op` is pruned: its backup is one copy fewer.
    fn gone(&mut self, op: &Operation) {
        if let Some(session) = self.backed_up(op)
            && let Some(n) = self.left.get_mut(&session)
        {
            *n = n.saturating_sub(1);
        }
    }
}

/// The candidate transcript of `op` if it may be deleted; `Ok(None)` when
/// there is none on disk; `Err(why)` when one exists and must stay.
/// `finished_only`: only a failed or cancelled operation's (prune); purge
/// also takes the candidate of an operation that ended any other way
/// without reaching the target.
pub(crate) fn leftover_candidate(
    op: &Operation,
    ops: &[Operation],
    config: &Config,
    finished_only: bool,
) -> std::result::Result<Option<Doomed>, String> {
    let Some(candidate) = &op.candidate else {
        return Ok(None);
    };
    let sid = &candidate.session_id;
    if SessionId::parse(sid).is_err() {
        return Err(format!(
            "candidate session id {sid:?} is invalid: left alone"
        ));
    }
    let project = config
        .project_dir
        .canonicalize()
        .unwrap_or_else(|_| config.project_dir.clone());
    let expected = project.join(format!("{sid}.jsonl"));
    let meta = match fs::symlink_metadata(&expected) {
        Ok(m) => m,
        Err(_) if fs::symlink_metadata(&candidate.path).is_err() => return Ok(None),
        Err(_) => {
            return Err(format!(
                "candidate {} is not at {}: left alone",
                candidate.path.display(),
                expected.display()
            ));
        }
    };
    let refuse = |why: &str| Err(format!("candidate {}: {why}", expected.display()));
    if op.status == Status::Activated {
        return refuse("the operation was activated; it is (or was) a live session");
    }
    if finished_only && !matches!(op.status, Status::Failed | Status::Cancelled) {
        return refuse("the operation was activated; it is (or was) a live session");
    }
    let reached_target = op
        .history
        .iter()
        .any(|t| matches!(t.to, Status::Activating | Status::Activated));
    if reached_target || op.needs_attention {
        return refuse("the operation reached the target; the session may have run");
    }
    let recorded_here = candidate.path.file_name() == expected.file_name()
        && candidate
            .path
            .parent()
            .and_then(|p| p.canonicalize().ok())
            .is_some_and(|p| p == project);
    if !recorded_here {
        return refuse("the recorded path is not <project_dir>/<candidate id>.jsonl");
    }
    if !meta.is_file() {
        return refuse("not a regular file");
    }
    if !sha256_file(&expected).is_ok_and(|d| d == candidate.sha256) {
        return refuse("changed since ktr wrote it (someone resumed it)");
    }
    if fs::read_to_string(&config.resume_pointer_path).is_ok_and(|p| p.trim() == sid.as_str()) {
        return refuse("the resume pointer names it");
    }
    if ops.iter().any(|o| o.session_id.as_deref() == Some(sid)) {
        return refuse("another operation rebuilt from it");
    }
    Ok(Some(Doomed {
        path: expected,
        what: "candidate",
        bytes: meta.len(),
    }))
}

/// `artifacts/<id>/` if it is a real directory.
fn artifacts(store: &Store, id: &OperationId) -> std::result::Result<Option<Doomed>, String> {
    OperationId::parse(id).map_err(|e| e.message)?;
    real_dir(store.dir().join("artifacts").join(id), "artifacts")
}

/// The key keeper's folders an operation's switches left behind
/// (`keep/<id>-activate/`, `keep/<id>-rollback/`: keys a person typed that
/// could not all be replayed, or a stage killed mid-switch).
fn keys_left(store: &Store, id: &OperationId) -> Vec<std::result::Result<Doomed, String>> {
    [Stage::Activate, Stage::Rollback]
        .into_iter()
        .filter_map(|stage| real_dir(store.keys_dir(id, stage), "keys").transpose())
        .collect()
}

/// `dir` as `what` to delete if it is a real directory; `Ok(None)` when
/// it does not exist; `Err(why)` when something else stands there.
fn real_dir(dir: PathBuf, what: &'static str) -> std::result::Result<Option<Doomed>, String> {
    match fs::symlink_metadata(&dir) {
        Err(_) => Ok(None),
        Ok(m) if m.is_dir() => Ok(Some(Doomed {
            bytes: tree_bytes(&dir),
            path: dir,
            what,
        })),
        Ok(_) => Err(format!(
            "{} is not a directory (a symlink?): left alone",
            dir.display()
        )),
    }
}

/// The bytes of the regular files in `dir`, recursively (links not followed).
pub(crate) fn tree_bytes(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => tree_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

pub(crate) fn remove(doomed: &Doomed) -> Result<()> {
    let result = if matches!(doomed.what, "artifacts" | "keys" | "folder") {
        // remove_dir_all never follows symlinks inside the tree.
        fs::remove_dir_all(&doomed.path)
    } else {
        fs::remove_file(&doomed.path)
    };
    match result {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::io_at("remove", &doomed.path, &e))
        }
        _ => Ok(()),
    }
}
