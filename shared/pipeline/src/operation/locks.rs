//! The state dir's locks (SPEC §9, "Locks"). Each lock is a separate
//! file, never one that is renamed over:
//!
//! - `coordinator.lock`, the household lock: held *shared* by every
//!   lane's read-modify-write, so sessions never wait for each other on
//!   it, and *exclusively* only by what truly spans the household —
//!   `ktr prune`, `ktr purge`, `ktr repair`, a full rebuild of `active` —
//!   which must see no lane half-way through a write;
//! - `locks/<lane>.lock`, one per session (and `unbound` for a request no
//!   session holds yet): held for one lane's read-modify-write, so one
//!   session's operation never waits for, blocks or expires another's;
//! - `active.lock`: held for one read and one atomic write of the shared
//!   `active` file, inside the others, never while a stage works.
//!
//! Order: household, then the lanes (sessions before `unbound`), then
//! `active.lock`; a lock is never waited for while holding a later one.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use super::{Active, LOCK_TIMEOUT, Lane, Store};
use ktr_base::config::home_dir;
use ktr_base::error::{Error, Result};
use ktr_base::fsutil::ensure_private_dir;
use ktr_base::ids::{OperationId, SessionId};
use ktr_base::state_dir;

/// The folder of the lanes' lock files.
pub const LOCKS_DIR: &str = "locks";

/// What a [`Locked`] may write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Holds {
    /// The household lock, exclusively: every lane.
    Household,
    /// These lanes (and the household lock, shared).
    Lanes(Vec<Lane>),
}

/// A held lock; every mutation goes through it.
pub struct Locked<'a> {
    pub(super) store: &'a Store,
    pub(super) holds: Holds,
    _files: Vec<File>,
}

impl Locked<'_> {
    /// Whether this lock covers `lane`.
    pub(crate) fn holds(&self, lane: &Lane) -> bool {
        match &self.holds {
            Holds::Household => true,
            Holds::Lanes(lanes) => lanes.contains(lane),
        }
    }
}

/// How a lock file is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Shared,
    Exclusive,
}

impl Store {
    /// Run `f` holding the household lock exclusively (every lane: prune,
    /// purge, repair). Waits at most [`LOCK_TIMEOUT`] for it.
    pub fn with_lock<T>(&self, f: impl FnOnce(&mut Locked) -> Result<T>) -> Result<T> {
        self.with_lock_within(LOCK_TIMEOUT, f)
    }

    /// [`Store::with_lock`], waiting at most `timeout`; a lock still held
    /// then is [`ktr_base::ErrorKind::Busy`].
    pub(crate) fn with_lock_within<T>(
        &self,
        timeout: Duration,
        f: impl FnOnce(&mut Locked) -> Result<T>,
    ) -> Result<T> {
        f(&mut self.lock(Holds::Household, Instant::now() + timeout)?)
    }

    /// Run `f` holding `session`'s lane, and the [`Lane::Unbound`] one
    /// when `active` names an unbound request: a hook of that session may
    /// bind it. Sessions never meet on the unbound lock while no request
    /// is unbound (an unknown `active` binds nothing this once; the
    /// lane's write rebuilds it). Waits at most `timeout`.
    pub(crate) fn with_session<T>(
        &self,
        session: &SessionId,
        timeout: Duration,
        f: impl FnOnce(&mut Locked) -> Result<T>,
    ) -> Result<T> {
        let mut lanes = vec![Lane::Session(session.clone())];
        if let Active::Known(index) = self.active_state()
            && index.get(&Lane::Unbound).is_some()
        {
            lanes.push(Lane::Unbound);
        }
        f(&mut self.lock(Holds::Lanes(lanes), Instant::now() + timeout)?)
    }

    /// Run `f` holding `lane` alone, waiting at most [`LOCK_TIMEOUT`].
    pub(crate) fn with_lane<T>(
        &self,
        lane: &Lane,
        f: impl FnOnce(&mut Locked) -> Result<T>,
    ) -> Result<T> {
        let deadline = Instant::now() + LOCK_TIMEOUT;
        f(&mut self.lock(Holds::Lanes(vec![lane.clone()]), deadline)?)
    }

    /// Run `f` holding the lane operation `id` is in, waiting at most
    /// [`LOCK_TIMEOUT`] (a lane that changed while it waited — a request
    /// bound to a session — is locked again).
    pub(crate) fn with_op<T>(
        &self,
        id: &OperationId,
        f: impl FnOnce(&mut Locked) -> Result<T>,
    ) -> Result<T> {
        let deadline = Instant::now() + LOCK_TIMEOUT;
        loop {
            let lane = self.load(id)?.lane();
            let mut tx = self.lock(Holds::Lanes(vec![lane.clone()]), deadline)?;
            if self.load(id)?.lane() == lane {
                return f(&mut tx);
            }
            if Instant::now() >= deadline {
                return Err(Error::busy(format!(
                    "operation {id} kept changing session while ktr waited for its lock; see `ktr status`"
                )));
            }
        }
    }

    /// Take the locks `holds` names, in the one order, by `deadline`.
    fn lock(&self, holds: Holds, deadline: Instant) -> Result<Locked<'_>> {
        let home = home_dir();
        state_dir::claim(
            &self.dir,
            state_dir::Place {
                project: self.project.as_deref(),
                ..state_dir::place_of_home(&home)
            },
        )?;
        ensure_private_dir(&self.dir.join("operations"), 0o700)?;
        let household = self.dir.join("coordinator.lock");
        let mut files = Vec::new();
        match &holds {
            Holds::Household => files.push(hold(&household, Mode::Exclusive, deadline)?),
            Holds::Lanes(lanes) => {
                files.push(hold(&household, Mode::Shared, deadline)?);
                ensure_private_dir(&self.dir.join(LOCKS_DIR), 0o700)?;
                let mut lanes = lanes.clone();
                lanes.sort();
                lanes.dedup();
                for lane in &lanes {
                    files.push(hold(
                        &lane_lock(&self.dir, lane),
                        Mode::Exclusive,
                        deadline,
                    )?);
                }
            }
        }
        Ok(Locked {
            store: self,
            holds,
            _files: files,
        })
    }

    /// `active.lock`: held for one read-modify-write of `active`.
    pub(super) fn index_lock(&self) -> Result<File> {
        hold(
            &self.dir.join("active.lock"),
            Mode::Exclusive,
            Instant::now() + LOCK_TIMEOUT,
        )
    }
}

/// Open the lock file `path` (0600, never through a link) and hold it in
/// `mode` by `deadline`; still held by another then is
/// [`ktr_base::ErrorKind::Busy`]. Released when the file drops.
pub(super) fn hold(path: &Path, mode: Mode, deadline: Instant) -> Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Error::io_at("open lock", path, &e))?;
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Err(Error::io(format!(
            "{} is not a regular file; move it aside",
            path.display()
        )));
    }
    let started = Instant::now();
    loop {
        let tried = match mode {
            Mode::Shared => file.try_lock_shared(),
            Mode::Exclusive => file.try_lock(),
        };
        match tried {
            Ok(()) => return Ok(file),
            Err(fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(2));
            }
            Err(fs::TryLockError::WouldBlock) => return Err(busy(path, started)),
            Err(fs::TryLockError::Error(e)) => return Err(Error::io_at("lock", path, &e)),
        }
    }
}

fn busy(path: &Path, since: Instant) -> Error {
    Error::busy(format!(
        "{} is held by another ktr process for more than {:.1} s; see `ktr status`",
        path.display(),
        since.elapsed().as_secs_f64()
    ))
}

/// The lock file of `lane` in the state dir `dir`.
fn lane_lock(dir: &Path, lane: &Lane) -> PathBuf {
    dir.join(LOCKS_DIR).join(format!("{}.lock", lane.name()))
}
