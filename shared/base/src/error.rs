//! The one error type of the library. Every message is one line that says
//! what is wrong and what to do about it; the kind decides the exit code.
//!
//! What a caller decides by is never the message: each layer puts its own
//! typed value under the error ([`Error::because`]) — which config key was
//! wrong, which verification check failed — and a caller asks for it by
//! type ([`Error::find`]). That value is the error's `source()`, and an OS
//! error stays under an I/O error the same way.

use std::error::Error as StdError;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

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

/// The typed value under an error: shared, so that errors stay `Clone`.
type Detail = Arc<dyn StdError + Send + Sync + 'static>;

/// A one-line, actionable error.
#[derive(Debug, Clone)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    /// The typed value a caller decides by, or the cause (see the module).
    detail: Option<Detail>,
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
    /// when there was no room for it); the OS error is its `source()`.
    pub fn io_at(action: &str, path: &Path, err: &std::io::Error) -> Self {
        let kind = if out_of_space(err) {
            ErrorKind::NoSpace
        } else {
            ErrorKind::Io
        };
        // `io::Error` is not `Clone`: keep what identifies it.
        let cause = match err.raw_os_error() {
            Some(code) => std::io::Error::from_raw_os_error(code),
            None => std::io::Error::new(err.kind(), err.to_string()),
        };
        Self::new(kind, format!("cannot {action} {}: {err}", path.display())).because(cause)
    }

    /// A typed value of the `kind` its layer chose: the message is what the
    /// value says, and the value is kept for callers ([`Error::find`]).
    pub fn typed(kind: ErrorKind, detail: impl StdError + Send + Sync + 'static) -> Self {
        Self::new(kind, detail.to_string()).because(detail)
    }

    /// This error, with `detail` under it: the typed value callers decide
    /// by, or the cause. It becomes the error's `source()`.
    pub fn because(mut self, detail: impl StdError + Send + Sync + 'static) -> Self {
        self.detail = Some(Arc::new(detail));
        self
    }

    /// The nearest value of type `T` under this error (its chain of
    /// `source()`s), e.g. `err.find::<ConfigError>()`.
    pub fn find<T: StdError + 'static>(&self) -> Option<&T> {
        let mut next = self.source();
        while let Some(err) = next {
            if let Some(found) = err.downcast_ref::<T>() {
                return Some(found);
            }
            next = err.source();
        }
        None
    }

    /// Whether a write found no room ([`ErrorKind::NoSpace`]).
    pub fn is_no_space(&self) -> bool {
        self.kind == ErrorKind::NoSpace
    }

    fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        // Keep the promise of one line: fold any newline a source put in.
        let message = message.into().replace(['\n', '\r'], " ");
        Self {
            kind,
            message,
            detail: None,
        }
    }

    /// The process exit code for this error (see README, "Exit codes").
    pub fn exit_code(&self) -> i32 {
        match self.kind {
            ErrorKind::Usage | ErrorKind::NotFound | ErrorKind::Config => 2,
            ErrorKind::Refused | ErrorKind::Io | ErrorKind::Busy | ErrorKind::NoSpace => 1,
        }
    }
}

/// Two errors are equal when a person reads the same: kind and message.
impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.message == other.message
    }
}

impl Eq for Error {}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.detail
            .as_deref()
            .map(|d| d as &(dyn StdError + 'static))
    }
}

/// Whether `err` says there is no room to write: a full file system, a
/// quota, or the file size limit.
pub(crate) fn out_of_space(err: &std::io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Which(u8);
    impl fmt::Display for Which {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "check {}", self.0)
        }
    }
    impl StdError for Which {}

    #[test]
    fn a_typed_value_is_found_through_layers_and_the_message_stays_one_line() {
        let inner = Error::typed(ErrorKind::Refused, Which(3));
        assert_eq!(inner.message, "check 3");
        let outer = Error::refused(format!("stage: {}\nmore", inner.message)).because(inner);
        assert_eq!(outer.message, "stage: check 3 more");
        assert_eq!(outer.find::<Which>().map(|w| w.0), Some(3));
        assert!(Error::refused("x").find::<Which>().is_none());
        assert!(outer.source().is_some());
    }

    #[test]
    fn an_io_error_keeps_the_os_error_as_its_source() {
        let err = std::io::Error::from_raw_os_error(libc::ENOSPC);
        let e = Error::io_at("write", Path::new("/x"), &err);
        assert!(e.is_no_space());
        let os = e.find::<std::io::Error>().unwrap();
        assert_eq!(os.raw_os_error(), Some(libc::ENOSPC));
    }
}
