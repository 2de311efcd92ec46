//! The candidate session (SPEC §7): one JSON line per carried item.
//!
//! Deterministic: the same items and the same new session id give the same
//! bytes. Item uuids are UUID v5 of `"<new_id>:<position>:<source uuid>"`
//! in [`ITEM_NAMESPACE`].

use serde::Serialize;
use uuid::Uuid;

use crate::engine::scan::Event;
use crate::engine::transcript::is_timestamp;
use crate::engine::turns::{ItemKind, Role, Turn};
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

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LineOut<'a> {
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
    is_meta: bool,
    message: MessageOut<'a>,
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

/// Build the candidate for `turns` under `session_id`.
pub fn build(
    turns: &[Turn],
    events: &[Event],
    session_id: &str,
    earliest: Option<&str>,
) -> Candidate {
    let mut lines = Vec::new();
    let mut manifest = Vec::new();
    let mut previous_uuid: Option<String> = None;
    let mut previous_ts: String = earliest.unwrap_or(EPOCH).to_string();
    for (position, item) in turns.iter().flat_map(|t| &t.items).enumerate() {
        let event = &events[item.event];
        let meta = &event.meta;
        let source_uuid = meta
            .uuid
            .clone()
            .unwrap_or_else(|| format!("line-{}", meta.line));
        let uuid = Uuid::new_v5(
            &ITEM_NAMESPACE,
            format!("{session_id}:{position}:{source_uuid}").as_bytes(),
        )
        .to_string();
        let timestamp = match meta.timestamp.as_deref() {
            Some(ts) if is_timestamp(ts) => ts.to_string(),
            _ => previous_ts.clone(),
        };
        let message = match item.role {
            Role::User => MessageOut::User {
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
            kind: match item.role {
                Role::User => "user",
                Role::Assistant => "assistant",
            },
            uuid: &uuid,
            parent_uuid: previous_uuid.as_deref(),
            session_id,
            timestamp: &timestamp,
            cwd: meta.cwd.as_deref(),
            version: meta.version.as_deref(),
            git_branch: meta.git_branch.as_deref(),
            user_type: meta.user_type.as_deref(),
            entrypoint: meta.entrypoint.as_deref(),
            is_sidechain: false,
            is_meta: false,
            message,
        };
        let json = serde_json::to_string(&line).expect("candidate lines are plain strings");
        manifest.push(ManifestEntry {
            position,
            role: item.role,
            kind: item.kind,
            source_uuid: meta.uuid.clone(),
            source_line: meta.line,
            source_timestamp: meta.timestamp.clone(),
            source_sha256: event.source_sha256.clone(),
            carried_sha256: sha256_hex(item.text.as_bytes()),
            uuid: uuid.clone(),
            elided_chars: item.elided_chars,
        });
        lines.push(json);
        previous_uuid = Some(uuid);
        previous_ts = timestamp;
    }
    Candidate {
        session_id: session_id.to_string(),
        lines,
        manifest,
    }
}
