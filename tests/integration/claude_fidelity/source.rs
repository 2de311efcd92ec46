//! What the source transcript says about each user text.

use ktr_engine::classify::INJECTED_TAGS;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::Path;

/// What the source transcript says about a user text.
#[derive(Debug, Default, Clone)]
pub(super) struct SourceInfo {
    pub(super) meta: bool,
    pub(super) companion: bool,
    pub(super) summary: bool,
    /// Every record with this text is `isSidechain: true`.
    pub(super) sidechain: bool,
    /// Another agent's message or a prompt Claude Code scheduled itself.
    pub(super) other_agent: bool,
    /// Every record with this text is a `<synthetic>` reply.
    pub(super) synthetic: bool,
    /// A `system` `local_command` record.
    pub(super) local_command: bool,
    pub(super) line: usize,
}

/// The source's user texts (trimmed) and assistant texts, by text.
pub(super) struct Source {
    pub(super) user: HashMap<String, SourceInfo>,
    pub(super) assistant: HashMap<String, SourceInfo>,
    /// Line of the last compaction boundary (0 when none).
    pub(super) last_boundary: usize,
    /// The uuids Claude Code loads on `--resume`: the parent chain of the
    /// last user or assistant record (it stops at a compaction boundary).
    pub(super) loaded: HashSet<String>,
    /// `SessionStart` hook contexts recorded before the first user or
    /// assistant record (this test's own reading): text and uuid.
    pub(super) session_start: Vec<(String, Option<String>)>,
}

pub(super) fn read_source(path: &Path) -> Source {
    let mut src = Source {
        user: HashMap::new(),
        assistant: HashMap::new(),
        last_boundary: 0,
        loaded: HashSet::new(),
        session_start: Vec::new(),
    };
    let mut spoken = false;
    let mut parents: HashMap<String, Option<String>> = HashMap::new();
    let mut leaf: Option<String> = None;
    let text = String::from_utf8_lossy(&fs::read(path).unwrap()).into_owned();
    for (n, line) in text.lines().enumerate() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v["type"] == "system" && v["subtype"] == "compact_boundary" {
            src.last_boundary = n + 1;
        }
        let a = &v["attachment"];
        if !spoken && a["type"] == "hook_additional_context" && a["hookEvent"] == "SessionStart" {
            let texts: Vec<&str> = match &a["content"] {
                Value::Array(parts) => parts.iter().filter_map(Value::as_str).collect(),
                Value::String(s) => vec![s.as_str()],
                _ => Vec::new(),
            };
            let uuid = v["uuid"].as_str().map(str::to_string);
            src.session_start.push((texts.join("\n"), uuid));
        }
        spoken |= matches!(v["type"].as_str(), Some("user" | "assistant"))
            && v["isMeta"] != true
            && v["isSidechain"] != true;
        if let Some(uuid) = v["uuid"].as_str() {
            parents.insert(
                uuid.to_string(),
                v["parentUuid"].as_str().map(str::to_string),
            );
            if matches!(v["type"].as_str(), Some("user" | "assistant")) && v["isSidechain"] != true
            {
                leaf = Some(uuid.to_string());
            }
        }
        if v["type"] == "system" && v["subtype"] == "local_command" {
            // Claude Code shows a local command's record to the model as user text.
            if let Some(t) = v["content"].as_str() {
                src.user
                    .entry(t.trim_end().to_string())
                    .or_insert(SourceInfo {
                        local_command: true,
                        line: n + 1,
                        ..SourceInfo::default()
                    });
            }
        }
        let texts: Vec<String> = match &v["message"]["content"] {
            Value::String(s) => vec![s.clone()],
            Value::Array(b) => b
                .iter()
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        };
        let map = match v["type"].as_str() {
            Some("user") => &mut src.user,
            Some("assistant") => &mut src.assistant,
            _ => continue,
        };
        let other_agent = matches!(
            v["origin"]["kind"].as_str(),
            Some("task-notification" | "peer")
        ) || v["promptSource"] == "system";
        for t in texts {
            let key = t.trim_end().to_string();
            let teammate = t.trim_start().starts_with("<teammate-message");
            let info = map.entry(key).or_insert(SourceInfo {
                meta: true,
                sidechain: true,
                synthetic: true,
                line: n + 1,
                ..SourceInfo::default()
            });
            // A text also sent by a plain record counts as plain.
            info.meta &= v["isMeta"] == true;
            info.sidechain &= v["isSidechain"] == true;
            info.synthetic &= v["message"]["model"] == "<synthetic>";
            info.companion |= v["turnCompanion"] == true;
            info.summary |= v["isCompactSummary"] == true;
            info.other_agent |= other_agent || teammate;
        }
    }
    let mut at = leaf;
    while let Some(uuid) = at.filter(|u| src.loaded.insert(u.clone())) {
        at = parents.get(&uuid).cloned().flatten();
    }
    src
}

/// This test's own reading of a user text: the words left after removing
/// injected elements at the start and end, and a slash command as
/// `/name args`.
pub(super) fn expected_user_text(text: &str) -> (String, Option<String>) {
    let mut rest = text.trim();
    let (mut name, mut args) = (None, None);
    loop {
        let before = rest;
        for tag in INJECTED_TAGS {
            let close = format!("</{tag}>");
            if rest.starts_with(&format!("<{tag}"))
                && let Some(end) = rest.find(&close)
            {
                let inner = &rest[rest.find('>').unwrap() + 1..end];
                match *tag {
                    "command-name" => name = Some(inner.trim().to_string()),
                    "command-args" => args = Some(inner.trim().to_string()),
                    _ => {}
                }
                rest = rest[end + close.len()..].trim_start();
            }
            if rest.ends_with(&close)
                && let Some(start) = rest.rfind(&format!("<{tag}"))
            {
                let element = &rest[start..rest.len() - close.len()];
                let inner = element.find('>').map_or("", |i| &element[i + 1..]);
                match *tag {
                    "command-name" => name = Some(inner.trim().to_string()),
                    "command-args" => args = Some(inner.trim().to_string()),
                    _ => {}
                }
                rest = rest[..start].trim_end();
            }
        }
        if rest == before {
            break;
        }
    }
    let command = name.map(|n| {
        let n = if n.starts_with('/') {
            n
        } else {
            format!("/{n}")
        };
        match args.as_deref() {
            Some(a) if !a.is_empty() => format!("{n} {a}"),
            _ => n,
        }
    });
    (rest.to_string(), command)
}
