//! What a human or a stage asks of the store: request, cancel, rollback,
//! and a stage claiming its operation. Each is one locked read-modify-write.

use super::{Lane, Operation, Stage, Status, Store, Worker};
use ktr_base::error::{Error, Result};
use ktr_base::ids::{OperationId, SessionId};

impl Store {
    /// What the configured target runs now (None without a target, or
    /// when it cannot be read).
    pub(crate) fn seen_target(&self) -> Option<super::SeenTarget> {
        let running = self.target.as_ref()?.running().ok()?;
        Some(super::SeenTarget {
            identity: running.identity,
            session: running.session,
        })
    }

    /// Request a rebuild (`REBUILD`): create a pending operation or merge the
    /// reason into the pending one. Any other non-terminal operation refuses.
    pub fn request(
        &self,
        reason: &str,
        confirmation: &str,
        session: Option<&SessionId>,
    ) -> Result<Operation> {
        confirm(confirmation, "REBUILD")?;
        let reason = reason.trim();
        if reason.is_empty() {
            return Err(Error::usage(
                "a reason is required: say why the session should be rebuilt",
            ));
        }
        let session = session.cloned();
        if let Some(project) = self.project.as_ref().filter(|p| !p.is_dir()) {
            return Err(Error::config(format!(
                "project_dir {} is not a directory, so no Stop hook could ever schedule this request; set project_dir to the Claude Code project folder (`ktr doctor`)",
                project.display()
            )));
        }
        self.recover_stale()?;
        let seen = self.seen_target();
        if let (Some(asked), Some(running)) =
            (&session, seen.as_ref().and_then(|s| s.session.as_ref()))
            && asked.as_str() != running
        {
            return Err(Error::refused(format!(
                "{} runs session {running}, not {asked}: a rebuild of {asked} would replace another conversation; ask from the session the target runs",
                self.target
                    .as_ref()
                    .map_or_else(String::new, ToString::to_string)
            )));
        }
        // Unbound: the session the target runs now, when it lives in project_dir.
        let session = session.or_else(|| {
            let running = seen.as_ref()?.session.clone()?;
            let project = self.project.as_ref()?;
            project
                .join(format!("{running}.jsonl"))
                .is_file()
                .then(|| SessionId::parse(&running).ok())
                .flatten()
        });
        let joined = session.is_none();
        let session = match session {
            Some(session) => Some(session),
            None => self.lane_of_unnamed()?,
        };
        let in_lane = |tx: &mut super::Locked| match &session {
            Some(session) => tx.session_operation(session),
            None => tx.lane_operation(&Lane::Unbound),
        };
        let locked = |tx: &mut super::Locked| {
            if let Some(mut op) = in_lane(tx)? {
                if op.status != Status::Pending {
                    return Err(Error::refused(format!(
                        "operation {} is {} for {}; wait for it to finish (or cancel/rollback it) before requesting another",
                        op.id,
                        op.status,
                        op.lane()
                    )));
                }
                if !op.reasons.iter().any(|r| r == reason) {
                    op.reasons.push(reason.to_string());
                }
                if op.session_id.is_none() {
                    // The request no session held is this session's now.
                    op.session_id.clone_from(&session);
                    tx.set_entry(&op)?;
                }
                tx.save(&mut op)?;
                tx.log(
                    &op.id,
                    op.status,
                    op.status,
                    &format!("reason merged: {reason}"),
                );
                return Ok(op);
            }
            if let Some(session) = session.as_ref().filter(|_| joined) {
                // The session it joined has finished since: its source no
                // longer runs there, so nothing is requested for it.
                return Err(Error::refused(format!(
                    "the operation of session {session} ended just now; ask again"
                )));
            }
            // `active` first: an operation file nobody points at would be
            // invisible; an `active` naming a missing file reads as none.
            let mut op = Operation::new(reason, session.clone());
            op.requested_target.clone_from(&seen);
            tx.set_entry(&op)?;
            tx.save(&mut op)?;
            tx.log(&op.id, Status::Pending, Status::Pending, "requested");
            Ok(op)
        };
        match &session {
            Some(id) => self.with_session(id, super::LOCK_TIMEOUT, locked),
            None => self.with_lane(&Lane::Unbound, locked),
        }
    }

    /// The session a request that names none joins (read from the
    /// operation files, which `active` follows a moment later): the one
    /// session with an operation in flight (as before several sessions: it merges into
    /// that request, or is refused naming what runs); none when nothing but
    /// an unbound request is in flight. With several sessions at work the
    /// request must name its session.
    fn lane_of_unnamed(&self) -> Result<Option<SessionId>> {
        let sessions: Vec<SessionId> = self
            .live_lanes()?
            .into_iter()
            .filter_map(|lane| match lane {
                Lane::Session(s) => Some(s),
                Lane::Unbound => None,
            })
            .collect();
        match sessions.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(one.clone())),
            several => Err(Error::refused(format!(
                "{} sessions have an operation in flight ({}); name the session to rebuild (--session ID)",
                several.len(),
                several
                    .iter()
                    .map(SessionId::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// Cancel a pending operation (`CANCEL`). A tmux pane's border notice
    /// that the switch waits for the person goes with it.
    pub fn cancel(&self, id: &OperationId, confirmation: &str) -> Result<Operation> {
        confirm(confirmation, "CANCEL")?;
        let op = self.with_op(id, |tx| {
            let mut op = tx.load_in(id, Status::Pending, "a pending operation can be cancelled")?;
            tx.transition(&mut op, Status::Cancelled, "cancelled by request")?;
            Ok(op)
        })?;
        if let Some(target) = &self.target {
            target.clear_notice();
        }
        Ok(op)
    }

    /// Ask to switch an activated operation back to the old session (`ROLLBACK`).
    pub fn rollback_request(&self, id: &OperationId, confirmation: &str) -> Result<Operation> {
        confirm(confirmation, "ROLLBACK")?;
        self.recover_stale()?;
        self.with_op(id, |tx| {
            let mut op = tx.load_in(
                id,
                Status::Activated,
                "an activated operation can be rolled back",
            )?;
            // The lane of the session the rollback switches away from.
            if let Some(other) = tx.lane_operation(&op.lane())? {
                return Err(Error::refused(format!(
                    "operation {} is {} for {}; wait for it to finish first",
                    other.id,
                    other.status,
                    other.lane()
                )));
            }
            let later = superseding(&op, &tx.store().list()?);
            if !later.is_empty() {
                let order: Vec<String> = later
                    .iter()
                    .chain([&op])
                    .map(|o| o.id.to_string())
                    .collect();
                return Err(Error::refused(format!(
                    "operation {id} is superseded: its session {} was rebuilt again by {}; the running session is not the one it switched to. Roll back newest first, one at a time: {}",
                    op.candidate
                        .as_ref()
                        .map_or("", |c| c.session_id.as_str()),
                    later.last().map_or("", |o| o.id.as_str()),
                    order
                        .iter()
                        .map(|o| format!("ktr rollback-request {o} --confirm ROLLBACK"))
                        .collect::<Vec<_>>()
                        .join(", then ")
                )));
            }
            tx.transition(&mut op, Status::RollbackPending, "rollback requested")?;
            Ok(op)
        })
    }

    /// For a stage starting up: under the lock, require the status `stage`
    /// expects ([`Stage::expects`]), record the calling process as the
    /// worker for `stage`, and move to `to` (`to == stage.expects()` only
    /// records the worker). Refused while another live process is the
    /// recorded worker.
    pub fn claim(&self, id: &OperationId, stage: Stage, to: Status) -> Result<Operation> {
        let expected = stage.expects();
        let stage_name = stage.name();
        self.with_op(id, |tx| {
            let mut op = tx.load(id)?;
            if op.status != expected {
                return Err(Error::refused(format!(
                    "operation {id} is {}, not {expected}; ktr-{stage_name} has nothing to do",
                    op.status
                )));
            }
            if let Some(w) = op
                .worker
                .as_ref()
                .filter(|w| w.pid != std::process::id() && w.alive())
            {
                return Err(Error::refused(format!(
                    "operation {id} is being worked on by ktr-{} (pid {}); wait for it",
                    w.stage.name(),
                    w.pid
                )));
            }
            op.worker = Some(Worker::current(stage));
            if to == expected {
                tx.save(&mut op)?;
            } else {
                tx.transition(&mut op, to, &format!("ktr-{stage_name} started"))?;
            }
            Ok(op)
        })
    }
}

/// The activated operations that rebuilt `op`'s session again, newest
/// first: `op`'s candidate was the source of the next one, whose
/// candidate was the source of the one after, and so on. Rolling `op`
/// back while they stand would type `/resume` into a session that is not
/// the one it switched to; they are rolled back first, in this order.
fn superseding(op: &Operation, ops: &[Operation]) -> Vec<Operation> {
    let mut chain: Vec<Operation> = Vec::new();
    let mut at = op.candidate.as_ref().map(|c| c.session_id.clone());
    while let Some(session) = at.take() {
        let next = ops.iter().rev().find(|o| {
            o.status == Status::Activated
                && o.id != op.id
                && !chain.iter().any(|c| c.id == o.id)
                && crate::recall::lineage::source_session(o).as_ref() == Some(&session)
        });
        if let Some(next) = next {
            at = next.candidate.as_ref().map(|c| c.session_id.clone());
            chain.push(next.clone());
        }
    }
    chain.reverse();
    chain
}

/// Confirmation words are exact and case-sensitive.
pub fn confirm(given: &str, word: &str) -> Result<()> {
    if given == word {
        Ok(())
    } else {
        Err(Error::refused(format!(
            "confirmation must be exactly {word}"
        )))
    }
}
