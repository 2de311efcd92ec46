//! `ktr-rollback` (SPEC §10): switch an activated operation back to the
//! old session, compare-and-swap checked, with the protections of an
//! activation: after the Stop, the gate up, no turn and no draft, in place
//! when the target is a tmux pane running Claude Code.

use std::thread;

use super::activate::{GATED_SETTLE, SETTLE, prompt_hook_installed, ran_before, respawn_back};
use super::in_place::{self, Switched};
use super::restore;
use super::{Outcome, Stage, Steps, abandon, guarded, pause_point, source_session, target_guard};
use crate::gate::turn_since_stop;
use crate::operation::{Locked, Operation, Status, Store};
use crate::targets::Target;
use ktr_base::config::Config;
use ktr_base::error::{Error, Result};
use ktr_base::ids::{OperationId, SessionId};

/// Roll operation `id` back (status `rollback_scheduled` → `rolling_back`,
/// the gate up: `ktr-prompt` refuses the rebuilt session's prompts): the
/// target must still run what activation left (the identity recorded after
/// activation) and the Claude Code whose Stop hook scheduled the rollback,
/// else `failed` + `session_conflict` with the target untouched. A turn
/// since that Stop, a refused prompt or a draft in the input line sends it
/// back to `rollback_pending` (the next Stop tries again, or at once when
/// that turn's Stop came meanwhile: [`super::again`]). Then resume the
/// source session — in place (`/resume <old-id>`), else by respawning — and
/// check its health: `rolled_back`, or `failed` with `needs_attention`.
pub fn rollback(
    config: &Config,
    store: &Store,
    id: &OperationId,
    steps: &mut Steps,
) -> Result<Outcome> {
    let op = store.claim(id, Stage::Rollback, Status::RollingBack)?;
    let outcome = guarded(store, id, steps, |steps| {
        let target = Target::from_config(config);
        if let Some(why) = target_moved(&target, &op)? {
            steps.say(&why);
            return abandon(store, id, &why, |op| op.session_conflict = true).map(Outcome::done);
        }
        if let Some(restored) = crate::recall::archive::restore_source(&config.project_dir, &op)? {
            steps.say(&restored);
        }
        super::in_place::noticed(&target, Status::RollbackPending, || {
            switch_back(config, store, id, &target, &op, steps)
        })
    })?;
    // Deferred for a turn that has ended meanwhile: at once again.
    if let Some(line) = super::again::after_deferral(config, store, &outcome.operation) {
        steps.say(line);
    }
    Ok(outcome)
}

/// From `rolling_back` (the gate up) to the end of the switch back: the
/// last look, in place, else by respawning.
fn switch_back(
    config: &Config,
    store: &Store,
    id: &OperationId,
    target: &Target,
    op: &Operation,
    steps: &mut Steps,
) -> Result<Outcome> {
    let old = source_session(op)?;
    pause_point(Stage::Rollback, "start");
    // Let a turn that began just before the gate went up show itself.
    thread::sleep(if prompt_hook_installed(config) {
        GATED_SETTLE
    } else {
        SETTLE
    });
    let op = store.with_op(id, |tx| last_look(tx, target, id))?;
    if op.status != Status::RollingBack {
        steps.say(format!(
            "not rolling back now: operation is {} ({})",
            op.status,
            op.deferred.as_deref().unwrap_or("")
        ));
        return Ok(Outcome::done(op));
    }
    let op = with_restore(config, store, id, &op, &old, steps)?;
    let to = op
        .restore
        .as_ref()
        .map_or_else(|| old.clone(), |r| r.session_id.clone());
    if let Target::Hand(_) = target {
        let op = store.with_op(id, |tx| {
            let mut op = tx.load(id)?;
            super::ensure_ours(&op, Status::RollingBack)?;
            super::hand::offer_rollback(tx, &mut op, &to)?;
            Ok(op)
        })?;
        steps.say(super::hand::said(&op));
        return Ok(Outcome::done(op));
    }
    steps.say(format!("switching {target} back to {to}"));
    let switched = in_place::switch(Stage::Rollback, config, store, id, target, op.claude, &to);
    let back = match switched {
        Switched::Healthy(identity) => {
            pause_point(Stage::Rollback, "switched");
            Ok((
                identity,
                format!("session {to} in place (/resume typed into the same Claude Code)"),
            ))
        }
        Switched::Collided(why) | Switched::Busy(why) => {
            steps.say(&why);
            let op = store.with_op(id, |tx| {
                let mut op = tx.load(id)?;
                defer(tx, &mut op, &why)?;
                Ok(op)
            })?;
            return Ok(Outcome::done(op));
        }
        Switched::NotTried(why) | Switched::NotTaken(why) | Switched::Unhealthy(why) => {
            steps.say(format!("not in place ({why}); respawning the pane"));
            ran_before(&op).and_then(|ran| {
                let ran = restore::ran_as(&ran, &to);
                respawn_back(config, target, &ran, || {
                    pause_point(Stage::Rollback, "switched");
                })
            })
        }
    };
    // Said on the pane for a while (tmux; the other targets have no
    // screen), besides the history and `ktr status`; up before the status
    // says `rolled_back`, so whoever reads that status sees it there.
    let said = match (&back, &op.restore) {
        (Ok(_), Some(r)) => Some(came_along(&old, r.turns)),
        _ => None,
    };
    // Taken down when dropped, after `SAID_FOR`.
    let shown = match (&said, target) {
        (Some(line), Target::Tmux(_)) => Some(target.notice(&format!("ktr: {line}"))),
        _ => None,
    };
    let op = match back {
        Ok((identity, what)) => store.with_op(id, |tx| {
            let mut op = tx.load(id)?;
            op.target_after = Some(identity.clone());
            let note = match (&op.restore, &said) {
                (Some(r), Some(said)) => format!(
                    "{said}; {target} runs {what} (identity {identity}): the old session's {} records, then the rebuilt session's {} records since the switch",
                    r.old_records, r.new_records
                ),
                _ => format!("rolled back: {target} runs {what} again (identity {identity})"),
            };
            tx.transition(&mut op, Status::RolledBack, &note)?;
            Ok(op)
        })?,
        Err(e) => {
            let now = target
                .identity()
                .unwrap_or_else(|e| format!("unknown: {e}"));
            abandon(store, id, &format!("rollback to {to} failed: {e}"), |op| {
                op.rollback_ok = Some(false);
                op.needs_attention = true;
                op.target_after = Some(now);
            })?
        }
    };
    steps.say(format!("operation is {}", op.status));
    if let (Some(line), Status::RolledBack) = (&said, op.status) {
        steps.say(line);
        if shown.is_some() {
            thread::sleep(SAID_FOR);
        }
    }
    Ok(Outcome::done(op))
}

/// How long the pane's border says that a rollback took the turns said
/// since the switch along.
const SAID_FOR: std::time::Duration = std::time::Duration::from_secs(8);

/// The line a rollback that took the turns said since the switch along
/// leaves in the history, `ktr status` and the resumed session's screen.
pub fn came_along(old: &str, turns: usize) -> String {
    let turns = match turns {
        1 => "the 1 turn said since the rebuild came".to_string(),
        n => format!("the {n} turns said since the rebuild came"),
    };
    format!("rolled back to {old}: {turns} along")
}

/// With the gate up and no turn running: when the rebuilt session holds
/// turns said since the switch, build the restore session (the old
/// transcript's records, then those turns) and record it; else the old
/// session itself is resumed. A restore session an earlier attempt built
/// and never switched to is removed (this one holds what was said since).
fn with_restore(
    config: &Config,
    store: &Store,
    id: &OperationId,
    op: &Operation,
    old: &SessionId,
    steps: &mut Steps,
) -> Result<Operation> {
    let live = config.project_dir.join(format!("{old}.jsonl"));
    let old_transcript = match &op.transcript_path {
        Some(path) if path.is_file() => path.clone(),
        _ => live,
    };
    let built = restore::build(op, &old_transcript)?;
    if let Some(r) = &built {
        steps.say(format!(
            "the rebuilt session holds {} turns said since the switch: restore session {} ({} old records, then {} new)",
            r.turns, r.session_id, r.old_records, r.new_records
        ));
    }
    let earlier = op.restore.clone();
    let op = store.with_op(id, |tx| {
        let mut op = tx.load(id)?;
        super::ensure_ours(&op, Status::RollingBack)?;
        op.restore = built;
        tx.save(&mut op)?;
        Ok(op)
    })?;
    // An earlier attempt's restore session, still as it was written.
    if let Some(earlier) = earlier
        && ktr_base::digest::Sha256::of_file(&earlier.path).is_ok_and(|d| d == earlier.sha256)
    {
        let _ = crate::operation::discard_restore(&op, &earlier, Some(&config.project_dir));
    }
    Ok(op)
}

/// Why the target is not what activation left: another identity, or (a
/// process target) not the Claude Code whose Stop hook scheduled the
/// rollback. None when it is.
fn target_moved(target: &Target, op: &Operation) -> Result<Option<String>> {
    let now = target.identity()?;
    if Some(&now) != op.target_after.as_ref() {
        return Ok(Some(format!(
            "{target} changed since activation (identity {:?}, now {now:?}); not rolling back",
            op.target_after.as_deref().unwrap_or("")
        )));
    }
    let Some(candidate) = op.candidate.as_ref() else {
        return Ok(Some(format!(
            "operation {} has no candidate recorded",
            op.id
        )));
    };
    if op.claude.is_none() {
        // Scheduled before the Stop hook recorded its Claude: identity only.
        return Ok(None);
    }
    Ok(target_guard::runs_source(target, op, &candidate.session_id)
        .err()
        .map(|e| e.message))
}

/// The last look with the gate up: no turn of the rebuilt session since
/// the Stop that scheduled the rollback, no prompt refused since the gate
/// went up, and the pane shows neither a draft nor a running turn. Else
/// back to `rollback_pending`, the target untouched.
fn last_look(tx: &mut Locked, target: &Target, id: &OperationId) -> Result<Operation> {
    let mut op = tx.load(id)?;
    super::ensure_ours(&op, Status::RollingBack)?;
    let transcript = op
        .candidate
        .as_ref()
        .map(|c| c.path.clone())
        .ok_or_else(|| Error::refused(format!("operation {id} has no candidate recorded")))?;
    let why = match turn_since_stop(&op, &transcript)? {
        Some(why) => Some(why),
        None if !op.blocked_prompts.is_empty() => Some(format!(
            "a prompt was sent while the gate was up ({} refused by ktr-prompt; Claude Code gives the text back to the input line)",
            op.blocked_prompts.len()
        )),
        None => super::activate::pane_busy(target),
    };
    if let Some(why) = why {
        defer(tx, &mut op, &why)?;
    }
    Ok(op)
}

/// Not now: back to `rollback_pending` with the reason; the next Stop of
/// the rebuilt session schedules the rollback again.
fn defer(tx: &mut Locked, op: &mut Operation, why: &str) -> Result<()> {
    op.deferred = Some(why.to_string());
    let note = format!("not rolled back: {why}; the next Stop tries again");
    tx.transition(op, Status::RollbackPending, &note)
}
