//! Another attempt. An attempt that may not switch goes back to `pending`
//! (a rollback to `rollback_pending`, [`after_deferral`] alike):
//! a turn since its Stop defers it ([`defer`], never counted), any other
//! change of the source is counted ([`source_changed`]). And the next
//! attempt at once: one that defers for a turn which has ended meanwhile
//! starts again right away, as if that turn's Stop had scheduled it: that
//! Stop came while the attempt was at work and could start nothing
//! ([`Operation::stopped_since`]).
//!
//! Without it, a rebuild the compaction guard starts at the beginning of a
//! turn that Claude Code then answers anyway (between the compaction point
//! and the hard limit, SPEC §10) always defers, and the next Stop comes
//! only after the person's next prompt; a person who answers quickly has
//! sent it before that attempt is ready. The soak saw five attempts in a
//! row defer so, the rebuild fail, and Claude Code compact lossily.

use std::path::{Path, PathBuf};

use super::fail_in;
use crate::gate::{self, turn_since_stop};
use crate::operation::{Locked, Operation, Status, Store, discard_candidate, manifest};
use crate::stages::stop::{self, By, Hook, Scheduled};
use ktr_base::config::Config;
use ktr_base::error::Result;

/// After `op` deferred: start its next attempt when a Stop came during
/// the last one and no turn began since that Stop (no prompt seen by
/// `ktr-prompt`, no user record in the transcript). The line for the
/// stage's log, None when nothing was started.
pub(super) fn after_deferral(config: &Config, store: &Store, op: &Operation) -> Option<String> {
    // The session whose turn it deferred for: the source for a rebuild,
    // the rebuilt session for a rollback.
    let (session, transcript, what) = match op.status {
        Status::Pending => (
            op.session_id.as_ref()?,
            op.transcript_path.as_deref()?,
            "prepare",
        ),
        Status::RollbackPending => {
            let rebuilt = op.candidate.as_ref()?;
            (&rebuilt.session_id, rebuilt.path.as_path(), "rollback")
        }
        _ => return None,
    };
    // Only after a deferral.
    op.deferred.as_ref()?;
    let mark = op.stopped_since.as_ref()?;
    let since = mark.at.time();
    let prompted = op
        .turn_started_at
        .as_ref()
        .is_some_and(|t| t.time() > since);
    if prompted || !matches!(gate::newer_prompt(transcript, since), Ok(None)) {
        return None;
    }
    let by = By {
        hook: Hook::Again,
        session,
        transcript,
        at: mark.at.clone(),
        statuses: &[op.status],
        why: ": the turn the last attempt deferred for has ended",
        reply: mark.reply.as_deref(),
    };
    match stop::schedule(config, store, &by) {
        Ok(Scheduled::Started { .. }) => Some(format!(
            "the turn it deferred for has ended; {what} started again at once"
        )),
        Ok(_) => None,
        Err(e) => Some(format!(
            "the next attempt could not start at once ({e}); the next Stop starts it"
        )),
    }
}

/// Not now: discard the candidate (it never ran) and go back to `pending`
/// with the reason; the next Stop of the source prepares again. Unlike a
/// changed source this never fails the operation: each retry needs a new
/// turn, so it cannot loop on its own.
pub(super) fn defer(tx: &mut Locked, config: &Config, op: &mut Operation, why: &str) -> Result<()> {
    let discarded = reset_attempt(tx, op, config)?;
    op.deferred = Some(why.to_string());
    let note = format!(
        "not switched: {why}; candidate {} discarded; the next Stop prepares again",
        discarded.map_or(String::new(), |p| p.display().to_string())
    );
    tx.transition(op, Status::Pending, &note)
}

/// Forget everything the discarded attempt produced.
/// The backup and the manifest artifact go together.
pub(super) fn reset_attempt(
    tx: &Locked,
    op: &mut Operation,
    config: &Config,
) -> Result<Option<PathBuf>> {
    let discarded = discard_candidate(op, Some(&config.project_dir))?;
    if let Some(backup) = op.backup.take() {
        tx.store().remove_artifact(&op.id, &backup);
    }
    if op.manifest_artifact.take().is_some() {
        manifest::remove(tx.store(), &op.id);
    }
    op.candidate = None;
    op.verification = None;
    op.stats = None;
    op.source_sha256 = None;
    op.prepared_at = None;
    op.worker = None;
    op.prompt_back = None;
    Ok(discarded)
}

/// The source changed after prepare: a turn that began since the
/// scheduling Stop explains it (the person spoke; [`defer`], which no
/// retry bound counts), else it is a [`source_changed`].
pub(super) fn changed_or_turned(
    tx: &mut Locked,
    config: &Config,
    op: &mut Operation,
    source: &Path,
    change: &str,
) -> Result<()> {
    match turn_since_stop(op, source)? {
        Some(why) => defer(tx, config, op, &why),
        None => source_changed(tx, config, op, change),
    }
}

/// New messages arrived after prepare: discard this candidate and go back
/// to `pending` so the next Stop prepares again, or fail once
/// `source_change_retries` retries are used up.
fn source_changed(
    tx: &mut Locked,
    config: &Config,
    op: &mut Operation,
    change: &str,
) -> Result<()> {
    op.source_changes += 1;
    if u64::from(op.source_changes) > config.source_change_retries {
        let why = format!(
            "the source changed after prepare {} times (source_change_retries = {}; last: {change}); request again when the conversation is quiet",
            op.source_changes, config.source_change_retries
        );
        return fail_in(tx, op, &why, |_| {});
    }
    let discarded = reset_attempt(tx, op, config)?;
    let note = format!(
        "source changed after prepare (attempt {}: {change}); candidate {} discarded; the next Stop prepares again",
        op.attempts,
        discarded.map_or(String::new(), |p| p.display().to_string())
    );
    tx.transition(op, Status::Pending, &note)
}
