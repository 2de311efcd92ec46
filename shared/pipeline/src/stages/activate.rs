//! Stage 3, `ktr-activate` (SPEC §10, §12): compare-and-swap checks,
//! switch the target, health check, automatic fallback.

use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use super::again::{changed_or_turned, defer};
use super::appended::settled_source_change;
use super::in_place::{self, Switched};
use super::{
    Outcome, Stage, Steps, fail_in, guarded, pause_point, seconds, source_session, target_guard,
};
use crate::gate::turn_since_stop;
use crate::operation::{Locked, Operation, Status, Store};
use crate::pane::Input;
use crate::process;
use crate::stages::prompt::PROBE;
use crate::targets::{Receipt, Target};
use ktr_base::config::{Activation, Config, home_dir};
use ktr_base::digest::Sha256;
use ktr_base::error::{Error, Result};
use ktr_base::ids::{OperationId, SessionId};
use ktr_base::time::parse_rfc3339;

/// How often the operation file is read while waiting for `ktr-ack`.
const ACK_POLL: Duration = Duration::from_millis(100);
/// How long activation waits with the gate up before its last look when
/// `ktr-prompt` is not installed: a prompt's user record reaches the
/// transcript 100–300 ms after the submit (measured, Claude Code 2.1.328 on
/// a loaded machine) and a queued prompt's soon after the Stop.
pub(super) const SETTLE: Duration = Duration::from_millis(600);
/// The same wait with `ktr-prompt` installed. Every Enter is then decided
/// under the lock: marked before the gate went up (the compare-and-swap
/// defers) or refused after it, and the last look defers on a refusal
/// recorded since. Until the refusal is recorded Claude Code shows the text
/// in the input line or a running turn, never an idle box, and gives the
/// text back after it. What this wait is for: a prompt whose Enter landed
/// as the gate went up is refused (Enter → refusal recorded: 0.02–0.15 s
/// measured, Claude Code 2.1.328, load average 2.3) and so defers the
/// switch instead of meeting ktr's `/resume` line in the input line.
pub const GATED_SETTLE: Duration = Duration::from_millis(200);
/// The least time pointer mode's health probe may take.
const PROBE_MIN: Duration = Duration::from_secs(60);

/// Activate operation `id` (status `verifying`, verification passed).
///
/// Under the lock: the source is unchanged up to records in which nobody
/// speaks (else back to `pending` for a fresh prepare at the next Stop, at
/// most `source_change_retries` times), the candidate digest is unchanged,
/// the target identity is the one recorded at prepare and no other
/// transcript in `project_dir` was modified since (else `failed` +
/// `session_conflict`, target untouched); then `activating`. Switch, then
/// health ([`healthy`]): with `ktr-ack` installed (tmux), Claude Code's
/// receipt and `healthcheck_min_seconds` of life after it; otherwise the
/// target runs the new session for `healthcheck_seconds`.
/// Healthy → `activated`. Unhealthy → the old session is resumed the same
/// way: `rolled_back` if that is healthy, else `failed` with
/// `rollback_ok: false` and `needs_attention`.
pub fn activate(
    config: &Config,
    store: &Store,
    id: &OperationId,
    steps: &mut Steps,
) -> Result<Outcome> {
    store.claim(id, Stage::Activate, Status::Verifying)?;
    let outcome = guarded(store, id, steps, |steps| {
        pause_point(Stage::Activate, "start");
        let target = Target::from_config(config);
        let op = store.with_op(id, |tx| compare_and_swap(tx, config, &target, id))?;
        if op.status == Status::Offered {
            steps.say(super::hand::said(&op));
            return Ok(Outcome::done(op));
        }
        if op.status != Status::Activating {
            steps.say(format!(
                "not switching: operation is {} ({})",
                op.status,
                op.deferred
                    .as_deref()
                    .or(op.error.as_deref())
                    .unwrap_or("source changed after prepare")
            ));
            if op.status.is_terminal() {
                // A waiting line an earlier attempt left.
                target.clear_notice();
            }
            return Ok(Outcome::done(op));
        }
        let outcome = in_place::noticed(&target, Status::Pending, || {
            switch_over(config, store, id, &target, &op, steps)
        })?;
        Ok(give_prompt_back(config, store, &target, outcome, steps))
    })?;
    if let Some(line) = super::again::after_deferral(config, store, &outcome.operation) {
        steps.say(line);
    }
    Ok(outcome)
}

/// After a healthy switch: the prompt the compaction guard blocked back
/// in the new session's input line (tmux; [`crate::prompt_back`]), noted
/// in the operation's history.
fn give_prompt_back(
    config: &Config,
    store: &Store,
    target: &Target,
    outcome: Outcome,
    steps: &mut Steps,
) -> Outcome {
    let op = &outcome.operation;
    if op.status != Status::Activated || op.prompt_back.is_none() {
        return outcome;
    }
    let Ok(source) = source_session(op) else {
        return outcome;
    };
    pause_point(Stage::Activate, "prompt-back");
    let Some(line) = crate::prompt_back::put_back(&config.state_dir, op, &source, target) else {
        return outcome;
    };
    steps.say(&line);
    let noted = store.with_op(&op.id, |tx| {
        let mut op = tx.load(&op.id)?;
        if let Some(last) = op.history.last_mut() {
            last.note.push_str("; ");
            last.note.push_str(&line);
        }
        tx.save(&mut op)?;
        Ok(op)
    });
    match noted {
        Ok(op) => Outcome::done(op),
        Err(_) => outcome,
    }
}

/// From `activating` (the gate up) to the end of the switch: the last
/// look, in place, else the respawn fallback, health, the old session
/// back when unhealthy.
fn switch_over(
    config: &Config,
    store: &Store,
    id: &OperationId,
    target: &Target,
    op: &Operation,
    steps: &mut Steps,
) -> Result<Outcome> {
    let new_id = op
        .candidate
        .as_ref()
        .map(|c| c.session_id.clone())
        .ok_or_else(|| Error::refused(format!("operation {id} has no candidate to switch to")))?;
    pause_point(Stage::Activate, "checked");
    // The gate is up (`activating`): ktr-prompt refuses new prompts of
    // the source. Let a turn that began just before it show itself.
    thread::sleep(if prompt_hook_installed(config) {
        GATED_SETTLE
    } else {
        SETTLE
    });
    let op = store.with_op(id, |tx| last_look(tx, config, target, id))?;
    if op.status != Status::Activating {
        steps.say(format!(
            "not switching: operation is {} ({})",
            op.status,
            op.deferred.as_deref().or(op.error.as_deref()).unwrap_or("")
        ));
        return Ok(Outcome::done(op));
    }
    steps.say(format!("checks passed; switching {target} to {new_id}"));
    let switched = in_place::switch(
        Stage::Activate,
        config,
        store,
        id,
        target,
        op.claude,
        &new_id,
    );
    let respawn_why = match judged_for_tests(switched) {
        Switched::Healthy(identity) => {
            let how = format!("in place: /resume {new_id} typed into the same Claude Code");
            return activated(store, id, target, &new_id, &identity, &how, steps);
        }
        Switched::Collided(why) | Switched::Busy(why) => {
            steps.say(&why);
            let op = store.with_op(id, |tx| {
                let mut op = tx.load(id)?;
                defer(tx, config, &mut op, &why)?;
                Ok(op)
            })?;
            return Ok(Outcome::done(op));
        }
        Switched::Unhealthy(why) => {
            return fall_back(
                config,
                store,
                &op,
                target,
                &format!("new session {new_id} unhealthy: {why}"),
                steps,
            );
        }
        Switched::NotTried(why) | Switched::NotTaken(why) => why,
    };
    // The respawn fallback: only when no turn began and nobody typed
    // meanwhile (a refused prompt is on its way back to the input line).
    let op = store.with_op(id, |tx| before_respawn(tx, config, id))?;
    if op.status != Status::Activating {
        steps.say(format!(
            "not respawning: operation is {} ({})",
            op.status,
            op.deferred.as_deref().unwrap_or("")
        ));
        return Ok(Outcome::done(op));
    }
    steps.say(format!("not in place ({respawn_why}); respawning the pane"));
    if let Err(e) = target.switch(&new_id, config) {
        let now = target.identity().ok();
        if now.is_some() && now == op.target_before {
            steps.say(format!("switch failed, target untouched: {e}"));
            return super::abandon(
                store,
                id,
                &format!("switch failed, old session untouched: {e}"),
                |_| {},
            )
            .map(Outcome::done);
        }
        return fall_back(
            config,
            store,
            &op,
            target,
            &format!("switch failed: {e}"),
            steps,
        );
    }
    pause_point(Stage::Activate, "switched");
    let health = healthy(config, store, target, id, &new_id);
    match health {
        Ok(identity) => {
            let how = format!("pane respawned ({respawn_why})");
            activated(store, id, target, &new_id, &identity, &how, steps)
        }
        Err(e) => fall_back(
            config,
            store,
            &op,
            target,
            &format!("new session {new_id} unhealthy: {e}"),
            steps,
        ),
    }
}

/// The switch is healthy: `activated`, with how it switched.
fn activated(
    store: &Store,
    id: &OperationId,
    target: &Target,
    new_id: &SessionId,
    identity: &str,
    how: &str,
    steps: &mut Steps,
) -> Result<Outcome> {
    pause_point(Stage::Activate, "healthy");
    let op = store.with_op(id, |tx| {
        let mut op = tx.load(id)?;
        op.target_after = Some(identity.to_string());
        let tokens = op.context_tokens().map_or(String::new(), |t| {
            format!(", Claude Code reports {t} context tokens")
        });
        let note = format!("{target} runs {new_id} (identity {identity}){tokens}; {how}");
        tx.transition(&mut op, Status::Activated, &note)?;
        Ok(op)
    })?;
    steps.say(format!("activated: {target} runs {new_id} ({how})"));
    Ok(Outcome::done(op))
}

/// Right before the respawn fallback: no turn began since the scheduling
/// Stop and `ktr-prompt` refused no prompt (the in-place attempt may have
/// taken seconds); else back to `pending`, the target untouched.
fn before_respawn(tx: &mut Locked, config: &Config, id: &OperationId) -> Result<Operation> {
    let mut op = tx.load(id)?;
    super::ensure_ours(&op, Status::Activating)?;
    let source = op
        .transcript_path
        .clone()
        .ok_or_else(|| Error::refused(format!("operation {id} has no transcript recorded")))?;
    let why = match turn_since_stop(&op, &source)? {
        Some(why) => Some(why),
        None if !op.blocked_prompts.is_empty() => Some(format!(
            "a prompt was sent while the gate was up ({} refused by ktr-prompt; Claude Code gives the text back to the input line)",
            op.blocked_prompts.len()
        )),
        None => None,
    };
    if let Some(why) = why {
        defer(tx, config, &mut op, &why)?;
    }
    Ok(op)
}

/// The checks of SPEC §10 under one lock; returns the operation, moved to
/// `activating`, or to `pending`/`failed` when a check failed.
fn compare_and_swap(
    tx: &mut Locked,
    config: &Config,
    target: &Target,
    id: &OperationId,
) -> Result<Operation> {
    let mut op = tx.load(id)?;
    super::ensure_ours(&op, Status::Verifying)?;
    let passed = op.verification.as_ref().is_some_and(|v| v.ok);
    if !passed {
        fail_in(
            tx,
            &mut op,
            "not verified; ktr-verify must pass first",
            |_| {},
        )?;
        return Ok(op);
    }
    let missing = |what: &str| Error::refused(format!("operation {id} has no {what} recorded"));
    let source = op
        .transcript_path
        .clone()
        .ok_or_else(|| missing("transcript"))?;
    let candidate = op.candidate.clone().ok_or_else(|| missing("candidate"))?;

    let residue = match settled_source_change(&op, &source, config) {
        Ok(residue) => residue,
        Err(change) => {
            changed_or_turned(tx, config, &mut op, &source, &change)?;
            return Ok(op);
        }
    };
    if Sha256::of_file(&candidate.path).ok().as_ref() != Some(&candidate.sha256) {
        let why = format!(
            "candidate {} changed or vanished after verification",
            candidate.path.display()
        );
        fail_in(tx, &mut op, &why, |_| {})?;
        return Ok(op);
    }
    let conflict = |why: String| (why, true);
    let problem = match target.identity() {
        Err(e) => Some((format!("cannot read the target's identity: {}", e.message), false)),
        Ok(now) if Some(&now) != op.target_before.as_ref() => Some(conflict(format!(
            "{target} changed since prepare (identity {:?}, now {now:?}); not switching",
            op.target_before.as_deref().unwrap_or("")
        ))),
        Ok(_) => newer_transcript(config, &op, &source, &candidate.path)?.map(|path| {
            conflict(format!(
                "transcript {} was modified after prepare: another session is active in this project; not switching",
                path.display()
            ))
        }),
    };
    let running = match problem {
        Some(problem) => Err(problem),
        None => source_session(&op)
            .and_then(|old| {
                let running = target_guard::runs_source(target, &op, &old)?;
                Ok(running.ran(&old))
            })
            .map_err(|e| conflict(e.message)),
    };
    let ran = match running {
        Ok(ran) => ran,
        Err((why, session_conflict)) => {
            fail_in(tx, &mut op, &why, |op| {
                op.session_conflict = session_conflict;
            })?;
            return Ok(op);
        }
    };
    if let Some(why) = turn_since_stop(&op, &source)? {
        defer(tx, config, &mut op, &why)?;
        return Ok(op);
    }
    op.target_ran = Some(ran);
    let note = format!("compare-and-swap checks passed{}", residue.note());
    if let Target::Hand(_) = target {
        super::hand::offer(tx, &mut op, &note)?;
        return Ok(op);
    }
    tx.transition(&mut op, Status::Activating, &note)?;
    Ok(op)
}

/// The last look before the switch, with the gate up (`activating`): the
/// source is still the frozen one, no turn began since the scheduling Stop,
/// `ktr-prompt` refused no prompt since the gate went up (its text is on
/// its way back to the input line), and the pane shows neither a draft nor
/// a running turn. Else back to `pending` (the target untouched).
fn last_look(
    tx: &mut Locked,
    config: &Config,
    target: &Target,
    id: &OperationId,
) -> Result<Operation> {
    let mut op = tx.load(id)?;
    super::ensure_ours(&op, Status::Activating)?;
    let source = op
        .transcript_path
        .clone()
        .ok_or_else(|| Error::refused(format!("operation {id} has no transcript recorded")))?;
    if let Err(change) = settled_source_change(&op, &source, config) {
        changed_or_turned(tx, config, &mut op, &source, &change)?;
        return Ok(op);
    }
    let why = match turn_since_stop(&op, &source)? {
        Some(why) => Some(why),
        None if !op.blocked_prompts.is_empty() => Some(format!(
            "a prompt was sent while the gate was up ({} refused by ktr-prompt; Claude Code gives the text back to the input line)",
            op.blocked_prompts.len()
        )),
        None => pane_busy(target),
    };
    if let Some(why) = why {
        defer(tx, config, &mut op, &why)?;
    }
    Ok(op)
}

/// Why the pane must not be respawned now: the input line holds a draft,
/// or a turn is running. None for an idle pane, a screen that is not
/// Claude Code's input box (another program, a dialog: the turn checks
/// still apply) and targets without a screen.
pub(super) fn pane_busy(target: &Target) -> Option<String> {
    match target.input() {
        Ok(None | Some(Input::Idle | Input::Unknown)) => None,
        Ok(Some(Input::Draft(text))) => Some(format!(
            "the input line holds a draft that was not sent ({} characters); it would be thrown away",
            text.chars().count()
        )),
        Ok(Some(Input::Running)) => Some("the pane shows a running turn".into()),
        Err(e) => Some(format!("cannot read the pane: {}", e.message)),
    }
}

/// A `*.jsonl` in `project_dir`, other than the source and this candidate,
/// modified after prepare froze the source and begun after the Stop that
/// scheduled it: a session started in this project meanwhile (`/clear` in
/// the target's Claude Code, which no receipt records). Another Claude
/// Code's own session, begun before, writes there as it likes (several
/// sessions of one project); a process that moved to it by `/resume` is
/// caught by the receipt ([`target_guard::runs_source`]).
fn newer_transcript(
    config: &Config,
    op: &Operation,
    source: &Path,
    candidate: &Path,
) -> Result<Option<PathBuf>> {
    let since = op
        .prepared_at
        .as_deref()
        .and_then(parse_rfc3339)
        .ok_or_else(|| Error::refused(format!("operation {} has no prepare time", op.id)))?;
    let scheduled = op
        .scheduled_at
        .as_deref()
        .and_then(parse_rfc3339)
        .unwrap_or(since);
    let dir = &config.project_dir;
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io_at("list", dir, &e))?;
    let ours = [source.canonicalize().ok(), candidate.canonicalize().ok()];
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".jsonl") || name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        if ours.contains(&path.canonicalize().ok()) {
            continue;
        }
        let modified = entry.metadata().and_then(|m| m.modified());
        // A session whose beginning cannot be read counts as new.
        if modified.is_ok_and(|m| m > since) && begun_at(&path).is_none_or(|b| b > scheduled) {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

/// The time of the first record with one in the first 64 KiB of `path`.
fn begun_at(path: &Path) -> Option<std::time::SystemTime> {
    use std::io::Read;
    let file = ktr_base::open::open_regular(path, ktr_base::open::Links::Refuse).ok()?;
    let mut head = Vec::new();
    file.take(64 * 1024).read_to_end(&mut head).ok()?;
    #[derive(serde::Deserialize)]
    struct At<'a> {
        #[serde(borrow)]
        timestamp: Option<&'a str>,
    }
    head.split(|b| *b == b'\n')
        .filter_map(|line| serde_json::from_slice::<At>(line).ok())
        .find_map(|r| r.timestamp.and_then(parse_rfc3339))
}

/// The target runs `new_id` healthily. With `ktr-ack` installed (tmux),
/// healthy is Claude Code's own receipt: the process runs `new_id`,
/// `ktr-ack` recorded `SessionStart` (resume) for it, and the process lived
/// `healthcheck_min_seconds` after that, all within `healthcheck_seconds`.
/// Without it (and for systemd), the process must run `new_id` for the
/// whole `healthcheck_seconds`. Pointer mode: the pointer names `new_id`
/// and, after the probe, the receipt is in. Returns the identity seen.
fn healthy(
    config: &Config,
    store: &Store,
    target: &Target,
    id: &OperationId,
    new_id: &SessionId,
) -> Result<String> {
    let wait = seconds(config.healthcheck_seconds);
    // When ktr-ack recorded the receipt for `new_id` (its own clock; an
    // unreadable time counts from now).
    let received = || -> Result<Option<std::time::SystemTime>> {
        let op = store.load(id)?;
        Ok(op
            .ack
            .as_ref()
            .filter(|a| a.session_id == *new_id)
            .map(|a| parse_rfc3339(&a.at).unwrap_or_else(std::time::SystemTime::now)))
    };
    if config.activation == Activation::Tmux && ack_installed(config) {
        let mut received = received;
        return target.health_until(
            new_id,
            wait,
            Some(Receipt {
                received: &mut received,
                min_life: seconds(config.healthcheck_min_seconds),
            }),
        );
    }
    let identity = target.health(new_id, wait)?;
    // Pointer mode has no process to watch: Claude Code loads the session
    // once, and its receipt is the proof.
    if probe_wanted(config) {
        probe(config, new_id)?;
        let deadline = Instant::now() + wait;
        while received()?.is_none() {
            if Instant::now() >= deadline {
                return Err(Error::refused(format!(
                    "Claude Code did not report SessionStart (resume) for {new_id} within {} s although ktr-ack is installed",
                    config.healthcheck_seconds
                )));
            }
            thread::sleep(ACK_POLL);
        }
    }
    Ok(identity)
}

/// Pointer mode's health probe is wanted when nothing else would ever see
/// the new session load before the runner's next turn: pointer target, and
/// both `ktr-ack` (the receipt) and `ktr-prompt` (which refuses the probe's
/// prompt) installed.
fn probe_wanted(config: &Config) -> bool {
    config.activation == Activation::Pointer
        && config.pointer_health_probe
        && ack_installed(config)
        && prompt_hook_installed(config)
}

/// Resume `new_id` once the way `resume_command` does (with `-p` added when
/// missing) in `claude_workdir` with `resume_env`, sending [`PROBE`]:
/// ktr-prompt refuses it, so Claude Code loads the session, reports the
/// resume (`ktr-ack`) and exits without calling the model. An error when it
/// cannot load the session or takes longer than the health window allows.
fn probe(config: &Config, new_id: &SessionId) -> Result<()> {
    let mut argv = vec![
        "env".to_string(),
        "-C".to_string(),
        config.claude_workdir.to_string_lossy().into_owned(),
    ];
    argv.extend(config.resume_env.iter().map(|(k, v)| format!("{k}={v}")));
    argv.push("--".into());
    let mut resume = config.resume_argv(new_id);
    if !resume.iter().any(|a| a == "-p" || a == "--print") {
        resume.insert(1, "-p".into());
    }
    argv.extend(resume);
    argv.push(PROBE.into());
    // A CLI start takes 1.5–2 s of CPU, far more wall time on a busy machine.
    let out = process::run_with_timeout(&argv, seconds(config.healthcheck_seconds).max(PROBE_MIN))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(Error::refused(format!(
        "resuming it failed ({}): {}",
        out.status,
        stderr
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no message")
    )))
}

/// Whether Claude Code will acknowledge resumes: a `SessionStart` hook
/// running `ktr-ack` in `~/.claude/settings.json` or in the workdir's
/// `.claude/settings.json` / `.claude/settings.local.json`.
pub(crate) fn ack_installed(config: &Config) -> bool {
    hook_installed(config, "SessionStart", "ktr-ack")
}

/// Whether Claude Code runs `ktr-prompt` (the turn gate) before each prompt.
pub(super) fn prompt_hook_installed(config: &Config) -> bool {
    hook_installed(config, "UserPromptSubmit", "ktr-prompt")
}

/// Whether a hook of `event` running `program` is in `~/.claude/settings.json`
/// or the workdir's `.claude/settings.json` / `.claude/settings.local.json`.
fn hook_installed(config: &Config, event: &str, program: &str) -> bool {
    let workdir = config.claude_workdir.join(".claude");
    [
        home_dir().join(".claude/settings.json"),
        workdir.join("settings.json"),
        workdir.join("settings.local.json"),
    ]
    .iter()
    .any(|path| {
        let Ok(text) = std::fs::read_to_string(path) else {
            return false;
        };
        let Ok(settings) = serde_json::from_str::<serde_json::Value>(&text) else {
            return false;
        };
        settings["hooks"][event]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|group| group["hooks"].as_array().into_iter().flatten())
            .filter_map(|hook| hook["command"].as_str())
            .any(|command| command.contains(program))
    })
}

/// Resume the old session after a failed switch: `rolled_back` when it is
/// healthy again, else `failed` with `needs_attention`.
/// A test hook, compiled into debug builds only: with
/// `KTR_TEST_UNHEALTHY_SWITCH` set, a healthy in-place switch to the
/// candidate is judged unhealthy, so a test drives the way back
/// (`/resume <old-id>` into the same Claude Code) through the real CLI,
/// which never resumes a valid candidate unhealthily by itself.
fn judged_for_tests(switched: Switched) -> Switched {
    if cfg!(debug_assertions)
        && std::env::var_os("KTR_TEST_UNHEALTHY_SWITCH").is_some()
        && matches!(switched, Switched::Healthy(_))
    {
        return Switched::Unhealthy(
            "judged unhealthy by the test hook KTR_TEST_UNHEALTHY_SWITCH".into(),
        );
    }
    switched
}

fn fall_back(
    config: &Config,
    store: &Store,
    op: &Operation,
    target: &Target,
    reason: &str,
    steps: &mut Steps,
) -> Result<Outcome> {
    steps.say(format!(
        "{reason}; resuming the old session (what the target ran)"
    ));
    let back = restore(config, store, op, target);
    let op = store.with_op(&op.id, |tx| {
        let mut op = tx.load(&op.id)?;
        match &back {
            Ok((identity, what)) => {
                op.error = Some(reason.to_string());
                op.rollback_ok = Some(true);
                op.target_after = Some(identity.clone());
                let note = format!("{reason}; old session resumed: {what} (identity {identity})");
                tx.transition(&mut op, Status::RolledBack, &note)?;
            }
            Err(e) => {
                let why = format!("{reason}; resuming the old session failed too: {e}");
                let now = target
                    .identity()
                    .unwrap_or_else(|e| format!("unknown: {e}"));
                fail_in(tx, &mut op, &why, |op| {
                    op.rollback_ok = Some(false);
                    op.needs_attention = true;
                    op.target_after = Some(now);
                })?;
            }
        }
        Ok(op)
    })?;
    steps.say(format!("operation is {}", op.status));
    Ok(Outcome::done(op))
}

/// Put back what the target ran before the switch (`target_ran`, recorded
/// by the compare-and-swap checks; the source session for operations
/// recorded before it existed) and check it is healthy: in place first
/// (`/resume <old-id>` into the same Claude Code), else by respawning the
/// pane. A collision with a person's typing resumes nothing (their text is
/// back in the input line; respawning would throw it away). Returns the
/// identity and a description of what runs again.
pub(super) fn restore(
    config: &Config,
    store: &Store,
    op: &Operation,
    target: &Target,
) -> Result<(String, String)> {
    let ran = ran_before(op)?;
    let stage = Stage::Activate;
    match in_place::switch(
        stage,
        config,
        store,
        &op.id,
        target,
        op.claude,
        &ran.session,
    ) {
        Switched::Healthy(identity) => Ok((
            identity,
            format!(
                "session {} in place (/resume typed into the same Claude Code)",
                ran.session
            ),
        )),
        Switched::Collided(why) | Switched::Busy(why) => Err(Error::refused(format!(
            "{why}; the old session was not resumed (respawning would throw the person's text away)"
        ))),
        Switched::NotTried(_) | Switched::NotTaken(_) | Switched::Unhealthy(_) => {
            respawn_back(config, target, &ran, || {})
        }
    }
}

/// What the target ran before the switch (`target_ran`; the source session
/// for operations recorded before it existed).
pub(super) fn ran_before(op: &Operation) -> Result<crate::targets::Ran> {
    Ok(match &op.target_ran {
        Some(ran) => ran.clone(),
        None => crate::targets::Ran {
            session: source_session(op)?,
            argv: Vec::new(),
            cwd: None,
        },
    })
}

/// Put `ran` back by respawning the target (restarting it, rewriting the
/// pointer) and check it is healthy; `switched` runs right after the switch.
pub(super) fn respawn_back(
    config: &Config,
    target: &Target,
    ran: &crate::targets::Ran,
    switched: impl FnOnce(),
) -> Result<(String, String)> {
    target.restore(ran, config)?;
    switched();
    let identity = target.health(&ran.session, seconds(config.healthcheck_seconds))?;
    let what = if ran.argv.is_empty() {
        format!("session {}", ran.session)
    } else {
        format!("session {} ({})", ran.session, ran.argv.join(" "))
    };
    Ok((identity, what))
}
