//! `ktr repair`: damaged operation files (truncated, edited, not regular)
//! are set aside into `state/damaged/`, never deleted, and `active` is
//! rebuilt from the operation files that remain.

use std::fs;
use std::path::PathBuf;

use super::store::Scanned;
use super::{Store, confirm};
use ktr_base::error::{Error, Result};
use ktr_base::fsutil::ensure_private_dir;
use ktr_base::time::now_rfc3339;

/// The damaged operation files and where they go
/// (`state/damaged/<name>.<UTC stamp>`). With `confirmation == Some("REPAIR")`
/// they are moved there under the lock; with `None` nothing moves.
pub fn set_damaged_aside(
    store: &Store,
    confirmation: Option<&str>,
) -> Result<Vec<(PathBuf, PathBuf)>> {
    if let Some(word) = confirmation {
        confirm(word, "REPAIR")?;
    }
    let aside = store.dir().join("damaged");
    let stamp: String = now_rfc3339()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    let plan = |scanned: Scanned| -> Vec<(PathBuf, PathBuf)> {
        scanned
            .damaged
            .into_iter()
            .map(|d| {
                let name = d.path.file_name().unwrap_or_default().to_string_lossy();
                let to = aside.join(format!("{name}.{stamp}"));
                (d.path, to)
            })
            .collect()
    };
    if confirmation.is_none() {
        return Ok(plan(store.scan()?));
    }
    store.with_lock(|tx| {
        let moves = plan(tx.store().scan()?);
        if !moves.is_empty() {
            ensure_private_dir(&aside, 0o700)?;
        }
        for (from, to) in &moves {
            fs::rename(from, to).map_err(|e| Error::io_at("move", from, &e))?;
        }
        // `active` is rebuilt from what remains.
        tx.rebuild_index()?;
        Ok(moves)
    })
}
