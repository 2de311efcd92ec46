//! The one error type of the library. Every message is one line that says
//! what is wrong and what to do about it; the kind decides the exit code.

use std::fmt;
use std::path::Path;

/// What class of failure this is; decides the process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Wrong command-line words (exit 2).
    Usage,
    /// Something named does not exist, e.g. an operation id (exit 2).
    NotFound,
    /// Configuration missing or invalid (exit 2).
    Config,
    /// A check refused the work (blocked plan, refused operation) (exit 1).
    Refused,
    /// The file system or a process failed (exit 1).
    Io,
    /// Another ktr process holds the coordinator lock (exit 1): try again.
    Busy,
    /// A write found no room: the file system is full (`ENOSPC`), a quota
    /// is reached (`EDQUOT`) or the file size limit (`EFBIG`, `ulimit -f`)
    /// (exit 1).
    NoSpace,
}

/// A one-line, actionable error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

/// Result alias used across the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Usage, message)
    }
    pub fn config(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Config, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }
    pub fn refused(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Refused, message)
    }
    pub fn io(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Io, message)
    }
    pub fn busy(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Busy, message)
    }
    /// An I/O error on `path`, with what was being attempted ([`ErrorKind::NoSpace`]
    /// when there was no room for it).
    pub fn io_at(action: &str, path: &Path, err: &std::io::Error) -> Self {
        let kind = if out_of_space(err) {
            ErrorKind::NoSpace
        } else {
            ErrorKind::Io
        };
        Self::new(kind, format!("cannot {action} {}: {err}", path.display()))
    }

    /// Whether a write found no room ([`ErrorKind::NoSpace`]).
    pub fn is_no_space(&self) -> bool {
        self.kind == ErrorKind::NoSpace
    }

    fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        // Keep the promise of one line: fold any newline a source put in.
        let message = message.into().replace(['\n', '\r'], " ");
        Self { kind, message }
    }

    /// The process exit code for this error (see README, "Exit codes").
    pub fn exit_code(&self) -> i32 {
        match self.kind {
            ErrorKind::Usage | ErrorKind::NotFound | ErrorKind::Config => 2,
            ErrorKind::Refused | ErrorKind::Io | ErrorKind::Busy | ErrorKind::NoSpace => 1,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// Whether `err` says there is no room to write: a full file system, a
/// quota, or the file size limit.
pub fn out_of_space(err: &std::io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG)
    )
}
