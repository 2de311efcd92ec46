//! The compaction guard, `ktr-precompact`: Claude Code's `PreCompact` hook.
//!
//! Claude Code compacts a full window lossily. When it is about to do so on
//! its own (`trigger: "auto"`) and a rebuild is pending for this session, or
//! the human gave the standing approval `on_auto_compaction = "rebuild"`,
//! this blocks the compaction and starts the rebuild at once (the reply has
//! finished and Claude Code now waits), so the running Claude Code is
//! switched to the rebuilt session instead of being compacted. The rebuild
//! is started by the Stop hook's own scheduling ([`stop::schedule`]).
//!
//! A rollback the person asked for of this (rebuilt) session replaces the
//! compaction the same way: it starts now, or, under way, is waited for.
//!
//! It never blocks `/compact` typed by hand, and never blocks when a
//! rebuild cannot help (its plan is refused, e.g. the carried conversation
//! would not fit; another operation is running): it lets Claude Code
//! compact and says why. Claude Code 2.1.328 does not show a `PreCompact`
//! hook's message, so every such line is also left for the session's next
//! Stop hook ([`advice::leave_notice`]).
//!
//! The human's prompt: Claude Code runs `UserPromptSubmit` (which keeps its
//! text, [`crate::prompt_back`]) before this hook, with the same
//! `prompt_id`. When this hook blocks, it marks that prompt blocked for the
//! operation it starts; the rebuilt session leaves it out and it comes back
//! to the input line after the switch (tmux), or the pointer runner sends
//! it again.

use crate::window_cache;
use std::path::Path;

use crate::hook::{Invocation, PreCompactInput, Reply};
use crate::operation::{Operation, Status, Store};
use crate::prompt_back;
use crate::stages::advice;
use crate::stages::stop::{self, By, Hook, Scheduled};
use crate::stages::target_guard;
use ktr_base::config::{Config, OnAutoCompaction};
use ktr_base::error::Result;
use ktr_base::ids::SessionId;
use ktr_base::open::{Exists, confine};
use ktr_base::time::Timestamp;
use ktr_engine::{plan, window};

/// `ktr-precompact --help`.
pub const HELP: &str =
    "ktr-precompact: the Claude Code PreCompact hook of ktr (the compaction guard).
Usage: ktr-precompact [--config PATH]   (the hook JSON on stdin; always exits 0)
Before Claude Code auto-compacts a session with a rebuild pending (or with
on_auto_compaction = \"rebuild\"), it blocks the compaction and starts the lossless rebuild
instead, when the rebuild's plan passes. /compact typed by hand is never blocked.";

/// What the guard decided, before it is said to Claude Code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Let Claude Code compact, nothing to say.
    Quiet,
    /// Let Claude Code compact; the line for the human.
    Allow(String),
    /// Block the compaction: the reason Claude Code records.
    Block(String),
}

/// The `PreCompact` hook: what it tells Claude Code for this invocation.
pub fn precompact(call: Invocation) -> Reply {
    let Some(input) = call.input else {
        return Reply::Message(
            "ktr: PreCompact input is larger than 1 MiB; not guarding this compaction".into(),
        );
    };
    let hook: PreCompactInput = match serde_json::from_slice(&input) {
        Ok(h) => h,
        Err(e) => {
            return Reply::Message(format!(
                "ktr: cannot parse the PreCompact input ({e}); not guarding this compaction"
            ));
        }
    };
    let verdict = decide(call.config.as_deref(), &hook);
    match verdict {
        // Claude Code 2.1.328 shows a PreCompact hook's output on /compact.
        Verdict::Quiet => Reply::Nothing,
        Verdict::Block(reason) => Reply::Block(reason),
        Verdict::Allow(line) => {
            // Claude Code does not show it now: the next Stop hook will.
            if let (Ok(session), Ok(state_dir)) = (
                SessionId::parse(&hook.session_id),
                crate::operation::locate_state_dir(call.config.as_deref()),
            ) {
                advice::leave_notice(&state_dir, &session, &line);
            }
            Reply::Message(line)
        }
    }
}

/// Decide for one `PreCompact` input.
pub fn decide(config_arg: Option<&Path>, hook: &PreCompactInput) -> Verdict {
    if hook.trigger.as_deref() != Some("auto") {
        // `/compact` typed by hand is the human's decision.
        return Verdict::Quiet;
    }
    guard(config_arg, hook).unwrap_or_else(|e| {
        Verdict::Allow(format!(
            "ktr: {e}; Claude Code compacted this window (lossy) instead"
        ))
    })
}

fn guard(config_arg: Option<&Path>, hook: &PreCompactInput) -> Result<Verdict> {
    let session = SessionId::parse(&hook.session_id)?;
    let config = crate::targets::discover::hook_config(config_arg, &hook.transcript_path)?;
    let store = Store::for_config(&config)?;
    store.recover_stale()?;
    // A stage of this session that died (killed) does nothing any more and
    // the compaction comes now: its operation is failed at once, not after
    // the grace, and the rebuild tried again below (never "an operation is
    // running" for a dead one, which let Claude Code compact: the soak).
    if store.dead_worker_in(&session) {
        Store::for_config(&config)?
            .serving(session.clone())
            .with_grace(std::time::Duration::ZERO)
            .recover_stale()?;
    }
    let active = store
        .active_for(&session)
        .map(|(id, _)| store.load(&id))
        .transpose()?;
    let pending_id = match active {
        Some(op) if op.status == Status::Pending => {
            if op.session_id.as_ref().is_some_and(|s| *s != session) {
                return Ok(Verdict::Allow(format!(
                    "ktr: the pending rebuild {} is for another session; Claude Code compacted this window (lossy) instead",
                    op.id
                )));
            }
            Some(op.id)
        }
        // The person asked to roll this rebuilt session back: the rollback
        // starts now, as this session's Stop would start it, and replaces
        // the compaction (which would summarise what it brings back).
        Some(op)
            if op.status == Status::RollbackPending && stop::rolls_back_from(&op, &session) =>
        {
            return Ok(roll_back_now(
                &config,
                &store,
                &session,
                &hook.transcript_path,
            ));
        }
        // This session's own rollback is under way (its stage alive): the
        // switch back replaces the compaction; the turn Claude Code answers
        // meanwhile comes along (a restore session).
        Some(op) if rollback_under_way(&op, &session) => {
            return Ok(Verdict::Block(format!(
                "ktr is already rolling this session back as you asked (operation {}, {}); Claude Code will be switched back instead of compacting it, with the turns said since the rebuild",
                op.id, op.status
            )));
        }
        // This session's own rebuild is under way (its stage alive): the
        // switch replaces the compaction; the prompt comes back after it as
        // for a rebuild the guard starts.
        Some(op) if under_way(&op, &session) => {
            if let Err(e) =
                prompt_back::block(store.dir(), &session, hook.prompt_id.as_deref(), &op.id)
            {
                eprintln!("ktr-precompact: the blocked prompt cannot come back: {e}");
            }
            return Ok(Verdict::Block(format!(
                "ktr is already rebuilding this session losslessly (operation {}, {}); Claude Code will be switched to the rebuilt session instead of compacting it",
                op.id, op.status
            )));
        }
        Some(op) => {
            return Ok(Verdict::Allow(format!(
                "ktr: operation {} is {}; a rebuild cannot start now; Claude Code compacted this window (lossy) instead",
                op.id, op.status
            )));
        }
        None => None,
    };
    let pending = pending_id.is_some();
    if !pending && config.on_auto_compaction == OnAutoCompaction::Advise {
        return Ok(Verdict::Allow(compacted_line(&config, hook)));
    }
    let path = plan::resolve_transcript(&config, Some(&hook.transcript_path))?;
    // Block only a compaction a rebuild can really replace now; else let
    // Claude Code compact and say why — never strand the session behind
    // "Context limit reached" on every prompt.
    match rebuild_possible(&config, &store, &session, &path) {
        Ok(()) => {}
        // The details are in `ktr status` (what the target runs now).
        Err(Impossible::NotSwitched) => return Ok(Verdict::Allow(NOT_SWITCHED.into())),
        Err(Impossible::Because(why)) => {
            return Ok(Verdict::Allow(format!(
                "ktr: a rebuild cannot replace this compaction: {why}; Claude Code compacted this window (lossy) instead"
            )));
        }
    }
    let id = match pending_id {
        Some(id) => id,
        None => {
            store
                .request(
                    "Claude Code was about to auto-compact (on_auto_compaction = \"rebuild\")",
                    "REBUILD",
                    Some(&session),
                )?
                .id
        }
    };
    // The prompt that triggered it comes back after the switch: marked
    // before the rebuild starts, so prepare sees it.
    let kept = prompt_back::block(store.dir(), &session, hook.prompt_id.as_deref(), &id)
        .unwrap_or_else(|e| {
            eprintln!("ktr-precompact: the blocked prompt cannot come back: {e}");
            None
        });
    let by = By {
        hook: Hook::PreCompact,
        session: &session,
        transcript: &path,
        at: Timestamp::now(),
        statuses: &[Status::Pending],
        why: " instead of Claude Code's auto-compaction",
        reply: None,
    };
    let scheduled = stop::schedule(&config, &store, &by);
    if !matches!(scheduled, Ok(Scheduled::Started { .. })) {
        prompt_back::forget(store.dir(), &session);
    }
    let by_hand = matches!(
        crate::targets::Target::from_config(&config),
        crate::targets::Target::Hand(_)
    );
    Ok(match scheduled? {
        Scheduled::Started { id, .. } if by_hand => Verdict::Block(format!(
            "ktr is rebuilding this session losslessly instead of compacting it (operation {id}); in a few seconds `ktr status` and the statusline show the line to type, `/resume <id>`: type it with the input line empty to switch, then send your prompt again"
        )),
        Scheduled::Started { id, .. } => Verdict::Block(match kept {
            Some(k)
                if config.activation == ktr_base::config::Activation::Pointer
                    || (config.activation == ktr_base::config::Activation::Tmux
                        && k.text.is_some()) =>
            {
                format!(
                "ktr is rebuilding this session losslessly instead of compacting it (operation {id}); Claude Code will be switched to the rebuilt session in a few seconds and your prompt put back in its input line, not sent: press Enter to send it"
                )
            }
            _ => format!(
                "ktr is rebuilding this session losslessly instead of compacting it (operation {id}); Claude Code will be switched to the rebuilt session in a few seconds, with your last prompt as its last turn: press ↑ then Enter to send it again"
            ),
        }),
        Scheduled::Expired(line) => Verdict::Allow(format!(
            "{line}; Claude Code compacted this window (lossy) instead"
        )),
        Scheduled::Nothing | Scheduled::Offering(_) => Verdict::Allow(
            "ktr: no rebuild could be started for this session; Claude Code compacted this window (lossy) instead".into(),
        ),
    })
}

/// Whether `op` is `session`'s own rebuild with a stage at work on it.
fn under_way(op: &Operation, session: &SessionId) -> bool {
    op.session_id.as_ref() == Some(session)
        && matches!(
            op.status,
            Status::Scheduled | Status::Running | Status::Verifying | Status::Activating
        )
        && op.stage_alive()
}

/// Whether `op` is a rollback switching away from `session` with its stage
/// at work.
fn rollback_under_way(op: &Operation, session: &SessionId) -> bool {
    stop::rolls_back_from(op, session)
        && matches!(op.status, Status::RollbackScheduled | Status::RollingBack)
        && op.stage_alive()
}

/// Start the rollback asked for `session` now, instead of the compaction.
/// Claude Code answers the prompt anyway (below its hard limit); the
/// rollback waits for that turn and takes it along.
fn roll_back_now(
    config: &Config,
    store: &Store,
    session: &SessionId,
    transcript: &Path,
) -> Verdict {
    let by = By {
        hook: Hook::PreCompact,
        session,
        transcript,
        at: Timestamp::now(),
        statuses: &[Status::RollbackPending],
        why: " instead of Claude Code's auto-compaction",
        reply: None,
    };
    match stop::schedule(config, store, &by) {
        Ok(Scheduled::Started { id, .. }) => Verdict::Block(format!(
            "ktr is rolling this session back as you asked (operation {id}) instead of letting Claude Code compact it; the turns said since the rebuild come along"
        )),
        Ok(_) => Verdict::Allow(
            "ktr: the rollback asked for could not start now; Claude Code compacted this window (lossy) instead".into(),
        ),
        Err(e) => Verdict::Allow(format!(
            "ktr: the rollback asked for could not start now ({e}); Claude Code compacted this window (lossy) instead"
        )),
    }
}

/// The guard's line when the target does not run this session.
pub const NOT_SWITCHED: &str =
    "ktr: this session is not the one ktr switches (see ktr status); Claude Code compacted it";

/// Why a rebuild cannot replace this compaction.
enum Impossible {
    /// The target does not run this session ([`target_guard::runs_hooks_session`]).
    NotSwitched,
    /// Anything else, said as is.
    Because(String),
}

/// How many guard-started rebuilds in a row may have failed by a killed
/// stage before the guard lets Claude Code compact: a stage killed by
/// accident (1 % of stage runs in the soak, several runs an attempt) is
/// tried again; one killed every time (out of memory) strands no session.
/// A 1,000-turn soak saw two in a row, which the earlier bound (once more,
/// never twice) let Claude Code compact.
const KILLED_IN_A_ROW: usize = 3;

/// Whether a rebuild can replace this compaction now, judged without
/// reading the whole transcript (the hook runs while the person waits):
/// the target runs this session's Claude Code; the last rebuild this
/// guard started for the session did not fail (never block twice for the
/// same failure; one whose stage was killed is retried, up to
/// [`KILLED_IN_A_ROW`]); and the rebuilt window would fit, by the running
/// account the Stop hooks keep (when it has caught up; prepare checks the
/// whole plan anyway).
fn rebuild_possible(
    config: &Config,
    store: &Store,
    session: &SessionId,
    transcript: &Path,
) -> std::result::Result<(), Impossible> {
    if target_guard::runs_hooks_session(config, session).is_err() {
        return Err(Impossible::NotSwitched);
    }
    let ours = store.list().map_err(|e| Impossible::Because(e.message))?;
    let latest = ours
        .iter()
        .rev()
        .filter(|op| op.session_id.as_ref() == Some(session));
    let failed_here = |op: &&Operation| op.status == Status::Failed && op.by_compaction_guard;
    // A stage killed (its worker died) is a failure of the moment: the
    // guard tries again, up to `KILLED_IN_A_ROW` such failures in a row.
    let died = |op: &&Operation| failed_here(op) && op.worker_died_in.is_some();
    let killed_in_a_row = latest.clone().take_while(died).count();
    let retry = (1..KILLED_IN_A_ROW).contains(&killed_in_a_row);
    if let Some(op) = latest.clone().next().filter(failed_here).filter(|_| !retry) {
        return Err(Impossible::Because(format!(
            "the rebuild it started instead of the last compaction ({}) failed: {}",
            op.id,
            op.error.as_deref().unwrap_or("see `ktr status`")
        )));
    }
    if let Ok(Some(w)) = window_cache::for_hook(
        config,
        session,
        transcript,
        None,
        None,
        &window_cache::compaction::setting(),
    ) && let Some(why) = window::refusal(&w)
    {
        return Err(Impossible::Because(why));
    }
    Ok(())
}

/// The line shown when Claude Code compacts with `on_auto_compaction = "advise"`.
fn compacted_line(config: &Config, hook: &PreCompactInput) -> String {
    let after = confine(
        &hook.transcript_path,
        &config.project_dir,
        "transcript",
        Exists::Must,
    )
    .ok()
    .zip(SessionId::parse(&hook.session_id).ok())
    .and_then(|(path, session)| {
        let compaction = window_cache::compaction::setting();
        window_cache::for_hook(config, &session, &path, None, None, &compaction).ok()
    })
    .flatten()
    .filter(window::Window::fits)
    .map(|w| {
        format!(
            "; a lossless rebuild would have brought it to ≈ {}",
            window::short(w.after_rebuild_tokens)
        )
    })
    .unwrap_or_default();
    format!(
        "ktr: Claude Code compacted this window (lossy) before this reply{after}. Next time say REBUILD before it fills up, or set on_auto_compaction = \"rebuild\" in ktr's config."
    )
}
