//! `ktr purge`: what uninstalling leaves behind, and removing it.
//!
//! ktr keeps copies of the conversation: the frozen backups under
//! `artifacts/`, the operation files, the logs, the window caches, the
//! prompts and keys kept for a person, the lineage links and the resume
//! pointer in the state dir, and in `project_dir` the candidates it
//! wrote. Purge removes ktr's own files from the state dir (by name: never
//! anything else that happens to live there, never through a symlink) and
//! the candidates that were never activated and are still byte for byte
//! what ktr wrote ([`crate::prune::leftover_candidate`]'s rules). It never
//! touches a source transcript or the transcript of a session that ran.
//! Nothing is removed while an operation is in flight.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::prune::{Doomed, leftover_candidate, remove, tree_bytes};
use ktr_base::config::Config;
use ktr_base::error::{Error, Result};
use ktr_pipeline::operation::{KEYS_DIR, Store};
use ktr_pipeline::recall::lineage::LINKS_FILE;
use ktr_pipeline::{binding, prompt_back};

/// The names ktr itself creates directly inside its state dir: the
/// operations and their artifacts, damaged state set aside, the window
/// caches, prompts kept for a paste-back (text a person typed), the key
/// keeper's files (keys a person typed), Claude Code's session bindings,
/// the lineage links prune kept, the logs and the lock.
const OWN: &[&str] = &[
    "operations",
    "artifacts",
    "damaged",
    "window",
    prompt_back::DIR,
    KEYS_DIR,
    binding::DIR,
    LINKS_FILE,
    "active",
    "ktr.log",
    "worker.log",
    "coordinator.lock",
];

/// What purge removes (or would), and what it leaves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Purge {
    /// false: a dry run, nothing was removed.
    pub deleted: bool,
    pub state_dir: PathBuf,
    pub files: Vec<Doomed>,
    /// Everything left on disk that holds the conversation, with why.
    pub kept: Vec<(PathBuf, String)>,
    pub bytes: u64,
}

/// Decide, and remove when `delete`, under the coordinator lock.
pub fn purge(store: &Store, config: &Config, delete: bool) -> Result<Purge> {
    let state_dir = store.dir().to_path_buf();
    let mut purge = store.with_lock(|tx| {
        let ops = tx.store().list()?;
        if let Some(op) = ops.iter().find(|o| !o.status.is_terminal()) {
            return Err(Error::refused(format!(
                "operation {} is {}: cancel it or let it finish before purging",
                op.id, op.status
            )));
        }
        let mut purge = Purge {
            deleted: delete,
            state_dir: state_dir.clone(),
            files: Vec::new(),
            kept: Vec::new(),
            bytes: 0,
        };
        for op in &ops {
            match leftover_candidate(op, &ops, config, false) {
                Ok(Some(doomed)) => purge.files.push(doomed),
                Ok(None) => {}
                Err(why) => purge.kept.push((
                    op.candidate
                        .as_ref()
                        .map_or(PathBuf::new(), |c| c.path.clone()),
                    why,
                )),
            }
        }
        own_files(&state_dir, config, &mut purge);
        purge.bytes = purge.files.iter().map(|f| f.bytes).sum();
        if delete {
            for doomed in &purge.files {
                remove(doomed)?;
            }
        }
        Ok(purge)
    })?;
    if delete {
        // The lock file went with the rest; an empty state dir goes too.
        match fs::remove_dir(&state_dir) {
            Ok(()) => {}
            Err(_) if !state_dir.exists() => {}
            Err(_) => purge.kept.push((
                state_dir.clone(),
                "not empty: it holds files ktr did not make".into(),
            )),
        }
    }
    Ok(purge)
}

/// ktr's own entries of the state dir, each a real file or folder (a
/// symlink is named and left alone), and the resume pointer when it lies
/// there.
fn own_files(state_dir: &Path, config: &Config, purge: &mut Purge) {
    let pointer = config
        .resume_pointer_path
        .parent()
        .filter(|p| *p == state_dir)
        .and(config.resume_pointer_path.file_name());
    for name in OWN.iter().copied().chain(pointer.and_then(|n| n.to_str())) {
        let path = state_dir.join(name);
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        let what = if meta.is_dir() {
            "folder"
        } else if meta.is_file() {
            "file"
        } else {
            purge.kept.push((
                path,
                "not a regular file or folder (a symlink?): left alone".into(),
            ));
            continue;
        };
        purge.files.push(Doomed {
            bytes: if meta.is_dir() {
                tree_bytes(&path)
            } else {
                meta.len()
            },
            path,
            what,
        });
    }
}
