//! The `UserPromptSubmit` hook, `ktr-prompt` (SPEC §10, the turn gate; see
//! [`crate::gate`]).
//!
//! Claude Code runs it synchronously before it sends a prompt (also in `-p`
//! mode). With nothing between the scheduling Stop and the end of a switch
//! it reads one small file (`<state_dir>/active`) and lets the prompt
//! through. A prompt of the source session while a rebuild is scheduled,
//! prepared or verified is marked (`turn_started_at`, under the lock) and
//! let through: activation then goes back to `pending`. A prompt of the
//! session being switched away from (`activating`, `rolling_back`) is
//! refused with a one-line reason and recorded (`blocked_prompts`). A
//! prompt of a session offered a line to type (`offered`,
//! `rollback_offered`: the hand target) withdraws the offer at once. While
//! the compaction guard could block (`on_auto_compaction = "rebuild"`, or a
//! rebuild pending) it keeps the prompt's text for [`crate::prompt_back`],
//! and it takes down the notice a put-back prompt left. Always exits 0; an
//! error lets the prompt through and goes to stderr.

use std::path::Path;

use crate::gate::{gated_session, switching, watched};
use crate::hook::{Invocation, PromptInput, Reply};
use crate::operation::{
    BlockedPrompt, HOOK_LOCK_WAIT, Lane, Operation, Status, Store, locate_for_hooks,
};
use crate::prompt_back;
use crate::targets::Target;
use crate::targets::resume_line;
use ktr_base::config::Config;
use ktr_base::error::{Error, Result};
use ktr_base::ids::SessionId;
use ktr_base::time::Timestamp;

/// `ktr-prompt --help`.
pub const HELP: &str = "ktr-prompt: the Claude Code UserPromptSubmit hook of ktr.
Usage: ktr-prompt [--config PATH]   (the hook JSON on stdin; always exits 0)
Marks a turn that starts while a rebuild is on its way (the switch then waits for the next Stop)
and refuses a prompt sent while the session is being switched, with a one-line reason. While the
compaction guard could act, keeps the prompt's text (<state_dir>/prompts/, 0600) so that a
prompt whose compaction the guard blocks comes back to the input line after the switch.";

/// What Claude Code shows above the input line it gives back.
pub(crate) const SWITCHING: &str = "ktr is switching this session over right now; your message was not sent — send it again in a moment";

/// What Claude Code shows when ktr's own `/resume <id>` line met keys a
/// person typed in the same instant (Claude Code submitted both as one
/// prompt): nothing was sent, the text comes back to the input line and
/// ktr takes its own line out of it again.
pub(crate) const COLLIDED: &str = "ktr typed its switch line while you were typing; nothing was sent — your text is back in the input line (ktr removes its own /resume line from it); the switch waits until you have sent it";

/// The prompt of pointer mode's health probe (`ktr-activate` resumes the new
/// session once with it): always refused here, so Claude Code loads the
/// session — its `SessionStart` hook reports the resume to `ktr-ack` — and
/// never calls the model.
pub const PROBE: &str = "ktr health probe: refused by ktr-prompt, never sent to the model";

/// What the probe's refusal says.
const PROBE_REFUSED: &str = "ktr health probe: the session loaded; nothing was sent";

/// How many characters of a refused prompt are kept.
const KEPT_CHARS: usize = 200;

/// The `UserPromptSubmit` hook: pass, or block with the reason.
pub fn prompt(call: Invocation) -> Reply {
    run(call.config.as_deref(), call.input).unwrap_or_else(|e| {
        eprintln!("ktr-prompt: {e}");
        Reply::Quiet
    })
}

/// What the person sees when the lock was held past [`HOOK_LOCK_WAIT`]
/// and the prompt went through without being marked.
pub(crate) const UNMARKED: &str = "ktr: busy (another ktr process held the lock for over a second); this prompt went through unmarked — the switch still checks the transcript for it before it runs";

/// Decide about one prompt. Fast path: one small read of `active` (and,
/// once ktr put a blocked prompt back or may block one, a look into
/// `<state_dir>/prompts/`).
pub fn run(config_arg: Option<&Path>, input: Option<Vec<u8>>) -> Result<Reply> {
    let (state_dir, rebuild) = locate_for_hooks(config_arg)?;
    let store = Store::at(&state_dir);
    let in_flight = store.in_flight();
    // The guard could block the compaction this prompt triggers: keep its
    // text, to put it back after the switch (crate::prompt_back).
    let keep = rebuild || in_flight.iter().any(|e| e.status == Status::Pending);
    let watched_now = in_flight.iter().any(|e| watched(e.status));
    let prompts = prompt_back::dir(&state_dir);
    let has_prompts = prompts.is_dir();
    if !keep && !watched_now && !has_prompts {
        return Ok(Reply::Quiet);
    }
    let input = input.ok_or_else(|| Error::usage("hook input is larger than 1 MiB"))?;
    let hook: PromptInput = serde_json::from_slice(&input)
        .map_err(|e| Error::usage(format!("cannot parse the UserPromptSubmit input: {e}")))?;
    if hook.prompt.as_deref() == Some(PROBE) {
        return Ok(if watched_now {
            Reply::Block(PROBE_REFUSED.into())
        } else {
            Reply::Quiet
        });
    }
    let home = ktr_base::config::home_dir();
    // Prompts are kept in, and taken back out of, ktr's own folder only.
    let ours = ktr_base::state_dir::claim(&state_dir, ktr_base::state_dir::place_of_home(&home))
        .map_err(|e| eprintln!("ktr-prompt: {e}"))
        .is_ok();
    if let Ok(session) = SessionId::parse(&hook.session_id)
        && ours
    {
        if has_prompts {
            prompt_back::prompt_sent(&state_dir, &session, || {
                let config = match hook.transcript_path.as_deref() {
                    Some(t) => crate::targets::discover::hook_config(config_arg, t),
                    None => Config::load(config_arg),
                };
                config.map(|c| Target::from_config(&c)).ok()
            });
        }
        if keep
            && let Some(text) = hook.prompt.as_deref()
            && let Err(e) = prompt_back::keep(&state_dir, &session, hook.prompt_id.as_deref(), text)
        {
            eprintln!("ktr-prompt: cannot keep this prompt for the compaction guard: {e}");
        }
    }
    // Only this session's operation (or a request no session holds yet)
    // gates its prompts.
    let session = SessionId::parse(&hook.session_id).ok();
    let mine = |s: &SessionId| {
        in_flight
            .iter()
            .filter(|e| e.lane == Lane::Session(s.clone()) || e.lane == Lane::Unbound)
            .any(|e| watched(e.status))
    };
    let Some(session) = session.filter(mine) else {
        return Ok(Reply::Quiet);
    };
    if let Some(failed) = fail_dead_switch(config_arg, &store, &session, &hook)? {
        return Ok(failed);
    }
    let store = Store::open(store.dir())?;
    let decided = store.with_session(&session, HOOK_LOCK_WAIT, |tx| {
        let Some(mut op) = tx.session_operation(&session)? else {
            return Ok(Reply::Quiet);
        };
        if gated_session(&op) != Some(hook.session_id.as_str()) {
            return Ok(Reply::Quiet);
        }
        if op.status.offered() {
            // The person spoke instead of typing the offered line: it is
            // stale now (the rebuild lacks this turn).
            let config = match hook.transcript_path.as_deref() {
                Some(t) => Config::for_transcript(config_arg, t)?,
                None => Config::load(config_arg)?,
            };
            let why = "a prompt was submitted after the offer";
            let said = super::hand::withdraw(tx, &config, &mut op, why)?;
            return Ok(Reply::Message(format!("ktr: {said}")));
        }
        if switching(op.status) {
            let text = hook.prompt.as_deref().unwrap_or_default();
            let collided_with = switched_to(&op).filter(|to| text.ends_with(&resume_line(to)));
            let theirs = collided_with
                .as_ref()
                .map_or(text, |to| &text[..text.len() - resume_line(to).len()]);
            op.blocked_prompts.push(BlockedPrompt {
                at: Timestamp::now(),
                session_id: hook.session_id.clone(),
                text: theirs.chars().take(KEPT_CHARS).collect(),
                collided_with: collided_with.clone(),
            });
            tx.save(&mut op)?;
            let why = if collided_with.is_some() {
                COLLIDED
            } else {
                SWITCHING
            };
            return Ok(Reply::Block(why.into()));
        }
        if op.turn_started_at.is_none() {
            op.turn_started_at = Some(Timestamp::now());
            tx.save(&mut op)?;
        }
        Ok(Reply::Quiet)
    });
    match decided {
        // The lock is busy: refuse only while a switch may be under way
        // (the text comes back to the input line), else let it through
        // and say so.
        Err(e) if e.kind == ktr_base::ErrorKind::Busy => Ok(match store.active_for(&session) {
            Some((_, status)) if switching(status) => Reply::Block(SWITCHING.into()),
            _ => Reply::Message(UNMARKED.into()),
        }),
        other => other,
    }
}

/// A switch of `session` whose stage died (killed, out of memory) switches
/// nothing, and refusing the prompt would leave no Stop to notice it: fail
/// it now, as the next Stop would (SPEC §9), and let the prompt through
/// saying so.
fn fail_dead_switch(
    config_arg: Option<&Path>,
    store: &Store,
    session: &SessionId,
    hook: &PromptInput,
) -> Result<Option<Reply>> {
    let switching_now = store
        .active_for(session)
        .is_some_and(|(_, status)| switching(status));
    if !(switching_now && store.dead_worker_in(session)) {
        return Ok(None);
    }
    let store = match hook.transcript_path.as_deref() {
        Some(t) => Store::for_config(&crate::targets::discover::hook_config(config_arg, t)?)?,
        None => Store::open(store.dir())?,
    };
    let failed = store.serving(session.clone()).recover_stale()?;
    // Within the grace the prompt is refused as during any switch, but not
    // recorded: a save would restart the grace, and a person sending it
    // again every few seconds would keep the dead switch alive for ever.
    Ok(Some(
        failed
            .iter()
            .find(|op| op.session_id.as_ref() == Some(session))
            .map_or_else(
                || Reply::Block(SWITCHING.into()),
                |op| Reply::Message(super::stop::failed_notice(op)),
            ),
    ))
}

/// The session an in-place switch of `op` types `/resume` for: the
/// candidate while activating, the restore session (else the source) while
/// rolling back.
fn switched_to(op: &Operation) -> Option<SessionId> {
    match op.status {
        Status::Activating => op.candidate.as_ref().map(|c| c.session_id.clone()),
        Status::RollingBack => match &op.restore {
            Some(restore) => Some(restore.session_id.clone()),
            None => super::source_session(op).ok(),
        },
        _ => None,
    }
}
