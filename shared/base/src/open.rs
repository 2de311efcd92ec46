//! Opening files ktr did not write itself (config, state files, transcripts)
//! without trusting what sits at the path.
//!
//! - [`open_regular`] never blocks in `open(2)` (a FIFO swapped in for a
//!   transcript or the `active` file would hang it forever), optionally
//!   refuses a symlink as the last component (`O_NOFOLLOW`), and checks the
//!   descriptor it got — not the path — is a regular file.
//! - [`read_capped`] reads such a file whole, but never more than a cap
//!   (a planted 10 GB file or `/dev/zero` is one line of error, not an OOM).
//! - [`resolved`] names the file a descriptor really is (`/proc/self/fd`),
//!   so a path checked by name and swapped before the open is caught.
//! - [`append_private`] opens a log for appending, never through a symlink.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Whether the last component of a path may be a symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Follow it (the caller checks where the opened file really is).
    Follow,
    /// Refuse it (`ELOOP`): files inside the state dir are ours, never links.
    Refuse,
}

/// Size caps for the small files ktr reads whole.
pub mod cap {
    /// A config file.
    pub const CONFIG: u64 = 1 << 20;
    /// The `active` file: one line.
    pub const ACTIVE: u64 = 4 << 10;
    /// One operation file: a few KiB by design (the manifest is an
    /// artifact, growing lists are capped when saved); larger is damaged.
    pub const OPERATION: u64 = 1 << 20;
    /// Claude Code's `settings.json`.
    pub const SETTINGS: u64 = 16 << 20;
    /// A cache file under `<state_dir>/window/` (a few hundred bytes).
    pub const CACHE: u64 = 64 << 10;
    /// A key keeper's small file (`ready`, `replayed`, `error`): a number
    /// or one line.
    pub const KEEP_NOTE: u64 = 4 << 10;
    /// A key keeper's `keys`: what a person typed during one switch (a
    /// recorder stops holding the keyboard at half of it).
    pub const KEYS: u64 = 16 << 20;
}

/// Open `path` read-only as a regular file. The open itself never blocks
/// (`O_NONBLOCK`; it has no effect on reads of a regular file), and a FIFO,
/// socket, device or directory is refused after opening, by the descriptor.
pub fn open_regular(path: &Path, links: Links) -> io::Result<File> {
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
    if links == Links::Refuse {
        flags |= libc::O_NOFOLLOW;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| {
            if links == Links::Refuse && e.raw_os_error() == Some(libc::ELOOP) {
                io::Error::new(io::ErrorKind::InvalidInput, "it is a symlink, not a file")
            } else {
                e
            }
        })?;
    let kind = file.metadata()?.file_type();
    if kind.is_file() {
        return Ok(file);
    }
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("it is {what}, not a regular file"),
    ))
}

/// Whether a confined path must name a file that is already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exists {
    /// The file must exist (it is about to be read).
    Must,
    /// It may not exist yet (Claude Code writes a transcript after the first
    /// hook of a session): then the folder it would be written to decides.
    May,
}

/// The one rule for a path ktr receives from outside — hook stdin, MCP
/// arguments, an operation file, the config: `path` and the folder `dir`
/// it belongs to are canonicalised (a symlinked `~/.claude` keeps
/// working), then `path` must lie directly inside `dir`, and not be a
/// symlink itself; if it exists, it must be a regular file. Returns the
/// canonical path, to be opened with [`open_regular`] and
/// [`Links::Refuse`] (non-blocking, no final symlink). Otherwise one line
/// naming `what` it is, and nothing is read.
pub fn confine(path: &Path, dir: &Path, what: &str, exists: Exists) -> Result<PathBuf> {
    let refuse = |why: &str| {
        Error::refused(format!(
            "{what} {} {why}; ktr reads only regular files directly inside {}",
            path.display(),
            dir.display()
        ))
    };
    let dir_real = dir
        .canonicalize()
        .map_err(|e| Error::config(format!("{} is not usable: {e}", dir.display())))?;
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(refuse("names no file"));
    };
    if !path.is_absolute() {
        return Err(refuse("is not an absolute path"));
    }
    let real = parent
        .canonicalize()
        .map_err(|e| refuse(&format!("cannot be resolved ({e})")))?
        .join(name);
    if real.parent() != Some(dir_real.as_path()) {
        return Err(refuse("is not inside it (symlinks resolved)"));
    }
    match std::fs::symlink_metadata(&real) {
        Ok(m) if m.file_type().is_symlink() => Err(refuse("is a symlink")),
        Ok(m) if !m.is_file() => Err(refuse("is not a regular file")),
        Ok(_) => Ok(real),
        Err(e) if e.kind() == io::ErrorKind::NotFound && exists == Exists::May => Ok(real),
        Err(e) => Err(refuse(&format!("cannot be read ({e})"))),
    }
}

/// Read a whole regular file of at most `cap` bytes (see [`open_regular`]).
/// A missing file is `Ok(None)`; a larger one is an error naming the cap.
pub fn read_capped(path: &Path, cap: u64, links: Links) -> Result<Option<Vec<u8>>> {
    let file = match open_regular(path, links) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io_at("read", path, &e)),
    };
    let mut bytes = Vec::new();
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io_at("read", path, &e))?;
    if bytes.len() as u64 > cap {
        return Err(Error::io(format!(
            "{} is larger than {} bytes, more than ktr ever writes there; move it aside",
            path.display(),
            cap
        )));
    }
    Ok(Some(bytes))
}

/// The path the open descriptor `file` really refers to, as the kernel
/// knows it (`/proc/self/fd/N`): checking this after the open catches a
/// path swapped between a check and the use.
pub fn resolved(file: &File) -> io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// Create `path` (0600) for writing, only if nothing is there: never
/// through a symlink, never onto a file someone else left (`O_EXCL`).
pub fn create_new_private(path: &Path) -> Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Error::io_at("create", path, &e))
}

/// Open (create 0600) a log file for appending, refusing a symlink.
pub fn append_private(path: &Path) -> Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Error::io_at("open", path, &e))?;
    let regular = file.metadata().is_ok_and(|m| m.is_file());
    if !regular {
        return Err(Error::io(format!(
            "{} is not a regular file; move it aside",
            path.display()
        )));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{CWD, FileType, Mode, mknodat};
    use std::time::{Duration, Instant};

    fn mkfifo(path: &Path) {
        mknodat(CWD, path, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
    }

    #[test]
    fn a_fifo_a_device_and_a_directory_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("active");
        mkfifo(&fifo);
        let start = Instant::now();
        for (path, what) in [
            (fifo.as_path(), "a FIFO"),
            (Path::new("/dev/zero"), "a device"),
            (dir.path(), "a directory"),
        ] {
            let err = read_capped(path, 10, Links::Follow).unwrap_err();
            assert!(err.message.contains(what), "{err}");
        }
        assert!(start.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn caps_links_and_missing_files() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; 11]).unwrap();
        assert!(
            read_capped(&big, 10, Links::Follow)
                .unwrap_err()
                .message
                .contains("larger than 10 bytes")
        );
        assert_eq!(
            read_capped(&big, 11, Links::Follow).unwrap().unwrap().len(),
            11
        );
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&big, &link).unwrap();
        assert!(read_capped(&link, 11, Links::Follow).unwrap().is_some());
        let err = read_capped(&link, 11, Links::Refuse).unwrap_err();
        assert!(err.message.contains("symlink"), "{err}");
        assert!(
            read_capped(&dir.path().join("none"), 1, Links::Refuse)
                .unwrap()
                .is_none()
        );
        assert!(
            append_private(&link).is_err(),
            "a log is never opened through a link"
        );
        assert!(create_new_private(&link).is_err(), "nor a new file");
        assert!(create_new_private(&big).is_err(), "nor one already there");
        let fresh = dir.path().join("fresh");
        create_new_private(&fresh).unwrap();
        assert!(create_new_private(&fresh).is_err(), "created once");
    }

    #[test]
    fn the_opened_file_is_named_by_its_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        let inner = real.join("a.jsonl");
        std::fs::write(&inner, "x").unwrap();
        let outside = tempfile::NamedTempFile::new().unwrap();
        let link = real.join("b.jsonl");
        std::os::unix::fs::symlink(outside.path(), &link).unwrap();
        let opened = |path: &Path| resolved(&open_regular(path, Links::Follow).unwrap()).unwrap();
        assert_eq!(opened(&inner), inner);
        assert_eq!(opened(&link), outside.path().canonicalize().unwrap());
    }

    #[test]
    fn the_one_path_rule_takes_only_regular_files_directly_inside() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("project");
        std::fs::create_dir(&dir).unwrap();
        let link_to_dir = tmp.path().join("linked");
        std::os::unix::fs::symlink(&dir, &link_to_dir).unwrap();
        let file = dir.join("s.jsonl");
        std::fs::write(&file, "x").unwrap();
        let real = dir.canonicalize().unwrap().join("s.jsonl");
        // A symlinked folder on either side keeps working.
        assert_eq!(
            confine(&file, &link_to_dir, "t", Exists::Must).unwrap(),
            real
        );
        assert_eq!(
            confine(&link_to_dir.join("s.jsonl"), &dir, "t", Exists::Must).unwrap(),
            real
        );
        // Not there yet: only when it may be missing.
        let later = dir.join("later.jsonl");
        assert!(confine(&later, &dir, "t", Exists::May).is_ok());
        assert!(confine(&later, &dir, "t", Exists::Must).is_err());
        let outside = tmp.path().join("secret.jsonl");
        std::fs::write(&outside, "x").unwrap();
        let link = dir.join("link.jsonl");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        let sub = dir.join("sub");
        std::fs::create_dir(&sub).unwrap();
        for (path, why) in [
            (outside.as_path(), "is not inside it"),
            (link.as_path(), "is a symlink"),
            (sub.as_path(), "is not a regular file"),
            (Path::new("/dev/zero"), "is not inside it"),
            (Path::new("relative.jsonl"), "is not an absolute path"),
        ] {
            let err = confine(path, &dir, "transcript", Exists::May).unwrap_err();
            assert!(err.message.contains(why), "{path:?}: {err}");
            assert!(err.message.starts_with("transcript "), "{err}");
            assert_eq!(err.message.lines().count(), 1);
        }
    }
}
