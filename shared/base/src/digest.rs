//! SHA-256 digests as the operation file keeps them: 64 lower-case hex
//! characters. Made only by hashing (or by a checked parse), and checked
//! when deserialized, so an edited operation file with a bad digest is
//! refused at load, naming the field. Serialized as the plain hex string
//! (the file format is unchanged).

use std::fmt;
use std::fs::File;
use std::io;
use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize};
use sha2::Digest as _;

use crate::error::{Error, Result};
use crate::fsutil;

/// A SHA-256 digest in lower-case hex.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Sha256(String);

impl Sha256 {
    /// Accept only what a hash of ours looks like.
    pub fn parse(text: &str) -> Result<Sha256> {
        let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
        if text.len() == 64 && text.bytes().all(hex) {
            Ok(Sha256(text.to_string()))
        } else {
            let shown: String = text.chars().take(80).collect();
            Err(Error::usage(format!(
                "invalid sha256 {shown:?}: expected 64 lower-case hex characters"
            )))
        }
    }

    /// The digest of `bytes`.
    pub fn of_bytes(bytes: &[u8]) -> Sha256 {
        Sha256(fsutil::sha256_hex(bytes))
    }

    /// The digest of a file's content ([`fsutil::sha256_file`]).
    pub fn of_file(path: &Path) -> Result<Sha256> {
        fsutil::sha256_file(path).map(Sha256)
    }

    /// The digest of an open file's first `len` bytes and how many there
    /// were ([`fsutil::sha256_prefix`]).
    pub fn of_prefix(file: &File, len: u64) -> io::Result<(Sha256, u64)> {
        fsutil::sha256_prefix(file, len).map(|(hex, n)| (Sha256(hex), n))
    }

    /// The digest a streaming hasher arrived at.
    pub fn of_hasher(hasher: sha2::Sha256) -> Sha256 {
        Sha256(fsutil::hex(&hasher.finalize()))
    }

    /// The digest as hex.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Its first 12 characters, for a message.
    pub fn short(&self) -> &str {
        &self.0[..12]
    }
}

/// The digest of no bytes: what an empty artifact hashes to.
impl Default for Sha256 {
    fn default() -> Sha256 {
        Sha256::of_bytes(b"")
    }
}

impl fmt::Display for Sha256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for Sha256 {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<String> for Sha256 {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl PartialEq<Sha256> for String {
    fn eq(&self, other: &Sha256) -> bool {
        *self == other.0
    }
}

impl From<Sha256> for String {
    fn from(digest: Sha256) -> String {
        digest.0
    }
}

impl<'de> Deserialize<'de> for Sha256 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Sha256::parse(&s).map_err(|e| serde::de::Error::custom(e.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_64_lower_case_hex_characters_read_as_a_digest() {
        let good = Sha256::of_bytes(b"ktr");
        assert_eq!(Sha256::parse(good.as_str()).unwrap(), good);
        let json = serde_json::to_string(&good).unwrap();
        assert_eq!(json, format!("\"{good}\""), "the file keeps the plain hex");
        assert_eq!(serde_json::from_str::<Sha256>(&json).unwrap(), good);
        for bad in [
            String::new(),
            "abc".into(),
            good.as_str().to_uppercase(),
            format!("{good}0"),
            format!("g{}", &good.as_str()[1..]),
        ] {
            let err = Sha256::parse(&bad).unwrap_err();
            assert!(err.message.starts_with("invalid sha256"), "{bad:?}: {err}");
            let json = serde_json::to_string(&bad).unwrap();
            assert!(serde_json::from_str::<Sha256>(&json).is_err(), "{bad:?}");
        }
        assert_eq!(
            Sha256::default().as_str(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
