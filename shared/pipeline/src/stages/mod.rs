//! The rebuild pipeline (SPEC §9, §10): `prepare → verify → activate`, and
//! `rollback`.
//!
//! Each stage is a library function that loads its operation, claims it in
//! the status it expects ([`Store::claim`] records the worker pid and start
//! time), does its one step, saves, and returns an [`Outcome`] naming the
//! next stage. The executables (`ktr-prepare`, …, see [`cli`]) then start
//! that stage detached with [`hand_off`]; `ktr demo` and pointer-mode runs
//! drive the same functions in one process with [`run_chain`].
//!
//! Once a stage has claimed its operation, every failure becomes a recorded
//! reason and a terminal status: nothing raises past the stage. A stage
//! killed at any point leaves a non-terminal operation with a dead worker,
//! which its [`watchdog`] fails the moment it dies, else
//! [`Store::recover_stale`] (called by every stage, hook and command) after
//! the grace; a candidate that never ran is discarded with it.
//!
//! Test hook: `KTR_TEST_PAUSE_AT=<stage>:<step>` makes a stage write its pid
//! to `$KTR_TEST_PAUSE_FILE` and sleep at that step ([`pause_point`]), so a
//! test can SIGKILL it exactly there.

pub mod ack;
mod activate;
pub mod advice;
mod again;
mod appended;
pub mod cli;
mod freeze;
pub mod hand;
mod in_place;
mod next;
pub mod offer;
pub mod precompact;
mod prepare;
pub mod prompt;
mod restore;
mod rollback;
mod space;
pub mod statusline;
pub mod stop;
mod target_guard;
mod verify;
pub mod watchdog;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::operation::{Locked, Operation, Status, Store, Worker, discard_candidate};
use crate::process;
use ktr_base::config::{Activation, Config};
use ktr_base::error::{Error, Result};
use ktr_base::fsutil::{Existing, write_atomic};
use ktr_base::ids::{OperationId, SessionId};
use ktr_base::time::now_rfc3339;

#[doc(no_inline)]
pub use crate::operation::Stage;
pub use activate::{GATED_SETTLE, activate};
pub use prepare::{prepare, schedule_by_hand};
pub use rollback::{came_along, rollback};
pub use verify::verify;

/// What a stage left behind: the operation as saved, and the stage to
/// start next (None when the operation is terminal or back to pending).
#[derive(Debug, Clone)]
pub struct Outcome {
    pub operation: Operation,
    pub next: Option<Stage>,
}

impl Outcome {
    fn done(operation: Operation) -> Outcome {
        Outcome {
            operation,
            next: None,
        }
    }

    /// One line for stdout: `operation <id>: <status>[ — error][; next]`.
    pub fn summary(&self) -> String {
        let op = &self.operation;
        let mut line = format!("operation {}: {}", op.id, op.status);
        if let Some(c) = &op.candidate {
            line.push_str(&format!(", candidate {}", c.session_id));
        }
        if let Some(e) = &op.error {
            line.push_str(&format!(" — {e}"));
        }
        if let Some(next) = self.next {
            line.push_str(&format!("; {next} started"));
        }
        line
    }
}

/// The step log of one stage run: one line per step on stderr (the
/// detached stages' stderr is `worker.log`), also kept for in-process
/// drivers such as `ktr demo`.
#[derive(Debug)]
pub struct Steps {
    prefix: String,
    lines: Vec<String>,
    echo: bool,
}

impl Steps {
    /// A log for `stage` working on operation `id`, echoed to stderr.
    pub fn new(stage: Stage, id: &OperationId) -> Steps {
        Steps {
            prefix: format!("{}[{}] {id}", stage.program(), std::process::id()),
            lines: Vec::new(),
            echo: true,
        }
    }

    /// A log that only collects (nothing on stderr).
    pub fn quiet(stage: Stage, id: &OperationId) -> Steps {
        Steps {
            echo: false,
            ..Steps::new(stage, id)
        }
    }

    /// Switch to another stage (in-process chains).
    fn enter(&mut self, stage: Stage, id: &OperationId) {
        self.prefix = format!("{}[{}] {id}", stage.program(), std::process::id());
    }

    /// Record one step.
    pub fn say(&mut self, step: impl fmt::Display) {
        let line = format!("{} {}: {step}", now_rfc3339(), self.prefix);
        if self.echo {
            eprintln!("{line}");
        }
        self.lines.push(line);
    }

    /// Every step so far.
    pub fn lines(&self) -> &[String] {
        &self.lines
    }
}

/// A stage as an executable runs it, one signature for all four, so that
/// each executable names — and links — only its own (`transcript` is for
/// prepare only).
pub(crate) type StageFn =
    fn(&Config, &Store, &OperationId, Option<&Path>, &mut Steps) -> Result<Outcome>;

/// A stage that takes no transcript, as a [`StageFn`] (prepare has the
/// shape already).
macro_rules! without_transcript {
    ($name:ident, $stage:ident) => {
        #[doc = concat!("[`", stringify!($stage), "`] as a [`StageFn`].")]
        pub fn $name(
            config: &Config,
            store: &Store,
            id: &OperationId,
            _: Option<&Path>,
            steps: &mut Steps,
        ) -> Result<Outcome> {
            $stage(config, store, id, steps)
        }
    };
}
without_transcript!(verify_stage, verify);
without_transcript!(activate_stage, activate);
without_transcript!(rollback_stage, rollback);

/// The [`StageFn`] of `stage`: only what runs several stages in one
/// process (pointer mode's chain in `ktr-prepare`, `ktr demo`) needs this.
pub(crate) fn stage_fn(stage: Stage) -> StageFn {
    match stage {
        Stage::Prepare => prepare,
        Stage::Verify => verify_stage,
        Stage::Activate => activate_stage,
        Stage::Rollback => rollback_stage,
    }
}

/// Run one stage on operation `id` (`transcript` is for prepare only).
pub fn run(
    stage: Stage,
    config: &Config,
    store: &Store,
    id: &OperationId,
    transcript: Option<&Path>,
    steps: &mut Steps,
) -> Result<Outcome> {
    steps.enter(stage, id);
    stage_fn(stage)(config, store, id, transcript, steps)
}

/// Follow `outcome.next` in this process until the operation stops moving
/// (terminal, or back to pending): pointer-mode runs and `ktr demo`.
pub(crate) fn run_chain(
    config: &Config,
    store: &Store,
    mut outcome: Outcome,
    steps: &mut Steps,
) -> Result<Outcome> {
    while let Some(next) = outcome.next {
        outcome = run(next, config, store, &outcome.operation.id, None, steps)?;
    }
    Ok(outcome)
}

/// Where ktr's executables are: `$KTR_BIN_DIR`, else beside the current one.
pub fn bin_dir() -> Result<PathBuf> {
    match std::env::var_os("KTR_BIN_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(Path::to_path_buf))
            .ok_or_else(|| {
                Error::io("cannot find the directory of the ktr executables; set KTR_BIN_DIR")
            }),
    }
}

/// `ktr-keep`, the key keeper of an in-place switch, beside the stages
/// ([`bin_dir`]); it may be missing (then there is no popup).
pub fn keeper_program() -> Result<PathBuf> {
    Ok(bin_dir()?.join("ktr-keep"))
}

/// The command line that starts `stage` for operation `op_id`: the
/// executable beside the current one (or in `$KTR_BIN_DIR`), with
/// [`config_args`] and `--operation`; with `activation = "systemd"` inside its own scope
/// (`systemd-run --scope --quiet --collect --unit ktr-<op>-<stage>
/// --property KillMode=process --`) so restarting the service cannot kill
/// it.
pub fn command(
    config: &Config,
    stage: Stage,
    op_id: &OperationId,
    transcript: Option<&Path>,
) -> Result<Vec<String>> {
    let mut argv = Vec::new();
    if config.activation == Activation::Systemd {
        let unit = format!("ktr-{op_id}-{}", stage.name());
        argv.push("systemd-run".to_string());
        if config.systemd_user {
            argv.push("--user".into());
        }
        argv.extend(
            [
                "--scope",
                "--quiet",
                "--collect",
                "--unit",
                &unit,
                "--property",
                "KillMode=process",
                "--",
            ]
            .map(String::from),
        );
    }
    argv.push(
        bin_dir()?
            .join(stage.program())
            .to_string_lossy()
            .into_owned(),
    );
    argv.extend(config_args(config)?);
    argv.extend(["--operation".into(), op_id.to_string()]);
    if let Some(t) = transcript {
        argv.extend(["--transcript".into(), t.to_string_lossy().into_owned()]);
    }
    Ok(argv)
}

/// `--config` and its absolute path for a process ktr starts (none with
/// zero config: it finds the same, none, again).
pub(crate) fn config_args(config: &Config) -> Result<Vec<String>> {
    let Some(p) = config.source.as_deref() else {
        return Ok(Vec::new());
    };
    let path = std::path::absolute(p)
        .map_err(|_| Error::config("cannot resolve the config path for the worker"))?;
    Ok(vec!["--config".into(), path.to_string_lossy().into_owned()])
}

/// Start `stage` detached (output appended to `worker.log`); returns its pid.
pub fn spawn(
    config: &Config,
    store: &Store,
    stage: Stage,
    op_id: &OperationId,
    transcript: Option<&Path>,
) -> Result<u32> {
    let argv = command(config, stage, op_id, transcript)?;
    let log = store.worker_log();
    let line = format!(
        "{} starting {} for operation {op_id}\n",
        now_rfc3339(),
        argv.join(" ")
    );
    append_log(&log, &line)?;
    let pid = process::spawn_detached(&argv, &[], &log)?;
    if config.activation == Activation::Systemd {
        // `systemd-run --scope` execs the stage in place once its scope
        // exists; when it cannot (name taken, access denied) it exits and
        // says why in worker.log: report that instead of "scheduled".
        process::wait_exec(pid, stage.program(), SCOPE_TIMEOUT).map_err(|e| {
            let said = last_line(&log).unwrap_or_default();
            Error::io(format!(
                "systemd-run could not start {stage} in its own scope ({}){}",
                e.message,
                if said.is_empty() {
                    String::new()
                } else {
                    format!(": {said}")
                }
            ))
        })?;
    }
    watchdog::start(config, store, stage, op_id, pid);
    Ok(pid)
}

/// How long `systemd-run --scope` may take to start a stage.
const SCOPE_TIMEOUT: Duration = Duration::from_secs(10);

/// Append `line` to the worker log (created 0600, never through a link).
pub(crate) fn append_log(path: &Path, line: &str) -> Result<()> {
    use std::io::Write;
    ktr_base::open::append_private(path)?
        .write_all(line.as_bytes())
        .map_err(|e| Error::io_at("append to", path, &e))
}

/// The last non-empty line of `path`'s last 4 KiB.
fn last_line(path: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = ktr_base::open::open_regular(path, ktr_base::open::Links::Refuse).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(4096))).ok()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
}

/// Start `next` detached for operation `id` and record it as the worker,
/// under the lock, so there is never a moment without a live worker on
/// record. Only the current worker hands over, and only from the status
/// `next` expects. If the stage cannot be started the operation fails.
pub(crate) fn hand_off(
    config: &Config,
    store: &Store,
    id: &OperationId,
    next: Stage,
    steps: &mut Steps,
) -> Result<Operation> {
    let started = store.with_op(id, |tx| {
        let mut op = tx.load(id)?;
        let mine = op
            .worker
            .as_ref()
            .is_some_and(|w| w.pid == std::process::id());
        if op.status != next.expects() || !mine {
            return Err(Error::refused(format!(
                "operation {id} is {} and no longer ours; not starting {next}",
                op.status
            )));
        }
        match spawn(config, store, next, id, None) {
            Ok(pid) => {
                op.worker = Some(Worker::spawned(pid, next));
                tx.save(&mut op)?;
                Ok(Ok((op, pid)))
            }
            Err(e) => Ok(Err(e)),
        }
    })?;
    match started {
        Ok((op, pid)) => {
            steps.say(format!("started {next} (pid {pid})"));
            Ok(op)
        }
        Err(e) => {
            steps.say(format!("cannot start {next}: {e}"));
            abandon(store, id, &format!("cannot start {next}: {e}"), |_| {})
        }
    }
}

/// Fail operation `id` with `reason` (after `edit`), discarding a candidate
/// that never ran. An operation that is already terminal is left alone.
pub(crate) fn abandon(
    store: &Store,
    id: &OperationId,
    reason: &str,
    edit: impl FnOnce(&mut Operation),
) -> Result<Operation> {
    store.with_op(id, |tx| {
        let mut op = tx.load(id)?;
        fail_in(tx, &mut op, reason, edit)?;
        Ok(op)
    })
}

/// [`abandon`] inside a held lock.
fn fail_in(
    tx: &mut Locked,
    op: &mut Operation,
    reason: &str,
    edit: impl FnOnce(&mut Operation),
) -> Result<()> {
    if op.status.is_terminal() {
        return Ok(());
    }
    edit(op);
    op.error = Some(reason.to_string());
    let mut note = reason.to_string();
    if op.status.before_switch() {
        match discard_candidate(op, tx.store().project()) {
            Ok(Some(path)) => note.push_str(&format!("; candidate {} discarded", path.display())),
            Ok(None) => {}
            Err(e) => note.push_str(&format!("; {e}")),
        }
    }
    tx.transition(op, Status::Failed, &note)
}

/// Run a claimed stage's work: an error becomes the operation's recorded
/// failure instead of escaping.
fn guarded(
    store: &Store,
    id: &OperationId,
    steps: &mut Steps,
    work: impl FnOnce(&mut Steps) -> Result<Outcome>,
) -> Result<Outcome> {
    match work(steps) {
        Ok(outcome) => Ok(outcome),
        Err(e) => {
            steps.say(format!("failed: {e}"));
            abandon(store, id, &e.message, |_| {}).map(Outcome::done)
        }
    }
}

/// Under the lock: load `id`, require that it is still `status` and that
/// this process is its worker, apply `edit`, then save it, or move it to
/// `to` with `note` when given.
fn update(
    store: &Store,
    id: &OperationId,
    status: Status,
    to: Option<(Status, &str)>,
    edit: impl FnOnce(&mut Operation),
) -> Result<Operation> {
    store.with_op(id, |tx| {
        let mut op = tx.load(id)?;
        ensure_ours(&op, status)?;
        edit(&mut op);
        match to {
            Some((to, note)) => tx.transition(&mut op, to, note)?,
            None => tx.save(&mut op)?,
        }
        Ok(op)
    })
}

/// The operation is still `status` and this process is its worker.
fn ensure_ours(op: &Operation, status: Status) -> Result<()> {
    let mine = op
        .worker
        .as_ref()
        .is_some_and(|w| w.pid == std::process::id());
    if op.status != status || !mine {
        return Err(Error::refused(format!(
            "operation {} changed under this stage (now {}); stopping",
            op.id, op.status
        )));
    }
    Ok(())
}

/// The source session id: the transcript's file name.
fn source_session(op: &Operation) -> Result<SessionId> {
    match op.transcript_path.as_deref() {
        Some(path) => SessionId::of_transcript(path),
        None => op
            .session_id
            .clone()
            .ok_or_else(|| Error::refused(format!("operation {} has no source session", op.id))),
    }
}

/// Seconds from a config value, never negative.
fn seconds(value: f64) -> Duration {
    Duration::from_secs_f64(value.max(0.0))
}

/// The test-only pause hook: when `KTR_TEST_PAUSE_AT` is `<stage>:<step>`,
/// write this pid to `$KTR_TEST_PAUSE_FILE` and sleep there, so that a test
/// can kill the stage exactly at that step, or change the world and then
/// delete the file to let the stage go on. After five minutes unattended
/// the stage exits without touching anything (recovery then fails it).
pub(crate) fn pause_point(stage: Stage, step: &str) {
    // A test hook: compiled into debug builds only, never into a release.
    if !cfg!(debug_assertions) {
        return;
    }
    let Ok(at) = std::env::var("KTR_TEST_PAUSE_AT") else {
        return;
    };
    if at.split_once(':') != Some((stage.name(), step)) {
        return;
    }
    let file = std::env::var_os("KTR_TEST_PAUSE_FILE").map(PathBuf::from);
    if let Some(file) = &file {
        let pid = format!("{}\n", std::process::id());
        let _ = write_atomic(file, pid.as_bytes(), 0o600, Existing::Replace);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    while std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        if file.as_ref().is_some_and(|f| !f.exists()) {
            return;
        }
    }
    std::process::exit(3);
}
