//! Durable file writes.
//!
//! Every state or candidate file is written the same way: a temp file in the
//! same directory, `fsync`, rename over the destination, `fsync` the directory.
//! A reader therefore sees either the old file or the new one, never a part.
//! Only the window account's caches skip the `fsync`s ([`write_cache_atomic`]).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::digest;
use crate::error::{Error, Result};
use crate::open::{Links, open_regular};

/// Whether to replace an existing destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Replace it (state files).
    Replace,
    /// Refuse if it exists (candidates, backups).
    Refuse,
}

/// Write `bytes` to `path` atomically with permission `mode`.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32, existing: Existing) -> Result<()> {
    write_atomic_with(path, mode, existing, |file| file.write_all(bytes))
}

/// [`write_atomic`] (replacing) without the two `fsync`s, for caches the
/// hooks rewrite on the hot path: readers still see the old or the new
/// content, never a torn file; a crash may only lose the newest write
/// (about 1 ms of a 2.5 ms Stop hook on this machine's disk went to them).
pub fn write_cache_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let mut out = AtomicFile::create(path, mode, Existing::Replace)?;
    out.file()
        .write_all(bytes)
        .map_err(|e| Error::io_at("write", path, &e))?;
    out.put_in_place(false)
}

/// Copy `src` to `dst` atomically (streamed, never held in memory) with
/// permission `mode`. Returns the SHA-256 of the bytes copied.
pub fn copy_atomic(
    src: &Path,
    dst: &Path,
    mode: u32,
    existing: Existing,
) -> Result<digest::Sha256> {
    let mut input = open_regular(src, Links::Refuse).map_err(|e| Error::io_at("read", src, &e))?;
    write_atomic_with(dst, mode, existing, |file| {
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = input.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            file.write_all(&buf[..n])?;
        }
        Ok(digest::Sha256::of_hasher(hasher))
    })
}

/// The mechanics of every atomic write: `fill` a new temp file in the same
/// directory, `fsync`, rename (or link, for [`Existing::Refuse`]) over
/// `path`, `fsync` the directory. The temp file is removed on failure.
pub fn write_atomic_with<T>(
    path: &Path,
    mode: u32,
    existing: Existing,
    fill: impl FnOnce(&mut File) -> io::Result<T>,
) -> Result<T> {
    let mut out = AtomicFile::create(path, mode, existing)?;
    let value = fill(out.file()).map_err(|e| Error::io_at("write", path, &e))?;
    out.commit()?;
    Ok(value)
}

/// A file written atomically piece by piece (for content produced as a
/// stream): a new temp file in the destination's directory, made durable
/// and renamed (or linked, for [`Existing::Refuse`]) over the destination
/// by [`AtomicFile::commit`]. Dropped without a commit, the temp file is
/// removed and the destination is untouched.
pub struct AtomicFile {
    file: File,
    tmp: PathBuf,
    path: PathBuf,
    existing: Existing,
    committed: bool,
}

impl AtomicFile {
    /// Start writing `path` (permission `mode`).
    pub fn create(path: &Path, mode: u32, existing: Existing) -> Result<AtomicFile> {
        if existing == Existing::Refuse && path.symlink_metadata().is_ok() {
            return Err(Error::refused(format!(
                "{} already exists; refusing to overwrite it",
                path.display()
            )));
        }
        let tmp = temp_path(path);
        let opened = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .and_then(|file| {
                // The umask may have narrowed the mode; set it exactly.
                file.set_permissions(fs::Permissions::from_mode(mode))?;
                Ok(file)
            });
        match opened {
            Ok(file) => Ok(AtomicFile {
                file,
                tmp,
                path: path.to_path_buf(),
                existing,
                committed: false,
            }),
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                Err(Error::io_at("write", path, &e))
            }
        }
    }

    /// The temp file, to write to.
    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// `fsync` the content, put it in place, `fsync` the directory.
    pub fn commit(self) -> Result<()> {
        self.put_in_place(true)
    }

    /// Put the content in place; the `fsync`s only when `durable`.
    fn put_in_place(mut self, durable: bool) -> Result<()> {
        let result = (|| -> io::Result<()> {
            if durable {
                self.file.sync_all()?;
            }
            if self.existing == Existing::Refuse {
                // link(2) fails if the destination appeared meanwhile: no overwrite race.
                fs::hard_link(&self.tmp, &self.path)?;
                fs::remove_file(&self.tmp)?;
            } else {
                fs::rename(&self.tmp, &self.path)?;
            }
            self.committed = true;
            if durable {
                sync_dir(&parent_of(&self.path))?;
            }
            Ok(())
        })();
        result.map_err(|e| Error::io_at("write", &self.path, &e))
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// `fsync` a directory so a rename inside it is durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Make sure `dir` is a private directory: create it (and missing
/// parents) with `mode` (e.g. 0o700) when it does not exist; an existing
/// one is never chmod-ed (it may be a shared folder like `/tmp`) but must
/// be [`safe_dir`], else a one-line refusal says why.
pub fn ensure_private_dir(dir: &Path, mode: u32) -> Result<()> {
    if dir.as_os_str().is_empty() {
        return Err(Error::config("an empty path is not a directory"));
    }
    match fs::symlink_metadata(dir) {
        Ok(_) => return safe_dir(dir),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io_at("inspect", dir, &e)),
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(|e| Error::io_at("create directory", parent, &e))?;
    }
    match fs::create_dir(dir) {
        Ok(()) => fs::set_permissions(dir, fs::Permissions::from_mode(mode))
            .map_err(|e| Error::io_at("set permissions on", dir, &e)),
        // Another ktr process created it meanwhile: check it like any other.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => safe_dir(dir),
        Err(e) => Err(Error::io_at("create directory", dir, &e)),
    }
}

/// `dir` is a real directory (not a symlink), owned by the running user,
/// and not writable by group or others; otherwise why not, in one line.
pub fn safe_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::symlink_metadata(dir).map_err(|e| Error::io_at("inspect", dir, &e))?;
    let why = if meta.file_type().is_symlink() {
        "is a symlink; name the real directory instead".to_string()
    } else if !meta.is_dir() {
        "is not a directory".to_string()
    } else if meta.uid() != current_uid() {
        format!(
            "is owned by uid {}, not by you (uid {})",
            meta.uid(),
            current_uid()
        )
    } else if meta.mode() & 0o022 != 0 {
        format!(
            "is writable by others (mode {:o}); ktr keeps its state in a private directory: use another one, or chmod 700 it if it is yours alone",
            meta.mode() & 0o7777
        )
    } else {
        return Ok(());
    };
    Err(Error::refused(format!("{} {why}", dir.display())))
}

/// Bytes an unprivileged writer may still use on the file system of `dir`.
pub fn free_bytes(dir: &Path) -> io::Result<u64> {
    let st = rustix::fs::statvfs(dir)?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Ignore `SIGXFSZ`: past the file size limit (`ulimit -f`) a write then
/// fails with `EFBIG`, which ktr reports, instead of killing the process
/// without a word.
#[allow(unsafe_code)]
pub fn ignore_file_size_signal() {
    // SAFETY: setting a signal's disposition to SIG_IGN has no
    // preconditions and installs no handler code. Neither std nor rustix
    // has a safe call for a signal's disposition (docs/ARCHITECTURE.md,
    // "unsafe").
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// The effective uid of this process.
pub fn current_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

pub fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let unique = uuid::Uuid::new_v4().simple().to_string();
    parent_of(path).join(format!(".{name}.{}.tmp", &unique[..12]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_sets_mode_and_refuses_existing() {
        let dir = std::env::temp_dir().join(format!("ktr-fsutil-{}", uuid::Uuid::new_v4()));
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.json");
        write_atomic(&p, b"one", 0o600, Existing::Refuse).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"one");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let err = write_atomic(&p, b"two", 0o600, Existing::Refuse).unwrap_err();
        assert!(err.message.contains("already exists"), "{err}");
        assert_eq!(fs::read(&p).unwrap(), b"one");
        write_atomic(&p, b"two", 0o600, Existing::Replace).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        // No temp files are left behind.
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_existing_dir_is_checked_never_chmod_ed() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        fs::create_dir(&shared).unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
        let err = ensure_private_dir(&shared, 0o700).unwrap_err();
        assert!(
            err.message.contains("is writable by others (mode 1777)"),
            "{err}"
        );
        assert_eq!(
            fs::metadata(&shared).unwrap().permissions().mode() & 0o7777,
            0o1777
        );
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        assert!(
            ensure_private_dir(&link, 0o700)
                .unwrap_err()
                .message
                .contains("is a symlink")
        );
        let mine = dir.path().join("a/b/state");
        ensure_private_dir(&mine, 0o700).unwrap();
        assert_eq!(
            fs::metadata(&mine).unwrap().permissions().mode() & 0o777,
            0o700
        );
        fs::set_permissions(&mine, fs::Permissions::from_mode(0o755)).unwrap();
        ensure_private_dir(&mine, 0o700).unwrap();
        assert_eq!(
            fs::metadata(&mine).unwrap().permissions().mode() & 0o777,
            0o755,
            "an existing private-enough dir keeps its mode"
        );
        assert!(ensure_private_dir(Path::new(""), 0o700).is_err());
    }

    #[test]
    fn atomic_copy_streams_digests_and_refuses_existing() {
        let dir = std::env::temp_dir().join(format!("ktr-fsutil-{}", uuid::Uuid::new_v4()));
        fs::create_dir_all(&dir).unwrap();
        let (src, dst) = (dir.join("src.jsonl"), dir.join("copy.jsonl"));
        let content = "line\n".repeat(40_000);
        fs::write(&src, &content).unwrap();
        let digest = copy_atomic(&src, &dst, 0o600, Existing::Refuse).unwrap();
        assert_eq!(digest, crate::digest::Sha256::of_bytes(content.as_bytes()));
        assert_eq!(crate::digest::sha256_file(&dst).unwrap(), digest);
        assert_eq!(
            fs::metadata(&dst).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let err = copy_atomic(&src, &dst, 0o600, Existing::Refuse).unwrap_err();
        assert!(err.message.contains("already exists"), "{err}");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 2, "no temp file left");
        fs::remove_dir_all(&dir).unwrap();
    }
}
