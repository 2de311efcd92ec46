//! What was wrong with a config: the typed value under each config error,
//! so that a caller (doctor's advice) decides by it, not by the words.

use std::fmt;
use std::path::PathBuf;

/// Why a config was refused. Its `Display` is the one line a person reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// There is no config file at `path`.
    Missing { path: PathBuf },
    /// The file is not UTF-8.
    NotUtf8 { path: PathBuf },
    /// The text is not TOML.
    NotToml { why: String },
    /// A key no row of `KEYS` declares; `close` is a declared one a typo away.
    UnknownKey {
        key: String,
        close: Option<&'static str>,
    },
    /// A required key is not set; `how` says what to set it to.
    Required {
        key: &'static str,
        how: &'static str,
    },
    /// A value of the wrong TOML type.
    WrongType {
        key: String,
        expected: &'static str,
        got: &'static str,
    },
    /// A value of the right type that breaks the key's rule.
    Rule { key: String, rule: String },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Missing { path } => write!(
                f,
                "cannot read config {}: it does not exist; create it (see README, Configuration) or pass --config PATH",
                path.display()
            ),
            ConfigError::NotUtf8 { path } => {
                write!(f, "config {} is not valid UTF-8", path.display())
            }
            ConfigError::NotToml { why } => write!(f, "not valid TOML: {why}"),
            ConfigError::UnknownKey { key, close } => {
                write!(f, "unknown key {key:?}")?;
                if let Some(close) = close {
                    write!(f, " (did you mean {close}?)")?;
                }
                f.write_str("; remove it or fix its spelling (README lists every key)")
            }
            ConfigError::Required { key, how } => write!(f, "{key} is required: {how}"),
            ConfigError::WrongType { key, expected, got } => {
                write!(f, "{key} must be {expected}, not {got}")
            }
            ConfigError::Rule { key, rule } => write!(f, "{key} {rule}"),
        }
    }
}

impl std::error::Error for ConfigError {}

impl From<ConfigError> for crate::Error {
    fn from(err: ConfigError) -> Self {
        crate::Error::typed(crate::ErrorKind::Config, err)
    }
}
