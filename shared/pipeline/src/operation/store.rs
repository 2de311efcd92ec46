//! The operation store over one state dir: loading, listing, the
//! coordinator lock, and the locked writes ([`Locked`]).

use std::fs;
use std::io::{ErrorKind as IoKind, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::record::SCHEMA;

/// The key keeper's directory's name in a state dir ([`Store::keys_dir`]).
pub const KEYS_DIR: &str = "keep";
use super::{CandidateFile, Lane, Locked, Operation, Stage, Status, Transition};
use crate::targets::Target;
use ktr_base::config::{Config, expand_home, home_dir};
use ktr_base::error::{Error, Result};
use ktr_base::fsutil::{Existing, ensure_private_dir, write_atomic};
use ktr_base::ids::{OperationId, SessionId};
use ktr_base::open::{Links, append_private, cap, read_capped};
use ktr_base::state_dir;
use ktr_base::time::{Timestamp, now_rfc3339};

/// Default state dir when no config says otherwise.
pub const DEFAULT_STATE_DIR: &str = "~/.local/state/ktr";

/// How long a dead worker is tolerated after the operation's last update
/// before the operation is failed (covers the hand-off between stages).
pub(crate) const DEFAULT_WORKER_GRACE: Duration = Duration::from_secs(10);

/// The grace period: `$KTR_WORKER_GRACE_SECONDS` when it is a non-negative
/// number (tests shorten it), else [`DEFAULT_WORKER_GRACE`]. Stages record
/// the next stage as the worker when they hand over, so the grace only
/// covers a stage's own start-up.
pub(crate) fn worker_grace() -> Duration {
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
    pub(super) dir: PathBuf,
    pub(super) target: Option<Target>,
    /// `project_dir` (configured stores): the only place a candidate may be
    /// discarded from, and where requests bind to a session.
    pub(super) project: Option<PathBuf>,
    /// `request_ttl_hours`: a pending request older than this expires.
    pub(super) ttl: Option<Duration>,
    pub(super) grace: Duration,
    /// The session whose target `target` is (a hook's store): recovery
    /// touches the target only for that session's operation.
    pub(super) serving: Option<SessionId>,
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
            serving: None,
        })
    }

    /// Open the configured state dir, with the configured target so that
    /// stale-worker recovery can record what the target runs.
    pub fn for_config(config: &Config) -> Result<Store> {
        state_dir::claim(&config.state_dir, config.state_place(&home_dir()))?;
        Ok(Store::open(&config.state_dir)?.with_config(config))
    }

    /// Read-only look at a state dir (creates nothing; for hooks and status).
    pub fn at(dir: &Path) -> Store {
        Store {
            dir: dir.to_path_buf(),
            target: None,
            project: None,
            ttl: None,
            grace: worker_grace(),
            serving: None,
        }
    }

    /// Use the configured target and `project_dir` (what recovery records
    /// and the only folder a never-run candidate is discarded from), and
    /// `request_ttl_hours` (recovery expires a request or an offer older).
    pub fn with_config(mut self, config: &Config) -> Store {
        self.target = Some(Target::from_config(config));
        self.project = Some(config.project_dir.clone());
        self.ttl = Some(Duration::from_secs_f64(config.request_ttl_hours * 3600.0));
        self
    }

    /// The target is `session`'s own (a hook's config, its pane found from
    /// its Claude Code): a dead worker of another session's operation is
    /// failed without looking at or releasing this target.
    pub fn serving(mut self, session: SessionId) -> Store {
        self.serving = Some(session);
        self
    }

    /// The configured `project_dir`, if this store was opened with a config.
    pub fn project(&self) -> Option<&Path> {
        self.project.as_deref()
    }

    /// Change the dead-worker grace period (the compaction guard: none).
    pub(crate) fn with_grace(mut self, grace: Duration) -> Store {
        self.grace = grace;
        self
    }

    /// Use `target` when recording what a dead activation left behind.
    #[cfg(test)]
    pub(crate) fn with_target(mut self, target: Target) -> Store {
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

    /// Remove `path`, a file ktr wrote in `artifacts/<id>/` (a backup, the
    /// manifest): only when it lies there and neither folder on the way is
    /// a link, so an edited operation file or a planted link never deletes
    /// anything elsewhere (a link planted at the name itself goes, not what
    /// it names).
    pub(crate) fn remove_artifact(&self, id: &OperationId, path: &Path) {
        let artifacts = self.dir.join("artifacts");
        let dir = artifacts.join(id.as_str());
        let real_dir = |d: &Path| fs::symlink_metadata(d).is_ok_and(|m| m.is_dir());
        if path.parent() == Some(dir.as_path())
            && real_dir(&artifacts)
            && real_dir(&dir)
            && fs::symlink_metadata(path).is_ok_and(|m| !m.is_dir())
        {
            let _ = fs::remove_file(path);
        }
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

    /// Load one operation; a missing one is [`ktr_base::ErrorKind::NotFound`].
    pub fn load(&self, id: &OperationId) -> Result<Operation> {
        self.try_load(id)?
            .ok_or_else(|| Error::not_found(format!("no operation {id}; `ktr ops` lists them")))
    }

    /// Load one operation, `None` when there is no such file.
    pub(crate) fn try_load(&self, id: &OperationId) -> Result<Option<Operation>> {
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
    pub(super) fn scan_as<T: Loaded>(&self) -> Result<(Vec<T>, Vec<Damaged>)> {
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
}

impl Locked<'_> {
    /// Load one operation (under the lock).
    pub fn load(&self, id: &OperationId) -> Result<Operation> {
        self.store.load(id)
    }

    /// Load `id` and require it to be in `status`; otherwise refuse with
    /// "operation ID is S; only <rule>".
    pub(crate) fn load_in(
        &self,
        id: &OperationId,
        status: Status,
        rule: &str,
    ) -> Result<Operation> {
        let op = self.load(id)?;
        if op.status != status {
            return Err(Error::refused(format!(
                "operation {id} is {}; only {rule}",
                op.status
            )));
        }
        Ok(op)
    }

    /// Write `op` atomically (0600) and refresh `updated_at`.
    pub fn save(&mut self, op: &mut Operation) -> Result<()> {
        self.may_write(op.status, op)?;
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
        self.may_write(to, op)?;
        op.status = to;
        op.history.push(Transition {
            at: Timestamp::now(),
            from,
            to,
            note: note.to_string(),
        });
        if to.unworked() {
            op.worker = None;
        }
        self.save(op)?;
        self.set_entry(op)?;
        self.log(&op.id, from, to, note);
        Ok(())
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

/// The fields of an operation file the one-per-lane rule needs; serde
/// skips the rest without building it.
#[derive(Deserialize)]
pub(super) struct Header {
    #[serde(default = "super::record::schema_before_the_field")]
    schema: u32,
    #[serde(default)]
    pub(super) id: OperationId,
    #[serde(default = "Header::pending")]
    pub(super) status: Status,
    #[serde(default)]
    created_at: Option<Timestamp>,
    #[serde(default)]
    session_id: Option<SessionId>,
    #[serde(default)]
    candidate: Option<CandidateFile>,
}

impl Header {
    /// What [`Operation`]'s default status is for a file without one.
    fn pending() -> Status {
        Status::Pending
    }

    /// The lane it is in ([`Operation::lane`]).
    pub(super) fn lane(&self) -> Lane {
        Lane::of(
            self.status,
            self.session_id.as_ref(),
            self.candidate.as_ref().map(|c| &c.session_id),
        )
    }

    /// Oldest first, as [`Store::scan`] orders operations.
    pub(super) fn order(&self) -> (Option<&Timestamp>, &OperationId) {
        (self.created_at.as_ref(), &self.id)
    }
}

/// What a file read from `operations/` is checked for beyond its JSON shape.
pub(super) trait Loaded: DeserializeOwned {
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
