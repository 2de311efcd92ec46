//! The backups as the archive of record. Claude Code
//! deletes a transcript that has not changed for `cleanupPeriodDays`, and
//! with it the session's `<session>/tool-results/` folder; a session ktr
//! rebuilt from stops changing at the switch. So prepare keeps the side
//! files beside the frozen backup, and a rollback to a session whose
//! transcript is gone first puts it back from the backup — byte for byte,
//! checked against the digest frozen with it.

use std::fs;
use std::path::{Path, PathBuf};

use crate::operation::Operation;
use ktr_base::digest::Sha256;
use ktr_base::fsutil::{Existing, copy_atomic, ensure_private_dir};
use ktr_base::ids::SessionId;
use ktr_base::open::{Exists, confine};
use ktr_base::{Error, Result};

/// The most side files kept per session.
const SIDE_FILES_MAX: usize = 10_000;

/// What was copied: files and bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Copied {
    pub files: u32,
    pub bytes: u64,
}

/// `<from>/<session>/tool-results/`, if both are real folders (no symlink).
fn side_dir(from: &Path, session: &SessionId) -> Option<PathBuf> {
    let real = |p: &Path| fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    let dir = from.join(session).join("tool-results");
    (real(&from.join(session)) && real(&dir)).then_some(dir)
}

/// The bytes of the regular files [`copy_side_files`] would copy (the
/// room a rebuild needs for them beside the backup).
pub fn side_bytes(from: &Path, session: &SessionId) -> u64 {
    let Some(src) = side_dir(from, session) else {
        return 0;
    };
    let Ok(entries) = fs::read_dir(&src) else {
        return 0;
    };
    entries
        .flatten()
        .take(SIDE_FILES_MAX)
        .filter_map(|e| e.metadata().ok().filter(fs::Metadata::is_file))
        .map(|m| m.len())
        .sum()
}

/// Copy the regular files of `<from>/<session>/tool-results/` into
/// `<to>/<session>/tool-results/` (0700 folders, 0600 files); files already
/// there are left as they are.
pub fn copy_side_files(from: &Path, to: &Path, session: &SessionId) -> Result<Copied> {
    let mut copied = Copied::default();
    let Some(src) = side_dir(from, session) else {
        return Ok(copied);
    };
    let entries = fs::read_dir(&src).map_err(|e| Error::io_at("list", &src, &e))?;
    let dst = to.join(session).join("tool-results");
    for entry in entries.flatten().take(SIDE_FILES_MAX) {
        let name = entry.file_name();
        if !super::hit_id::plain_name(&name.to_string_lossy()) {
            continue;
        }
        let Ok(file) = confine(&entry.path(), &src, "tool result", Exists::Must) else {
            continue;
        };
        let target = dst.join(&name);
        if target.exists() {
            continue;
        }
        if copied.files == 0 {
            ensure_private_dir(&to.join(session), 0o700)?;
            ensure_private_dir(&dst, 0o700)?;
        }
        copy_atomic(&file, &target, 0o600, Existing::Refuse)?;
        copied.files += 1;
        copied.bytes += fs::metadata(&target).map_or(0, |m| m.len());
    }
    Ok(copied)
}

/// Before switching back to `op`'s source session: if its transcript is
/// gone from `project`, put the frozen backup back (and its side files),
/// checked against the digest frozen with it. Returns what it did, for
/// the stage's report; `None` when the transcript is there.
pub fn restore_source(project: &Path, op: &Operation) -> Result<Option<String>> {
    let Some(backup) = &op.backup else {
        return Ok(None);
    };
    let Some(name) = backup.file_name() else {
        return Ok(None);
    };
    let live = project.join(name);
    if fs::symlink_metadata(&live).is_ok() {
        return Ok(None);
    }
    let session = SessionId::of_transcript(backup)?;
    let want = op.source_sha256.as_ref().ok_or_else(|| {
        Error::refused(format!(
            "{} is gone and operation {} recorded no digest of its backup: restore it by hand from {}",
            live.display(),
            op.id,
            backup.display()
        ))
    })?;
    let artifacts = backup.parent().unwrap_or(Path::new("/"));
    let backup = confine(backup, artifacts, "backup", Exists::Must)?;
    let on_disk = Sha256::of_file(&backup)?;
    if on_disk != *want {
        return Err(Error::refused(format!(
            "the backup {} no longer has the digest frozen with it (sha256 {} ≠ {}); not restoring it — look at it by hand",
            backup.display(),
            on_disk.short(),
            want.short()
        )));
    }
    let copied = copy_atomic(&backup, &live, 0o600, Existing::Refuse)?;
    if copied != *want {
        let _ = fs::remove_file(&live);
        return Err(Error::io(format!(
            "restoring {} from its backup copied other bytes; removed it again",
            live.display()
        )));
    }
    let side = copy_side_files(artifacts, project, &session)?;
    Ok(Some(format!(
        "{} was gone (Claude Code's cleanup): restored from the backup, sha256 {} verified{}",
        live.display(),
        want.short(),
        if side.files > 0 {
            format!(", with {} tool-results files", side.files)
        } else {
            String::new()
        }
    )))
}
