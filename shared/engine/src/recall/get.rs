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

/// The largest page, in bytes (a page ends after a line end when it holds
/// one, else on a character boundary, so it may hold less).
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
    let bytes = text.as_bytes();
    let spans = spans(bytes.len() as u64, |from, buf| {
        let n = buf.len().min(bytes.len() - from as usize);
        buf[..n].copy_from_slice(&bytes[from as usize..from as usize + n]);
        Ok(n)
    })?;
    let pages = spans.len() as u32;
    let &(from, to) = spans
        .get(page as usize)
        .ok_or_else(|| no_page(page, pages))?;
    Ok(Page {
        page,
        pages,
        raw,
        text: text[from as usize..to as usize].to_string(),
    })
}

/// Page `page` of `len` bytes at `offset` of a file, read directly.
fn raw_page(file: &File, path: &Path, offset: u64, len: u64, page: u32) -> Result<Page> {
    let spans = file_spans(file, path, offset, len)?;
    let pages = spans.len() as u32;
    let &(from, to) = spans
        .get(page as usize)
        .ok_or_else(|| no_page(page, pages))?;
    let mut buf = vec![0u8; (to - from) as usize];
    file.read_exact_at(&mut buf, offset + from)
        .map_err(|e| Error::io_at("read", path, &e))?;
    Ok(Page {
        page,
        pages,
        raw: true,
        text: String::from_utf8_lossy(&buf).into_owned(),
    })
}

/// The page of an offloaded file `path` that holds byte `at`.
pub(crate) fn page_of(path: &Path, at: u64) -> Option<u32> {
    let file = open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let spans = file_spans(&file, path, 0, len).ok()?;
    let page = spans.iter().position(|&(_, to)| at < to)?;
    u32::try_from(page).ok()
}

fn file_spans(file: &File, path: &Path, offset: u64, len: u64) -> Result<Vec<(u64, u64)>> {
    spans(len, |from, buf| {
        let n = buf.len().min((len - from) as usize);
        file.read_exact_at(&mut buf[..n], offset + from)
            .map_err(|e| Error::io_at("read", path, &e))?;
        Ok(n)
    })
}

fn no_page(page: u32, pages: u32) -> Error {
    Error::not_found(format!(
        "there is no page {page}: this hit has pages 0 to {}",
        pages - 1
    ))
}

/// Where each page of `len` bytes starts and ends: at most
/// [`PAGE_BYTES`], ending after the last line end inside it (else on the
/// last character boundary), so no page cuts a line it could hold whole
/// nor a character. `read(from, buf)` fills `buf` from byte `from`.
fn spans(
    len: u64,
    mut read: impl FnMut(u64, &mut [u8]) -> Result<usize>,
) -> Result<Vec<(u64, u64)>> {
    let mut spans = Vec::new();
    let mut buf = vec![0u8; PAGE_BYTES];
    let mut from = 0u64;
    while from < len {
        let n = read(from, &mut buf)?;
        let end = if from + n as u64 >= len {
            n
        } else {
            cut(&buf[..n])
        };
        spans.push((from, from + end as u64));
        from += end as u64;
    }
    if spans.is_empty() {
        spans.push((0, 0));
    }
    Ok(spans)
}

/// Where a full page window ends: after its last `\n`, else before the
/// character its end splits (never nothing: a window of continuation bytes
/// is cut at its end).
fn cut(window: &[u8]) -> usize {
    if let Some(nl) = memchr::memrchr(b'\n', window) {
        return nl + 1;
    }
    let mut at = window.len();
    while at > 0 && (window[at - 1] & 0xC0) == 0x80 {
        at -= 1;
    }
    // `at - 1` holds the last character's first byte.
    let Some(lead) = at.checked_sub(1).filter(|&l| l > 0).map(|l| window[l]) else {
        return window.len();
    };
    let need = match lead {
        0xF0.. => 4,
        0xE0.. => 3,
        0xC0.. => 2,
        _ => 1,
    };
    if window.len() - (at - 1) < need {
        return at - 1;
    }
    window.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_cut_on_character_boundaries_and_lose_nothing() {
        let text = "中".repeat(PAGE_BYTES); // 3 bytes each
        let mut joined = String::new();
        let pages = paged(&text, 0, false).unwrap().pages;
        for p in 0..pages {
            let page = paged(&text, p, false).unwrap();
            assert!(page.text.len() <= PAGE_BYTES);
            assert_eq!(page.pages, pages);
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

#[cfg(test)]
mod line_tests {
    use super::*;

    #[test]
    fn pages_end_on_line_ends_and_utf8_boundaries() {
        // Lines of 1,000 bytes (中 and ASCII): no page ends inside one.
        let line = format!("{}{}\n", "中".repeat(300), "x".repeat(99));
        let text = line.repeat(50);
        let first = paged(&text, 0, false).unwrap();
        let mut joined = String::new();
        for p in 0..first.pages {
            let page = paged(&text, p, false).unwrap();
            assert!(page.text.len() <= PAGE_BYTES);
            assert!(page.text.ends_with('\n'), "page {p} cuts a line");
            joined.push_str(&page.text);
        }
        assert_eq!(joined, text);
        // One line longer than a page: cut on a character boundary.
        let long = "日本".repeat(PAGE_BYTES);
        let page = paged(&long, 0, false).unwrap();
        assert!(page.text.len() <= PAGE_BYTES && page.text.len() > PAGE_BYTES - 4);
    }
}
