//! The backups as the archive of record. Claude Code
//! deletes a transcript that has not changed for `cleanupPeriodDays`, and
//! with it the session's folder `<session>/` beside it; a session ktr
//! rebuilt from stops changing at the switch. So prepare keeps that whole
//! folder beside the frozen backup, and a rollback to a session whose
//! transcript is gone first puts it back from the backup — byte for byte,
//! checked against the digest frozen with it.
//!
//! What 2.1.328 keeps in `<session>/` (read from its bundle: its cleanup
//! removes these with the transcript): `tool-results/` (large tool
//! outputs), `subagents/` (`agent-<id>.jsonl` and `agent-<id>.meta.json`,
//! nested folders, `workflows/<run>/`), `workflows/`, `remote-agents/`,
//! `mcp-tasks/`, and files such as `custom-title.json`, `archived.json`,
//! `precompact.json`, `sent-prefix.json`, `resume-head.jsonl`. The copy
//! takes every real folder and regular file in it, whatever new ones a
//! later release adds; a subagent's `*.jsonl` stays inside the folder, so
//! nothing ever takes it for a session (only `<session>.jsonl` directly in
//! `project_dir` or `artifacts/<op>/` is one).

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
/// The deepest folder followed inside `<session>/`.
const DEPTH_MAX: usize = 8;

/// What was copied: files and bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Copied {
    pub files: u32,
    pub bytes: u64,
}

/// `<from>/<session>/`, if it is a real folder (no symlink).
fn side_dir(from: &Path, session: &SessionId) -> Option<PathBuf> {
    let dir = from.join(session);
    fs::symlink_metadata(&dir)
        .is_ok_and(|m| m.is_dir())
        .then_some(dir)
}

/// The regular files under `dir` (real folders only, plain names, at
/// most [`DEPTH_MAX`] deep and [`SIDE_FILES_MAX`] in all), as paths
/// relative to `dir`, with their sizes.
fn side_files(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut found = Vec::new();
    let mut stack = vec![(PathBuf::new(), 0usize)];
    while let Some((rel, depth)) = stack.pop() {
        let Ok(entries) = fs::read_dir(dir.join(&rel)) else {
            continue;
        };
        for entry in entries.flatten() {
            if found.len() >= SIDE_FILES_MAX {
                return found;
            }
            let name = entry.file_name();
            if !super::hit_id::plain_name(&name.to_string_lossy()) {
                continue;
            }
            match entry.file_type() {
                Ok(t) if t.is_dir() && depth < DEPTH_MAX => {
                    stack.push((rel.join(&name), depth + 1));
                }
                Ok(t) if t.is_file() => {
                    let len = entry.metadata().map_or(0, |m| m.len());
                    found.push((rel.join(&name), len));
                }
                _ => {}
            }
        }
    }
    found
}

/// The bytes of the regular files [`copy_side_files`] would copy (the
/// room a rebuild needs for them beside the backup).
pub fn side_bytes(from: &Path, session: &SessionId) -> u64 {
    side_dir(from, session).map_or(0, |dir| side_files(&dir).iter().map(|f| f.1).sum())
}

/// Copy the session's folder `<from>/<session>/` (every regular file in
/// its real folders) into `<to>/<session>/` (0700 folders, 0600 files);
/// files already there are left as they are.
pub fn copy_side_files(from: &Path, to: &Path, session: &SessionId) -> Result<Copied> {
    let mut copied = Copied::default();
    let Some(src) = side_dir(from, session) else {
        return Ok(copied);
    };
    let dst = to.join(session);
    for (rel, _) in side_files(&src) {
        let Some(parent) = rel.parent() else {
            continue;
        };
        let Ok(file) = confine(
            &src.join(&rel),
            &src.join(parent),
            "side file",
            Exists::Must,
        ) else {
            continue;
        };
        let target = dst.join(&rel);
        if fs::symlink_metadata(&target).is_ok() {
            continue;
        }
        ensure_private_dir(&dst, 0o700)?;
        let mut at = dst.clone();
        for part in parent.components() {
            at.push(part);
            ensure_private_dir(&at, 0o700)?;
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
            format!(", with {} files of its folder {session}/", side.files)
        } else {
            String::new()
        }
    )))
}
