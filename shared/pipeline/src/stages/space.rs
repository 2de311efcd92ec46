//! Room on disk for a rebuild. Prepare measures what it
//! will write before it writes anything, and refuses early when a
//! directory has less room; a write that still finds none (the disk filled
//! meanwhile, a quota, `ulimit -f`) fails the operation with the same one
//! line, after the partial files are removed.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use ktr_base::error::{Error, Result};
use ktr_base::fsutil::free_bytes;

/// Room kept aside in an operation's artifacts while prepare writes: given
/// back (the file removed) when it ends, so that its outcome can be
/// recorded even when a write filled the disk.
pub struct Room(PathBuf);

/// The size of [`Room`]: more than an operation file (≤ 64 KB).
const ROOM: usize = 128 << 10;

impl Room {
    /// Keep the room in `artifacts`.
    pub fn keep(artifacts: &Path) -> Result<Room> {
        let path = artifacts.join(".room");
        let room = Room(path);
        std::fs::write(&room.0, vec![0u8; ROOM]).map_err(|e| Error::io_at("write", &room.0, &e))?;
        Ok(room)
    }
}

impl Drop for Room {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Remove the files of a prepare that found no room (the backup, the
/// candidate being written, the manifest): they would only hold the
/// space; the source is never touched.
pub fn clear(artifacts: &Path) {
    if let Ok(entries) = std::fs::read_dir(artifacts) {
        for entry in entries.flatten() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// What a rebuild writes where.
pub(crate) struct Need {
    /// The state dir: the backup, the candidate being written, the manifest.
    state_dir: PathBuf,
    state: u64,
    /// The project dir: the candidate, unless it is on the state dir's file
    /// system (a hard link then puts it in place).
    project_dir: PathBuf,
    project: u64,
}

/// Room kept beyond the estimate (the operation file, the log, the
/// startup snapshot of a usual session).
const SLACK: u64 = 1 << 20;

impl Need {
    /// What the rebuild of a `source_len`-byte transcript needs: in the
    /// state dir the backup, the candidate (at most the source's size), the
    /// manifest (at most a quarter of it: one short line per record) and
    /// the copies of its `side_bytes` of `tool-results/`.
    pub fn of(source_len: u64, side_bytes: u64, state_dir: &Path, project_dir: &Path) -> Need {
        let same = match (state_dir.metadata(), project_dir.metadata()) {
            (Ok(s), Ok(p)) => s.dev() == p.dev(),
            _ => false,
        };
        let candidate = source_len;
        let state = source_len + candidate + source_len / 4 + side_bytes + SLACK;
        Need {
            state_dir: state_dir.to_path_buf(),
            state,
            project_dir: project_dir.to_path_buf(),
            project: if same { 0 } else { candidate },
        }
    }

    /// Refuse when a directory has less room than its part.
    pub fn check(&self) -> Result<()> {
        for (dir, need) in self.parts() {
            let free =
                free_bytes(dir).map_err(|e| Error::io_at("measure the free space of", dir, &e))?;
            if free < need {
                return Err(no_room(dir, need, free));
            }
        }
        Ok(())
    }

    /// The one line for a write that found no room: the directory with the
    /// least room for its part (measured now), or the file size limit when
    /// both have room (`EFBIG`).
    pub fn failure(&self, cause: &Error) -> Error {
        let short = self
            .parts()
            .filter_map(|(dir, need)| free_bytes(dir).ok().map(|free| (dir, need, free)))
            .min_by_key(|&(_, need, free)| free.saturating_sub(need));
        match short {
            Some((dir, need, free)) if free < need => no_room(dir, need, free),
            Some((dir, need, _)) => Error::io(format!(
                "no room to write in {}: {}; the rebuild needs ≈ {} MB there: raise the file size limit (ulimit -f) or the quota",
                dir.display(),
                cause.message,
                mb(need)
            )),
            None => cause.clone(),
        }
    }

    fn parts(&self) -> impl Iterator<Item = (&Path, u64)> {
        [
            (self.state_dir.as_path(), self.state),
            (self.project_dir.as_path(), self.project),
        ]
        .into_iter()
        .filter(|&(_, need)| need > 0)
    }
}

fn no_room(dir: &Path, need: u64, free: u64) -> Error {
    let mut e = Error::io(format!(
        "no space left on {}: the rebuild needs ≈ {} MB there, {} MB free; free some space or move state_dir",
        dir.display(),
        mb(need),
        free / 1_000_000
    ));
    e.kind = ktr_base::error::ErrorKind::NoSpace;
    e
}

/// Megabytes, rounded up.
fn mb(bytes: u64) -> u64 {
    bytes.div_ceil(1_000_000)
}
