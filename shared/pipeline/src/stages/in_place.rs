//! The in-place switch of a tmux target (SPEC §12), shared by
//! `ktr-activate` and `ktr-rollback`.
//!
//! Claude Code 2.1.328 switches sessions without restarting: `/resume <id>`
//! typed into its idle, empty input line makes the same process end the old
//! session and resume the new one (`SessionEnd` reason `resume`, then
//! `SessionStart` source `resume`), with its flags, MCP servers and
//! terminal kept. Healthy is `ktr-ack`'s receipt for the new session from
//! that very process (pid + start time, [`crate::binding`]), then the
//! resumed session on screen (Claude Code's idle input box). A CLI that
//! does not take the line within `healthcheck_seconds` is left to the
//! respawn fallback; a line that collided with a person's keys (Claude Code
//! submitted it as part of their prompt, which `ktr-prompt` refused and
//! Claude Code gave back) is taken out of the input line again, leaving
//! the person's text as they typed it. From the last look at the idle
//! input line to the end of the switch, `ktr-keep`'s popup on each
//! attached client holds the keys a person types (Claude Code drops those
//! typed while it loads the resumed session) and types them in after
//! ([`crate::targets::Keeper`]).

use std::thread;
use std::time::{Duration, Instant, SystemTime};

use super::{Stage, pause_point, seconds};
use crate::binding;
use crate::operation::Store;
use crate::pane::Input;
use crate::process::ProcessId;
use crate::targets::{Keeper, Target, resume_line};
use ktr_base::config::{Activation, Config};
use ktr_base::ids::{OperationId, SessionId};

/// How often the receipt and the screen are looked at.
const POLL: Duration = Duration::from_millis(40);
/// How long the input line must stay empty right before ktr types into it.
const QUIET: Duration = Duration::from_millis(120);
/// How much longer than the longest switch a key-keeping popup may stay.
const KEEP_SPARE: Duration = Duration::from_secs(5);
/// How long a refused prompt's text takes to come back to the input line.
const GIVEN_BACK: Duration = Duration::from_secs(3);

/// How an in-place switch went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Switched {
    /// The process resumed the session and shows it (the target's identity).
    Healthy(String),
    /// Not tried: no tmux pane, no Claude Code process recorded, or the
    /// pane does not show Claude Code's input box (the reason).
    NotTried(String),
    /// Not now: the input line holds a draft or a turn is running (the
    /// reason); nothing was typed.
    Busy(String),
    /// The line was typed but Claude Code did not take it (the reason).
    NotTaken(String),
    /// The line collided with a person's typing; it was taken out of the
    /// input line again (the reason, with what is left there).
    Collided(String),
    /// The process resumed it but did not come back healthy (the reason).
    Unhealthy(String),
}

/// Switch `claude`, running in `target`, to session `to` in place, for
/// `stage` (its test pause point `typing` is right before the line is
/// typed). `id`: the operation whose `blocked_prompts` tell a collision.
/// Run a switch (`run`) with the notice on the target's pane up for a
/// person to see until it is over; an outcome that waits for them
/// (`waits_as`: back to `pending` / `rollback_pending`) leaves the waiting
/// line up instead.
pub fn noticed(
    target: &Target,
    waits_as: crate::operation::Status,
    run: impl FnOnce() -> ktr_base::error::Result<super::Outcome>,
) -> ktr_base::error::Result<super::Outcome> {
    let notice = target.notice(crate::targets::SWITCHING_NOTICE);
    let outcome = run();
    if outcome
        .as_ref()
        .is_ok_and(|o| o.operation.status == waits_as)
    {
        notice.waiting();
    }
    outcome
}

pub fn switch(
    stage: Stage,
    config: &Config,
    store: &Store,
    id: &OperationId,
    target: &Target,
    claude: Option<ProcessId>,
    to: &SessionId,
) -> Switched {
    if config.activation != Activation::Tmux {
        return Switched::NotTried(format!("{target} has no keyboard"));
    }
    if !config.tmux_switch_in_place {
        return Switched::NotTried("tmux_switch_in_place = false".into());
    }
    let Some(claude) = claude.filter(|c| c.alive()) else {
        return Switched::NotTried("no live Claude Code process recorded for the pane".into());
    };
    if let Some(not) = not_idle(quiet_input(target)) {
        return not;
    }
    let wait = seconds(config.healthcheck_seconds);
    let keeper = keep_keys(store, stage, id, target, wait);
    if keeper.holding() > 0 {
        // The popups hold the person's keys now: what reached the input
        // line before they opened shows within QUIET, and nothing else can.
        thread::sleep(QUIET);
        if let Some(not) = not_idle(target.input()) {
            finished(keeper);
            return not;
        }
    }
    let switched = typed(stage, config, store, id, target, claude, to, wait);
    finished(keeper);
    switched
}

/// Why ktr must not type now, from a look at the input line (None: it is
/// idle and empty).
fn not_idle(look: ktr_base::error::Result<Option<Input>>) -> Option<Switched> {
    match look {
        Ok(Some(Input::Idle)) => None,
        Ok(Some(Input::Draft(text))) => Some(Switched::Busy(format!(
            "the input line holds a draft that was not sent ({} characters)",
            text.chars().count()
        ))),
        Ok(Some(Input::Running)) => Some(Switched::Busy("the pane shows a running turn".into())),
        Ok(None | Some(Input::Unknown)) => Some(Switched::NotTried(
            "the pane does not show Claude Code's input box".into(),
        )),
        Err(e) => Some(Switched::NotTried(format!(
            "cannot read the pane: {}",
            e.message
        ))),
    }
}

/// Finish the popups (the keys typed meanwhile go into the pane) and log
/// what they kept.
fn finished(mut keeper: Keeper) {
    let kept = keeper.finish();
    if !kept.is_empty() {
        eprintln!("ktr: {kept}");
    }
}

/// The key keeper's popups on the clients showing the pane, for the rest
/// of the switch: they outlive the longest switch (the receipt's wait,
/// then half of it for the screen) by a few seconds, then replay and
/// close by themselves. None when `ktr-keep` is not installed beside
/// this executable.
fn keep_keys(
    store: &Store,
    stage: Stage,
    id: &OperationId,
    target: &Target,
    wait: Duration,
) -> Keeper {
    let program = match super::keeper_program() {
        Ok(program) if program.is_file() => program,
        Ok(program) => {
            eprintln!(
                "ktr: no key-keeping popup: {} is missing (reinstall ktr); keys typed while Claude Code loads the resumed session are dropped",
                program.display()
            );
            return Keeper::none();
        }
        Err(e) => {
            eprintln!("ktr: no key-keeping popup: {}", e.message);
            return Keeper::none();
        }
    };
    let dir = store.keys_dir(id, stage);
    let keeper = target.keep_keys(&program, &dir, wait * 3 / 2 + KEEP_SPARE);
    for why in keeper.missed() {
        eprintln!("ktr: no key-keeping popup: {why}");
    }
    keeper
}

/// Type the line and wait for the resumed session.
#[allow(clippy::too_many_arguments)]
fn typed(
    stage: Stage,
    config: &Config,
    store: &Store,
    id: &OperationId,
    target: &Target,
    claude: ProcessId,
    to: &SessionId,
    wait: Duration,
) -> Switched {
    pause_point(stage, "typing");
    let since = SystemTime::now();
    if let Err(e) = target.type_resume(to) {
        return Switched::NotTaken(format!("typing /resume failed: {}", e.message));
    }
    let deadline = Instant::now() + wait;
    let bindings = binding::dir(&config.state_dir);
    loop {
        if received(&bindings, claude, to, since) {
            break;
        }
        if collided(store, id, to) {
            return Switched::Collided(take_back(target, to));
        }
        if !claude.alive() {
            return Switched::Unhealthy(format!(
                "Claude Code (pid {}) exited after /resume {to}",
                claude.pid
            ));
        }
        if Instant::now() >= deadline {
            return Switched::NotTaken(format!(
                "Claude Code (pid {}) did not report SessionStart (resume) for {to} within {:.1} s (healthcheck_seconds)",
                claude.pid,
                wait.as_secs_f64()
            ));
        }
        thread::sleep(POLL);
    }
    shown(target, claude, to, deadline.max(Instant::now() + wait / 2))
}

/// The input line, looked at twice [`QUIET`] apart: a person who has
/// just begun typing shows a draft in the second look (Claude Code 2.1.328
/// drops keys typed in the ~0.15 s after the `/resume` Enter, when it
/// clears the input line for the resumed session). The first look that is
/// not idle is the answer.
fn quiet_input(target: &Target) -> ktr_base::error::Result<Option<Input>> {
    let first = target.input()?;
    if first != Some(Input::Idle) {
        return Ok(first);
    }
    thread::sleep(QUIET);
    target.input()
}

/// `ktr-ack` recorded, after `since`, that `claude` resumed `to`.
fn received(
    bindings: &std::path::Path,
    claude: ProcessId,
    to: &SessionId,
    since: SystemTime,
) -> bool {
    // ktr-ack's clock has millisecond precision.
    let since = since - Duration::from_millis(2);
    binding::of(bindings, claude)
        .is_some_and(|b| b.session_id == *to && b.time().is_some_and(|at| at >= since))
}

/// `ktr-prompt` refused a prompt holding ktr's own switch line.
fn collided(store: &Store, id: &OperationId, to: &SessionId) -> bool {
    store
        .load(id)
        .is_ok_and(|op| op.blocked_prompts.iter().any(|p| p.collision_with(to)))
}

/// After the receipt: the process shows the resumed session (Claude Code's
/// input box, no turn running) by `until`.
fn shown(target: &Target, claude: ProcessId, to: &SessionId, until: Instant) -> Switched {
    loop {
        if !claude.alive() {
            return Switched::Unhealthy(format!(
                "Claude Code (pid {}) exited right after it resumed {to}",
                claude.pid
            ));
        }
        if let Ok(Some(Input::Idle | Input::Draft(_))) = target.input() {
            return match target.identity() {
                Ok(identity) => Switched::Healthy(identity),
                Err(e) => Switched::Unhealthy(e.message),
            };
        }
        if Instant::now() >= until {
            return Switched::Unhealthy(format!(
                "Claude Code resumed {to} but never showed its input box"
            ));
        }
        thread::sleep(POLL);
    }
}

/// Claude Code gives a refused prompt back to the input line whole: the
/// person's keys with ktr's `/resume <id>` after them. Take ktr's line out
/// (backspaces from the end, the cursor's place) once it is there, and
/// describe what is left.
fn take_back(target: &Target, to: &SessionId) -> String {
    let line = resume_line(to);
    let deadline = Instant::now() + GIVEN_BACK;
    loop {
        if let Ok(Some(Input::Draft(text))) = target.input() {
            // A long input wraps on screen: compare without the wraps.
            let text = text.replace('\n', "");
            if let Some(theirs) = text.strip_suffix(&line) {
                let removed = target.backspace(line.chars().count());
                return match removed {
                    Ok(()) => format!(
                        "ktr's /resume line collided with keys typed in the same instant; Claude Code gave the prompt back and ktr took its own line out again, leaving the person's {} characters in the input line",
                        theirs.chars().count()
                    ),
                    Err(e) => format!(
                        "ktr's /resume line collided with keys typed in the same instant and could not be taken out of the input line ({}): the person sees it after their text",
                        e.message
                    ),
                };
            }
        }
        if Instant::now() >= deadline {
            return "ktr's /resume line collided with keys typed in the same instant; it did not come back at the end of the input line, which was left as it is".into();
        }
        thread::sleep(POLL);
    }
}
