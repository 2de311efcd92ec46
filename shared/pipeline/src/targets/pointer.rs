//! A pointer file naming the session a `claude -p --resume` loop uses
//! (SPEC §12): its identity is the content, a switch rewrites it.

use std::fs;
use std::path::{Path, PathBuf};

use ktr_base::error::{Error, Result};
use ktr_base::fsutil::{Existing, ensure_private_dir, write_atomic};
use ktr_base::ids::SessionId;

/// A pointer file naming the session a `claude -p --resume` loop uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    pub path: PathBuf,
}

impl Pointer {
    pub(super) fn read(&self) -> Result<String> {
        match fs::read_to_string(&self.path) {
            Ok(text) => Ok(text.trim().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
            Err(e) => Err(Error::io_at("read pointer", &self.path, &e)),
        }
    }
}

/// Atomically write `session_id` into a pointer file (0600), creating its
/// directory (0700) if it does not exist yet.
pub(super) fn write_pointer(path: &Path, session_id: &SessionId) -> Result<()> {
    if let Some(parent) = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty() && !p.exists())
    {
        ensure_private_dir(parent, 0o700)?;
    }
    write_atomic(
        path,
        format!("{session_id}\n").as_bytes(),
        0o600,
        Existing::Replace,
    )
}
