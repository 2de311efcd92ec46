//! Operations and their state machine (SPEC §9): the one place where the
//! stages, the hooks and the CLI meet.
//!
//! Layout of the state dir (0700):
//!
//! | file | what |
//! |---|---|
//! | `coordinator.lock` | held for every read-modify-write (a separate file: never lock a file that is renamed over) |
//! | `active` | `<id> <status>` of the one non-terminal operation, or absent: the Stop hook reads only this |
//! | `operations/<id>.json` | one [`Operation`] per file (0600, atomic writes) |
//! | `artifacts/<id>/` | backup, snapshot, ack receipt (0700) |
//! | `ktr.log` | one JSON line per transition: `{ts, op, from, to, note}` |
//! | `worker.log` | stdout/stderr of detached stages |

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind as IoKind, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::config::{Config, expand_home, home_dir};
use crate::error::{Error, Result};
use crate::fsutil::{Existing, ensure_private_dir, write_atomic};
use crate::plan::LeftOut;
use crate::process::{self, ProcessId};
use crate::target::{Ran, Target};

/// Where an operation is in its life (SPEC §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Requested; waits for the next Stop hook.
    Pending,
    /// A Stop hook spawned `ktr-prepare`.
    Scheduled,
    /// `ktr-prepare` is freezing the source and writing the candidate.
    Running,
    /// `ktr-verify` is checking the candidate (and `ktr-activate` its CAS checks).
    Verifying,
    /// `ktr-activate` is switching the target.
    Activating,
    /// The target runs the candidate session. Terminal, but can be rolled back.
    Activated,
    /// Rollback requested; waits for the next Stop hook.
    RollbackPending,
    /// A Stop hook spawned `ktr-rollback`.
    RollbackScheduled,
    /// `ktr-rollback` is switching back.
    RollingBack,
    /// Cancelled before it was scheduled.
    Cancelled,
    /// Abandoned; the old session is untouched unless `needs_attention`.
    Failed,
    /// The old session runs again.
    RolledBack,
    /// Pending for longer than `request_ttl_hours`: the bound session never
    /// stopped (it no longer runs, or not in the target). Nothing was changed.
    Expired,
}

impl Status {
    /// Every status, in life-cycle order.
    pub const ALL: [Status; 13] = [
        Status::Pending,
        Status::Scheduled,
        Status::Running,
        Status::Verifying,
        Status::Activating,
        Status::Activated,
        Status::RollbackPending,
        Status::RollbackScheduled,
        Status::RollingBack,
        Status::Cancelled,
        Status::Failed,
        Status::RolledBack,
        Status::Expired,
    ];

    /// Terminal operations block nothing: activated, cancelled, failed,
    /// rolled_back, expired.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Status::Activated
                | Status::Cancelled
                | Status::Failed
                | Status::RolledBack
                | Status::Expired
        )
    }

    /// Statuses in which the target has certainly not been touched yet, so
    /// a written candidate was never run and can be discarded.
    pub fn before_switch(self) -> bool {
        matches!(
            self,
            Status::Pending | Status::Scheduled | Status::Running | Status::Verifying
        )
    }

    /// The snake_case name used in files and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Scheduled => "scheduled",
            Status::Running => "running",
            Status::Verifying => "verifying",
            Status::Activating => "activating",
            Status::Activated => "activated",
            Status::RollbackPending => "rollback_pending",
            Status::RollbackScheduled => "rollback_scheduled",
            Status::RollingBack => "rolling_back",
            Status::Cancelled => "cancelled",
            Status::Failed => "failed",
            Status::RolledBack => "rolled_back",
            Status::Expired => "expired",
        }
    }

    /// Parse a snake_case name.
    pub fn parse(name: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Whether the state machine allows `self → to` (SPEC §9):
    ///
    /// ```text
    /// pending → scheduled → running → verifying → activating → activated
    /// scheduled → pending            (scheduling undone)
    /// verifying → pending            (source changed: retry from the fresh transcript)
    /// activating → rolled_back       (unhealthy, old session resumed)
    /// activated → rollback_pending → rollback_scheduled → rolling_back → rolled_back
    /// rollback_scheduled → rollback_pending   (scheduling undone)
    /// rollback_scheduled → rolled_back        (ktr-rollback without a rolling_back step)
    /// pending → cancelled | expired;   any non-terminal → failed
    /// ```
    pub fn can_become(self, to: Status) -> bool {
        use Status::*;
        if to == Failed {
            return !self.is_terminal();
        }
        matches!(
            (self, to),
            (Pending, Scheduled | Cancelled | Expired)
                | (Scheduled, Running | Pending)
                | (Running, Verifying)
                | (Verifying, Activating | Pending)
                | (Activating, Activated | RolledBack)
                | (Activated, RollbackPending)
                | (RollbackPending, RollbackScheduled)
                | (
                    RollbackScheduled,
                    RollingBack | RollbackPending | RolledBack
                )
                | (RollingBack, RolledBack)
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The process currently responsible for an operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worker {
    pub pid: u32,
    /// `/proc/<pid>/stat` field 22: tells a live worker from a reused pid.
    pub start_time: u64,
    /// Which stage it runs (`prepare`, `verify`, `activate`, `rollback`).
    pub stage: String,
}

impl Worker {
    /// Describe a live process (None if it is already gone).
    pub fn of(pid: u32, stage: &str) -> Option<Worker> {
        Some(Worker {
            pid,
            start_time: process::start_time(pid)?,
            stage: stage.to_string(),
        })
    }

    /// The calling process.
    pub fn current(stage: &str) -> Worker {
        let pid = std::process::id();
        Worker {
            pid,
            start_time: process::start_time(pid).unwrap_or(0),
            stage: stage.to_string(),
        }
    }

    /// Whether that very process still runs.
    pub fn alive(&self) -> bool {
        process::same_process_alive(self.pid, self.start_time)
    }
}

/// The rebuilt session written by `ktr-prepare`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Candidate {
    pub session_id: String,
    pub path: PathBuf,
    pub sha256: String,
}

/// Claude Code's own receipt that it loaded the candidate (`ktr-ack`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    pub at: String,
    pub session_id: String,
    /// The real token count of the resumed window, as Claude Code measured it.
    pub context_tokens: Option<u64>,
}

/// A target as seen at one moment: its identity and the session it ran
/// (when that could be found).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeenTarget {
    pub identity: String,
    #[serde(default)]
    pub session: Option<String>,
}

/// One step of an operation's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    pub at: String,
    pub from: Status,
    pub to: Status,
    pub note: String,
}

/// One rebuild request and everything learned while carrying it out
/// (`operations/<id>.json`). Fields the stages have not reached yet are null.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Operation {
    /// UUID v4.
    pub id: String,
    pub status: Status,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// RFC 3339 UTC; refreshed by every save.
    pub updated_at: String,
    /// Why a rebuild was requested; repeated requests merge in.
    pub reasons: Vec<String>,
    /// The source session. When set, only that session's Stop hook schedules.
    pub session_id: Option<String>,
    /// The source transcript, as the Stop hook reported it.
    pub transcript_path: Option<PathBuf>,
    /// How many times prepare started (source changes count).
    pub attempts: u32,
    pub worker: Option<Worker>,
    /// Digest of the frozen source backup.
    pub source_sha256: Option<String>,
    pub candidate: Option<Candidate>,
    /// One entry per carried item (SPEC §7), filled by prepare.
    pub manifest: Vec<serde_json::Value>,
    /// Selection statistics of the plan, filled by prepare.
    pub stats: Option<serde_json::Value>,
    /// Result of ktr-verify (`{"ok": true, …}`), filled by verify.
    pub verification: Option<serde_json::Value>,
    /// What the target ran when the rebuild was requested (SPEC §10:
    /// prepare refuses when it changed, unless the same session was resumed).
    pub requested_target: Option<SeenTarget>,
    /// The Claude Code process whose Stop hook scheduled the rebuild (the
    /// hook's parent, past `sh -c`): the target must run it to be switched.
    pub claude: Option<ProcessId>,
    /// Target identity recorded before the switch (tmux pane pid, MainPID, pointer).
    pub target_before: Option<String>,
    /// What the target ran right before the switch (session, command line,
    /// directory): the fallback and a rollback restore exactly this.
    pub target_ran: Option<Ran>,
    /// Target identity after the switch (or what it ran when a worker died).
    pub target_after: Option<String>,
    /// Why it failed, one line.
    pub error: Option<String>,
    /// A third party changed the target: never retry blindly.
    pub session_conflict: bool,
    /// A human must look at the target (e.g. a worker died mid-switch).
    pub needs_attention: bool,
    /// Whether the automatic fallback to the old session worked.
    pub rollback_ok: Option<bool>,
    /// Token estimate of the carried conversation (SPEC §6).
    pub estimated_tokens: Option<u64>,
    pub ack: Option<Ack>,
    pub history: Vec<Transition>,
    /// The frozen 0600 copy of the source (`artifacts/<id>/<source>.jsonl`).
    pub backup: Option<PathBuf>,
    /// Conversation records the plan did not carry, with the reason (for
    /// ktr-verify's conservation check).
    pub left_out: Vec<LeftOut>,
    /// RFC 3339 UTC: when prepare froze the source. Transcripts modified
    /// after this are competitors at activation.
    pub prepared_at: Option<String>,
}

impl Default for Operation {
    fn default() -> Self {
        let now = now_rfc3339();
        Operation {
            id: String::new(),
            status: Status::Pending,
            created_at: now.clone(),
            updated_at: now,
            reasons: Vec::new(),
            session_id: None,
            transcript_path: None,
            attempts: 0,
            worker: None,
            source_sha256: None,
            candidate: None,
            manifest: Vec::new(),
            stats: None,
            verification: None,
            requested_target: None,
            claude: None,
            target_before: None,
            target_ran: None,
            target_after: None,
            error: None,
            session_conflict: false,
            needs_attention: false,
            rollback_ok: None,
            estimated_tokens: None,
            ack: None,
            history: Vec::new(),
            backup: None,
            left_out: Vec::new(),
            prepared_at: None,
        }
    }
}

impl Operation {
    /// A new pending operation with a fresh UUID v4.
    pub fn new(reason: &str, session_id: Option<String>) -> Operation {
        Operation {
            id: uuid::Uuid::new_v4().to_string(),
            reasons: vec![reason.to_string()],
            session_id,
            ..Operation::default()
        }
    }

    /// The measured size of the new window, if Claude Code acknowledged it.
    pub fn context_tokens(&self) -> Option<u64> {
        self.ack.as_ref().and_then(|a| a.context_tokens)
    }
}

/// Reject ids that could not have come from us before they touch a path:
/// `[0-9a-f-]`, 1 to 64 characters.
pub fn validate_id(id: &str) -> Result<()> {
    validate_name(
        id,
        64,
        |b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b) || b == b'-',
        "operation id",
        "lower-case hex and dashes (see `ktr ops`)",
    )
}

/// Default state dir when no config says otherwise.
pub const DEFAULT_STATE_DIR: &str = "~/.local/state/ktr";

/// How long a dead worker is tolerated after the operation's last update
/// before the operation is failed (covers the hand-off between stages).
pub const DEFAULT_WORKER_GRACE: Duration = Duration::from_secs(10);

/// The grace period: `$KTR_WORKER_GRACE_SECONDS` when it is a non-negative
/// number (tests shorten it), else [`DEFAULT_WORKER_GRACE`]. Stages record
/// the next stage as the worker when they hand over, so the grace only
/// covers a stage's own start-up.
pub fn worker_grace() -> Duration {
    std::env::var("KTR_WORKER_GRACE_SECONDS")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(DEFAULT_WORKER_GRACE, Duration::from_secs_f64)
}

/// How long to wait for the coordinator lock before giving up.
const LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// Find the state dir cheaply, for hooks that must start in a millisecond:
/// the `state_dir` key of the config file found by [`Config::locate`], read
/// as plain TOML without validating the rest ([`Config::load`] resolves the
/// key the same way), else [`DEFAULT_STATE_DIR`] when there is no config
/// file. A config file that is not TOML, or whose `state_dir` is not a
/// string, is an error: nothing could be scheduled with it.
pub fn locate_state_dir(config: Option<&Path>) -> Result<PathBuf> {
    let path = Config::locate(config);
    let configured = match fs::read_to_string(&path) {
        Ok(text) => {
            let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
                Error::config(format!(
                    "config {} is not valid TOML: {}",
                    path.display(),
                    e.message()
                ))
            })?;
            match table.get("state_dir") {
                None => None,
                Some(toml::Value::String(s)) => Some(s.clone()),
                Some(_) => {
                    return Err(Error::config(format!(
                        "config {}: state_dir must be a string",
                        path.display()
                    )));
                }
            }
        }
        Err(e) if e.kind() == IoKind::NotFound => None,
        Err(e) => {
            return Err(Error::config(format!(
                "cannot read config {}: {e}",
                path.display()
            )));
        }
    };
    Ok(expand_home(
        configured.as_deref().unwrap_or(DEFAULT_STATE_DIR),
        &home_dir(),
    ))
}

/// The operation store over one state dir.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    target: Option<Target>,
    /// `project_dir` of the config (requests bind to a session there).
    project_dir: Option<PathBuf>,
    /// `request_ttl_hours`: a pending request older than this expires.
    ttl: Option<Duration>,
    grace: Duration,
}

/// A held coordinator lock; every mutation goes through it.
pub struct Tx<'a> {
    store: &'a Store,
    _lock: File,
}

impl Store {
    /// Open (and create, 0700) the state dir.
    pub fn open(dir: &Path) -> Result<Store> {
        ensure_private_dir(dir, 0o700)?;
        ensure_private_dir(&dir.join("operations"), 0o700)?;
        Ok(Store {
            dir: dir.to_path_buf(),
            target: None,
            project_dir: None,
            ttl: None,
            grace: worker_grace(),
        })
    }

    /// Open the configured state dir, with the configured target so that
    /// stale-worker recovery can record what the target runs.
    pub fn for_config(config: &Config) -> Result<Store> {
        let mut store = Store::open(&config.state_dir)?;
        store.target = Some(Target::from_config(config));
        store.project_dir = Some(config.project_dir.clone());
        store.ttl = Some(Duration::from_secs_f64(config.request_ttl_hours * 3600.0));
        Ok(store)
    }

    /// Read-only look at a state dir (creates nothing; for hooks and status).
    pub fn at(dir: &Path) -> Store {
        Store {
            dir: dir.to_path_buf(),
            target: None,
            project_dir: None,
            ttl: None,
            grace: worker_grace(),
        }
    }

    /// Change the dead-worker grace period.
    pub fn with_grace(mut self, grace: Duration) -> Store {
        self.grace = grace;
        self
    }

    /// Use `target` when recording what a dead activation left behind.
    pub fn with_target(mut self, target: Target) -> Store {
        self.target = Some(target);
        self
    }

    /// What the configured target runs now (None without a target, or
    /// when it cannot be read).
    pub fn seen_target(&self) -> Option<SeenTarget> {
        let running = self.target.as_ref()?.running().ok()?;
        Some(SeenTarget {
            identity: running.identity,
            session: running.session,
        })
    }

    /// The state dir.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of an operation file (the id is validated).
    pub fn operation_path(&self, id: &str) -> Result<PathBuf> {
        validate_id(id)?;
        Ok(self.dir.join("operations").join(format!("{id}.json")))
    }

    /// `artifacts/<id>/`, created 0700.
    pub fn artifacts_dir(&self, id: &str) -> Result<PathBuf> {
        validate_id(id)?;
        let dir = self.dir.join("artifacts").join(id);
        ensure_private_dir(&self.dir.join("artifacts"), 0o700)?;
        ensure_private_dir(&dir, 0o700)?;
        Ok(dir)
    }

    /// Where detached stages write their output.
    pub fn worker_log(&self) -> PathBuf {
        self.dir.join("worker.log")
    }

    /// The `active` file: `(id, status)` of the non-terminal operation, if
    /// any. Cheap (one small read, no lock): this is the Stop hook's fast path.
    pub fn active(&self) -> Option<(String, Status)> {
        let text = fs::read_to_string(self.dir.join("active")).ok()?;
        let mut words = text.split_whitespace();
        let id = words.next()?;
        let status = Status::parse(words.next()?)?;
        validate_id(id).ok()?;
        Some((id.to_string(), status))
    }

    /// Load one operation.
    pub fn load(&self, id: &str) -> Result<Operation> {
        let path = self.operation_path(id)?;
        let bytes = fs::read(&path).map_err(|e| {
            if e.kind() == IoKind::NotFound {
                Error::usage(format!("no operation {id}; `ktr ops` lists them"))
            } else {
                Error::io_at("read", &path, &e)
            }
        })?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::io(format!("operation file {} is damaged: {e}", path.display())))
    }

    /// Every operation, oldest first. Unreadable files are skipped.
    pub fn list(&self) -> Result<Vec<Operation>> {
        let dir = self.dir.join("operations");
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == IoKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io_at("list", &dir, &e)),
        };
        let mut ops: Vec<Operation> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                self.load(name.strip_suffix(".json")?).ok()
            })
            .collect();
        ops.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        Ok(ops)
    }

    /// The most recently created operation.
    pub fn latest(&self) -> Result<Option<Operation>> {
        Ok(self.list()?.pop())
    }

    /// Run `f` holding the coordinator lock. Waits at most 10 s for it.
    pub fn with_lock<T>(&self, f: impl FnOnce(&mut Tx) -> Result<T>) -> Result<T> {
        ensure_private_dir(&self.dir, 0o700)?;
        ensure_private_dir(&self.dir.join("operations"), 0o700)?;
        let path = self.dir.join("coordinator.lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| Error::io_at("open lock", &path, &e))?;
        let deadline = Instant::now() + LOCK_TIMEOUT;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(2));
                }
                Err(fs::TryLockError::WouldBlock) => {
                    return Err(Error::io(format!(
                        "{} is held by another ktr process for more than {} s; see `ktr status`",
                        path.display(),
                        LOCK_TIMEOUT.as_secs()
                    )));
                }
                Err(fs::TryLockError::Error(e)) => return Err(Error::io_at("lock", &path, &e)),
            }
        }
        let mut tx = Tx {
            store: self,
            _lock: file,
        };
        f(&mut tx)
        // The lock is released when `tx` (and its file) drops.
    }

    /// Request a rebuild (`REBUILD`): create a pending operation or merge the
    /// reason into the pending one. Any other non-terminal operation refuses.
    pub fn request(
        &self,
        reason: &str,
        confirmation: &str,
        session: Option<String>,
    ) -> Result<Operation> {
        confirm(confirmation, "REBUILD")?;
        let reason = reason.trim();
        if reason.is_empty() {
            return Err(Error::usage(
                "a reason is required: say why the session should be rebuilt",
            ));
        }
        if let Some(s) = &session {
            validate_session_id(s)?;
        }
        self.recover_stale()?;
        let seen = self.seen_target();
        if let (Some(asked), Some(running)) =
            (&session, seen.as_ref().and_then(|s| s.session.as_ref()))
            && asked != running
        {
            return Err(Error::refused(format!(
                "{} runs session {running}, not {asked}: a rebuild of {asked} would replace another conversation; ask from the session the target runs",
                self.target
                    .as_ref()
                    .map_or_else(String::new, ToString::to_string)
            )));
        }
        // Unbound: the session the target runs now, when it lives in project_dir.
        let session = session.or_else(|| {
            let running = seen.as_ref()?.session.clone()?;
            let project = self.project_dir.as_ref()?;
            project
                .join(format!("{running}.jsonl"))
                .is_file()
                .then_some(running)
        });
        self.with_lock(|tx| {
            if let Some(mut op) = tx.active_operation()? {
                if op.status != Status::Pending {
                    return Err(Error::refused(format!(
                        "operation {} is {}; wait for it to finish (or cancel/rollback it) before requesting another",
                        op.id, op.status
                    )));
                }
                if session.is_some() && op.session_id.is_some() && op.session_id != session {
                    return Err(Error::refused(format!(
                        "operation {} is pending for session {}; cancel it before requesting one for another session",
                        op.id,
                        op.session_id.as_deref().unwrap_or("")
                    )));
                }
                if !op.reasons.iter().any(|r| r == reason) {
                    op.reasons.push(reason.to_string());
                }
                if op.session_id.is_none() {
                    op.session_id = session;
                }
                tx.save(&mut op)?;
                tx.log(&op.id, op.status, op.status, &format!("reason merged: {reason}"))?;
                return Ok(op);
            }
            // `active` first: an operation file nobody points at would be
            // invisible; an `active` naming a missing file reads as none.
            let mut op = Operation::new(reason, session);
            op.requested_target = seen;
            tx.set_active(&op)?;
            tx.save(&mut op)?;
            tx.log(&op.id, Status::Pending, Status::Pending, "requested")?;
            Ok(op)
        })
    }

    /// Cancel a pending operation (`CANCEL`).
    pub fn cancel(&self, id: &str, confirmation: &str) -> Result<Operation> {
        confirm(confirmation, "CANCEL")?;
        self.with_lock(|tx| {
            let mut op = tx.load_in(id, Status::Pending, "a pending operation can be cancelled")?;
            tx.transition(&mut op, Status::Cancelled, "cancelled by request")?;
            Ok(op)
        })
    }

    /// Ask to switch an activated operation back to the old session (`ROLLBACK`).
    pub fn rollback_request(&self, id: &str, confirmation: &str) -> Result<Operation> {
        confirm(confirmation, "ROLLBACK")?;
        self.recover_stale()?;
        self.with_lock(|tx| {
            let mut op = tx.load_in(
                id,
                Status::Activated,
                "an activated operation can be rolled back",
            )?;
            if let Some(other) = tx.active_operation()? {
                return Err(Error::refused(format!(
                    "operation {} is {}; wait for it to finish first",
                    other.id, other.status
                )));
            }
            tx.transition(&mut op, Status::RollbackPending, "rollback requested")?;
            Ok(op)
        })
    }

    /// For a stage starting up: under the lock, require status `expected`,
    /// record the calling process as the worker for `stage`, and move to
    /// `to` (`to == expected` only records the worker). Refused while
    /// another live process is the recorded worker.
    pub fn claim(&self, id: &str, expected: Status, to: Status, stage: &str) -> Result<Operation> {
        self.with_lock(|tx| {
            let mut op = tx.load(id)?;
            if op.status != expected {
                return Err(Error::refused(format!(
                    "operation {id} is {}, not {expected}; ktr-{stage} has nothing to do",
                    op.status
                )));
            }
            if let Some(w) = op
                .worker
                .as_ref()
                .filter(|w| w.pid != std::process::id() && w.alive())
            {
                return Err(Error::refused(format!(
                    "operation {id} is being worked on by ktr-{} (pid {}); wait for it",
                    w.stage, w.pid
                )));
            }
            op.worker = Some(Worker::current(stage));
            if to == expected {
                tx.save(&mut op)?;
            } else {
                tx.transition(&mut op, to, &format!("ktr-{stage} started"))?;
            }
            Ok(op)
        })
    }

    /// Fail every non-terminal operation whose recorded worker is gone (dead
    /// or pid reused) and that has not been updated within the grace period:
    /// `error: "worker died during <status>"`. If it died while activating,
    /// what the target runs now is recorded and `needs_attention` is set.
    /// Returns the operations it failed.
    pub fn recover_stale(&self) -> Result<Vec<Operation>> {
        let Some((id, status)) = self.active() else {
            return Ok(Vec::new());
        };
        if status == Status::Pending {
            return self.expire_stale_request();
        }
        if !self.load(&id).is_ok_and(|op| self.is_stale(&op)) {
            return Ok(Vec::new());
        }
        self.with_lock(|tx| {
            let Some(mut op) = tx.active_operation()? else {
                return Ok(Vec::new());
            };
            if !self.is_stale(&op) {
                return Ok(Vec::new());
            }
            let died_in = op.status;
            op.error = Some(format!("worker died during {died_in}"));
            if matches!(died_in, Status::Activating | Status::RollingBack) {
                op.needs_attention = true;
                op.target_after = Some(match &self.target {
                    Some(t) => t
                        .identity()
                        .unwrap_or_else(|e| format!("unknown: {}", e.message)),
                    None => "unknown: no target configured for this command".into(),
                });
            }
            let pid = op.worker.as_ref().map_or(0, |w| w.pid);
            let mut note = format!("worker {pid} died during {died_in}");
            // A candidate that never ran is discarded; a failure to do so
            // is noted but never keeps the operation alive.
            let discarded = if died_in.before_switch() {
                discard_candidate(&op)
            } else {
                Ok(None)
            };
            match discarded {
                Ok(Some(path)) => {
                    note.push_str(&format!("; candidate {} discarded", path.display()))
                }
                Ok(None) => {}
                Err(e) => note.push_str(&format!("; {e}")),
            }
            tx.transition(&mut op, Status::Failed, &note)?;
            Ok(vec![op])
        })
    }

    /// Expire the pending request when it is older than `request_ttl_hours`
    /// (a store opened with [`Store::for_config`]); returns it then.
    pub fn expire_stale_request(&self) -> Result<Vec<Operation>> {
        let Some(ttl) = self.ttl else {
            return Ok(Vec::new());
        };
        self.with_lock(|tx| {
            let Some(mut op) = tx.active_operation()? else {
                return Ok(Vec::new());
            };
            if !tx.expire_if_old(&mut op, ttl)? {
                return Ok(Vec::new());
            }
            Ok(vec![op])
        })
    }

    fn is_stale(&self, op: &Operation) -> bool {
        let Some(worker) = &op.worker else {
            return false;
        };
        if op.status.is_terminal() || worker.alive() {
            return false;
        }
        let updated = parse_rfc3339(&op.updated_at).unwrap_or(UNIX_EPOCH);
        SystemTime::now()
            .duration_since(updated)
            .is_ok_and(|age| age >= self.grace)
    }
}

impl Tx<'_> {
    /// Load one operation (under the lock).
    pub fn load(&self, id: &str) -> Result<Operation> {
        self.store.load(id)
    }

    /// Load `id` and require it to be in `status`; otherwise refuse with
    /// "operation ID is S; only <rule>".
    pub fn load_in(&self, id: &str, status: Status, rule: &str) -> Result<Operation> {
        let op = self.load(id)?;
        if op.status != status {
            return Err(Error::refused(format!(
                "operation {id} is {}; only {rule}",
                op.status
            )));
        }
        Ok(op)
    }

    /// The operation named by `active`, if it is still non-terminal.
    pub fn active_operation(&self) -> Result<Option<Operation>> {
        let Some((id, _)) = self.store.active() else {
            return Ok(None);
        };
        match self.load(&id) {
            Ok(op) if !op.status.is_terminal() => Ok(Some(op)),
            Ok(_) => Ok(None),
            Err(e) if e.kind == crate::ErrorKind::Usage => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Write `op` atomically (0600) and refresh `updated_at`.
    pub fn save(&mut self, op: &mut Operation) -> Result<()> {
        op.updated_at = now_rfc3339();
        let path = self.store.operation_path(&op.id)?;
        let mut bytes = serde_json::to_vec_pretty(op)
            .map_err(|e| Error::io(format!("cannot encode operation {}: {e}", op.id)))?;
        bytes.push(b'\n');
        write_atomic(&path, &bytes, 0o600, Existing::Replace)
    }

    /// Move `op` to `to` if the state machine allows it: record the step in
    /// its history, save it, update `active` and append to `ktr.log`.
    pub fn transition(&mut self, op: &mut Operation, to: Status, note: &str) -> Result<()> {
        let from = op.status;
        if !from.can_become(to) {
            return Err(Error::refused(format!(
                "operation {} cannot go from {from} to {to}",
                op.id
            )));
        }
        op.status = to;
        op.history.push(Transition {
            at: now_rfc3339(),
            from,
            to,
            note: note.to_string(),
        });
        if to.is_terminal() {
            op.worker = None;
        }
        self.save(op)?;
        self.set_active(op)?;
        self.log(&op.id, from, to, note)
    }

    /// Point `active` at `op`, or clear it when `op` is terminal (only if
    /// it still names `op`).
    fn set_active(&mut self, op: &Operation) -> Result<()> {
        let path = self.store.dir.join("active");
        if !op.status.is_terminal() {
            let line = format!("{} {}\n", op.id, op.status);
            return write_atomic(&path, line.as_bytes(), 0o600, Existing::Replace);
        }
        if self.store.active().is_some_and(|(id, _)| id != op.id) {
            return Ok(());
        }
        match fs::remove_file(&path) {
            Err(e) if e.kind() != IoKind::NotFound => Err(Error::io_at("remove", &path, &e)),
            _ => Ok(()),
        }
    }

    /// Append one line to `ktr.log`.
    fn log(&self, id: &str, from: Status, to: Status, note: &str) -> Result<()> {
        let path = self.store.dir.join("ktr.log");
        let line = serde_json::json!({"ts": now_rfc3339(), "op": id, "from": from, "to": to, "note": note});
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| Error::io_at("open", &path, &e))?;
        file.write_all(format!("{line}\n").as_bytes())
            .map_err(|e| Error::io_at("append to", &path, &e))
    }

    /// Move a pending `op` older than `ttl` to `expired` (error: how long
    /// it waited and for which session). Returns whether it expired.
    pub fn expire_if_old(&mut self, op: &mut Operation, ttl: Duration) -> Result<bool> {
        let created = parse_rfc3339(&op.created_at).unwrap_or(UNIX_EPOCH);
        let age = SystemTime::now()
            .duration_since(created)
            .unwrap_or_default();
        if op.status != Status::Pending || age < ttl {
            return Ok(false);
        }
        let why = format!(
            "request expired after {:.1} h (request_ttl_hours = {}): {} never stopped since it was requested",
            age.as_secs_f64() / 3600.0,
            ttl.as_secs_f64() / 3600.0,
            op.session_id.as_deref().map_or_else(
                || "no session in project_dir".to_string(),
                |s| format!("session {s}")
            )
        );
        op.error = Some(why.clone());
        self.transition(op, Status::Expired, &why)?;
        Ok(true)
    }

    /// The store this lock belongs to.
    pub fn store(&self) -> &Store {
        self.store
    }
}

/// Delete the never-activated candidate of `op` (SPEC §9: a failed stage
/// discards it). Only a file named `<candidate session id>.jsonl` that is
/// not the source is removed. Returns the removed path, if there was one.
pub fn discard_candidate(op: &Operation) -> Result<Option<PathBuf>> {
    let Some(c) = &op.candidate else {
        return Ok(None);
    };
    validate_session_id(&c.session_id)?;
    let named_for_it = c
        .path
        .file_name()
        .is_some_and(|n| *n == *format!("{}.jsonl", c.session_id));
    let is_source = op.transcript_path.as_ref().is_some_and(|t| {
        *t == c.path
            || matches!((t.canonicalize(), c.path.canonicalize()), (Ok(a), Ok(b)) if a == b)
    });
    if !named_for_it || is_source {
        return Err(Error::refused(format!(
            "operation {}: recorded candidate {} is not a candidate file; not deleting it",
            op.id,
            c.path.display()
        )));
    }
    match fs::remove_file(&c.path) {
        Ok(()) => Ok(Some(c.path.clone())),
        Err(e) if e.kind() == IoKind::NotFound => Ok(None),
        Err(e) => Err(Error::io_at("remove candidate", &c.path, &e)),
    }
}

/// Confirmation words are exact and case-sensitive.
pub fn confirm(given: &str, word: &str) -> Result<()> {
    if given == word {
        Ok(())
    } else {
        Err(Error::refused(format!(
            "confirmation must be exactly {word}"
        )))
    }
}

/// Session ids come from Claude Code and end up in file names: be strict.
pub fn validate_session_id(id: &str) -> Result<()> {
    validate_name(
        id,
        128,
        |b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_',
        "session id",
        "letters, digits, - or _",
    )
}

/// `name` is 1 to `max` bytes, each `allowed`; else a usage error naming
/// `what` it is and the `expected` characters.
fn validate_name(
    name: &str,
    max: usize,
    allowed: impl Fn(u8) -> bool,
    what: &str,
    expected: &str,
) -> Result<()> {
    if (1..=max).contains(&name.len()) && name.bytes().all(allowed) {
        Ok(())
    } else {
        Err(Error::usage(format!(
            "invalid {what} {:?}: expected {expected}",
            truncate(name, 80)
        )))
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Now as RFC 3339 UTC with milliseconds, e.g. `2026-11-29T08:15:02.113Z`.
pub fn now_rfc3339() -> String {
    rfc3339(SystemTime::now())
}

/// Format a time as RFC 3339 UTC with milliseconds.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let (y, m, day) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Parse what [`rfc3339`] writes (`YYYY-MM-DDTHH:MM:SS[.fff]Z`).
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || !s.ends_with('Z')
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<u64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let frac = &s[19..s.len() - 1];
    let millis = match frac.strip_prefix('.') {
        None if frac.is_empty() => 0,
        Some(digits) if !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit()) => {
            format!("{:0<3}", &digits[..digits.len().min(3)])
                .parse()
                .ok()?
        }
        _ => return None,
    };
    let days = days_from_civil(y as i64, mo as u32, d as u32);
    let secs = u64::try_from(days).ok()? * 86_400 + h * 3600 + mi * 60 + sec;
    Some(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis))
}

// Howard Hinnant's civil calendar algorithms.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Arc;

    fn store() -> (tempfile::TempDir, Store) {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("state")).unwrap();
        (tmp, store)
    }

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    /// A fresh pending operation in `store`.
    fn requested(store: &Store) -> Operation {
        store.request("x", "REBUILD", None).unwrap()
    }

    /// `result` is an error whose message contains `needle`.
    fn assert_refused<T: std::fmt::Debug>(result: Result<T>, needle: &str) {
        let err = result.unwrap_err();
        assert!(err.message.contains(needle), "{err}");
    }

    #[test]
    fn a_pending_request_expires_after_request_ttl_hours() {
        let (_tmp, store) = store();
        let mut store = store;
        let op = store
            .request("x", "REBUILD", Some("sess-1".into()))
            .unwrap();
        // Without a configured ttl nothing expires.
        assert!(store.recover_stale().unwrap().is_empty());
        store.ttl = Some(Duration::from_secs(3600));
        assert!(store.recover_stale().unwrap().is_empty(), "fresh: not yet");
        store
            .with_lock(|tx| {
                let mut op = tx.load(&op.id)?;
                op.created_at = rfc3339(SystemTime::now() - Duration::from_secs(7200));
                tx.save(&mut op)
            })
            .unwrap();
        let expired = store.recover_stale().unwrap();
        assert_eq!(expired.len(), 1);
        let op = store.load(&op.id).unwrap();
        assert_eq!(op.status, Status::Expired);
        assert!(op.status.is_terminal());
        let error = op.error.unwrap();
        assert!(
            error.starts_with("request expired after 2.0 h (request_ttl_hours = 1)")
                && error.contains("session sess-1 never stopped"),
            "{error}"
        );
        assert_eq!(store.active(), None, "nothing blocks the next request");
        assert_eq!(
            store.request("y", "REBUILD", None).unwrap().status,
            Status::Pending
        );
    }

    /// Drive `id` along `path` of statuses.
    fn walk(store: &Store, id: &str, path: &[Status]) -> Operation {
        store
            .with_lock(|tx| {
                let mut op = tx.load(id)?;
                for to in path {
                    tx.transition(&mut op, *to, "test")?;
                }
                Ok(op)
            })
            .unwrap()
    }

    fn dead_worker(stage: &str) -> Worker {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        Worker {
            pid,
            start_time: 1,
            stage: stage.into(),
        }
    }

    fn set_worker(store: &Store, id: &str, worker: Worker) {
        store
            .with_lock(|tx| {
                let mut op = tx.load(id)?;
                op.worker = Some(worker);
                tx.save(&mut op)
            })
            .unwrap();
    }

    #[test]
    fn the_state_machine_has_exactly_the_documented_edges() {
        use Status::*;
        let allowed = [
            (Pending, Scheduled),
            (Pending, Cancelled),
            (Pending, Expired),
            (Scheduled, Running),
            (Scheduled, Pending),
            (Running, Verifying),
            (Verifying, Activating),
            (Verifying, Pending),
            (Activating, Activated),
            (Activating, RolledBack),
            (Activated, RollbackPending),
            (RollbackPending, RollbackScheduled),
            (RollbackScheduled, RollingBack),
            (RollbackScheduled, RollbackPending),
            (RollbackScheduled, RolledBack),
            (RollingBack, RolledBack),
        ];
        for from in Status::ALL {
            for to in Status::ALL {
                let expected =
                    allowed.contains(&(from, to)) || (to == Failed && !from.is_terminal());
                assert_eq!(from.can_become(to), expected, "{from} -> {to}");
            }
        }
        let terminal: Vec<_> = Status::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .collect();
        assert_eq!(
            terminal,
            [Activated, Cancelled, Failed, RolledBack, Expired]
        );
        for s in Status::ALL {
            assert_eq!(Status::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }

    #[test]
    fn a_forbidden_transition_is_refused_and_changes_nothing() {
        let (_t, store) = store();
        let op = store.request("big", "REBUILD", None).unwrap();
        let err = store
            .with_lock(|tx| {
                let mut op = tx.load(&op.id)?;
                tx.transition(&mut op, Status::Activated, "skip ahead")
            })
            .unwrap_err();
        assert_eq!(
            err.message,
            format!("operation {} cannot go from pending to activated", op.id)
        );
        assert_eq!(store.load(&op.id).unwrap().status, Status::Pending);
        assert_eq!(store.active(), Some((op.id.clone(), Status::Pending)));
    }

    #[test]
    fn a_full_life_is_logged_and_active_follows_it() {
        let (_t, store) = store();
        let op = store
            .request("big", "REBUILD", Some("sess-1".into()))
            .unwrap();
        use Status::*;
        let op = walk(&store, &op.id, &[Scheduled, Running, Verifying, Activating]);
        assert_eq!(store.active(), Some((op.id.clone(), Activating)));
        let op = walk(&store, &op.id, &[Activated]);
        assert_eq!(store.active(), None, "a terminal operation is not active");
        assert_eq!(op.history.len(), 5);
        assert_eq!((op.history[0].from, op.history[4].to), (Pending, Activated));
        let log = fs::read_to_string(store.dir().join("ktr.log")).unwrap();
        let lines: Vec<serde_json::Value> = log
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 6, "request + five transitions");
        assert_eq!(lines[5]["op"], op.id.as_str());
        assert_eq!(
            (lines[5]["from"].as_str(), lines[5]["to"].as_str()),
            (Some("activating"), Some("activated"))
        );
        assert!(parse_rfc3339(lines[5]["ts"].as_str().unwrap()).is_some());
        assert_eq!(store.latest().unwrap().unwrap(), op);
    }

    #[test]
    fn files_and_dirs_are_private() {
        let (_t, store) = store();
        let op = store.request("big", "REBUILD", None).unwrap();
        let art = store.artifacts_dir(&op.id).unwrap();
        assert_eq!(mode(store.dir()), 0o700);
        assert_eq!(mode(&store.dir().join("operations")), 0o700);
        assert_eq!(mode(&art), 0o700);
        assert_eq!(mode(&store.dir().join("artifacts")), 0o700);
        for f in ["active", "ktr.log", "coordinator.lock"] {
            assert_eq!(mode(&store.dir().join(f)), 0o600, "{f}");
        }
        assert_eq!(mode(&store.operation_path(&op.id).unwrap()), 0o600);
        // Atomic writes leave no temp files behind.
        let names: Vec<_> = fs::read_dir(store.dir().join("operations"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from(format!("{}.json", op.id))]);
    }

    #[test]
    fn bad_ids_never_reach_a_path() {
        let (_t, store) = store();
        for bad in [
            "",
            "../../etc/passwd",
            "ABC",
            "a/b",
            "0123 ",
            &"a".repeat(65),
            "a\0b",
        ] {
            let err = store.load(bad).unwrap_err();
            assert!(
                err.message.starts_with("invalid operation id"),
                "{bad:?}: {err}"
            );
            assert!(store.artifacts_dir(bad).is_err());
            assert!(store.cancel(bad, "CANCEL").is_err());
        }
        assert!(validate_id(&uuid::Uuid::new_v4().to_string()).is_ok());
        let missing = store.load("0123-abcd").unwrap_err();
        assert!(
            missing.message.contains("no operation 0123-abcd"),
            "{missing}"
        );
        // A garbage `active` file reads as nothing active.
        fs::write(store.dir().join("active"), "../x pending\n").unwrap();
        assert_eq!(store.active(), None);
    }

    #[test]
    fn confirmation_words_are_exact() {
        let (_t, store) = store();
        for bad in ["rebuild", "REBUILD ", "Rebuild", ""] {
            let err = store.request("x", bad, None).unwrap_err();
            assert_eq!(err.message, "confirmation must be exactly REBUILD");
        }
        assert!(store.list().unwrap().is_empty(), "nothing was created");
        let op = requested(&store);
        assert_eq!(
            store.cancel(&op.id, "cancel").unwrap_err().message,
            "confirmation must be exactly CANCEL"
        );
        assert_eq!(
            store.rollback_request(&op.id, "YES").unwrap_err().message,
            "confirmation must be exactly ROLLBACK"
        );
        assert_eq!(store.load(&op.id).unwrap().status, Status::Pending);
    }

    #[test]
    fn repeated_requests_merge_into_the_pending_operation() {
        let (_t, store) = store();
        let a = store
            .request("dirty ledger over budget", "REBUILD", None)
            .unwrap();
        let b = store
            .request("image viewed", "REBUILD", Some("s1".into()))
            .unwrap();
        let c = store
            .request("dirty ledger over budget", "REBUILD", None)
            .unwrap();
        assert_eq!(
            (a.id.as_str(), b.id.as_str()),
            (c.id.as_str(), c.id.as_str())
        );
        assert_eq!(c.reasons, ["dirty ledger over budget", "image viewed"]);
        assert_eq!(
            c.session_id.as_deref(),
            Some("s1"),
            "an unbound request binds when a session is given"
        );
        assert_refused(
            store.request("x", "REBUILD", Some("s2".into())),
            "pending for session s1",
        );
        assert_eq!(store.list().unwrap().len(), 1);
        assert_refused(store.request("   ", "REBUILD", None), "reason");
    }

    #[test]
    fn a_busy_operation_refuses_new_requests_by_name() {
        let (_t, store) = store();
        let op = requested(&store);
        walk(&store, &op.id, &[Status::Scheduled]);
        let err = store.request("y", "REBUILD", None).unwrap_err();
        assert_eq!(err.exit_code(), 1);
        assert!(
            err.message.contains(&op.id) && err.message.contains("is scheduled"),
            "{err}"
        );
    }

    #[test]
    fn cancel_only_pending_and_it_frees_the_next_request() {
        let (_t, store) = store();
        let op = requested(&store);
        let cancelled = store.cancel(&op.id, "CANCEL").unwrap();
        assert_eq!(cancelled.status, Status::Cancelled);
        assert_eq!(store.active(), None);
        assert_refused(
            store.cancel(&op.id, "CANCEL"),
            "is cancelled; only a pending",
        );
        let next = store.request("again", "REBUILD", None).unwrap();
        assert_ne!(next.id, op.id);
        walk(&store, &next.id, &[Status::Scheduled]);
        assert_refused(store.cancel(&next.id, "CANCEL"), "is scheduled");
    }

    #[test]
    fn rollback_request_only_for_activated() {
        use Status::*;
        let (_t, store) = store();
        let op = requested(&store);
        assert_refused(
            store.rollback_request(&op.id, "ROLLBACK"),
            "is pending; only an activated",
        );
        walk(
            &store,
            &op.id,
            &[Scheduled, Running, Verifying, Activating, Activated],
        );
        let op = store.rollback_request(&op.id, "ROLLBACK").unwrap();
        assert_eq!(op.status, RollbackPending);
        assert_eq!(store.active(), Some((op.id.clone(), RollbackPending)));
        assert_refused(store.request("y", "REBUILD", None), "is rollback_pending");
    }

    #[test]
    fn the_lock_serialises_read_modify_write() {
        let (_t, store) = store();
        let id = requested(&store).id;
        let store = Arc::new(store);
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (store, id) = (Arc::clone(&store), id.clone());
                thread::spawn(move || {
                    for _ in 0..15 {
                        store
                            .with_lock(|tx| {
                                let mut op = tx.load(&id)?;
                                op.attempts += 1;
                                tx.save(&mut op)
                            })
                            .unwrap();
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(store.load(&id).unwrap().attempts, 120, "no update was lost");
    }

    #[test]
    fn the_lock_is_held_for_the_whole_closure() {
        let (_t, store) = store();
        let store = Arc::new(store);
        let (tx_in, rx_in) = std::sync::mpsc::channel();
        let held = {
            let store = Arc::clone(&store);
            thread::spawn(move || {
                store
                    .with_lock(|_| {
                        tx_in.send(()).unwrap();
                        thread::sleep(Duration::from_millis(300));
                        Ok(())
                    })
                    .unwrap()
            })
        };
        rx_in.recv().unwrap();
        let start = Instant::now();
        store.with_lock(|_| Ok(())).unwrap();
        assert!(
            start.elapsed() >= Duration::from_millis(200),
            "second holder waited"
        );
        held.join().unwrap();
    }

    #[test]
    fn a_stage_claims_only_the_status_it_expects() {
        use Status::*;
        let (_t, store) = store();
        let op = requested(&store);
        let err = store
            .claim(&op.id, Scheduled, Running, "prepare")
            .unwrap_err();
        assert_eq!(
            err.message,
            format!(
                "operation {} is pending, not scheduled; ktr-prepare has nothing to do",
                op.id
            )
        );
        walk(&store, &op.id, &[Scheduled]);
        let op = store.claim(&op.id, Scheduled, Running, "prepare").unwrap();
        assert_eq!(op.status, Running);
        assert_eq!(op.worker, Some(Worker::current("prepare")));
        assert!(op.worker.as_ref().unwrap().alive());
        let op = store.claim(&op.id, Running, Running, "verify").unwrap();
        assert_eq!((op.status, op.history.len()), (Running, 2));
    }

    #[test]
    fn a_claim_is_refused_while_another_live_worker_holds_the_operation() {
        use Status::*;
        let (_t, store) = store();
        let op = requested(&store);
        walk(&store, &op.id, &[Scheduled]);
        let mut other = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        set_worker(&store, &op.id, Worker::of(other.id(), "prepare").unwrap());
        let err = store
            .claim(&op.id, Scheduled, Running, "prepare")
            .unwrap_err();
        assert_eq!(
            err.message,
            format!(
                "operation {} is being worked on by ktr-prepare (pid {}); wait for it",
                op.id,
                other.id()
            )
        );
        other.kill().unwrap();
        other.wait().unwrap();
        let op = store.claim(&op.id, Scheduled, Running, "prepare").unwrap();
        assert_eq!(op.worker, Some(Worker::current("prepare")));
    }

    #[test]
    fn a_dead_worker_fails_the_operation_and_frees_the_next_request() {
        use Status::*;
        let (_t, store) = store();
        let store = store.with_grace(Duration::ZERO);
        let op = requested(&store);
        walk(&store, &op.id, &[Scheduled, Running]);
        set_worker(&store, &op.id, dead_worker("prepare"));
        let next = store.request("again", "REBUILD", None).unwrap();
        assert_ne!(next.id, op.id);
        let failed = store.load(&op.id).unwrap();
        assert_eq!(failed.status, Failed);
        assert_eq!(failed.error.as_deref(), Some("worker died during running"));
        assert!(!failed.needs_attention);
    }

    #[test]
    fn a_live_worker_or_a_recent_death_is_left_alone() {
        use Status::*;
        let (_t, store) = store();
        let op = requested(&store);
        walk(&store, &op.id, &[Scheduled, Running]);
        set_worker(&store, &op.id, Worker::current("prepare"));
        let store = store.with_grace(Duration::ZERO);
        assert!(store.recover_stale().unwrap().is_empty());
        set_worker(&store, &op.id, dead_worker("prepare"));
        let store = store.with_grace(Duration::from_secs(3600));
        assert!(
            store.recover_stale().unwrap().is_empty(),
            "within the grace period"
        );
        assert_eq!(store.load(&op.id).unwrap().status, Running);
    }

    #[test]
    fn a_reused_pid_counts_as_dead() {
        use Status::*;
        let (_t, store) = store();
        let store = store.with_grace(Duration::ZERO);
        let op = requested(&store);
        walk(&store, &op.id, &[Scheduled, Running, Verifying]);
        let mut me = Worker::current("verify");
        me.start_time += 1;
        set_worker(&store, &op.id, me);
        let failed = store.recover_stale().unwrap();
        assert_eq!(failed.len(), 1);
        assert_eq!(
            failed[0].error.as_deref(),
            Some("worker died during verifying")
        );
    }

    #[test]
    fn a_death_while_activating_records_the_target_and_needs_attention() {
        use Status::*;
        let (t, store) = store();
        let pointer = t.path().join("pointer");
        fs::write(&pointer, "new-session\n").unwrap();
        let store = store
            .with_grace(Duration::ZERO)
            .with_target(Target::Pointer(crate::target::Pointer { path: pointer }));
        let op = requested(&store);
        walk(&store, &op.id, &[Scheduled, Running, Verifying, Activating]);
        set_worker(&store, &op.id, dead_worker("activate"));
        let failed = store.recover_stale().unwrap().pop().unwrap();
        assert_eq!(failed.status, Failed);
        assert_eq!(
            failed.error.as_deref(),
            Some("worker died during activating")
        );
        assert!(failed.needs_attention);
        assert_eq!(failed.target_after.as_deref(), Some("new-session"));
        assert_eq!(store.active(), None);
    }

    #[test]
    fn operation_files_tolerate_missing_and_unknown_fields() {
        let (_t, store) = store();
        let id = "0000-1111";
        fs::write(
            store.operation_path(id).unwrap(),
            format!(r#"{{"id":"{id}","status":"rollback_scheduled","from_the_future":1}}"#),
        )
        .unwrap();
        let op = store.load(id).unwrap();
        assert_eq!(
            (op.status, op.attempts, op.manifest.len()),
            (Status::RollbackScheduled, 0, 0)
        );
        fs::write(store.operation_path(id).unwrap(), "{").unwrap();
        assert_refused(store.load(id), "is damaged");
        assert_eq!(
            store.list().unwrap().len(),
            0,
            "damaged files are skipped in listings"
        );
    }

    #[test]
    fn rfc3339_round_trips() {
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(rfc3339(t), "2023-11-14T22:13:20.123Z");
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20.123Z"), Some(t));
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(
            parse_rfc3339("2000-02-29T00:00:00Z"),
            Some(UNIX_EPOCH + Duration::from_secs(951_782_400))
        );
        for bad in [
            "",
            "2023-11-14 22:13:20Z",
            "2023-13-01T00:00:00Z",
            "2023-11-14T22:13:20.Z",
            "2023-11-14T22:13:20+01:00",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
