//! Applying a merge or unmerge to a settings file: backup, atomic write,
//! mode and symlink kept, a diff for the dry run.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use ktr_base::error::{Error, Result};
use ktr_base::fsutil::{Existing, write_atomic};
use ktr_base::open::{Links, cap, read_capped};

use std::fmt::Write as _;

use super::hooks::{events_of, merge, unmerge, wanted};
use super::json::Json;
use super::statusline::{embed_hint, merge_statusline, unmerge_statusline, wanted_statusline};

/// A planned change to a settings file.
#[derive(Debug, Clone)]
pub struct Edit {
    /// Something the human should know (e.g. how to embed the statusline).
    pub note: Option<String>,
    pub path: PathBuf,
    /// The file's text now (`None`: absent).
    pub before: Option<String>,
    /// The file's text afterwards (`None`: the file is removed, because
    /// ktr created it and nothing but ktr's hooks was ever in it).
    pub after: Option<String>,
    /// The ktr backup whose exact bytes `after` restores (uninstall); it is
    /// removed once restored, so install + uninstall leave no file behind.
    pub restores: Option<PathBuf>,
}

/// What [`Edit::apply`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub change: Change,
    /// The file actually written when the settings path is a symlink
    /// (dotfile managers): the link stays, its target is replaced atomically.
    pub through_link: Option<PathBuf>,
}

/// The change [`Edit::apply`] made to the settings file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The file already was as wanted.
    Unchanged,
    /// The file did not exist and was created.
    Created,
    /// The file was rewritten; the old text is in `backup`.
    Updated { backup: PathBuf },
    /// The file got the bytes of the backup it was made from (removed now).
    Restored { from: PathBuf },
    /// The file ktr created was removed: it is absent again, as before install.
    Removed,
}

impl Edit {
    /// Plan merging ktr's hooks (binaries in `bin_dir`) into `path`.
    pub fn merge(path: &Path, bin_dir: &Path, config: Option<&Path>) -> Result<Edit> {
        let before = read_optional(path)?;
        let wanted = wanted(bin_dir, config)?;
        let what = path.display().to_string();
        let after = merge(before.as_deref(), &what, &wanted)?;
        let (after, foreign) =
            merge_statusline(&after, &what, &wanted_statusline(bin_dir, config)?)?;
        Ok(Edit {
            note: foreign.map(|f| embed_hint(&f, bin_dir, config)),
            path: path.to_path_buf(),
            before,
            after: Some(after),
            restores: None,
        })
    }

    /// Plan setting only ktr's `statusLine` in `path`, for a household
    /// that runs ktr as a Claude Code plugin: Claude Code 2.1.328 takes no
    /// `statusLine` from a plugin (SPEC §13a), so the installer offers it
    /// here. The command is `ktr-statusline --plugin` (silent in a project
    /// ktr does not serve); [`Edit::unmerge`] takes it out again.
    pub fn merge_plugin_statusline(path: &Path, bin_dir: &Path) -> Result<Edit> {
        let before = read_optional(path)?;
        let what = path.display().to_string();
        let mut wanted = wanted_statusline(bin_dir, None)?;
        if let Some(Json::String(command)) = wanted.get_mut("command") {
            command.push_str(" --plugin");
        }
        let after = merge(before.as_deref(), &what, &[])?;
        let (after, foreign) = merge_statusline(&after, &what, &wanted)?;
        Ok(Edit {
            note: foreign.map(|f| embed_hint(&f, bin_dir, None)),
            path: path.to_path_buf(),
            before,
            after: Some(after),
            restores: None,
        })
    }

    /// Plan removing ktr's hooks from `path`. When the result is the same
    /// document as a ktr backup of this file (the state before install),
    /// that backup's exact bytes are used, so an install followed by an
    /// uninstall leaves the file byte-for-byte as it was; when the result
    /// is an empty document and no backup holds one, install created the
    /// file, and it is removed.
    pub fn unmerge(path: &Path) -> Result<Edit> {
        let before = read_optional(path)?;
        let wanted = wanted(Path::new("/"), None)?;
        let Some(text) = before.as_deref() else {
            return Ok(Edit {
                note: None,
                path: path.to_path_buf(),
                before,
                after: None,
                restores: None,
            });
        };
        let what = path.display().to_string();
        let after = unmerge(Some(text), &what, &events_of(&wanted))?;
        let after = unmerge_statusline(&after, &what)?;
        let (after, restores) = if after == text {
            (Some(after), None)
        } else if let Some((bytes, backup)) = original_backup(path, &after) {
            (Some(bytes), Some(backup))
        } else if is_empty_document(&after) {
            (None, None)
        } else {
            (Some(after), None)
        };
        Ok(Edit {
            note: None,
            path: path.to_path_buf(),
            before,
            after,
            restores,
        })
    }

    /// Whether applying would change the file.
    pub fn changes(&self) -> bool {
        self.before != self.after
    }

    /// A readable line diff of the change (empty when nothing changes).
    pub fn diff(&self) -> String {
        if !self.changes() {
            return String::new();
        }
        let path = self.path.display();
        let mut out = match (&self.before, &self.after) {
            (None, _) => format!("--- {path} (absent)\n+++ {path}\n"),
            (_, None) => format!("--- {path}\n+++ {path} (removed: install created it)\n"),
            _ => format!("--- {path}\n+++ {path}\n"),
        };
        out.push_str(&line_diff(
            self.before.as_deref().unwrap_or(""),
            self.after.as_deref().unwrap_or(""),
        ));
        out
    }

    /// Write the change. A merge first keeps a timestamped backup of the
    /// old file beside it, then writes the new text atomically with the old
    /// file's mode (0600 for a new file). An unmerge that restores a backup
    /// or the file's absence writes no backup of its own. Nothing is
    /// written when nothing changes.
    pub fn apply(&self) -> Result<Applied> {
        if !self.changes() {
            return Ok(Applied {
                change: Change::Unchanged,
                through_link: None,
            });
        }
        let target = link_target(&self.path)?;
        let written = target.as_deref().unwrap_or(&self.path);
        let Some(after) = &self.after else {
            // Install created the file (through the link, if any): remove
            // what it created; a link the user had stays as it was.
            fs::remove_file(written).map_err(|e| Error::io_at("remove", written, &e))?;
            return Ok(Applied {
                change: Change::Removed,
                through_link: target,
            });
        };
        let mode = match fs::metadata(&self.path) {
            Ok(m) => m.permissions().mode() & 0o7777,
            Err(_) => 0o600,
        };
        let change = match (&self.before, &self.restores) {
            (_, Some(from)) => Change::Restored { from: from.clone() },
            (Some(before), None) => {
                let backup = backup_path(&self.path);
                write_atomic(&backup, before.as_bytes(), mode, Existing::Refuse)?;
                Change::Updated { backup }
            }
            (None, None) => Change::Created,
        };
        if let Some(dir) = written.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(|e| Error::io_at("create", dir, &e))?;
        }
        write_atomic(written, after.as_bytes(), mode, Existing::Replace)?;
        if let Change::Restored { from } = &change {
            fs::remove_file(from).map_err(|e| Error::io_at("remove", from, &e))?;
        }
        Ok(Applied {
            change,
            through_link: target,
        })
    }
}

/// Whether a settings text is an object with nothing in it.
pub(super) fn is_empty_document(text: &str) -> bool {
    matches!(Json::parse(text), Ok(Json::Object(entries)) if entries.is_empty())
}

/// Where a write to `path` must go: `None` when `path` is not a symlink;
/// else the file the link (chain) names, so that the link itself is kept
/// (a dangling link names the file to create).
pub(super) fn link_target(path: &Path) -> Result<Option<PathBuf>> {
    let is_link = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if !is_link {
        return Ok(None);
    }
    if let Ok(real) = fs::canonicalize(path) {
        return Ok(Some(real));
    }
    let mut at = path.to_path_buf();
    for _ in 0..40 {
        let next = fs::read_link(&at).map_err(|e| Error::io_at("read link", &at, &e))?;
        at = match at.parent() {
            Some(dir) => dir.join(next),
            None => next,
        };
        if !fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return Ok(Some(at));
        }
    }
    Err(Error::refused(format!(
        "{} is a loop of symlinks; fix it by hand (nothing was changed)",
        path.display()
    )))
}

pub(super) fn read_optional(path: &Path) -> Result<Option<String>> {
    let bytes = read_capped(path, cap::SETTINGS, Links::Follow)
        .map_err(|e| Error::refused(format!("{}; nothing was changed", e.message)))?;
    bytes
        .map(|b| {
            String::from_utf8(b).map_err(|_| {
                Error::refused(format!(
                    "{} is not UTF-8 text; fix it by hand, then run again (nothing was changed)",
                    path.display()
                ))
            })
        })
        .transpose()
}

/// The prefix of backup file names: `<name>.ktr-backup-<UTC timestamp>`.
const BACKUP_MARK: &str = ".ktr-backup-";

pub(super) fn backup_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stamp: String = ktr_base::time::now_rfc3339()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    let base = path.with_file_name(format!("{name}{BACKUP_MARK}{stamp}"));
    let mut candidate = base.clone();
    let mut n = 1;
    while candidate.symlink_metadata().is_ok() {
        candidate = PathBuf::from(format!("{}-{n}", base.display()));
        n += 1;
    }
    candidate
}

/// The newest ktr backup of `path` that is the same document as `text`:
/// its exact bytes and its path.
pub(super) fn original_backup(path: &Path, text: &str) -> Option<(String, PathBuf)> {
    let doc = Json::parse(text).ok();
    let name = path.file_name()?.to_string_lossy().into_owned();
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let prefix = format!("{name}{BACKUP_MARK}");
    let mut backups: Vec<PathBuf> = fs::read_dir(&dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    backups.sort();
    backups.into_iter().rev().find_map(|b| {
        let bytes = fs::read_to_string(&b).ok()?;
        let same = match &doc {
            Some(doc) => Json::parse(&bytes).ok().as_ref() == Some(doc),
            None => bytes.trim().is_empty() && text.trim().is_empty(),
        };
        same.then_some((bytes, b))
    })
}

/// A small line diff (longest common subsequence; settings files are small):
/// changed lines with `-`/`+`, two lines of context around them.
pub fn line_diff(old: &str, new: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            ops.push((' ', a[i]));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push(('-', a[i]));
            i += 1;
        } else {
            ops.push(('+', b[j]));
            j += 1;
        }
    }
    let near_change = |k: usize| {
        let lo = k.saturating_sub(2);
        let hi = (k + 2).min(ops.len() - 1);
        ops[lo..=hi].iter().any(|(c, _)| *c != ' ')
    };
    let mut out = String::new();
    let mut skipped = false;
    for (k, (c, line)) in ops.iter().enumerate() {
        if near_change(k) {
            if skipped {
                out.push_str("@@\n");
                skipped = false;
            }
            let _ = writeln!(out, "{c} {line}");
        } else {
            skipped = true;
        }
    }
    out
}
