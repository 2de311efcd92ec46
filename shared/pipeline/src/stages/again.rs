//! The next attempt at once. An attempt that defers for a turn which has
//! ended meanwhile starts again right away, as if that turn's Stop had
//! scheduled it: that Stop came while the attempt was at work and could
//! start nothing ([`Operation::stopped_since`]).
//!
//! Without it, a rebuild the compaction guard starts at the beginning of a
//! turn that Claude Code then answers anyway (between the compaction point
//! and the hard limit, SPEC §10) always defers, and the next Stop comes
//! only after the person's next prompt; a person who answers quickly has
//! sent it before that attempt is ready. The soak saw five attempts in a
//! row defer so, the rebuild fail, and Claude Code compact lossily.

use crate::gate;
use crate::operation::{Operation, Status, Store};
use crate::stages::stop::{self, By, Hook, Scheduled};
use ktr_base::config::Config;

/// After `op` deferred: start its next attempt when a Stop came during
/// the last one and no turn began since that Stop (no prompt seen by
/// `ktr-prompt`, no user record in the transcript). The line for the
/// stage's log, None when nothing was started.
pub(super) fn after_deferral(config: &Config, store: &Store, op: &Operation) -> Option<String> {
    if op.status != Status::Pending || op.deferred.is_none() {
        return None;
    }
    let mark = op.stopped_since.as_ref()?;
    let session = op.session_id.as_ref()?;
    let transcript = op.transcript_path.as_deref()?;
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
        statuses: &[Status::Pending],
        why: ": the turn the last attempt deferred for has ended",
        reply: mark.reply.as_deref(),
    };
    match stop::schedule(config, store, &by) {
        Ok(Scheduled::Started { .. }) => {
            Some("the turn it deferred for has ended; prepare started again at once".into())
        }
        Ok(_) => None,
        Err(e) => Some(format!(
            "the next attempt could not start at once ({e}); the next Stop prepares again"
        )),
    }
}
