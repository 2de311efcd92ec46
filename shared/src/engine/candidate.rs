//! The candidate session (SPEC §7): one JSON line per carried item.
//!
//! Deterministic: the same items and the same new session id give the same
//! bytes. Item uuids are UUID v5 of `"<new_id>:<position>:<source uuid>"`
//! in [`ITEM_NAMESPACE`].

use serde::Serialize;
use uuid::Uuid;

use crate::engine::scan::{Event, Meta, Speech};
use crate::engine::transcript::is_timestamp;
use crate::engine::turns::{Item, ItemKind, Role, Turn};
use crate::fsutil::sha256_hex;

/// Namespace of item uuids (a fixed, documented constant).
pub const ITEM_NAMESPACE: Uuid = Uuid::from_u128(0x6b74_7200_5f1e_4c2a_9d3b_7a11_c0de_0001);

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

/// The candidate: its lines and manifest.
#[derive(Debug, Clone)]
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
        content: &'a str,
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
    text: &'a str,
}

/// Build the candidate for `turns` under `session_id`: the carried
/// `SessionStart` contexts (`startup`, event indexes) first, then every item.
pub fn build(
    turns: &[Turn],
    startup: &[usize],
    events: &[Event],
    session_id: &str,
    earliest: Option<&str>,
) -> Candidate {
    let mut out = Writer {
        session_id,
        lines: Vec::new(),
        manifest: Vec::new(),
        previous_uuid: None,
        previous_ts: earliest.unwrap_or(EPOCH).to_string(),
    };
    for &e in startup {
        let event = &events[e];
        if let Speech::StartupContext { text, attachment } = &event.speech {
            out.attachment(event, text, attachment);
        }
    }
    for item in turns.iter().flat_map(|t| &t.items) {
        out.item(item, &events[item.event]);
    }
    Candidate {
        session_id: session_id.to_string(),
        lines: out.lines,
        manifest: out.manifest,
    }
}

/// The candidate being written, line by line.
struct Writer<'s> {
    session_id: &'s str,
    lines: Vec<String>,
    manifest: Vec<ManifestEntry>,
    previous_uuid: Option<String>,
    previous_ts: String,
}

impl Writer<'_> {
    /// The next line's uuid and timestamp.
    fn next(&self, meta: &Meta) -> (String, String) {
        let source_uuid = meta
            .uuid
            .clone()
            .unwrap_or_else(|| format!("line-{}", meta.line));
        let position = self.lines.len();
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

    fn push(&mut self, json: String, entry: ManifestEntry, timestamp: String) {
        self.previous_uuid = Some(entry.uuid.clone());
        self.manifest.push(entry);
        self.lines.push(json);
        self.previous_ts = timestamp;
    }

    fn entry(
        &self,
        event: &Event,
        role: Role,
        kind: ItemKind,
        text: &str,
        uuid: &str,
    ) -> ManifestEntry {
        let meta = &event.meta;
        ManifestEntry {
            position: self.lines.len(),
            role,
            kind,
            source_uuid: meta.uuid.clone(),
            source_line: meta.line,
            source_timestamp: meta.timestamp.clone(),
            source_sha256: event.source_sha256.clone(),
            carried_sha256: sha256_hex(text.as_bytes()),
            uuid: uuid.to_string(),
            elided_chars: 0,
        }
    }

    fn attachment(&mut self, event: &Event, text: &str, attachment: &str) {
        let Ok(raw) = serde_json::from_str::<&serde_json::value::RawValue>(attachment) else {
            return; // the scan kept it from a parsed record: always valid JSON
        };
        let meta = &event.meta;
        let (uuid, timestamp) = self.next(meta);
        let line = AttachmentOut {
            head: self.head("attachment", meta, &uuid, &timestamp),
            attachment: raw,
        };
        let json = serde_json::to_string(&line).expect("candidate lines are plain JSON");
        let entry = self.entry(
            event,
            Role::Attachment,
            ItemKind::StartupSnapshot,
            text,
            &uuid,
        );
        self.push(json, entry, timestamp);
    }

    fn item(&mut self, item: &Item, event: &Event) {
        let meta = &event.meta;
        let (uuid, timestamp) = self.next(meta);
        let message = match item.role {
            // (items of turns are never attachments)
            Role::User | Role::Attachment => MessageOut::User {
                role: "user",
                content: &item.text,
            },
            Role::Assistant => MessageOut::Assistant {
                id: meta.message_id.as_deref(),
                role: "assistant",
                content: [TextBlock {
                    kind: "text",
                    text: &item.text,
                }],
            },
        };
        let line = LineOut {
            head: self.head(item.role.as_str(), meta, &uuid, &timestamp),
            is_meta: false,
            message,
        };
        let json = serde_json::to_string(&line).expect("candidate lines are plain strings");
        let mut entry = self.entry(event, item.role, item.kind, &item.text, &uuid);
        entry.elided_chars = item.elided_chars;
        self.push(json, entry, timestamp);
    }
}
