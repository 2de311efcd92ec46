//! The second read of a planned transcript.
//!
//! The scan keeps no text: each speech event remembers where its line is
//! ([`LineRef`]) and how it was read ([`Via`]). When selection or the
//! candidate writer needs a text, the line is read again from the same
//! frozen bytes and read the same way, so memory holds one record at a
//! time whatever the size of the conversation. A line that no longer reads
//! as it did (the bytes changed between the two reads) is an error, never a
//! silently different candidate.

use std::borrow::Cow;
use std::cell::{OnceCell, RefCell};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::classify::{self, AssistantReading, UserReading};
use crate::scan::{self, Event, LineRef, Meta, Options, Speech, Via};
use crate::span::ReadAt;
use crate::transcript::{self, Attachment, Content, Line, Record};
use ktr_base::error::{Error, Result};

/// Bytes a plan can read again at an offset: the open transcript, or a
/// slice (tests, fuzzing).
pub trait Bytes {
    /// Fill `buf` with exactly the bytes of `at`.
    fn read_at(&self, at: LineRef, buf: &mut Vec<u8>) -> std::io::Result<()>;
    /// The bytes as the span table keeps them, to read a long text again
    /// while the candidate is written ([`crate::span`]).
    fn shared(&self) -> std::io::Result<Arc<dyn ReadAt>>;
}

impl Bytes for File {
    fn read_at(&self, at: LineRef, buf: &mut Vec<u8>) -> std::io::Result<()> {
        let len = usize::try_from(at.len).map_err(std::io::Error::other)?;
        buf.clear();
        buf.resize(len, 0);
        self.read_exact_at(buf, at.offset)
    }

    fn shared(&self) -> std::io::Result<Arc<dyn ReadAt>> {
        Ok(Arc::new(self.try_clone()?))
    }
}

impl Bytes for &[u8] {
    fn read_at(&self, at: LineRef, buf: &mut Vec<u8>) -> std::io::Result<()> {
        let range = usize::try_from(at.offset)
            .ok()
            .zip(usize::try_from(at.offset + at.len).ok())
            .and_then(|(start, end)| self.get(start..end))
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
        buf.clear();
        buf.extend_from_slice(range);
        Ok(())
    }

    fn shared(&self) -> std::io::Result<Arc<dyn ReadAt>> {
        Ok(Arc::new(self.to_vec()))
    }
}

/// The raw bytes (inside the quotes) of the string value of `line` that
/// decodes to `text`, when they hold an escape: searched in the record's
/// `message` first, then in the whole line; the first match. `None` when
/// no string decodes to `text` (a text ktr made or stripped), when the
/// match holds no escape or the line no escape `serde_json` would write
/// otherwise (its bytes would be the same), and for a text holding a span
/// (its raw bytes are copied already, [`crate::span`]). `lone`: the line
/// may hold lone surrogates, decoded as their stand-ins ([`crate::lone`]).
fn written(line: &[u8], text: &str, lone: bool) -> Option<String> {
    // A line written as `serde_json` writes (JSON.stringify, which wrote
    // nearly every line) needs no search: its strings would come out the same.
    if text.is_empty() || crate::rawjson::canonical_escapes(line) || crate::span::has(text) {
        return None;
    }
    let line = std::str::from_utf8(line).ok()?;
    let scopes = crate::rawjson::top_level(line, "message")
        .into_iter()
        .chain([line]);
    for scope in scopes {
        for raw in crate::rawjson::string_values(scope) {
            let inner = &raw[1..raw.len() - 1];
            // An escape is 2 to 6 bytes for 1 (`\u0001`); raw text is 1 for 1.
            if inner.len() < text.len() || inner.len() > text.len().saturating_mul(6) {
                continue;
            }
            if memchr::memchr(b'\\', inner.as_bytes()).is_none() {
                if inner == text {
                    return None;
                }
                continue;
            }
            let mapped = if lone {
                crate::lone::map_line(raw.as_bytes()).and_then(|m| String::from_utf8(m).ok())
            } else {
                None
            };
            if crate::rawjson::text(mapped.as_deref().unwrap_or(raw)).as_deref() == Some(text) {
                return Some(inner.to_string());
            }
        }
    }
    None
}

/// The text of one speech event, read again.
#[derive(Debug, Clone, Default)]
pub struct Said {
    /// The speech text (empty for [`Speech::Injected`]).
    pub text: String,
    /// What the manifest's `source_sha256` digests: the record's text
    /// before any stripping, when it differs from `text`.
    pub raw: Option<String>,
    /// The raw startup snapshot text, when the event is one.
    pub snapshot: Option<String>,
    /// The `attachment` object of a `SessionStart` context, verbatim.
    pub attachment: Option<String>,
    /// How the source wrote `text`: the raw bytes (inside the quotes) of
    /// the JSON string that decodes to it, when they hold an escape
    /// (`serde_json` would write a string without one the same way). Only
    /// [`Reread::said_and_meta`] looks for it, for the candidate writer.
    pub json: Option<String>,
}

/// Reads events of one planned transcript again.
pub struct Reread<'a> {
    bytes: &'a dyn Bytes,
    opts: &'a Options<'a>,
    buf: RefCell<Vec<u8>>,
    lone_surrogates: bool,
    shared: OnceCell<Arc<dyn ReadAt>>,
}

impl<'a> Reread<'a> {
    pub fn new(bytes: &'a dyn Bytes, opts: &'a Options<'a>) -> Reread<'a> {
        Reread {
            bytes,
            opts,
            buf: RefCell::new(Vec::new()),
            lone_surrogates: false,
            shared: OnceCell::new(),
        }
    }

    /// The file holds lone surrogates: the texts read hold their stand-ins
    /// ([`crate::lone`]), which the candidate writer turns back.
    #[must_use]
    pub(crate) fn with_lone_surrogates(mut self, any: bool) -> Reread<'a> {
        self.lone_surrogates = any;
        self
    }

    /// Whether [`Reread::with_lone_surrogates`] said so.
    pub fn lone_surrogates(&self) -> bool {
        self.lone_surrogates
    }

    /// Parse the record at `at` and hand it to `f` (which may take its
    /// decoded text out of it).
    fn with_record<T>(
        &self,
        at: LineRef,
        f: impl FnOnce(&mut Record<'_>) -> Result<T>,
    ) -> Result<T> {
        self.with_line(at, |r, _| f(r))
    }

    /// [`Reread::with_record`], `f` also given the line as read (before
    /// lone surrogates are mapped; a long line's skeleton).
    fn with_line<T>(
        &self,
        at: LineRef,
        f: impl FnOnce(&mut Record<'_>, &[u8]) -> Result<T>,
    ) -> Result<T> {
        let mut buf = self.buf.borrow_mut();
        let again = |e: std::io::Error| changed(at, &format!("cannot be read again ({e})"));
        if at.len >= crate::span::LONG as u64 {
            // A long line is read as its skeleton (its long texts spans).
            let shared = if let Some(s) = self.shared.get() {
                s
            } else {
                let s = self.bytes.shared().map_err(again)?;
                self.shared.get_or_init(|| s)
            };
            *buf = crate::lines::skeleton_at(shared, at.offset, at.len)
                .map_err(again)?
                .ok_or_else(|| changed(at, "no longer holds valid JSON"))?;
        } else {
            self.bytes.read_at(at, &mut buf).map_err(again)?;
        }
        let mapped = crate::lone::map_line(&buf);
        let parsed = transcript::parse_line(mapped.as_deref().unwrap_or(&buf));
        match parsed {
            Line::Record(mut r) => f(&mut r, &buf),
            _ => Err(changed(at, "no longer holds a record")),
        }
    }

    /// The text of `event`.
    pub fn said(&self, event: &Event) -> Result<Said> {
        self.with_record(event.at(), |r| self.read(event, r))
    }

    /// The text of `event` and the fields its candidate line copies.
    /// The text's own escaping is looked for too ([`Said::json`]).
    pub(crate) fn said_and_meta(&self, event: &Event) -> Result<(Said, Meta)> {
        self.with_line(event.at(), |r, line| {
            let mut said = self.read(event, r)?;
            said.json = written(line, &said.text, self.lone_surrogates);
            Ok((said, scan::meta(event.line(), r)))
        })
    }

    /// The timestamp of the record at `at` (a stamp's time).
    pub fn timestamp(&self, at: LineRef) -> Result<Option<String>> {
        self.with_record(at, |r| {
            Ok(r.timestamp
                .get()
                .filter(|t| transcript::is_timestamp(t))
                .map(ToString::to_string))
        })
    }

    /// The uuid of the record of `event`.
    pub fn uuid(&self, event: &Event) -> Result<Option<String>> {
        self.with_record(event.at(), |r| Ok(r.uuid.get().map(ToString::to_string)))
    }

    /// Read `r` the way the scan read it (`event.via`).
    fn read(&self, event: &Event, r: &mut Record<'_>) -> Result<Said> {
        let mut said = Said::default();
        let speech = match event.via() {
            Via::CarriedBefore => {
                let Content::Text(t) = &r.message.content else {
                    return Err(changed(event.at(), "no longer holds a plain user text"));
                };
                said.text = t.to_string();
                said.snapshot = event
                    .snapshot()
                    .then(|| t.split_once('\n').map_or("", |(_, raw)| raw).to_string());
                Speech::User
            }
            Via::User => {
                let (speech, text) = {
                    let reading = classify::read_user(r);
                    let (speech, text) = match reading.reading {
                        UserReading::Speech(t) => (Speech::User, t),
                        UserReading::Slash(t) => (Speech::Slash, Cow::Owned(t)),
                        UserReading::CompactSummary(t) => (Speech::Summary, t),
                        UserReading::Expansion(t) => (Speech::Expansion, t),
                        UserReading::NotSpeech(_) => (Speech::Injected, Cow::Borrowed("")),
                    };
                    let raw = &reading.raw_text;
                    said.snapshot = event.snapshot().then(|| raw.to_string());
                    if !raw.is_empty() && *raw != text {
                        said.raw = Some(raw.to_string());
                    }
                    // The record's whole plain text, unchanged: taken out of
                    // the record below instead of copied.
                    let whole = matches!(&r.message.content, Content::Text(t) if t.as_ptr() == text.as_ptr() && t.len() == text.len());
                    (speech, (!whole).then(|| text.into_owned()))
                };
                said.text = match text {
                    Some(text) => text,
                    None => match &mut r.message.content {
                        Content::Text(t) => std::mem::take(t).into_owned(),
                        _ => String::new(),
                    },
                };
                speech
            }
            Via::Queued => {
                let a = r.attachment.map(Attachment::parse);
                match a.as_ref().and_then(classify::read_queued) {
                    Some(UserReading::Speech(t)) => said.text = t.into_owned(),
                    _ => return Err(changed(event.at(), "no longer holds a queued message")),
                }
                Speech::User
            }
            Via::Assistant => {
                match classify::read_assistant(r, self.opts.reply_tool) {
                    AssistantReading::Speech(t) => said.text = t,
                    _ => return Err(changed(event.at(), "no longer holds assistant text")),
                }
                Speech::Assistant
            }
            Via::StartupContext => {
                let raw = r.attachment;
                match raw
                    .map(Attachment::parse)
                    .as_ref()
                    .and_then(classify::session_start_context)
                {
                    Some(t) => said.text = t,
                    None => {
                        return Err(changed(
                            event.at(),
                            "no longer holds a SessionStart context",
                        ));
                    }
                }
                said.attachment = raw.map(|a| a.get().to_string());
                Speech::StartupContext
            }
        };
        if speech != event.speech() || crate::span::bytes(&said.text) != event.text().bytes {
            return Err(changed(event.at(), "reads differently now"));
        }
        Ok(said)
    }
}

fn changed(at: LineRef, what: &str) -> Error {
    Error::refused(format!(
        "the transcript changed while it was planned: the record at byte {} {what}; plan again (ktr plans a frozen copy when it rebuilds)",
        at.offset
    ))
}
