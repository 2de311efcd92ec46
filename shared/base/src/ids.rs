//! Identifiers that end up in file names: operation ids (ours) and session
//! ids (Claude Code's). Both validate when parsed *and* when deserialized,
//! so an edited operation file cannot smuggle `../` into a path.

use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::{Error, Result};

/// An operation id: a UUID v4 we made, `[0-9a-f-]`, 1 to 64 characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Default)]
#[serde(transparent)]
pub struct OperationId(String);

/// A Claude Code session id: letters, digits, `-` or `_`, 1 to 128 characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct SessionId(String);

impl OperationId {
    /// A fresh random id.
    pub fn new_random() -> OperationId {
        OperationId(uuid::Uuid::new_v4().to_string())
    }

    /// Reject ids that could not have come from us before they touch a path.
    pub fn parse(id: &str) -> Result<OperationId> {
        validate(
            id,
            64,
            |b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b) || b == b'-',
            "operation id",
            "lower-case hex and dashes (see `ktr ops`)",
        )
        .map(OperationId)
    }
}

impl SessionId {
    /// A fresh random session id (UUID v4), as Claude Code makes them.
    pub fn new_random() -> SessionId {
        SessionId(uuid::Uuid::new_v4().to_string())
    }

    /// Session ids come from Claude Code and end up in file names: be strict.
    pub fn parse(id: &str) -> Result<SessionId> {
        validate(
            id,
            128,
            |b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_',
            "session id",
            "letters, digits, - or _",
        )
        .map(SessionId)
    }

    /// The session a transcript (or its backup) is named after:
    /// `<session id>.jsonl`.
    pub fn of_transcript(path: &std::path::Path) -> Result<SessionId> {
        let stem = path.file_stem().unwrap_or_default().to_string_lossy();
        SessionId::parse(&stem)
    }
}

/// `name` is 1 to `max` bytes, each `allowed`; else a usage error naming
/// `what` it is and the `expected` characters.
fn validate(
    name: &str,
    max: usize,
    allowed: impl Fn(u8) -> bool,
    what: &str,
    expected: &str,
) -> Result<String> {
    if (1..=max).contains(&name.len()) && name.bytes().all(allowed) {
        Ok(name.to_string())
    } else {
        Err(Error::usage(format!(
            "invalid {what} {:?}: expected {expected}",
            truncate(name, 80)
        )))
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Deref, Display, `PartialEq<str>` and validating Deserialize for both.
macro_rules! id_type {
    ($ty:ident) => {
        impl $ty {
            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl Deref for $ty {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<std::path::Path> for $ty {
            fn as_ref(&self) -> &std::path::Path {
                self.0.as_ref()
            }
        }

        impl AsRef<str> for $ty {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl PartialEq<str> for $ty {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<String> for $ty {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$ty> for String {
            fn eq(&self, other: &$ty) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$ty> for &str {
            fn eq(&self, other: &$ty) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$ty> for str {
            fn eq(&self, other: &$ty) -> bool {
                self == other.0
            }
        }

        impl PartialEq<&str> for $ty {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl From<$ty> for String {
            fn from(id: $ty) -> String {
                id.0
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                $ty::parse(&s).map_err(|e| serde::de::Error::custom(e.message))
            }
        }
    };
}

id_type!(OperationId);
id_type!(SessionId);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_refuse_path_tricks_when_parsed_and_when_deserialized() {
        for bad in ["", "../x", "a/b", "a\0b", &"a".repeat(200)] {
            assert!(SessionId::parse(bad).is_err(), "{bad:?}");
            assert!(OperationId::parse(bad).is_err(), "{bad:?}");
            let json = serde_json::to_string(bad).unwrap();
            assert!(serde_json::from_str::<SessionId>(&json).is_err());
            assert!(serde_json::from_str::<OperationId>(&json).is_err());
        }
        assert!(OperationId::parse("0e20afc1-aa").is_ok());
        assert!(OperationId::parse("ABC").is_err());
        assert!(SessionId::parse("agent_A-1").is_ok());
        let id: SessionId = serde_json::from_str("\"abc-1\"").unwrap();
        assert_eq!(id, "abc-1");
    }
}
