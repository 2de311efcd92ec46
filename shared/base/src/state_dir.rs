//! ktr's state dir is ktr's own folder. Purge, prune and the hooks remove
//! what ktr wrote there, so a `state_dir` that is a person's folder (their
//! home, `/`, the project folder) would lose their files. The rule:
//!
//! - a state dir ktr creates gets a marker file ([`MARKER`]) at once;
//! - `$HOME`, `/`, any folder holding `$HOME` or the project folder (or the
//!   project folder itself) is refused, marker or not;
//! - an existing folder without the marker is taken only when everything
//!   in it has one of ktr's own names ([`NAMES`], the resume pointer's
//!   name, an atomic write's temp name of one of them): the state dirs of
//!   installs made before the marker existed; the marker is written then.
//!   Anything else in it is refused with one line.
//!
//! [`check`] only looks (config load, read-only commands); [`claim`]
//! creates or adopts (before ktr writes anything there).

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};
use crate::fsutil::{ensure_private_dir, sync_dir};

/// The marker file: ktr created (or adopted) this folder.
pub const MARKER: &str = ".ktr-state-dir";
/// What the marker holds (a marker with other content is not ktr's).
const MARKER_TEXT: &str =
    "ktr state dir: every name in this folder is ktr's; ktr purge removes them\n";

/// What ktr writes under one of its names: a folder or a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Folder,
    File,
}

/// The names ktr itself creates directly inside its state dir, and their
/// form: the operations and their artifacts, damaged state set aside, the
/// window caches, prompts kept for a paste-back, the key keeper's files,
/// Claude Code's session bindings, the lineage links prune kept, the logs
/// and the locks. (`ktr-pipeline` names some of them where it writes them;
/// a test in `ktr-admin` keeps both equal.)
pub const NAMES: &[(&str, Form)] = &[
    ("operations", Form::Folder),
    ("artifacts", Form::Folder),
    ("damaged", Form::Folder),
    ("window", Form::Folder),
    ("prompts", Form::Folder),
    ("keep", Form::Folder),
    ("claude", Form::Folder),
    ("locks", Form::Folder),
    ("lineage.jsonl", Form::File),
    ("active", Form::File),
    ("ktr.log", Form::File),
    ("worker.log", Form::File),
    ("coordinator.lock", Form::File),
    ("active.lock", Form::File),
];

/// The resume pointer's default name: the default config puts it in the
/// default state dir.
const DEFAULT_POINTER: &str = "resume_session";

/// Where the state dir stands: the folders it must not be or hold.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    pub home: &'a Path,
    /// The project folder, when known (config load).
    pub project: Option<&'a Path>,
    /// The resume pointer's file name when it lies in the state dir.
    pub pointer: Option<&'a str>,
}

/// Why `dir` cannot be ktr's state dir, in one line; `Ok` when it can
/// (it does not exist yet, carries the marker, or holds only ktr's names).
/// Reads only: never writes.
pub fn check(dir: &Path, place: Place<'_>) -> Result<()> {
    forbidden(dir, place)?;
    match fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io_at("inspect", dir, &e)),
        Ok(m) if !m.is_dir() => {
            return Err(refusal(dir, "is not a directory"));
        }
        Ok(_) => {}
    }
    if marked(dir) {
        return Ok(());
    }
    match foreign_entry(dir, place.pointer)? {
        None => Ok(()),
        Some(name) => Err(refusal(
            dir,
            &format!(
                "holds {name:?}, which ktr did not make, and no {MARKER} marker: ktr deletes what it writes there, so it needs a folder of its own"
            ),
        )),
    }
}

/// [`check`], then create `dir` (0700) or adopt it, writing the marker
/// when it is missing. Call before writing anything into the state dir.
pub fn claim(dir: &Path, place: Place<'_>) -> Result<()> {
    check(dir, place)?;
    ensure_private_dir(dir, 0o700)?;
    if marked(dir) {
        return Ok(());
    }
    let path = dir.join(MARKER);
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .and_then(|mut f| f.write_all(MARKER_TEXT.as_bytes()).and(f.sync_all()));
    match written {
        Ok(()) => sync_dir(dir).map_err(|e| Error::io_at("sync", dir, &e)),
        // Another ktr process wrote it meanwhile (several sessions at once:
        // it may still be writing the text).
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && marked_within(dir) => Ok(()),
        Err(e) => Err(Error::io_at("write", &path, &e)),
    }
}

/// The place of a state dir as the hooks know it: `$HOME` only.
pub fn place_of_home(home: &Path) -> Place<'_> {
    Place {
        home,
        project: None,
        pointer: None,
    }
}

/// [`marked`], waiting up to a second for a marker another process has
/// created but not yet written.
fn marked_within(dir: &Path) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        if marked(dir) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Whether `dir` carries ktr's marker: a regular file (no link) with
/// ktr's text.
pub fn marked(dir: &Path) -> bool {
    let path = dir.join(MARKER);
    let Ok(bytes) = crate::open::read_capped(&path, 4096, crate::open::Links::Refuse) else {
        return false;
    };
    bytes.is_some_and(|b| b == MARKER_TEXT.as_bytes())
}

/// Whether `name` is one ktr writes directly in its state dir.
pub(crate) fn is_own_name(name: &str, pointer: Option<&str>) -> bool {
    let own = |n: &str| {
        n == MARKER
            || NAMES.iter().any(|(own, _)| *own == n)
            || n == DEFAULT_POINTER
            || pointer == Some(n)
    };
    own(name) || temp_of(name).is_some_and(own)
}

/// The name an atomic write's temp file stands for (`.NAME.<12 hex>.tmp`).
fn temp_of(name: &str) -> Option<&str> {
    let inner = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (base, unique) = inner.rsplit_once('.')?;
    (unique.len() == 12 && unique.bytes().all(|b| b.is_ascii_hexdigit())).then_some(base)
}

/// The first entry of `dir` that is not one of ktr's names.
fn foreign_entry(dir: &Path, pointer: Option<&str>) -> Result<Option<String>> {
    let entries = fs::read_dir(dir).map_err(|e| Error::io_at("list", dir, &e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io_at("list", dir, &e))?;
        let name = entry.file_name();
        match name.to_str() {
            Some(n) if is_own_name(n, pointer) => {}
            _ => return Ok(Some(name.to_string_lossy().into_owned())),
        }
    }
    Ok(None)
}

/// `/`, `$HOME`, a folder holding `$HOME` or the project folder, or the
/// project folder itself.
fn forbidden(dir: &Path, place: Place<'_>) -> Result<()> {
    let dir_forms = forms(dir);
    let holds = |inner: &Path| {
        forms(inner)
            .iter()
            .any(|i| dir_forms.iter().any(|d| i.starts_with(d)))
    };
    if dir_forms.iter().any(|d| d.parent().is_none()) {
        return Err(refusal(dir, "is the root folder"));
    }
    if holds(place.home) {
        return Err(refusal(
            dir,
            &format!("is your home folder {} or holds it", place.home.display()),
        ));
    }
    if let Some(project) = place.project
        && holds(project)
    {
        return Err(refusal(
            dir,
            &format!("is the project folder {} or holds it", project.display()),
        ));
    }
    Ok(())
}

/// A path as written (`.` and `..` resolved by name) and, when it exists,
/// as the file system resolves it (symlinks).
fn forms(path: &Path) -> Vec<PathBuf> {
    let mut lexical = PathBuf::new();
    for c in std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .components()
    {
        match c {
            Component::ParentDir => {
                lexical.pop();
            }
            Component::CurDir => {}
            other => lexical.push(other),
        }
    }
    let mut out = vec![lexical];
    if let Ok(real) = path.canonicalize() {
        out.push(real);
    }
    out
}

fn refusal(dir: &Path, why: &str) -> Error {
    Error::config(format!(
        "state_dir {} {why}; set state_dir to a folder of ktr's own (the default ~/.local/state/ktr)",
        dir.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(home: &Path) -> Place<'_> {
        place_of_home(home)
    }

    #[test]
    fn home_root_and_their_holders_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("h");
        let project = home.join(".claude/projects/-w");
        fs::create_dir_all(&project).unwrap();
        let with_project = Place {
            home: &home,
            project: Some(&project),
            pointer: None,
        };
        for dir in [
            PathBuf::from("/"),
            home.clone(),
            tmp.path().to_path_buf(),
            home.join("x/.."),
            home.join(".claude"),
            project.clone(),
        ] {
            let err = check(&dir, with_project).unwrap_err();
            assert!(err.message.starts_with("state_dir "), "{dir:?}: {err}");
            assert!(!dir.join(MARKER).exists());
        }
        assert!(check(&home.join(".local/state/ktr"), with_project).is_ok());
    }

    #[test]
    fn several_processes_claiming_a_new_state_dir_at_once_all_succeed() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("h");
        for round in 0..100 {
            let dir = tmp.path().join(format!("state{round}"));
            let start = std::sync::Barrier::new(4);
            std::thread::scope(|s| {
                let claims: Vec<_> = (0..4)
                    .map(|_| {
                        s.spawn(|| {
                            start.wait();
                            claim(&dir, place(&home))
                        })
                    })
                    .collect();
                for c in claims {
                    c.join().unwrap().unwrap();
                }
            });
            assert!(marked(&dir));
        }
    }

    #[test]
    fn a_folder_of_ktr_names_is_adopted_and_any_other_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("h");
        let old = tmp.path().join("old");
        fs::create_dir_all(old.join("operations")).unwrap();
        fs::write(old.join("ktr.log"), "").unwrap();
        fs::write(old.join(".active.0123456789ab.tmp"), "").unwrap();
        claim(&old, place(&home)).unwrap();
        assert!(marked(&old));
        let shared = tmp.path().join("shared");
        fs::create_dir_all(shared.join("claude")).unwrap();
        fs::write(shared.join("thesis.tex"), "mine").unwrap();
        let err = claim(&shared, place(&home)).unwrap_err();
        assert!(err.message.contains("\"thesis.tex\""), "{err}");
        assert!(!shared.join(MARKER).exists());
        // Once marked, what else lands there is ktr's business.
        fs::write(old.join("notes.md"), "x").unwrap();
        check(&old, place(&home)).unwrap();
        let fresh = tmp.path().join("new/state");
        claim(&fresh, place(&home)).unwrap();
        assert!(marked(&fresh));
    }
}
