//! Recovery: an operation whose worker died is failed by the next command,
//! and a candidate that never ran is discarded (SPEC §9, incident 6).

use std::fs;
use std::io::ErrorKind as IoKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::{InFlight, Lane, Operation, RestoreFile, Status, Store};
use ktr_base::error::{Error, Result};
use ktr_base::ids::{OperationId, SessionId};

impl Store {
    /// In every lane, fail the operation in flight whose recorded worker is
    /// gone (dead or pid reused) and that has not been updated within the
    /// grace period: `error: "worker died during <status>"`; if it died
    /// while activating, what the target runs now is recorded and
    /// `needs_attention` is set. A pending request older than
    /// `request_ttl_hours` expires, each by its own age. Each lane is
    /// handled under its own lock, and only when it has something to end,
    /// so this never waits for another session's stage. A lost or
    /// older-layout `active` names nothing here (the hooks, `ktr doctor`
    /// and every lane's next write rebuild it). Returns the operations it
    /// failed or expired.
    pub fn recover_stale(&self) -> Result<Vec<Operation>> {
        let mut ended = Vec::new();
        for entry in self.in_flight() {
            ended.extend(self.recover_lane(&entry)?);
        }
        Ok(ended)
    }

    /// [`Store::recover_stale`] for one lane's operation in flight.
    fn recover_lane(&self, entry: &InFlight) -> Result<Option<Operation>> {
        if entry.status == Status::Pending || entry.status.offered() {
            return self.expire_stale_request(&entry.lane);
        }
        self.fail_dead_worker(entry, |_| {})
    }

    /// Fail operation `id` now, whatever the grace, if it is in flight and
    /// its recorded worker is gone: what a stage's watchdog does the moment
    /// the stage ended. `tell` runs just before the failure is saved (the
    /// failed operation, its lane), so whoever sees it failed can also see
    /// what `tell` left. Returns the operation it failed.
    pub(crate) fn recover_now(
        self,
        id: &OperationId,
        tell: impl FnOnce(&Operation, &Lane),
    ) -> Result<Option<Operation>> {
        let Some(entry) = self.in_flight().into_iter().find(|e| e.id == *id) else {
            return Ok(None);
        };
        let lane = entry.lane.clone();
        self.with_grace(Duration::ZERO)
            .fail_dead_worker(&entry, |op| tell(op, &lane))
    }

    /// Fail `entry`'s operation if its worker is gone and the grace passed
    /// (`tell`: see [`Store::recover_now`]).
    fn fail_dead_worker(
        &self,
        entry: &InFlight,
        tell: impl FnOnce(&Operation),
    ) -> Result<Option<Operation>> {
        if !self.load(&entry.id).is_ok_and(|op| self.is_stale(&op)) {
            return Ok(None);
        }
        self.with_lane(&entry.lane, |tx| {
            let Some(mut op) = tx.lane_operation(&entry.lane)? else {
                return Ok(None);
            };
            if !self.is_stale(&op) {
                return Ok(None);
            }
            let died_in = op.status;
            op.error = Some(format!("worker died during {died_in}"));
            op.worker_died_in = Some(died_in);
            if matches!(died_in, Status::Activating | Status::RollingBack) {
                op.needs_attention = true;
                // Its pane runs one of the operation's sessions: the source,
                // the candidate (killed after the switch) or the restore
                // session (a rollback's).
                let sessions = [
                    op.session_id.as_ref(),
                    op.candidate.as_ref().map(|c| &c.session_id),
                    op.restore.as_ref().map(|r| &r.session_id),
                ];
                let own = self
                    .serving
                    .as_ref()
                    .is_none_or(|s| sessions.contains(&Some(s)));
                op.target_after = Some(match self.target.as_ref().filter(|_| own) {
                    Some(t) => {
                        // It may have died holding the pane's keyboard.
                        t.release_input();
                        t.identity()
                            .unwrap_or_else(|e| format!("unknown: {}", e.message))
                    }
                    None if !own => {
                        "unknown: failed from another session's hook, which does not look at this session's target".into()
                    }
                    None => "unknown: no target configured for this command".into(),
                });
            }
            let pid = op.worker.as_ref().map_or(0, |w| w.pid);
            let mut note = format!("worker {pid} died during {died_in}");
            // A candidate that never ran is discarded; a failure to do so
            // is noted but never keeps the operation alive.
            let discarded = if died_in.before_switch() {
                discard_candidate(&op, self.project.as_deref())
            } else {
                Ok(None)
            };
            match discarded {
                Ok(Some(path)) => {
                    note.push_str(&format!("; candidate {} discarded", path.display()));
                }
                Ok(None) => {}
                Err(e) => note.push_str(&format!("; {e}")),
            }
            tell(&op);
            tx.transition(&mut op, Status::Failed, &note)?;
            Ok(Some(op))
        })
    }

    /// Expire `lane`'s pending request, or its offer nobody took, when it
    /// is older than `request_ttl_hours` (a store opened with
    /// [`Store::for_config`]).
    fn expire_stale_request(&self, lane: &Lane) -> Result<Option<Operation>> {
        let Some(ttl) = self.ttl else {
            return Ok(None);
        };
        self.with_lane(lane, |tx| {
            let Some(mut op) = tx.lane_operation(lane)? else {
                return Ok(None);
            };
            Ok(tx.expire_if_old(&mut op, ttl)?.then_some(op))
        })
    }

    /// Whether `session`'s operation in flight has a recorded worker that
    /// is gone (killed, out of memory): whatever the grace, its stage does
    /// nothing any more.
    pub(crate) fn dead_worker_in(&self, session: &SessionId) -> bool {
        self.in_flight().iter().any(|e| {
            e.lane == Lane::Session(session.clone())
                && self.load(&e.id).is_ok_and(|op| worker_gone(&op))
        })
    }

    /// [`worker_gone`], and not updated within the grace.
    fn is_stale(&self, op: &Operation) -> bool {
        if !worker_gone(op) {
            return false;
        }
        let updated = op.updated_at.time();
        SystemTime::now()
            .duration_since(updated)
            .is_ok_and(|age| age >= self.grace)
    }
}

/// Whether `op` is in flight with a recorded worker that is gone (an offer
/// waits for the person, not for its finished stage).
fn worker_gone(op: &Operation) -> bool {
    !op.status.is_terminal() && !op.status.offered() && op.worker.is_some() && !op.stage_alive()
}

/// Delete the never-activated candidate of `op` (SPEC §9: a failed stage
/// discards it), by the rule of [`remove_session_file`]. Returns the
/// removed path, if there was one.
pub fn discard_candidate(op: &Operation, project: Option<&Path>) -> Result<Option<PathBuf>> {
    let Some(c) = &op.candidate else {
        return Ok(None);
    };
    remove_session_file(op, "candidate", &c.path, &c.session_id, project)
}

/// Delete a restore session `op` built that never ran (a rollback offer
/// nobody took, an earlier attempt's), by the rule of [`remove_session_file`].
pub fn discard_restore(
    op: &Operation,
    restore: &RestoreFile,
    project: Option<&Path>,
) -> Result<Option<PathBuf>> {
    remove_session_file(
        op,
        "restore session",
        &restore.path,
        &restore.session_id,
        project,
    )
}

/// Delete a session file ktr wrote for `op` (`what`: its candidate, its
/// restore session). Only a file named `<session>.jsonl`, directly inside
/// `project` (`project_dir`; `None`: nothing is deleted), that is not the
/// source, is removed (a link there: the link, not what it names) — the
/// path comes from an operation file, which may have been edited, and a
/// session file of another project is a person's conversation. Its
/// `/resume` title goes with it. Returns the removed path, if there was one.
fn remove_session_file(
    op: &Operation,
    what: &str,
    path: &Path,
    session: &SessionId,
    project: Option<&Path>,
) -> Result<Option<PathBuf>> {
    let in_project = project
        .and_then(|p| p.canonicalize().ok())
        .is_some_and(|p| path.parent().and_then(|d| d.canonicalize().ok()) == Some(p));
    let named_for_it = in_project
        && path
            .file_name()
            .is_some_and(|n| *n == *format!("{session}.jsonl"));
    let is_source = op.transcript_path.as_ref().is_some_and(|t| {
        *t == path || matches!((t.canonicalize(), path.canonicalize()), (Ok(a), Ok(b)) if a == b)
    });
    if !named_for_it || is_source {
        return Err(Error::refused(format!(
            "operation {}: recorded {what} {} is not a session file of its own directly inside project_dir; not deleting it",
            op.id,
            path.display()
        )));
    }
    crate::title::remove(path, session);
    match fs::remove_file(path) {
        Ok(()) => Ok(Some(path.to_path_buf())),
        Err(e) if e.kind() == IoKind::NotFound => Ok(None),
        Err(e) => Err(Error::io_at(&format!("remove {what}"), path, &e)),
    }
}

impl super::Locked<'_> {
    /// Move a pending `op` older than `ttl` to `expired` (error: how long
    /// it waited and for which session). Returns whether it expired.
    pub(crate) fn expire_if_old(
        &mut self,
        op: &mut Operation,
        ttl: std::time::Duration,
    ) -> Result<bool> {
        if op.status.offered() {
            return self.expire_offer_if_old(op, ttl);
        }
        let created = op.created_at.time();
        let age = SystemTime::now()
            .duration_since(created)
            .unwrap_or_default();
        if op.status != Status::Pending || age < ttl {
            return Ok(false);
        }
        let why = format!(
            "request expired after {:.1} h (request_ttl_hours = {}): {} never stopped since it was requested",
            age.as_secs_f64() / 3600.0,
            ttl.as_secs_f64() / 3600.0,
            op.session_id.as_deref().map_or_else(
                || "no session in project_dir".to_string(),
                |s| format!("session {s}")
            )
        );
        op.error = Some(why.clone());
        self.transition(op, Status::Expired, &why)?;
        Ok(true)
    }

    /// An offer nobody took within `ttl` of being made (the hand target,
    /// SPEC §12 "By hand"): a rebuild's offer `expired`, its candidate
    /// (never run) removed, so a late `/resume <id>` finds nothing; a
    /// rollback's offer back to `activated` (the rebuilt session runs on),
    /// the restore session it built removed. Returns whether it expired.
    fn expire_offer_if_old(
        &mut self,
        op: &mut Operation,
        ttl: std::time::Duration,
    ) -> Result<bool> {
        let offered = op
            .history
            .iter()
            .rev()
            .find(|t| t.to == op.status)
            .map_or_else(|| op.updated_at.time(), |t| t.at.time());
        let age = SystemTime::now()
            .duration_since(offered)
            .unwrap_or_default();
        if age < ttl {
            return Ok(false);
        }
        let waited = format!(
            "nobody typed the offered line within {:.1} h (request_ttl_hours = {})",
            age.as_secs_f64() / 3600.0,
            ttl.as_secs_f64() / 3600.0
        );
        if op.status == Status::RollbackOffered {
            let discarded = op.restore.as_ref().map_or(Ok(None), |r| {
                discard_restore(op, r, self.store().project.as_deref())
            });
            let note = match discarded {
                Ok(Some(path)) => format!(
                    "rollback offer expired: {waited}; restore session {} removed; the rebuilt session runs on",
                    path.display()
                ),
                Ok(None) => {
                    format!("rollback offer expired: {waited}; the rebuilt session runs on")
                }
                Err(e) => {
                    format!("rollback offer expired: {waited}; {e}; the rebuilt session runs on")
                }
            };
            op.restore = None;
            self.transition(op, Status::Activated, &note)?;
            return Ok(true);
        }
        let discarded = discard_candidate(op, self.store().project.as_deref());
        let why = match discarded {
            Ok(Some(path)) => format!(
                "offer expired: {waited}; candidate {} removed, the old session untouched",
                path.display()
            ),
            Ok(None) => format!("offer expired: {waited}; the old session untouched"),
            Err(e) => format!("offer expired: {waited}; {e}"),
        };
        op.error = Some(why.clone());
        self.transition(op, Status::Expired, &why)?;
        Ok(true)
    }
}
