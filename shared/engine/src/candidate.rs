//! The candidate session (SPEC §7): one JSON line per carried item.
//!
//! Deterministic: the same items and the same new session id give the same
//! bytes. Item uuids are UUID v5 of `"<new_id>:<position>:<source uuid>"`
//! in [`ITEM_NAMESPACE`].

use serde::Serialize;
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::left_out::LeftOut;
use crate::options::EngineOptions;
use crate::reread::{Reread, Said};
use crate::scan::{Event, Meta};
use crate::transcript::is_timestamp;
use crate::turns::{Item, ItemKind, Role, Selection};
use ktr_base::digest::sha256_hex;
use ktr_base::error::Result;
use ktr_base::ids::SessionId;

/// Namespace of item uuids (a fixed, documented constant).
pub(crate) const ITEM_NAMESPACE: Uuid = Uuid::from_u128(0x6b74_7200_5f1e_4c2a_9d3b_7a11_c0de_0001);

/// Timestamp used only when the source has no usable timestamp at all.
const EPOCH: &str = "1970-01-01T00:00:00.000Z";

/// One manifest entry: where a carried item came from.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct ManifestEntry {
    pub position: usize,
    pub role: Role,
    pub kind: ItemKind,
    pub source_uuid: Option<String>,
    pub source_line: usize,
    pub source_timestamp: Option<String>,
    pub source_sha256: String,
    pub carried_sha256: String,
    pub uuid: String,
    /// Characters removed by `max_event_chars` (0 when whole).
    #[serde(default)]
    pub elided_chars: usize,
}

/// Where the candidate's lines go, one at a time, each with its manifest
/// entry: a file being written (prepare), a digest (verify), or memory
/// ([`Candidate`], for `ktr plan --show-candidate` and tests).
pub trait Sink {
    /// One line (without its newline) and its manifest entry. A long text
    /// in it is a span's token: write the line through
    /// [`crate::span::expand_json`], which copies the text's raw bytes from
    /// the source.
    fn line(&mut self, json: &str, entry: ManifestEntry) -> Result<()>;
    /// Whether the sink wants lines at all ([`Discard`] does not: the
    /// texts are then not read a second time).
    fn wants_lines(&self) -> bool {
        true
    }
    /// Whether the sink keeps the manifest entries (a digest does not: the
    /// entries' own digests are then not computed).
    fn wants_manifest(&self) -> bool {
        true
    }
    /// A record the plan left out (after every line, in source order).
    /// Returned to be listed in the report, or taken (a sink that streams
    /// it elsewhere returns `None`).
    fn left_out(&mut self, entry: LeftOut) -> Result<Option<LeftOut>> {
        Ok(Some(entry))
    }
}

/// No candidate at all: only the plan's report is wanted (`ktr plan`,
/// `ktr dirty`, the hooks).
pub struct Discard;

impl Sink for Discard {
    fn line(&mut self, _: &str, _: ManifestEntry) -> Result<()> {
        Ok(())
    }
    fn wants_lines(&self) -> bool {
        false
    }
}

/// The candidate in memory: its lines and manifest.
#[derive(Debug, Clone, Default)]
pub struct Candidate {
    pub session_id: String,
    /// Each line without its newline.
    pub lines: Vec<String>,
    pub manifest: Vec<ManifestEntry>,
}

impl Candidate {
    /// The file content: every line followed by `\n`.
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.lines.iter().map(|l| l.len() + 1).sum());
        for line in &self.lines {
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
        out
    }
    /// SHA-256 of [`Candidate::bytes`].
    pub fn sha256(&self) -> String {
        sha256_hex(&self.bytes())
    }
}

impl Sink for Candidate {
    fn line(&mut self, json: &str, entry: ManifestEntry) -> Result<()> {
        let mut line = Vec::with_capacity(json.len());
        crate::span::expand_json(json, &mut |b| {
            line.extend_from_slice(b);
            Ok(())
        })?;
        let line = String::from_utf8(line)
            .map_err(|_| ktr_base::error::Error::io("a long text is not UTF-8"))?;
        self.lines.push(line);
        self.manifest.push(entry);
        Ok(())
    }
}

/// What every line of the candidate starts with (SPEC §7).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct HeadOut<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    uuid: &'a str,
    parent_uuid: Option<&'a str>,
    session_id: &'a str,
    timestamp: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cwd: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    git_branch: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user_type: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    entrypoint: Option<&'a str>,
    is_sidechain: bool,
}

/// A carried user or assistant item.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LineOut<'a> {
    #[serde(flatten)]
    head: HeadOut<'a>,
    is_meta: bool,
    message: MessageOut<'a>,
}

/// A carried `SessionStart` context: the source's `attachment` object as it
/// was, on a line of the new session.
#[derive(Serialize)]
struct AttachmentOut<'a> {
    #[serde(flatten)]
    head: HeadOut<'a>,
    attachment: &'a serde_json::value::RawValue,
}

#[derive(Serialize)]
#[serde(untagged)]
enum MessageOut<'a> {
    User {
        role: &'static str,
        content: Text<'a>,
    },
    Assistant {
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a str>,
        role: &'static str,
        content: [TextBlock<'a>; 1],
    },
}

#[derive(Serialize)]
struct TextBlock<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: Text<'a>,
}

/// A carried text: written by `serde_json`, or as a JSON string that keeps
/// the source's own escaping ([`kept`]).
#[derive(Clone, Copy, Serialize)]
#[serde(untagged)]
enum Text<'a> {
    Plain(&'a str),
    Kept(&'a RawValue),
}

/// `text` (the carried text) as a JSON string in which the part that is
/// `said` (the source's text) keeps its raw bytes `json`, as the source
/// escaped them; the rest (a stamp line before it, an expansion after) is
/// escaped by `serde_json`. `None` when `said` is not in `text` (an elided
/// or made text): the text is then written by `serde_json` alone.
fn kept(text: &str, said: &str, json: &str) -> Option<Box<RawValue>> {
    let at = if text.ends_with(said) {
        text.len() - said.len()
    } else {
        memchr::memmem::find(text.as_bytes(), said.as_bytes())?
    };
    let escaped = |s: &str| {
        let quoted = serde_json::to_string(s).expect("a string is plain JSON");
        quoted[1..quoted.len() - 1].to_string()
    };
    let (before, after) = (&text[..at], &text[at + said.len()..]);
    let mut out = String::with_capacity(json.len() + before.len() + after.len() + 8);
    out.push('"');
    out.push_str(&escaped(before));
    out.push_str(json);
    out.push_str(&escaped(after));
    out.push('"');
    RawValue::from_string(out).ok()
}

/// Write the candidate of `sel` under `session_id` into `sink`: the
/// carried `SessionStart` contexts first, then
/// every item, each text read again (`rd`) as it is written. Returns the
/// number of lines.
pub fn write(
    options: &EngineOptions<'_>,
    sel: &Selection,
    events: &[Event],
    session_id: &SessionId,
    earliest: Option<&str>,
    rd: &Reread<'_>,
    sink: &mut dyn Sink,
) -> Result<usize> {
    let (turns, startup) = (&sel.turns, &sel.startup_context);
    if !sink.wants_lines() {
        return Ok(startup.len() + turns.items().len());
    }
    let mut out = Writer {
        session_id: session_id.as_str(),
        sink,
        lines: 0,
        previous_uuid: None,
        previous_ts: earliest.unwrap_or(EPOCH).to_string(),
        lone_surrogates: rd.lone_surrogates(),
    };
    for &e in startup {
        let (said, meta) = rd.said_and_meta(&events[e])?;
        out.attachment(&said, &meta)?;
    }
    for item in turns.items() {
        let (said, meta) = rd.said_and_meta(&events[item.event()])?;
        let source_sha256 = out.digest(said.raw.as_deref().unwrap_or(&said.text))?;
        // A text the source wrote with escapes: kept to find it in the
        // carried text (a short text: a long one is a span).
        let written = said.json.map(|json| (said.text.clone(), json));
        // The record is read once: its text (moved, not copied: it may be
        // huge) and its time serve the item.
        let text = item.text(
            events,
            rd,
            options,
            Some((said.text, meta.timestamp.as_deref())),
        )?;
        let kept = written.and_then(|(said, json)| kept(&text, &said, &json));
        out.item(item, &text, kept.as_deref(), source_sha256, &meta)?;
    }
    Ok(out.lines)
}

/// The candidate being written, line by line.
struct Writer<'s> {
    session_id: &'s str,
    sink: &'s mut dyn Sink,
    lines: usize,
    previous_uuid: Option<String>,
    previous_ts: String,
    /// Texts may hold stand-ins of lone surrogates ([`crate::lone`]).
    lone_surrogates: bool,
}

impl Writer<'_> {
    /// The next line's uuid and timestamp.
    fn next(&self, meta: &Meta) -> (String, String) {
        let source_uuid = meta
            .uuid
            .clone()
            .unwrap_or_else(|| format!("line-{}", meta.line));
        let position = self.lines;
        let uuid = Uuid::new_v5(
            &ITEM_NAMESPACE,
            format!("{}:{position}:{source_uuid}", self.session_id).as_bytes(),
        )
        .to_string();
        let timestamp = match meta.timestamp.as_deref() {
            Some(ts) if is_timestamp(ts) => ts.to_string(),
            _ => self.previous_ts.clone(),
        };
        (uuid, timestamp)
    }

    /// The fields every line starts with: ids, time, the copied source fields.
    fn head<'h>(
        &'h self,
        kind: &'static str,
        meta: &'h Meta,
        uuid: &'h str,
        timestamp: &'h str,
    ) -> HeadOut<'h> {
        HeadOut {
            kind,
            uuid,
            parent_uuid: self.previous_uuid.as_deref(),
            session_id: self.session_id,
            timestamp,
            cwd: meta.cwd.as_deref(),
            version: meta.version.as_deref(),
            git_branch: meta.git_branch.as_deref(),
            user_type: meta.user_type.as_deref(),
            entrypoint: meta.entrypoint.as_deref(),
            is_sidechain: false,
        }
    }

    /// A text's digest for the manifest (empty when the sink keeps none);
    /// a long text's spans are read again ([`crate::span`]).
    fn digest(&self, text: &str) -> Result<String> {
        if self.sink.wants_manifest() {
            crate::span::sha256(text)
        } else {
            Ok(String::new())
        }
    }

    fn push(&mut self, json: &str, entry: ManifestEntry, timestamp: String) -> Result<()> {
        self.previous_uuid = Some(entry.uuid.clone());
        if self.lone_surrogates {
            self.sink.line(&crate::lone::unmap_json(json), entry)?;
        } else {
            self.sink.line(json, entry)?;
        }
        self.lines += 1;
        self.previous_ts = timestamp;
        Ok(())
    }

    fn entry(
        &self,
        meta: &Meta,
        source_sha256: String,
        role: Role,
        kind: ItemKind,
        text: &str,
        uuid: &str,
    ) -> Result<ManifestEntry> {
        Ok(ManifestEntry {
            position: self.lines,
            role,
            kind,
            source_uuid: meta.uuid.clone(),
            source_line: meta.line,
            source_timestamp: meta.timestamp.clone(),
            source_sha256,
            carried_sha256: self.digest(text)?,
            uuid: uuid.to_string(),
            elided_chars: 0,
        })
    }

    fn attachment(&mut self, said: &Said, meta: &Meta) -> Result<()> {
        let Some(Ok(raw)) = said
            .attachment
            .as_deref()
            .map(serde_json::from_str::<&serde_json::value::RawValue>)
        else {
            return Ok(()); // read from a parsed record: always valid JSON
        };
        let (uuid, timestamp) = self.next(meta);
        let line = AttachmentOut {
            head: self.head("attachment", meta, &uuid, &timestamp),
            attachment: raw,
        };
        let json = serde_json::to_string(&line).expect("candidate lines are plain JSON");
        let entry = self.entry(
            meta,
            self.digest(said.raw.as_deref().unwrap_or(&said.text))?,
            Role::Attachment,
            ItemKind::StartupSnapshot,
            &said.text,
            &uuid,
        )?;
        self.push(&json, entry, timestamp)
    }

    /// `kept`: the text as a JSON string that keeps the source's escaping
    /// ([`kept`]), when there is one.
    fn item(
        &mut self,
        item: &Item,
        text: &str,
        kept: Option<&RawValue>,
        source_sha256: String,
        meta: &Meta,
    ) -> Result<()> {
        let (uuid, timestamp) = self.next(meta);
        let written = kept.map_or(Text::Plain(text), Text::Kept);
        let message = match item.role {
            // (items of turns are never attachments)
            Role::User | Role::Attachment => MessageOut::User {
                role: "user",
                content: written,
            },
            Role::Assistant => MessageOut::Assistant {
                id: meta.message_id.as_deref(),
                role: "assistant",
                content: [TextBlock {
                    kind: "text",
                    text: written,
                }],
            },
        };
        let line = LineOut {
            head: self.head(item.role.as_str(), meta, &uuid, &timestamp),
            is_meta: false,
            message,
        };
        let json = serde_json::to_string(&line).expect("candidate lines are plain strings");
        let mut entry = self.entry(meta, source_sha256, item.role, item.kind, text, &uuid)?;
        entry.elided_chars = item.elided_chars();
        self.push(&json, entry, timestamp)
    }
}
