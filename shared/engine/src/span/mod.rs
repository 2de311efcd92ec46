//! Long strings are spans of the file they were read from.
//!
//! A string value of [`LONG`] raw bytes or more (a pasted 100 MB log, a
//! huge tool result) is never held. Reading its line ([`skeleton`]), ktr
//! decodes it once as it streams by ([`decode`]) to learn its [`Facts`]
//! (length, token counts, head, digest) and puts a short *token* in its
//! place; the rest of the engine parses and classifies that small
//! skeleton as usual. A token names the text by its SHA-256, so the same
//! text read from two files (the backup, the candidate) gives the same
//! token. Whatever needs the text itself reads it again from its file a
//! chunk at a time ([`for_each_chunk`]), and the candidate writer copies
//! its raw escaped bytes from the source ([`expand_json`]): the candidate
//! keeps the source's own escaping.
//!
//! Such a text is opaque to classification: nothing is stripped from
//! inside it (an injected element Claude Code puts there is small and
//! comes in its own text). The table of tokens is per thread: a plan runs
//! on one thread, from its scan to its candidate.

pub mod decode;
pub mod skeleton;

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, OnceLock};

use sha2::{Digest as _, Sha256};

use crate::counts::Counts;
use ktr_base::error::{Error, Result};

/// A string value of this many raw bytes or more is a span. A line shorter
/// than this cannot hold one, and is read whole.
pub const LONG: usize = 1 << 20;

/// Decoded bytes of a span's text kept as its head (prefix checks, previews).
const HEAD: usize = 4096;

/// Raw bytes read from a file at a time.
const CHUNK: usize = 1 << 16;

/// Bytes a span can be read again from.
pub trait ReadAt: Send + Sync {
    /// `pread(2)`: up to `buf.len()` bytes at `offset`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize>;
}

impl ReadAt for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        FileExt::read_at(self, buf, offset)
    }
}

impl ReadAt for Vec<u8> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.len());
        let n = buf.len().min(self.len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }
}

/// Where a span's raw bytes (inside its quotes) are.
#[derive(Clone)]
pub struct Source {
    pub file: Arc<dyn ReadAt>,
    pub at: u64,
    pub len: u64,
}

/// What is known of a span's decoded text without holding it.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub counts: Counts,
    /// Decoded bytes.
    pub bytes: u64,
    /// Raw bytes inside the quotes.
    pub raw_len: u64,
    /// Only whitespace.
    pub blank: bool,
    /// The first [`HEAD`] bytes (cut at a character).
    pub head: String,
    pub digest: [u8; 32],
    /// The digest of the text after its first line, when that line ends
    /// within the head (a stamp line, see `conserve`).
    pub after_first_line: Option<[u8; 32]>,
    pub marks: Marks,
}

/// Characters worth counting in the plan report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Marks {
    /// A lone surrogate (its stand-in, [`crate::lone`]).
    pub lone: bool,
    /// A NUL.
    pub nul: bool,
}

impl Marks {
    fn of(s: &str) -> Marks {
        Marks {
            lone: memchr::memchr(0xF4, s.as_bytes()).is_some()
                && s.chars().any(crate::lone::is_stand_in),
            nul: memchr::memchr(0, s.as_bytes()).is_some(),
        }
    }

    fn or(self, o: Marks) -> Marks {
        Marks {
            lone: self.lone || o.lone,
            nul: self.nul || o.nul,
        }
    }
}

/// [`Facts`] of a text fed in decoded pieces.
pub(crate) struct FactsBuilder {
    facts: Facts,
    all: Sha256,
    after: Option<Sha256>,
}

impl Default for FactsBuilder {
    fn default() -> FactsBuilder {
        FactsBuilder {
            facts: Facts {
                blank: true,
                ..Facts::default()
            },
            all: Sha256::new(),
            after: None,
        }
    }
}

impl FactsBuilder {
    pub fn push(&mut self, s: &str) {
        let f = &mut self.facts;
        f.counts = f.counts + Counts::of(s);
        f.marks = f.marks.or(Marks::of(s));
        f.blank &= s.chars().all(char::is_whitespace);
        self.all.update(s.as_bytes());
        if let Some(after) = &mut self.after {
            after.update(s.as_bytes());
        } else if f.bytes < HEAD as u64
            && let Some(nl) = s.find('\n')
            && f.bytes + (nl as u64) < HEAD as u64
        {
            let mut after = Sha256::new();
            after.update(&s.as_bytes()[nl + 1..]);
            self.after = Some(after);
        }
        if f.head.len() < HEAD {
            let mut cut = (HEAD - f.head.len()).min(s.len());
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            f.head.push_str(&s[..cut]);
        }
        f.bytes += s.len() as u64;
    }

    pub fn finish(mut self, raw_len: u64) -> Facts {
        self.facts.raw_len = raw_len;
        self.facts.digest = self.all.finalize().into();
        self.facts.after_first_line = self.after.map(|a| a.finalize().into());
        self.facts
    }
}

struct Entry {
    facts: Facts,
    source: Option<Source>,
}

thread_local! {
    static TABLE: RefCell<HashMap<[u8; 32], Entry>> = RefCell::new(HashMap::new());
}

/// This process's mark in every token: text from a file cannot pass for one.
fn nonce() -> &'static str {
    static NONCE: OnceLock<String> = OnceLock::new();
    NONCE.get_or_init(|| uuid::Uuid::new_v4().simple().to_string()[..16].to_string())
}

fn prefix() -> String {
    format!("\0ktr-span:{}:", nonce())
}

/// `prefix` as `serde_json` escapes it inside a string.
fn json_prefix() -> String {
    format!("\\u0000ktr-span:{}:", nonce())
}

/// The token of the text with `digest`.
fn token(digest: &[u8; 32]) -> String {
    format!("{}{}\0", prefix(), ktr_base::digest::hex(digest))
}

/// Keep `facts` (and where to read the text again, if known: the latest
/// reading's file, the one being planned or checked); returns the token
/// that stands for the text.
pub fn register(facts: Facts, source: Option<Source>) -> String {
    let token = token(&facts.digest);
    TABLE.with_borrow_mut(|t| {
        let entry = t.entry(facts.digest).or_insert(Entry {
            facts,
            source: None,
        });
        if source.is_some() {
            entry.source = source;
        }
    });
    token
}

/// Forget every span of this thread (a new plan starts: the table does
/// not grow with every plan a long-lived process makes).
pub(crate) fn forget_all() {
    TABLE.with_borrow_mut(HashMap::clear);
}

fn facts_of(digest: &[u8; 32]) -> Option<Facts> {
    TABLE.with_borrow(|t| t.get(digest).map(|e| e.facts.clone()))
}

fn source_of(digest: &[u8; 32]) -> Result<Source> {
    TABLE
        .with_borrow(|t| t.get(digest).and_then(|e| e.source.clone()))
        .ok_or_else(|| Error::io("a long text can no longer be read from its file"))
}

/// A piece of a text: its own bytes, or a span's token.
enum Part<'t> {
    Text(&'t str),
    Span([u8; 32]),
}

fn unhex(hex: &[u8]) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    for (i, pair) in hex.chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).ok()?;
        *out.get_mut(i)? = u8::from_str_radix(s, 16).ok()?;
    }
    (hex.len() == 64).then_some(out)
}

/// The parts of `text`, tokens found by `prefix` and ended by `end`.
fn parts_with<'t>(text: &'t str, prefix: &str, end: &str) -> Vec<Part<'t>> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = memchr::memmem::find(rest.as_bytes(), prefix.as_bytes()) {
        let hex_at = at + prefix.len();
        let digest = rest
            .get(hex_at..hex_at + 64)
            .filter(|_| rest[hex_at + 64..].starts_with(end))
            .and_then(|h| unhex(h.as_bytes()));
        let Some(digest) = digest else {
            break; // not a token after all: plain text
        };
        if at > 0 {
            out.push(Part::Text(&rest[..at]));
        }
        out.push(Part::Span(digest));
        rest = &rest[hex_at + 64 + end.len()..];
    }
    if !rest.is_empty() {
        out.push(Part::Text(rest));
    }
    out
}

fn parts(text: &str) -> Vec<Part<'_>> {
    parts_with(text, &prefix(), "\0")
}

/// Whether no span is known on this thread: then no text holds a token,
/// and nothing needs searching for one (a file of lines shorter than
/// [`LONG`], the common case).
fn none_known() -> bool {
    TABLE.with_borrow(HashMap::is_empty)
}

/// Whether `text` holds a token (cheap tests first: any span known, a NUL).
pub fn has(text: &str) -> bool {
    !none_known()
        && memchr::memchr(0, text.as_bytes()).is_some()
        && memchr::memmem::find(text.as_bytes(), prefix().as_bytes()).is_some()
}

/// `acc` folded over the parts of `text`: its own pieces as they are, each
/// token by its facts.
fn fold<T>(text: &str, acc: T, own: impl Fn(T, &str) -> T, span: impl Fn(T, &Facts) -> T) -> T {
    parts(text).into_iter().fold(acc, |acc, part| match part {
        Part::Text(t) => own(acc, t),
        Part::Span(d) => span(acc, &facts_of(&d).unwrap_or_default()),
    })
}

/// Decoded bytes of `text`, spans included.
pub fn bytes(text: &str) -> u64 {
    if !has(text) {
        return text.len() as u64;
    }
    fold(text, 0, |n, t| n + t.len() as u64, |n, f| n + f.bytes)
}

/// Token-estimate counts of `text`, spans included.
pub fn counts(text: &str) -> Counts {
    if !has(text) {
        return Counts::of(text);
    }
    fold(
        text,
        Counts::default(),
        |c, t| c + Counts::of(t),
        |c, f| c + f.counts,
    )
}

/// Whether `text` is only whitespace, spans included.
pub fn blank(text: &str) -> bool {
    fold(
        text,
        true,
        |b, t| b && t.trim().is_empty(),
        |b, f| b && f.blank,
    )
}

/// The [`Marks`] of the decoded `text`, spans included.
pub fn marks(text: &str) -> Marks {
    if !has(text) {
        return Marks::of(text);
    }
    fold(
        text,
        Marks::default(),
        |m, t| m.or(Marks::of(t)),
        |m, f| m.or(f.marks),
    )
}

/// `text` with each span replaced by its head: for prefix checks and
/// previews (the text itself when it holds no span).
pub fn head(text: &str) -> Cow<'_, str> {
    if !has(text) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(fold(
        text,
        String::new(),
        |out, t| out + t,
        |out, f| out + &f.head,
    ))
}

/// Call `f` with the decoded text of `text` a piece at a time: its own
/// pieces as they are, each span read again from its file.
pub fn for_each_chunk(text: &str, f: &mut dyn FnMut(&str) -> Result<()>) -> Result<()> {
    for part in parts(text) {
        match part {
            Part::Text(t) => f(t)?,
            Part::Span(d) => decode_source(&source_of(&d)?, f)?,
        }
    }
    Ok(())
}

/// Read `source` again and decode it into `f`.
fn decode_source(source: &Source, f: &mut dyn FnMut(&str) -> Result<()>) -> Result<()> {
    let mut decoder = decode::Decoder::default();
    let mut failed = None;
    let mut sink = |s: &str| {
        if failed.is_none()
            && let Err(e) = f(s)
        {
            failed = Some(e);
        }
    };
    let changed = || Error::io("a long text reads differently now: its file changed");
    raw_chunks(source, &mut |raw| {
        decoder.feed(raw, &mut sink).map_err(|_| changed())
    })?;
    decoder.finish(&mut sink).map_err(|_| changed())?;
    failed.map_or(Ok(()), Err)
}

/// The raw bytes of `source`, a chunk at a time.
fn raw_chunks(source: &Source, f: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
    let mut buf = vec![0u8; CHUNK];
    let mut done = 0u64;
    while done < source.len {
        let want = usize::try_from(source.len - done).map_or(CHUNK, |n| n.min(CHUNK));
        let n = source
            .file
            .read_at(&mut buf[..want], source.at + done)
            .map_err(|e| Error::io(format!("cannot read a long text again: {e}")))?;
        if n == 0 {
            return Err(Error::io("a long text's file is shorter now"));
        }
        f(&buf[..n])?;
        done += n as u64;
    }
    Ok(())
}

/// SHA-256 (hex) of the decoded `text`, spans read again as needed.
pub fn sha256(text: &str) -> Result<String> {
    if !has(text) {
        return Ok(ktr_base::digest::sha256_hex(text.as_bytes()));
    }
    if let [Part::Span(d)] = parts(text).as_slice() {
        return Ok(ktr_base::digest::hex(d));
    }
    let mut h = Sha256::new();
    for_each_chunk(text, &mut |s| {
        h.update(s.as_bytes());
        Ok(())
    })?;
    Ok(ktr_base::digest::hex(&h.finalize()))
}

/// A text held as its own pieces and the places its spans are read from:
/// the frozen startup text (`startup_snapshot.txt`), which may be huge and
/// is written after the plan, on another thread than the span table's.
#[derive(Clone, Default)]
pub struct Frozen {
    parts: Vec<FrozenPart>,
}

#[derive(Clone)]
enum FrozenPart {
    Text(String),
    Span(Source),
}

impl std::fmt::Debug for Frozen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frozen")
            .field("parts", &self.parts.len())
            .finish()
    }
}

impl Frozen {
    /// `text` (which may hold tokens of this thread's spans), frozen.
    pub fn of(text: &str) -> Result<Frozen> {
        let mut parts = Vec::new();
        if has(text) {
            for part in self::parts(text) {
                parts.push(match part {
                    Part::Text(t) => FrozenPart::Text(t.to_string()),
                    Part::Span(d) => FrozenPart::Span(source_of(&d)?),
                });
            }
        } else {
            parts.push(FrozenPart::Text(text.to_string()));
        }
        Ok(Frozen { parts })
    }

    /// Call `f` with the decoded text a piece at a time (on any thread).
    pub fn for_each_chunk(&self, f: &mut dyn FnMut(&str) -> Result<()>) -> Result<()> {
        for part in &self.parts {
            match part {
                FrozenPart::Text(t) => f(t)?,
                FrozenPart::Span(source) => decode_source(source, f)?,
            }
        }
        Ok(())
    }

    /// The decoded text, whole (a bounded text only: tests).
    pub fn expand(&self) -> Result<String> {
        let mut out = String::new();
        self.for_each_chunk(&mut |s| {
            out.push_str(s);
            Ok(())
        })?;
        Ok(out)
    }
}

/// The decoded `text`, whole (a bounded text only; the startup snapshot
/// is [`Frozen`], streamed).
pub fn expand(text: &str) -> Result<String> {
    if !has(text) {
        return Ok(text.to_string());
    }
    let mut out = String::new();
    for_each_chunk(text, &mut |s| {
        out.push_str(s);
        Ok(())
    })?;
    Ok(out)
}

/// `text` for the conservation check's comparisons: after each token, the
/// token of its text after the first line (the candidate's text of a
/// stamped item is the stamp line, then the source's text).
pub(crate) fn comparable(text: String) -> String {
    if !has(&text) {
        return text;
    }
    let mut out = String::with_capacity(text.len() * 2);
    for part in parts(&text) {
        match part {
            Part::Text(t) => out.push_str(t),
            Part::Span(d) => {
                out.push_str(&token(&d));
                if let Some(after) = facts_of(&d).and_then(|f| f.after_first_line) {
                    out.push_str(&token(&after));
                }
            }
        }
    }
    out
}

/// The length `raw` (JSON text from a skeleton) had in its file: each
/// token counted as the string it stands for.
pub(crate) fn json_len(raw: &str) -> usize {
    if none_known() || memchr::memmem::find(raw.as_bytes(), b"\\u0000ktr-span:").is_none() {
        return raw.len();
    }
    parts_with(raw, &json_prefix(), "\\u0000")
        .iter()
        .map(|p| match p {
            Part::Text(t) => t.len(),
            Part::Span(d) => {
                usize::try_from(facts_of(d).map_or(0, |f| f.raw_len)).unwrap_or(usize::MAX)
            }
        })
        .sum()
}

/// Write `json` (a candidate line) through `out`, each token replaced by
/// the raw escaped bytes of its text, copied from the source a chunk at a
/// time.
pub fn expand_json(json: &str, out: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
    if none_known() || memchr::memmem::find(json.as_bytes(), b"\\u0000ktr-span:").is_none() {
        return out(json.as_bytes());
    }
    for part in parts_with(json, &json_prefix(), "\\u0000") {
        match part {
            Part::Text(t) => out(t.as_bytes())?,
            Part::Span(d) => raw_chunks(&source_of(&d)?, out)?,
        }
    }
    Ok(())
}

/// How many matches of `pattern` the decoded `text` holds. A span is
/// searched a window at a time, each window overlapping the one before by
/// [`OVERLAP`] bytes: a match longer than that across two windows may be
/// missed (the poison check's phrases are short).
pub(crate) fn count_matches(text: &str, pattern: &regex::Regex) -> Result<usize> {
    if !has(text) {
        return Ok(pattern.find_iter(text).count());
    }
    let mut window = String::new();
    let mut hits = 0;
    // Matches starting before `cut` are counted; the window then starts there.
    let mut count = |window: &mut String, cut: usize| {
        hits += pattern
            .find_iter(window)
            .filter(|m| m.start() < cut)
            .count();
        window.drain(..cut.min(window.len()));
    };
    for_each_chunk(text, &mut |s| {
        window.push_str(s);
        if window.len() >= CHUNK + OVERLAP {
            let cut = floor(&window, window.len() - OVERLAP);
            count(&mut window, cut);
        }
        Ok(())
    })?;
    let all = window.len() + 1;
    count(&mut window, all);
    Ok(hits)
}

/// Bytes one window of [`count_matches`] shares with the next.
const OVERLAP: usize = 4096;

fn floor(s: &str, mut at: usize) -> usize {
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// The characters of the decoded `text`: how many, the first `keep` and
/// the last `keep` (elision), read a piece at a time.
pub fn ends(text: &str, keep: usize) -> Result<(usize, String, String)> {
    let mut count = 0;
    let mut head = String::new();
    let mut tail: std::collections::VecDeque<char> = std::collections::VecDeque::new();
    for_each_chunk(text, &mut |s| {
        for c in s.chars() {
            if count < keep {
                head.push(c);
            }
            count += 1;
            tail.push_back(c);
            if tail.len() > keep {
                tail.pop_front();
            }
        }
        Ok(())
    })?;
    Ok((count, head, tail.into_iter().collect()))
}
