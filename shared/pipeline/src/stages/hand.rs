//! The hand target's flow (SPEC §12, "By hand"; [`crate::targets::Hand`]):
//! the person switches by typing the line ktr offers.
//!
//! - [`offer`]: ktr-activate, its compare-and-swap checks passed, moves a
//!   verified rebuild to `offered` instead of switching, with the
//!   candidate's title for the picker ([`crate::title`]); ktr-rollback
//!   likewise moves a rollback to `rollback_offered` ([`offer_rollback`]).
//! - [`accepts`], [`take`]: `ktr-ack`'s receipt of the offered session, from the
//!   Claude Code process the offer was made to (or from any process once
//!   that one has exited: `claude --resume <id>`), makes it `activated` /
//!   `rolled_back`.
//! - [`withdraw`]: the session spoke after the offer (`ktr-prompt` at the
//!   prompt, else the Stop hook after the turn): the offer is stale. A
//!   rebuild goes back to `pending` with its candidate removed (a late
//!   `/resume <id>` finds nothing and loses nothing), and the next Stop
//!   prepares again; a rollback goes back to `rollback_pending`.
//! - An offer nobody takes expires after `request_ttl_hours`
//!   ([`crate::operation::Locked::expire_if_old`]).

use super::again::reset_attempt;
use super::source_session;
use crate::operation::{Locked, Operation, Status};
use crate::process::ProcessId;
use crate::targets::Offer;
use ktr_base::config::Config;
use ktr_base::error::{Error, Result};
use ktr_base::ids::SessionId;

/// `verifying` → `offered`: the candidate gets its title, the person the
/// line. `checks` is the compare-and-swap note.
pub(super) fn offer(tx: &mut Locked, op: &mut Operation, checks: &str) -> Result<()> {
    let candidate = op
        .candidate
        .clone()
        .ok_or_else(|| Error::refused(format!("operation {} has no candidate", op.id)))?;
    let date = op
        .prepared_at
        .as_deref()
        .map_or_else(String::new, |t| t.chars().take(10).collect());
    let source = op.backup.clone().or_else(|| op.transcript_path.clone());
    let titled = source
        .ok_or_else(|| Error::refused("no source to name the candidate after"))
        .and_then(|s| crate::title::for_source(&s, &date))
        .and_then(|title| {
            crate::title::write(&candidate.path, &candidate.session_id, &title)?;
            Ok(title)
        });
    let title = match titled {
        Ok(title) => format!("titled {title:?} in /resume's picker"),
        Err(e) => format!("no title for the picker: {e}"),
    };
    let note = format!("{checks}; offered by hand ({title}): {}", said(op));
    tx.transition(op, Status::Offered, &note)
}

/// `rolling_back` → `rollback_offered`: the person is offered the line
/// back to `to` (the old session, or the restore session).
pub(super) fn offer_rollback(tx: &mut Locked, op: &mut Operation, to: &SessionId) -> Result<()> {
    let note = format!("offered by hand: {}", Offer::rollback(to, &rebuilt(op)));
    tx.transition(op, Status::RollbackOffered, &note)
}

/// The rebuilt session's id (a rollback's words name it).
fn rebuilt(op: &Operation) -> String {
    op.candidate
        .as_ref()
        .map_or_else(String::new, |c| c.session_id.to_string())
}

/// The session an offer's line resumes: the candidate (a rebuild's), the
/// restore session or the old session (a rollback's).
pub fn offered_session(op: &Operation) -> Option<SessionId> {
    match op.status {
        Status::Offered => op.candidate.as_ref().map(|c| c.session_id.clone()),
        Status::RollbackOffered => match &op.restore {
            Some(r) => Some(r.session_id.clone()),
            None => source_session(op).ok(),
        },
        _ => None,
    }
}

/// What the person is told about `op`'s offer (empty when there is none).
pub fn said(op: &Operation) -> String {
    let Some(session) = offered_session(op) else {
        return String::new();
    };
    if op.status == Status::RollbackOffered {
        return Offer::rollback(&session, &rebuilt(op));
    }
    let old = source_session(op).map_or_else(|_| String::new(), |s| s.to_string());
    Offer::rebuild(&session, &old)
}

/// Whether `ktr-ack`'s receipt of `session` from Claude Code process
/// `runner` takes `op`'s offer: from the process the offer was made to
/// (`op.claude`), or from any once that one has exited.
pub(super) fn accepts(op: &Operation, session: &SessionId, runner: Option<ProcessId>) -> bool {
    if offered_session(op).as_ref() != Some(session) {
        return false;
    }
    let offered_to = op.claude;
    let from_it = runner.is_some() && runner == offered_to;
    let it_exited = offered_to.is_none_or(|c| !c.alive());
    if !(from_it || it_exited) {
        eprintln!(
            "ktr-ack: {session} was resumed by pid {}, not by the Claude Code the line was offered to (pid {}, still running); the offer stands",
            runner.map_or(0, |r| r.pid),
            offered_to.map_or(0, |c| c.pid)
        );
    }
    from_it || it_exited
}

/// The offer taken ([`accepts`]): `activated` (a rebuild) or
/// `rolled_back` (a rollback), what runs now being `runner`.
pub(super) fn take(
    tx: &mut Locked,
    op: &mut Operation,
    session: &SessionId,
    runner: Option<ProcessId>,
) -> Result<()> {
    let from_it = runner.is_some() && runner == op.claude;
    let by = runner.map_or_else(|| "an unknown process".into(), |r| format!("pid {}", r.pid));
    let how = if from_it {
        "typed into the same Claude Code"
    } else {
        "resumed by another Claude Code after the first one exited"
    };
    op.target_after = runner.map(|r| r.pid.to_string());
    let (to, what) = match op.status {
        Status::Offered => (Status::Activated, "activated by hand"),
        _ => (Status::RolledBack, "rolled back by hand"),
    };
    if to == Status::Activated {
        op.claude = runner;
    }
    let note = format!("{what}: Claude Code's receipt of {session} ({by}, {how})");
    tx.transition(op, to, &note)
}

/// The offer is stale (`why`: the session spoke after it): a rebuild back
/// to `pending` with its candidate removed, a rollback back to
/// `rollback_pending`. The line it returns says so.
pub(crate) fn withdraw(
    tx: &mut Locked,
    config: &Config,
    op: &mut Operation,
    why: &str,
) -> Result<String> {
    let line = Offer::line(
        &offered_session(op)
            .ok_or_else(|| Error::refused(format!("operation {} offers no session", op.id)))?,
    );
    op.deferred = Some(why.to_string());
    if op.status == Status::RollbackOffered {
        let said = format!(
            "the offered line `{line}` is withdrawn ({why}): the next Stop offers a new one"
        );
        tx.transition(op, Status::RollbackPending, &said)?;
        return Ok(said);
    }
    let discarded = reset_attempt(tx, op, config)?;
    let said = format!(
        "the offered line `{line}` is withdrawn ({why}); its candidate {}was removed, never run: typed late, it finds nothing and nothing is lost; the rebuild is prepared again after the next reply",
        discarded.map_or(String::new(), |p| format!("{} ", p.display()))
    );
    tx.transition(op, Status::Pending, &said)?;
    Ok(said)
}
