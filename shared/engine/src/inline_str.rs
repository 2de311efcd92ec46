//! A short string kept inside the value that owns it.
//!
//! `ktr plan`'s report lists every record it leaves out with its uuid; a
//! capped plan of a months-long session leaves out hundreds of thousands.
//! A `String` each would be as many small allocations (flat
//! memory); inline, the list is one compact table. A string longer than a
//! uuid's room is boxed as usual.

use std::fmt;

/// Bytes kept inline: a uuid (36) with room to spare.
const ROOM: usize = 38;

/// A string, inline when it fits [`ROOM`] bytes.
#[derive(Clone, PartialEq, Eq)]
pub enum InlineStr {
    Short { len: u8, bytes: [u8; ROOM] },
    Long(Box<str>),
}

impl InlineStr {
    pub fn new(s: &str) -> InlineStr {
        match u8::try_from(s.len()) {
            Ok(len) if s.len() <= ROOM => {
                let mut bytes = [0; ROOM];
                bytes[..s.len()].copy_from_slice(s.as_bytes());
                InlineStr::Short { len, bytes }
            }
            _ => InlineStr::Long(s.into()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            // Copied from a `&str` whole: valid UTF-8.
            InlineStr::Short { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            InlineStr::Long(s) => s,
        }
    }
}

impl From<&str> for InlineStr {
    fn from(s: &str) -> InlineStr {
        InlineStr::new(s)
    }
}

impl fmt::Debug for InlineStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl serde::Serialize for InlineStr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for InlineStr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<InlineStr, D::Error> {
        let s = String::deserialize(d)?;
        Ok(InlineStr::new(&s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_strings_read_back_and_serialize_as_strings() {
        for s in [
            "",
            "é",
            "0b7f8a52-1c55-4a8e-9d0e-3f1c2b6a7e90",
            &"x".repeat(39),
            &"語".repeat(20),
        ] {
            let i = InlineStr::new(s);
            assert_eq!(i.as_str(), s);
            let json = serde_json::to_string(&i).unwrap();
            assert_eq!(json, serde_json::to_string(s).unwrap());
            assert_eq!(serde_json::from_str::<InlineStr>(&json).unwrap(), i);
        }
        assert!(matches!(
            InlineStr::new(&"x".repeat(38)),
            InlineStr::Short { .. }
        ));
        assert!(matches!(
            InlineStr::new(&"x".repeat(39)),
            InlineStr::Long(_)
        ));
        assert!(std::mem::size_of::<InlineStr>() <= 40);
    }
}
