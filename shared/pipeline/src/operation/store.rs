//! The operation store over one state dir: loading, listing, the
//! coordinator lock, and the locked writes ([`Locked`]).

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind as IoKind, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::record::SCHEMA;

/// The key keeper's directory's name in a state dir ([`Store::keys_dir`]).
pub const KEYS_DIR: &str = "keep";
use super::{Operation, Stage, Status, Transition};
use crate::targets::Target;
use ktr_base::config::{Config, expand_home, home_dir};
use ktr_base::error::{Error, Result};
use ktr_base::fsutil::{Existing, ensure_private_dir, write_atomic};
use ktr_base::ids::OperationId;
use ktr_base::open::{Links, append_private, cap, read_capped};
use ktr_base::state_dir;
use ktr_base::time::{Timestamp, now_rfc3339};

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
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .unwrap_or(DEFAULT_WORKER_GRACE)
}

/// How long to wait for the coordinator lock before giving up.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// The one rule for hooks a person waits on (Stop, UserPromptSubmit): at
/// most this long for the lock, then each does what loses nothing and
/// says so — the Stop hook leaves the operation as it is and retries at
/// the next Stop; a prompt during a switch is refused (Claude Code gives
/// the text back), any other goes through with a line saying it was not
/// marked. (`ktr-ack`, whose receipt decides a switch's health and which
/// runs while Claude Code loads a session, before any prompt, waits
/// [`LOCK_TIMEOUT`].)
pub const HOOK_LOCK_WAIT: Duration = Duration::from_secs(1);

/// Find the state dir cheaply, for hooks that must start in a millisecond:
/// the `state_dir` key of the config file found by [`Config::locate`], read
/// as plain TOML without validating the rest ([`Config::load`] resolves the
/// key the same way), else [`DEFAULT_STATE_DIR`] when the config names
/// none or there is no config file at the default place (zero config). A
/// `--config` or `$KTR_CONFIG` naming a missing file is an error, never the
/// default state dir (a hook started with a config that is not there must
/// not act on an installation it was not pointed at); so is a config file
/// that is not TOML, or whose `state_dir` is not a string.
pub fn locate_state_dir(config: Option<&Path>) -> Result<PathBuf> {
    locate_for_hooks(config).map(|(dir, _)| dir)
}

/// [`locate_state_dir`], and whether the same config holds the standing
/// approval `on_auto_compaction = "rebuild"` (read as plain TOML too; a
/// wrong value is [`Config::load`]'s to report).
pub fn locate_for_hooks(config: Option<&Path>) -> Result<(PathBuf, bool)> {
    let Some(path) = Config::find(config)? else {
        // Zero config: the default state dir, and no standing approval.
        return Ok((expand_home(DEFAULT_STATE_DIR, &home_dir()), false));
    };
    let rebuild;
    let configured = match ktr_base::config::read_config_file(&path)? {
        Some(bytes) => {
            let text = String::from_utf8(bytes).map_err(|_| {
                Error::config(format!("config {} is not valid UTF-8", path.display()))
            })?;
            let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
                Error::config(format!(
                    "config {} is not valid TOML: {}",
                    path.display(),
                    e.message()
                ))
            })?;
            // The global key or any project's table: the full load decides
            // for the session's project.
            let says_rebuild = |t: &toml::Table| {
                t.get("on_auto_compaction").and_then(toml::Value::as_str) == Some("rebuild")
            };
            rebuild = says_rebuild(&table)
                || table
                    .get("projects")
                    .and_then(toml::Value::as_table)
                    .is_some_and(|p| {
                        p.values()
                            .filter_map(toml::Value::as_table)
                            .any(says_rebuild)
                    });
            match table.get("state_dir") {
                None => None,
                Some(toml::Value::String(s)) if !s.is_empty() => Some(s.clone()),
                Some(_) => {
                    return Err(Error::config(format!(
                        "config {}: state_dir must be a non-empty string",
                        path.display()
                    )));
                }
            }
        }
        None => {
            return Err(Error::config(format!(
                "config {} does not exist: create it (see README, Configuration) or pass --config PATH",
                path.display()
            )));
        }
    };
    let dir = expand_home(
        configured.as_deref().unwrap_or(DEFAULT_STATE_DIR),
        &home_dir(),
    );
    // Relative to the config file, as Config::load resolves it.
    let dir = if dir.is_relative() {
        ktr_base::config::config_folder(&path).join(dir)
    } else {
        dir
    };
    Ok((dir, rebuild))
}

/// The operation store over one state dir.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    pub(super) target: Option<Target>,
    /// `project_dir` (configured stores): the only place a candidate may be
    /// discarded from, and where requests bind to a session.
    pub(super) project: Option<PathBuf>,
    /// `request_ttl_hours`: a pending request older than this expires.
    pub(super) ttl: Option<Duration>,
    pub(super) grace: Duration,
}

/// A held coordinator lock; every mutation goes through it.
pub struct Locked<'a> {
    store: &'a Store,
    _lock: File,
}

impl Store {
    /// Open (and create, 0700) the state dir.
    pub fn open(dir: &Path) -> Result<Store> {
        state_dir::claim(dir, state_dir::place_of_home(&home_dir()))?;
        ensure_private_dir(&dir.join("operations"), 0o700)?;
        Ok(Store {
            dir: dir.to_path_buf(),
            target: None,
            project: None,
            ttl: None,
            grace: worker_grace(),
        })
    }

    /// Open the configured state dir, with the configured target so that
    /// stale-worker recovery can record what the target runs.
    pub fn for_config(config: &Config) -> Result<Store> {
        state_dir::claim(&config.state_dir, config.state_place(&home_dir()))?;
        let mut store = Store::open(&config.state_dir)?.with_config(config);
        store.ttl = Some(Duration::from_secs_f64(config.request_ttl_hours * 3600.0));
        Ok(store)
    }

    /// Read-only look at a state dir (creates nothing; for hooks and status).
    pub fn at(dir: &Path) -> Store {
        Store {
            dir: dir.to_path_buf(),
            target: None,
            project: None,
            ttl: None,
            grace: worker_grace(),
        }
    }

    /// Use the configured target and `project_dir` (what recovery records
    /// and the only folder a never-run candidate is discarded from).
    pub fn with_config(mut self, config: &Config) -> Store {
        self.target = Some(Target::from_config(config));
        self.project = Some(config.project_dir.clone());
        self
    }

    /// The configured `project_dir`, if this store was opened with a config.
    pub fn project(&self) -> Option<&Path> {
        self.project.as_deref()
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

    /// The state dir.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of an operation file.
    pub fn operation_path(&self, id: &OperationId) -> PathBuf {
        self.dir.join("operations").join(format!("{id}.json"))
    }

    /// `artifacts/<id>/`, created 0700.
    pub fn artifacts_dir(&self, id: &OperationId) -> Result<PathBuf> {
        let dir = self.dir.join("artifacts").join(id);
        ensure_private_dir(&self.dir.join("artifacts"), 0o700)?;
        ensure_private_dir(&dir, 0o700)?;
        Ok(dir)
    }

    /// `keep/<id>-<stage>/`: the key keeper's files of one in-place switch
    /// (SPEC §12: what a person typed while Claude Code loaded). Removed
    /// after a replay that lost nothing; `ktr prune` takes what is left.
    pub fn keys_dir(&self, id: &OperationId, stage: Stage) -> PathBuf {
        self.dir
            .join(KEYS_DIR)
            .join(format!("{id}-{}", stage.name()))
    }

    /// Where detached stages write their output.
    pub fn worker_log(&self) -> PathBuf {
        self.dir.join("worker.log")
    }

    /// The `active` file: `(id, status)` of the non-terminal operation, if
    /// it names one. Cheap (one small read, no lock): this is the Stop
    /// hook's fast path. See [`Store::active_state`] for why it may not.
    pub fn active(&self) -> Option<(OperationId, Status)> {
        match self.active_state() {
            Active::Busy(id, status) => Some((id, status)),
            Active::Idle | Active::Unknown(_) => None,
        }
    }

    /// What the `active` file says: an operation in flight, `idle`, or —
    /// missing, unreadable, a FIFO, too large, garbage — unknown, to be
    /// rebuilt from the operation files ([`Locked::active_operation`]).
    pub fn active_state(&self) -> Active {
        let text = match read_capped(&self.dir.join("active"), cap::ACTIVE, Links::Refuse) {
            Ok(Some(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
            Ok(None) => return Active::Unknown("missing".into()),
            Err(e) => return Active::Unknown(e.message),
        };
        let mut words = text.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some(IDLE), None, None) => Active::Idle,
            (Some(id), Some(status), None) => match (OperationId::parse(id), Status::parse(status))
            {
                (Ok(id), Some(status)) => Active::Busy(id, status),
                _ => Active::Unknown("not what ktr writes there".into()),
            },
            _ => Active::Unknown("not what ktr writes there".into()),
        }
    }

    /// Rebuild a lost or damaged `active` from the operation files
    /// ([`Locked::active_operation`]), waiting at most `timeout` for the
    /// lock; the operation in flight, if any.
    pub fn rebuild_active(&self, timeout: Duration) -> Result<Option<Operation>> {
        // The method path does not satisfy the closure's higher-ranked
        // lifetime (`Locked<'_>`), which clippy's suggestion overlooks.
        #[allow(clippy::redundant_closure_for_method_calls)]
        self.with_lock_within(timeout, |tx| tx.active_operation())
    }

    /// Load one operation; a missing one is [`ktr_base::ErrorKind::NotFound`].
    pub fn load(&self, id: &OperationId) -> Result<Operation> {
        self.try_load(id)?
            .ok_or_else(|| Error::not_found(format!("no operation {id}; `ktr ops` lists them")))
    }

    /// Load one operation, `None` when there is no such file.
    pub fn try_load(&self, id: &OperationId) -> Result<Option<Operation>> {
        self.read_as(id)
    }

    /// Read operation file `id` as `T` (the whole [`Operation`], or just
    /// its [`Header`]); `id_of` names the id the file claims, which must be
    /// its file name.
    fn read_as<T: Loaded>(&self, id: &OperationId) -> Result<Option<T>> {
        let path = self.operation_path(id);
        let Some(bytes) = read_capped(&path, cap::OPERATION, Links::Refuse)
            .map_err(|e| damaged(&path, &e.message))?
        else {
            return Ok(None);
        };
        let read: T =
            serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(&bytes))
                .map_err(|e| match e.path().to_string().as_str() {
                    "." => damaged(&path, &e.inner().to_string()),
                    field => damaged(&path, &format!("{field}: {}", e.inner())),
                })?;
        if read.schema() > SCHEMA {
            return Err(Error::refused(format!(
                "operation file {} was written by a newer ktr (schema {}; this ktr reads up to {SCHEMA}): upgrade ktr, or move the file aside with `ktr repair`",
                path.display(),
                read.schema()
            )));
        }
        let named = read.id();
        if named != id {
            return Err(damaged(
                &path,
                &format!("it names operation {:?}", named.to_string()),
            ));
        }
        if let Some(why) = read.implausible(&self.dir) {
            return Err(damaged(&path, &why));
        }
        Ok(Some(read))
    }

    /// Every readable operation, oldest first ([`Store::scan`] also
    /// names the damaged files).
    pub fn list(&self) -> Result<Vec<Operation>> {
        Ok(self.scan()?.operations)
    }

    /// Every file in `operations/`: the operations, oldest first, and the
    /// files that are not one (unreadable, not JSON, an unknown status, a
    /// FIFO…), each with why. Temp files of atomic writes are skipped.
    pub fn scan(&self) -> Result<Scanned> {
        let (mut operations, damaged) = self.scan_as::<Operation>()?;
        operations.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        Ok(Scanned {
            operations,
            damaged,
        })
    }

    /// Read every file in `operations/` as `T`; the ones that cannot be
    /// read as `T` are damaged (sorted by path).
    fn scan_as<T: Loaded>(&self) -> Result<(Vec<T>, Vec<Damaged>)> {
        let dir = self.dir.join("operations");
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == IoKind::NotFound => return Ok((Vec::new(), Vec::new())),
            Err(e) => return Err(Error::io_at("list", &dir, &e)),
        };
        let (mut read, mut damaged) = (Vec::new(), Vec::new());
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') && name.ends_with(".tmp") {
                continue;
            }
            let loaded = match name.strip_suffix(".json") {
                Some(id) => OperationId::parse(id)
                    .and_then(|id| self.read_as(&id))
                    .and_then(|r| {
                        r.ok_or_else(|| Error::io(format!("{} vanished", entry.path().display())))
                    }),
                None => Err(Error::io("not named <operation id>.json")),
            };
            match loaded {
                Ok(r) => read.push(r),
                Err(e) => damaged.push(Damaged {
                    path: entry.path(),
                    why: e.message,
                }),
            }
        }
        damaged.sort_by(|a, b| a.path.cmp(&b.path));
        Ok((read, damaged))
    }

    /// The most recently created operation.
    pub fn latest(&self) -> Result<Option<Operation>> {
        Ok(self.list()?.pop())
    }

    /// Run `f` holding the coordinator lock. Waits at most 10 s for it.
    pub fn with_lock<T>(&self, f: impl FnOnce(&mut Locked) -> Result<T>) -> Result<T> {
        self.with_lock_within(LOCK_TIMEOUT, f)
    }

    /// [`Store::with_lock`], waiting at most `timeout` (the Stop hook waits
    /// briefly and retries at the next Stop rather than delay Claude Code);
    /// a lock still held then is [`ktr_base::ErrorKind::Busy`].
    pub fn with_lock_within<T>(
        &self,
        timeout: Duration,
        f: impl FnOnce(&mut Locked) -> Result<T>,
    ) -> Result<T> {
        let home = home_dir();
        state_dir::claim(
            &self.dir,
            state_dir::Place {
                project: self.project.as_deref(),
                ..state_dir::place_of_home(&home)
            },
        )?;
        ensure_private_dir(&self.dir.join("operations"), 0o700)?;
        let path = self.dir.join("coordinator.lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| Error::io_at("open lock", &path, &e))?;
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return Err(Error::io(format!(
                "{} is not a regular file; move it aside",
                path.display()
            )));
        }
        let deadline = Instant::now() + timeout;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(2));
                }
                Err(fs::TryLockError::WouldBlock) => {
                    return Err(Error::busy(format!(
                        "{} is held by another ktr process for more than {} s; see `ktr status`",
                        path.display(),
                        timeout.as_secs_f64()
                    )));
                }
                Err(fs::TryLockError::Error(e)) => return Err(Error::io_at("lock", &path, &e)),
            }
        }
        let mut tx = Locked {
            store: self,
            _lock: file,
        };
        f(&mut tx)
        // The lock is released when `tx` (and its file) drops.
    }
}

impl Locked<'_> {
    /// Load one operation (under the lock).
    pub fn load(&self, id: &OperationId) -> Result<Operation> {
        self.store.load(id)
    }

    /// Load `id` and require it to be in `status`; otherwise refuse with
    /// "operation ID is S; only <rule>".
    pub fn load_in(&self, id: &OperationId, status: Status, rule: &str) -> Result<Operation> {
        let op = self.load(id)?;
        if op.status != status {
            return Err(Error::refused(format!(
                "operation {id} is {}; only {rule}",
                op.status
            )));
        }
        Ok(op)
    }

    /// The one non-terminal operation, derived from the operation files
    /// themselves (not from `active` alone: a deleted or stale `active`
    /// must not let a second operation start). `active` is rewritten when
    /// it is missing or disagrees. A damaged operation file refuses: it
    /// could be the operation in flight (`ktr repair` sets it aside).
    pub fn active_operation(&mut self) -> Result<Option<Operation>> {
        // Every hook and stage comes through here under the lock: read only
        // each file's id and status (a finished operation's manifest can be
        // megabytes), then load the one in flight.
        let (headers, damaged) = self.store.scan_as::<Header>()?;
        if let Some(d) = damaged.first() {
            let more = match damaged.len() - 1 {
                0 => String::new(),
                n => format!(" (and {n} more damaged files)"),
            };
            return Err(Error::refused(format!(
                "{}{more}; `ktr repair` sets damaged files aside (nothing is deleted)",
                d.why
            )));
        }
        let live: Vec<Header> = headers
            .into_iter()
            .filter(|h| !h.status.is_terminal())
            .collect();
        let op = match live.as_slice() {
            [] => None,
            [one] => self.store.try_load(&one.id)?,
            _ => self.one_in_flight(&live)?,
        };
        // A missing `active` with nothing in flight is written `idle` too:
        // else every later hook would find it missing and come here, under
        // the lock, again.
        let agrees = match (&op, self.store.active_state()) {
            (Some(op), Active::Busy(id, status)) => id == op.id && status == op.status,
            (None, Active::Idle) => true,
            _ => false,
        };
        if !agrees {
            match &op {
                Some(op) => self.set_active(op)?,
                None => self.set_idle()?,
            }
        }
        Ok(op)
    }

    /// More than one operation in flight (only a lost `active` lets that
    /// happen): the newest whose worker is alive or that no stage has
    /// started yet is the one; every other ends `failed`, saying why.
    fn one_in_flight(&mut self, live: &[Header]) -> Result<Option<Operation>> {
        let mut ops = Vec::new();
        for h in live {
            ops.extend(self.store.try_load(&h.id)?);
        }
        ops.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        let keep = ops
            .iter()
            .rposition(|op| op.worker.as_ref().is_none_or(super::Worker::alive))
            .unwrap_or(ops.len() - 1);
        let kept = ops[keep].id.clone();
        for (i, op) in ops.iter_mut().enumerate() {
            if i != keep {
                let why = format!(
                    "operation {kept} is in flight too (only a lost `active` file lets two run); this one ends here"
                );
                op.error = Some(why.clone());
                self.transition(op, Status::Failed, &why)?;
            }
        }
        Ok(Some(ops.swap_remove(keep)))
    }

    /// Write `op` atomically (0600) and refresh `updated_at`.
    pub fn save(&mut self, op: &mut Operation) -> Result<()> {
        op.updated_at = Timestamp::now();
        op.schema = SCHEMA;
        op.cap_lists();
        let path = self.store.operation_path(&op.id);
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
            at: Timestamp::now(),
            from,
            to,
            note: note.to_string(),
        });
        if to.is_terminal() {
            op.worker = None;
        }
        self.save(op)?;
        self.set_active(op)?;
        self.log(&op.id, from, to, note);
        Ok(())
    }

    /// Point `active` at `op`, or clear it when `op` is terminal (only if
    /// it still names `op`).
    pub(super) fn set_active(&mut self, op: &Operation) -> Result<()> {
        let path = self.store.dir.join("active");
        if !op.status.is_terminal() {
            let line = format!("{} {}\n", op.id, op.status);
            return write_atomic(&path, line.as_bytes(), 0o600, Existing::Replace);
        }
        if self.store.active().is_some_and(|(id, _)| id != *op.id) {
            return Ok(());
        }
        self.set_idle()
    }

    /// `active` says no operation is in flight.
    fn set_idle(&mut self) -> Result<()> {
        let line = format!("{IDLE}\n");
        write_atomic(
            &self.store.dir.join("active"),
            line.as_bytes(),
            0o600,
            Existing::Replace,
        )
    }

    /// Append one line to `ktr.log`.
    /// The log is a convenience beside the operation files (which keep
    /// each operation's history): a log that cannot be written — a planted
    /// symlink, a full disk — is said on stderr and never undoes or hides a
    /// transition that was saved.
    pub(super) fn log(&self, id: &OperationId, from: Status, to: Status, note: &str) {
        let path = self.store.dir.join("ktr.log");
        let line = serde_json::json!({"ts": now_rfc3339(), "op": id, "from": from, "to": to, "note": note});
        let written = append_private(&path).and_then(|mut file| {
            file.write_all(format!("{line}\n").as_bytes())
                .map_err(|e| Error::io_at("append to", &path, &e))
        });
        if let Err(e) = written {
            eprintln!("ktr: {e}; the operation file keeps the history ({id}: {from} → {to})");
        }
    }

    /// The store this lock belongs to.
    pub fn store(&self) -> &Store {
        self.store
    }
}

/// An operation file that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damaged {
    pub path: PathBuf,
    pub why: String,
}

/// What `active` holds when no operation is in flight.
const IDLE: &str = "idle";

/// What the `active` file says ([`Store::active_state`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Active {
    /// No operation is in flight.
    Idle,
    /// This operation is, in this status.
    Busy(OperationId, Status),
    /// The file is missing or damaged (why): rebuild it from the operation
    /// files ([`Locked::active_operation`]).
    Unknown(String),
}

/// The two fields of an operation file the one-operation rule needs; serde
/// skips the rest without building it.
#[derive(Deserialize)]
struct Header {
    #[serde(default = "super::record::schema_before_the_field")]
    schema: u32,
    #[serde(default)]
    id: OperationId,
    #[serde(default = "Header::pending")]
    status: Status,
}

impl Header {
    /// What [`Operation`]'s default status is for a file without one.
    fn pending() -> Status {
        Status::Pending
    }
}

/// What a file read from `operations/` is checked for beyond its JSON shape.
trait Loaded: DeserializeOwned {
    fn id(&self) -> &OperationId;
    fn schema(&self) -> u32;
    /// Why its values cannot be an operation of the state dir `dir`.
    fn implausible(&self, dir: &Path) -> Option<String>;
}

impl Loaded for Header {
    fn id(&self) -> &OperationId {
        &self.id
    }
    fn schema(&self) -> u32 {
        self.schema
    }
    fn implausible(&self, _dir: &Path) -> Option<String> {
        None
    }
}

impl Loaded for Operation {
    fn id(&self) -> &OperationId {
        &self.id
    }
    fn schema(&self) -> u32 {
        self.schema
    }
    fn implausible(&self, dir: &Path) -> Option<String> {
        self.implausible(dir)
    }
}

/// What [`Store::scan`] found in `operations/`.
#[derive(Debug, Clone, Default)]
pub struct Scanned {
    pub operations: Vec<Operation>,
    pub damaged: Vec<Damaged>,
}

fn damaged(path: &Path, why: &str) -> Error {
    Error::io(format!(
        "operation file {} is damaged: {why}",
        path.display()
    ))
}
