//! The Stop hook, `ktr-stop` (SPEC §10).
//!
//! Runs after every finished reply, so it must be fast and must never fail
//! Claude: it always exits 0. With nothing pending it reads one small file
//! (`<state_dir>/active`) and then says what [`advice::idle_line`] has to
//! say (a line `ktr-precompact` left, or the window advice), else prints
//! `{"suppressOutput":true}`. With a
//! pending operation it binds it to this session, marks it `scheduled` and
//! starts `ktr-prepare` detached (`ktr-rollback` for `rollback_pending`).
//! An operation whose worker died is failed here ([`Store::recover_stale`]),
//! so a killed stage never blocks the next request; one its watchdog
//! failed already is told here (the line it left).
//!
//! Stage executables are looked up beside `ktr-stop`, or in `$KTR_BIN_DIR`.
//! [`schedule`] is also how `ktr-precompact` starts a pending rebuild.

use std::path::Path;

use crate::hook::{Invocation, Reply, StopInput};
use crate::operation::index::Index;
use crate::operation::{
    Active, Operation, Stage, Status, StopMark, Store, Worker, locate_state_dir,
};
use crate::stages::{self, advice};
use crate::targets::discover;
use ktr_base::config::Config;
use ktr_base::error::{Error, Result};
use ktr_base::ids::SessionId;
use ktr_base::open::{Exists, confine};
use ktr_base::time::Timestamp;

/// `ktr-stop --help`.
pub const HELP: &str = "ktr-stop: the Claude Code Stop hook of ktr.
Usage: ktr-stop [--config PATH]   (the hook JSON on stdin; always exits 0)
With a pending rebuild or rollback for this session it starts it detached after the reply;
otherwise it may show one line about the window (advise_at_percent), never requesting anything,
or prints {\"suppressOutput\":true}.";

/// How long the Stop hook waits for the coordinator lock (the hooks' one
/// rule): far below the hook's own timeout, so Claude Code never waits on
/// ktr; a busy lock means "try again at the next Stop".
const LOCK_WAIT: std::time::Duration = crate::operation::HOOK_LOCK_WAIT;

/// The Stop hook: what it tells Claude Code for this invocation.
pub fn stop(call: Invocation) -> Reply {
    let Invocation { config, input, .. } = call;
    run(config.as_deref(), input.as_deref()).unwrap_or_else(|e| Reply::Message(format!("ktr: {e}")))
}

fn run(config_arg: Option<&Path>, input: Option<&[u8]>) -> Result<Reply> {
    // A turn whose user record is newer than this began after this Stop.
    let stopped_at = Timestamp::now();
    // Fast path: one small file, no config validation, no lock.
    let state_dir = locate_state_dir(config_arg)?;
    let hook = input.map(serde_json::from_slice::<StopInput>).transpose();
    let session = match &hook {
        Ok(Some(h)) => SessionId::parse(&h.session_id).ok(),
        _ => None,
    };
    let mine = |index: &Index| match &session {
        Some(s) => index.for_session(s),
        // Input that names no session: whatever is in flight is said to stay.
        None => index.entries().first().map(|e| (e.id.clone(), e.status)),
    };
    let index = match Store::at(&state_dir).active_state() {
        Active::Known(index) => index,
        // Nothing was ever requested here.
        Active::Unknown(_) if !state_dir.join("operations").is_dir() => Index::default(),
        // Missing, damaged or in the older layout: the operation files
        // decide, under the lock, and `active` is written again — a
        // pending request is never lost.
        Active::Unknown(why) => {
            Store::at(&state_dir).rebuild_active(LOCK_WAIT).map_err(|e| {
                Error::io(format!(
                    "the state file `active` is {why} and could not be rebuilt from the operation files ({e}); `ktr doctor` says more"
                ))
            })?;
            match Store::at(&state_dir).active_state() {
                Active::Known(index) => index,
                Active::Unknown(_) => Index::default(),
            }
        }
    };
    let Some((id, status)) = mine(&index) else {
        // Another session's stage at work: a dead worker is failed here
        // too, as before several sessions (its lane's lock is taken only
        // then), so a killed stage never blocks that session's next request.
        if index.entries().iter().any(|e| at_work(e.status)) {
            let failed = recover(config_arg, &state_dir, parsed(&hook))?;
            if failed != Reply::Quiet {
                return Ok(failed);
            }
        }
        let line = hook
            .ok()
            .flatten()
            .and_then(|h| advice::idle_line(config_arg, &state_dir, &h));
        return Ok(line.map_or(Reply::Quiet, Reply::Message));
    };
    if at_work(status) {
        let failed = recover(config_arg, &state_dir, parsed(&hook))?;
        if let (Reply::Quiet, true, Some(session), Some(h)) =
            (&failed, notes_stops(status), &session, parsed(&hook))
        {
            note_stop(&state_dir, session, stopped_at, h);
        }
        // The stage's watchdog may have failed it just now: it left its
        // line before saving the failure.
        let left = match (&failed, &session) {
            (Reply::Quiet, Some(session)) => advice::take_notice(&state_dir, session),
            _ => None,
        };
        return Ok(left.map_or(failed, Reply::Message));
    }
    let stays = |why: String| Reply::Message(format!("ktr: {why}; operation {id} stays {status}"));

    let hook = match hook {
        Ok(Some(h)) => h,
        Ok(None) => return Ok(stays("Stop hook input is larger than 1 MiB".into())),
        Err(e) => return Ok(stays(format!("cannot parse the Stop hook input ({e})"))),
    };
    let session = match SessionId::parse(&hook.session_id) {
        Ok(s) => s,
        Err(e) => return Ok(stays(e.message)),
    };
    let config = match discover::hook_config(config_arg, &hook.transcript_path) {
        Ok(c) => c,
        Err(e) => return Ok(stays(e.message)),
    };
    if config.state_dir != state_dir {
        return Ok(stays(format!(
            "config state_dir {} differs from {}",
            config.state_dir.display(),
            state_dir.display()
        )));
    }
    let store = Store::open(&config.state_dir)?;
    let scheduled = schedule(
        &config,
        &store,
        &By {
            hook: Hook::Stop,
            session: &session,
            transcript: &hook.transcript_path,
            at: stopped_at,
            statuses: &[
                Status::Pending,
                Status::RollbackPending,
                Status::Offered,
                Status::RollbackOffered,
            ],
            why: "",
            reply: hook.last_assistant_message.as_deref(),
        },
    );
    let reply = scheduled.map(|s| match s {
        Scheduled::Nothing => Reply::Quiet,
        Scheduled::Expired(line) => Reply::Message(line),
        Scheduled::Offering(line) => Reply::Message(format!("ktr: {line}")),
        Scheduled::Started {
            id,
            what,
            withdrawn: Some(said),
        } => Reply::Message(format!(
            "ktr: {said}\nktr: {what} scheduled again (operation {id}); it runs after this reply"
        )),
        Scheduled::Started { id, what, .. } => Reply::Message(format!(
            "ktr: {what} scheduled (operation {id}); it runs after this reply{}",
            by_hand_note(&config)
        )),
    });
    // A lock or write failure leaves the operation as it was.
    reply.or_else(|e| {
        Ok(stays(if e.kind == ktr_base::ErrorKind::Busy {
            "busy (another ktr process holds the lock), will retry at the next Stop".into()
        } else {
            e.message
        }))
    })
}

/// Which hook schedules, for which session, and what it may start.
pub(crate) struct By<'a> {
    pub hook: Hook,
    pub session: &'a SessionId,
    pub transcript: &'a Path,
    /// When the hook started (`scheduled_at`).
    pub at: Timestamp,
    /// The statuses this hook may act on.
    pub statuses: &'a [Status],
    /// Appended to the history note.
    pub why: &'a str,
    /// The reply that just ended (the Stop hook's `last_assistant_message`).
    pub reply: Option<&'a str>,
}

/// The hook that schedules; its name goes into the operation's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hook {
    Stop,
    /// The compaction guard.
    PreCompact,
    /// A Stop that came while the last attempt was at work, acted on when
    /// that attempt deferred ([`super::again`]): the Claude Code process
    /// recorded by the attempt's own scheduling stays.
    Again,
}

impl std::fmt::Display for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Hook::Stop => "Stop hook",
            Hook::PreCompact => "PreCompact hook",
            Hook::Again => "Stop hook (come while the last attempt was at work)",
        })
    }
}

/// What [`schedule`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Scheduled {
    /// Nothing is this session's business (or this hook's).
    Nothing,
    /// The session's operation expired instead; the line says so.
    Expired(String),
    /// The offer of the hand target stands (no turn since it was made):
    /// the line says what to type.
    Offering(String),
    /// `what` ("rebuild" or "rollback") was started for operation `id`,
    /// after the offer it `withdrawn` (the line saying so), if any.
    Started {
        id: String,
        what: &'static str,
        withdrawn: Option<String>,
    },
}

/// What the person will do when the session has the hand target.
fn by_hand_note(config: &Config) -> &'static str {
    match crate::targets::Target::from_config(config) {
        crate::targets::Target::Hand(_) => {
            "; when it is verified, ktr shows the line to type (`/resume <id>`) here, in the statusline and in `ktr status`"
        }
        _ => "",
    }
}

/// Under the lock: expire an operation pending too long, else start the
/// stage this session's hook starts for its operation (detached),
/// bind a pending one to the session, its transcript and the Claude Code
/// process that ran the hook, and record who started it. A stage that
/// cannot be started leaves the operation as it was (the error says why).
pub(crate) fn schedule(config: &Config, store: &Store, by: &By<'_>) -> Result<Scheduled> {
    store.with_session(by.session, LOCK_WAIT, |tx| {
        let Some(mut op) = tx.session_operation(by.session)? else {
            return Ok(Scheduled::Nothing);
        };
        let ttl = std::time::Duration::from_secs_f64(config.request_ttl_hours * 3600.0);
        if tx.expire_if_old(&mut op, ttl)? {
            return Ok(Scheduled::Expired(format!(
                "ktr: operation {} expired: {}",
                op.id,
                op.error.as_deref().unwrap_or("")
            )));
        }
        if !by.statuses.contains(&op.status) {
            return Ok(Scheduled::Nothing);
        }
        let mut withdrawn = None;
        if op.status.offered() {
            match stale_offer(&op)? {
                None => return Ok(Scheduled::Offering(super::hand::said(&op))),
                Some(why) => withdrawn = Some(super::hand::withdraw(tx, config, &mut op, &why)?),
            }
        }
        let Some(step) = next_step(&op, by.session, by.transcript, config)? else {
            return Ok(Scheduled::Nothing);
        };
        let transcript = (op.status == Status::Pending).then_some(by.transcript);
        // Nothing was changed yet when this fails: the operation keeps its status.
        let pid = stages::spawn(config, store, step.stage, &op.id, transcript)?;
        let name = step.stage.name();
        op.worker = Some(Worker::spawned(pid, step.stage));
        if op.status == Status::Pending {
            op.session_id = Some(by.session.clone());
            op.transcript_path = Some(by.transcript.to_path_buf());
        }
        // The Claude Code process that ran this hook: the target must run
        // it (a rebuild), or still run it (a rollback, switched in place).
        if by.hook != Hook::Again {
            op.claude = crate::process::runner_of(std::process::id());
        }
        op.stopped_since = None;
        op.scheduled_at = Some(by.at.clone());
        op.scheduled_reply = by.reply.map(super::advice::reply_end);
        op.turn_started_at = None;
        op.blocked_prompts.clear();
        op.by_compaction_guard |= by.hook == Hook::PreCompact && step.stage == Stage::Prepare;
        let note = format!(
            "{} of session {} started {name} (pid {pid}){}",
            by.hook, by.session, by.why
        );
        tx.transition(&mut op, step.status, &note)?;
        Ok(Scheduled::Started {
            id: op.id.to_string(),
            what: step.what,
            withdrawn,
        })
    })
}

/// Why the offer `op` stands for is stale: a turn of the session it was
/// made in began after the Stop that scheduled it (the source for a
/// rebuild, the rebuilt session for a rollback). None while it holds.
fn stale_offer(op: &Operation) -> Result<Option<String>> {
    let transcript = match op.status {
        Status::RollbackOffered => op.candidate.as_ref().map(|c| c.path.clone()),
        _ => op.transcript_path.clone(),
    };
    match transcript {
        Some(t) => crate::gate::turn_since_stop(op, &t),
        None => Ok(None),
    }
}

/// The stage a Stop hook starts for an operation, and the status it sets.
struct Step {
    stage: Stage,
    status: Status,
    what: &'static str,
}

/// Which stage this session's hook starts, or None when the operation is
/// not this session's business.
fn next_step(
    op: &Operation,
    session: &SessionId,
    transcript: &Path,
    config: &Config,
) -> Result<Option<Step>> {
    match op.status {
        Status::Pending => {
            let bound_elsewhere = op.session_id.as_ref().is_some_and(|s| s != session);
            if bound_elsewhere {
                return Ok(None);
            }
            if !inside_project(transcript, &config.project_dir) {
                if op.session_id.is_none() {
                    // Another project's session: it does not bind this operation.
                    return Ok(None);
                }
                return Err(Error::refused(format!(
                    "transcript {} is not a .jsonl directly inside project_dir {}",
                    transcript.display(),
                    config.project_dir.display()
                )));
            }
            Ok(Some(Step {
                stage: Stage::Prepare,
                status: Status::Scheduled,
                what: "rebuild",
            }))
        }
        Status::RollbackPending => {
            // Only the session the rollback switches away from may trigger it.
            if !rolls_back_from(op, session) {
                return Ok(None);
            }
            Ok(Some(Step {
                stage: Stage::Rollback,
                status: Status::RollbackScheduled,
                what: "rollback",
            }))
        }
        _ => Ok(None),
    }
}

/// Whether `op`'s rollback switches away from `session` (the rebuilt one).
pub(crate) fn rolls_back_from(op: &Operation, session: &SessionId) -> bool {
    op.candidate.as_ref().map(|c| &c.session_id) == Some(session)
}

/// A Stop of the session notes itself on an operation in `status`
/// ([`note_stop`]): a rebuild's attempt or a rollback at work, before its
/// last look.
fn notes_stops(status: Status) -> bool {
    matches!(
        status,
        Status::Scheduled
            | Status::Running
            | Status::Verifying
            | Status::RollbackScheduled
            | Status::RollingBack
    )
}

/// A stage works on an operation in `status` (no hook waits to start
/// one, no offer waits for the person).
fn at_work(status: Status) -> bool {
    !matches!(status, Status::Pending | Status::RollbackPending) && !status.offered()
}

/// The Stop input, when it parsed.
fn parsed(hook: &Result<Option<StopInput>, serde_json::Error>) -> Option<&StopInput> {
    hook.as_ref().ok().and_then(Option::as_ref)
}

/// This session's attempt is at work (a rebuild scheduled, prepared or
/// verified; a rollback scheduled or under way) and its worker alive: note
/// this Stop on it ([`Operation::stopped_since`]).
/// Should the attempt defer for the turn this Stop ended, the next one
/// starts at once ([`super::again`]). A busy lock or a failed write leaves
/// that to the next Stop, as before.
fn note_stop(state_dir: &Path, session: &SessionId, at: Timestamp, hook: &StopInput) {
    let mark = StopMark {
        at,
        reply: hook
            .last_assistant_message
            .as_deref()
            .map(advice::reply_end),
    };
    let Ok(store) = Store::open(state_dir) else {
        return;
    };
    let _ = store.with_session(session, LOCK_WAIT, |tx| {
        let Some(mut op) = tx.session_operation(session)? else {
            return Ok(());
        };
        let attempt = notes_stops(op.status)
            && match op.status {
                Status::RollbackScheduled | Status::RollingBack => rolls_back_from(&op, session),
                _ => op.session_id.as_ref() == Some(session),
            };
        // A dead worker's operation is not touched: a save would restart
        // the grace after which recovery fails it.
        if attempt && op.stage_alive() {
            op.stopped_since = Some(mark);
            tx.save(&mut op)?;
        }
        Ok(())
    });
}

/// An operation is being worked on: if its worker died, fail it now and
/// tell the human (SPEC §9: a dead worker never blocks the next request).
/// The config is the one serving this hook's session (its target records
/// what a dead activation left); without a readable hook input, the
/// store alone recovers.
fn recover(config_arg: Option<&Path>, state_dir: &Path, hook: Option<&StopInput>) -> Result<Reply> {
    let store = match hook {
        Some(hook) => {
            let store =
                Store::for_config(&discover::hook_config(config_arg, &hook.transcript_path)?)?;
            // The target is this session's pane: another session's dead
            // activation is failed without touching it.
            match SessionId::parse(&hook.session_id) {
                Ok(session) => store.serving(session),
                Err(_) => store,
            }
        }
        None => Store::open(state_dir)?,
    };
    let failed = store.recover_stale()?;
    Ok(failed
        .first()
        .map_or(Reply::Quiet, |op| Reply::Message(failed_notice(op))))
}

/// What the person is told of an operation recovery failed.
pub(crate) fn failed_notice(op: &Operation) -> String {
    format!(
        "ktr: operation {} failed: {}{}",
        op.id,
        op.error.as_deref().unwrap_or("worker died"),
        if op.needs_attention {
            "; check what the target runs (`ktr status`)"
        } else {
            ""
        }
    )
}

/// A `*.jsonl` directly inside `project_dir` by the one path rule
/// ([`confine`]). Claude Code writes the transcript asynchronously: at a
/// session's first Stop the file may not exist yet, and then the directory
/// it will be written to decides (ktr-prepare waits for the file to be
/// there and stable, and opens only a regular file).
fn inside_project(transcript: &Path, project_dir: &Path) -> bool {
    confine(transcript, project_dir, "transcript", Exists::May)
        .is_ok_and(|file| file.extension().is_some_and(|e| e == "jsonl"))
}
