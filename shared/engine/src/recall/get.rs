//! `get`: one hit whole, in pages of at most [`PAGE_BYTES`] bytes — a
//! record's texts (each headed by its kind; images as type and size), or
//! an offloaded file's text. A record too large to decode here is paged
//! as its raw JSON.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use super::record;
use ktr_base::open::{Links, open_regular};
use ktr_base::{Error, Result};

/// The largest page, in bytes (a page ends on a character boundary, so it
/// may hold up to 3 bytes less).
pub const PAGE_BYTES: usize = 16_000;
/// A record up to this size is decoded; a larger one is paged raw.
const DECODED_MAX: u64 = 8 << 20;

/// One page of a hit.
#[derive(Debug, Serialize)]
pub struct Page {
    pub page: u32,
    pub pages: u32,
    /// Whether the text is the record's raw JSON (too large to decode).
    pub raw: bool,
    pub text: String,
}

/// Page `page` of the record that starts at `offset` of the transcript `path`.
pub fn record(path: &Path, offset: u64, page: u32) -> Result<Page> {
    let mut file = open(path)?;
    let len = file
        .metadata()
        .map_err(|e| Error::io_at("read", path, &e))?
        .len();
    if offset >= len || !starts_a_line(&file, offset) {
        return Err(Error::not_found(format!(
            "no record starts at byte {offset} of {}; take the id from a recall hit",
            path.display()
        )));
    }
    let line_len = line_length(&mut file, offset).map_err(|e| Error::io_at("read", path, &e))?;
    if line_len > DECODED_MAX {
        return raw_page(&file, path, offset, line_len, page);
    }
    let mut bytes = vec![0u8; line_len as usize];
    file.read_exact_at(&mut bytes, offset)
        .map_err(|e| Error::io_at("read", path, &e))?;
    let value: Value = record::decode(&bytes).ok_or_else(|| {
        Error::io(format!(
            "the record at byte {offset} of {} is not JSON",
            path.display()
        ))
    })?;
    drop(bytes);
    paged(&rendered(&value), page, false)
}

/// Page `page` of a whole text file (an offloaded tool result).
pub fn text_file(path: &Path, page: u32) -> Result<Page> {
    let file = open(path)?;
    let len = file
        .metadata()
        .map_err(|e| Error::io_at("read", path, &e))?
        .len();
    raw_page(&file, path, 0, len, page)
}

fn open(path: &Path) -> Result<File> {
    open_regular(path, Links::Refuse).map_err(|e| Error::io_at("read", path, &e))
}

fn starts_a_line(file: &File, offset: u64) -> bool {
    let mut before = [0u8; 1];
    offset == 0 || (file.read_exact_at(&mut before, offset - 1).is_ok() && before[0] == b'\n')
}

/// The length of the line at `offset` (without its `\n`), read in chunks.
fn line_length(file: &mut File, offset: u64) -> std::io::Result<u64> {
    file.seek(SeekFrom::Start(offset))?;
    let mut buf = vec![0u8; 64 << 10];
    let mut len = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(len);
        }
        if let Some(nl) = memchr::memchr(b'\n', &buf[..n]) {
            return Ok(len + nl as u64);
        }
        len += n as u64;
    }
}

/// A record's texts, each headed by its kind (and tool).
fn rendered(value: &Value) -> String {
    let mut out = String::new();
    if let Some(at) = record::timestamp(value) {
        out.push_str(&format!("[{at}]\n"));
    }
    for part in record::parts(value) {
        out.push_str(&format!("── {}", part.kind.name()));
        if let Some(tool) = part.tool {
            out.push_str(&format!(" {tool}"));
        }
        out.push('\n');
        out.extend(part.text.chars().map(record::visible));
        out.push_str("\n\n");
    }
    out
}

/// Page `page` of a text held in memory.
fn paged(text: &str, page: u32, raw: bool) -> Result<Page> {
    let bounds = page_bounds(text.as_bytes(), page)
        .ok_or_else(|| no_page(page, pages_of(text.len() as u64)))?;
    Ok(Page {
        page,
        pages: pages_of(text.len() as u64),
        raw,
        text: text[bounds.0..bounds.1].to_string(),
    })
}

/// Page `page` of `len` bytes at `offset` of a file, read directly.
fn raw_page(file: &File, path: &Path, offset: u64, len: u64, page: u32) -> Result<Page> {
    let pages = pages_of(len);
    if page >= pages {
        return Err(no_page(page, pages));
    }
    let from = u64::from(page) * PAGE_BYTES as u64;
    let n = (len - from).min(PAGE_BYTES as u64 + 4) as usize;
    let mut buf = vec![0u8; n];
    file.read_exact_at(&mut buf, offset + from)
        .map_err(|e| Error::io_at("read", path, &e))?;
    let at_end = from + n as u64 >= len;
    let (start, end) = char_window(&buf, at_end);
    Ok(Page {
        page,
        pages,
        raw: true,
        text: String::from_utf8_lossy(&buf[start..end]).into_owned(),
    })
}

fn pages_of(len: u64) -> u32 {
    len.div_ceil(PAGE_BYTES as u64).max(1) as u32
}

fn no_page(page: u32, pages: u32) -> Error {
    Error::not_found(format!(
        "there is no page {page}: this hit has pages 0 to {}",
        pages - 1
    ))
}

/// Byte bounds of page `page`: its nominal window moved forward to
/// character boundaries (a character split by a page edge goes to the
/// page it starts on).
fn page_bounds(bytes: &[u8], page: u32) -> Option<(usize, usize)> {
    let from = page as usize * PAGE_BYTES;
    if from >= bytes.len() && !(from == 0 && bytes.is_empty()) {
        return None;
    }
    let forward = |mut at: usize| {
        while at < bytes.len() && (bytes[at] & 0xC0) == 0x80 {
            at += 1;
        }
        at.min(bytes.len())
    };
    Some((forward(from), forward((from + PAGE_BYTES).min(bytes.len()))))
}

/// The same rule on a window read from a file (`PAGE_BYTES + 4` bytes, or
/// fewer at the end).
fn char_window(buf: &[u8], at_end: bool) -> (usize, usize) {
    let skip = |mut at: usize| {
        while at < buf.len() && (buf[at] & 0xC0) == 0x80 {
            at += 1;
        }
        at
    };
    let end = if at_end {
        buf.len()
    } else {
        skip(PAGE_BYTES.min(buf.len()))
    };
    (skip(0), end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_cut_on_character_boundaries_and_lose_nothing() {
        let text = "中".repeat(PAGE_BYTES); // 3 bytes each
        let mut joined = String::new();
        let pages = pages_of(text.len() as u64);
        for p in 0..pages {
            let page = paged(&text, p, false).unwrap();
            assert!(page.text.len() <= PAGE_BYTES + 3);
            joined.push_str(&page.text);
        }
        assert_eq!(joined, text);
        assert!(
            paged(&text, pages, false)
                .unwrap_err()
                .message
                .contains("no page")
        );
    }
}
