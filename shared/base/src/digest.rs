//! SHA-256: of bytes, of a file streamed, of an open file's prefix; and the
//! digest as the operation file keeps it, 64 lower-case hex characters. Made only by hashing (or by a checked parse), and checked
//! when deserialized, so an edited operation file with a bad digest is
//! refused at load, naming the field. Serialized as the plain hex string
//! (the file format is unchanged).

use std::fmt;
use std::fs::File;
use std::io;
use std::path::Path;

use std::io::Read;

use serde::{Deserialize, Deserializer, Serialize};
use sha2::Digest as _;

use crate::error::{Error, Result};
use crate::open::{Links, open_regular};

/// Lower-case hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
}

/// SHA-256 of bytes, as lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&sha2::Sha256::digest(bytes))
}

/// SHA-256 of a file's content, streamed, as lower-case hex. Only a
/// regular file is read, never through a symlink as the last component
/// (every file ktr digests is named by a resolved path).
pub fn sha256_file(path: &Path) -> Result<String> {
    sha256_file_with(path, |_| {})
}

/// [`sha256_file`], handing every chunk read to `each` as well (one read
/// serves another measure of the file).
pub fn sha256_file_with(path: &Path, mut each: impl FnMut(&[u8])) -> Result<String> {
    let mut file = open_regular(path, Links::Refuse).map_err(|e| Error::io_at("read", path, &e))?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| Error::io_at("read", path, &e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        each(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

/// SHA-256 of the first `len` bytes of an open file, read with `pread` (the
/// file's offset is left to a concurrent reader). Returns the digest and
/// how many bytes there were (fewer than `len` if the file shrank).
pub fn sha256_prefix(file: &File, len: u64) -> io::Result<(String, u64)> {
    use std::os::unix::fs::FileExt;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut at = 0u64;
    while at < len {
        let want = usize::try_from((len - at).min(buf.len() as u64)).unwrap_or(buf.len());
        let n = file.read_at(&mut buf[..want], at)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        at += n as u64;
    }
    Ok((hex(&hasher.finalize()), at))
}

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
        Sha256(sha256_hex(bytes))
    }

    /// The digest of a file's content ([`sha256_file`]).
    pub fn of_file(path: &Path) -> Result<Sha256> {
        sha256_file(path).map(Sha256)
    }

    /// The digest of an open file's first `len` bytes and how many there
    /// were ([`sha256_prefix`]).
    pub fn of_prefix(file: &File, len: u64) -> io::Result<(Sha256, u64)> {
        sha256_prefix(file, len).map(|(hex, n)| (Sha256(hex), n))
    }

    /// The digest a streaming hasher arrived at.
    pub fn of_hasher(hasher: sha2::Sha256) -> Sha256 {
        Sha256(hex(&hasher.finalize()))
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
    fn hex_and_digest_match_known_vector() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

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
