//! What surrounds a hit: the typed prompt of its turn, and on request the
//! records just before and after it — read once the hits are chosen, a
//! bounded window of the transcript on each side of the hit's record.

use std::fs::File;
use std::os::unix::fs::FileExt;

use serde::Serialize;

use super::record::{self, Kind};
use super::{Found, Hit, Search, Source};
use ktr_base::open::{Links, open_regular};

/// The most bytes read on each side of a hit for its context.
const SIDE_BYTES: usize = 1 << 20;
/// Records without a searchable text (file-only records) are skipped, at
/// most this many per record shown.
const SKIPPED_PER_RECORD: usize = 8;
/// Characters of a nearby record or a prompt shown.
const SHOWN_CHARS: usize = 200;

/// A record near a hit, on one line.
#[derive(Debug, Clone, Serialize)]
pub struct Nearby {
    pub line: u64,
    pub kind: Kind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    pub text: String,
}

/// Fill in the prompt (and, when asked for, the context) of every hit shown.
pub(crate) fn fill(sources: &[Source], s: &Search, found: &mut Found) {
    let hits = found
        .hits
        .iter_mut()
        .chain(found.carried.iter_mut().map(|c| &mut c.hit));
    for hit in hits {
        let Some(source) = sources.get(hit.source) else {
            continue;
        };
        let Ok(file) = open_regular(&source.path, Links::Refuse) else {
            continue;
        };
        if let Some(at) = hit.prompt_at
            && at != hit.offset
        {
            hit.prompt = prompt(&file, at);
        }
        if s.context > 0 && !hit.raw {
            hit.context = around(&file, hit, s.context);
        }
    }
}

/// The first text of the typed prompt at `at`.
fn prompt(file: &File, at: u64) -> Option<String> {
    let bytes = line_at(file, at)?;
    let value = record::decode(&bytes)?;
    record::parts(&value)
        .into_iter()
        .find(|p| p.kind == Kind::User)
        .map(|p| record::one_line(&p.text, SHOWN_CHARS))
}

/// The line starting at `at` (without its `\n`), if it fits the side
/// window (read in growing steps: a prompt is short).
fn line_at(file: &File, at: u64) -> Option<Vec<u8>> {
    let mut size = 64 << 10;
    loop {
        let mut buf = vec![0u8; size];
        let n = read_some_at(file, &mut buf, at);
        if let Some(end) = memchr::memchr(b'\n', &buf[..n]) {
            buf.truncate(end);
            return Some(buf);
        }
        if n < size {
            buf.truncate(n);
            return Some(buf);
        }
        if size >= SIDE_BYTES {
            return None;
        }
        size *= 4;
    }
}

fn read_some_at(file: &File, buf: &mut [u8], at: u64) -> usize {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], at + n as u64) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    n
}

/// Up to `n` records with a text before the hit's record and `n` after it.
fn around(file: &File, hit: &Hit, n: usize) -> Vec<Nearby> {
    let mut out = before(file, hit, n);
    out.extend(after(file, hit, n));
    out
}

fn before(file: &File, hit: &Hit, n: usize) -> Vec<Nearby> {
    let from = hit.offset.saturating_sub(SIDE_BYTES as u64);
    let mut buf = vec![0u8; (hit.offset - from) as usize];
    let got = read_some_at(file, &mut buf, from);
    buf.truncate(got);
    // Whole lines only: the first is cut unless the window starts the file.
    let mut lines: Vec<&[u8]> = buf.split(|&b| b == b'\n').collect();
    lines.pop(); // what follows the last `\n`: the hit's own record
    if from > 0 && !lines.is_empty() {
        lines.remove(0);
    }
    let mut out = Vec::new();
    for (back, line) in lines.iter().rev().enumerate().take(n * SKIPPED_PER_RECORD) {
        if let Some(near) = nearby(line, hit.line.saturating_sub(back as u64 + 1)) {
            out.push(near);
            if out.len() == n {
                break;
            }
        }
    }
    out.reverse();
    out
}

fn after(file: &File, hit: &Hit, n: usize) -> Vec<Nearby> {
    let mut buf = vec![0u8; SIDE_BYTES];
    let got = read_some_at(file, &mut buf, hit.offset);
    buf.truncate(got);
    let mut lines = buf.split(|&b| b == b'\n');
    lines.next(); // the hit's own record
    let mut out = Vec::new();
    for (ahead, line) in lines.enumerate().take(n * SKIPPED_PER_RECORD) {
        if let Some(near) = nearby(line, hit.line + ahead as u64 + 1) {
            out.push(near);
            if out.len() == n {
                break;
            }
        }
    }
    // The last line may be cut by the window: it is decoded only if whole.
    out
}

/// A record on one line: its first text, if it has one.
fn nearby(line: &[u8], number: u64) -> Option<Nearby> {
    let value = record::decode(line)?;
    let part = record::parts(&value)
        .into_iter()
        .find(|p| !p.text.is_empty())?;
    Some(Nearby {
        line: number,
        kind: part.kind,
        tool: part.tool.map(str::to_string),
        text: record::one_line(&part.text, SHOWN_CHARS),
    })
}
