//! What the current window carries, as recall folds it: the items a
//! rebuild carried into the current session (unless it compacted since)
//! and the records of older sessions they came from — told by the caller
//! from the rebuilds' manifests (the source record each carried item came
//! from), never by comparing texts.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

use memchr::memmem;

use super::turn;

/// Bytes read at a time when looking for the last boundary from the end.
const CHUNK: usize = 1 << 20;

/// What of one file the current window carries.
#[derive(Debug, Clone, Default)]
pub struct Window {
    /// Records (by uuid) the window carries, each with the uuid of its
    /// copy in the current session (a carried item there: its own).
    pub carried: HashMap<String, String>,
}

impl Window {
    /// The window copy a record with `uuid` stands for, if the window
    /// carries it.
    pub(crate) fn key(&self, uuid: Option<&str>) -> Option<String> {
        self.carried.get(uuid?).cloned()
    }
}

/// The byte offset of the line holding the file's last compaction
/// boundary (a `system` record with subtype `compact_boundary`), read
/// backwards from the end in fixed chunks; 0 when there is none.
pub fn last_boundary(file: &File) -> std::io::Result<u64> {
    let needles = turn::pair("subtype", "\"compact_boundary\"");
    let overlap = needles.iter().map(String::len).max().unwrap_or(0);
    let len = file.metadata()?.len();
    let mut buf = vec![0u8; CHUNK + overlap];
    let mut end = len;
    while end > 0 {
        let start = end.saturating_sub(CHUNK as u64);
        let n = ((end - start) as usize + overlap).min((len - start) as usize);
        file.read_exact_at(&mut buf[..n], start)?;
        let found = needles
            .iter()
            .filter_map(|needle| memmem::rfind(&buf[..n], needle.as_bytes()))
            .max();
        if let Some(at) = found {
            return line_start(file, start + at as u64);
        }
        end = start;
    }
    Ok(0)
}

/// The offset of the line that holds byte `at`.
fn line_start(file: &File, at: u64) -> std::io::Result<u64> {
    let mut buf = vec![0u8; 64 << 10];
    let mut end = at;
    while end > 0 {
        let start = end.saturating_sub(buf.len() as u64);
        let n = (end - start) as usize;
        file.read_exact_at(&mut buf[..n], start)?;
        if let Some(nl) = memchr::memrchr(b'\n', &buf[..n]) {
            return Ok(start + nl as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}
