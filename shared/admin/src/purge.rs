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
use ktr_base::state_dir::{self, Form, MARKER};
use ktr_pipeline::operation::Store;

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

/// ktr's own entries of the state dir, each only in the form ktr writes
/// it (a folder or a regular file; a symlink, or a file where ktr makes a
/// folder, is named and left alone), the resume pointer when it lies
/// there, and last the marker.
fn own_files(state_dir: &Path, config: &Config, purge: &mut Purge) {
    let pointer = config
        .resume_pointer_path
        .parent()
        .filter(|p| *p == state_dir)
        .and(config.resume_pointer_path.file_name())
        .and_then(|n| n.to_str());
    let names = state_dir::NAMES
        .iter()
        .copied()
        .chain(pointer.map(|n| (n, Form::File)))
        .chain([(MARKER, Form::File)]);
    for (name, form) in names {
        let path = state_dir.join(name);
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        let (what, bytes) = match form {
            Form::Folder if meta.is_dir() => ("folder", tree_bytes(&path)),
            Form::File if meta.is_file() => ("file", meta.len()),
            _ => {
                purge.kept.push((
                    path,
                    format!(
                        "not the {} ktr writes there (a symlink?): left alone",
                        if form == Form::Folder {
                            "folder"
                        } else {
                            "regular file"
                        }
                    ),
                ));
                continue;
            }
        };
        purge.files.push(Doomed { path, what, bytes });
    }
}

#[cfg(test)]
mod tests {
    use ktr_base::state_dir::NAMES;
    use ktr_pipeline::operation::{KEYS_DIR, LOCKS_DIR};
    use ktr_pipeline::recall::lineage::LINKS_FILE;
    use ktr_pipeline::{binding, prompt_back};

    /// The names the pipeline writes under are the ones the state dir
    /// rule and purge know.
    #[test]
    fn the_pipeline_writes_only_names_the_state_dir_rule_knows() {
        for name in [
            prompt_back::DIR,
            KEYS_DIR,
            LOCKS_DIR,
            binding::DIR,
            LINKS_FILE,
        ] {
            assert!(NAMES.iter().any(|(n, _)| *n == name), "{name}");
        }
    }
}
