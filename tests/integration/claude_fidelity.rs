//! Fidelity, proven per transcript against the real CLI: resume
//! the ORIGINAL transcript and the REBUILT candidate with the same probe
//! prompt against the fake API, and compare the two requests text by text.
//!
//! Every text the original request holds before the probe is either found
//! again in the rebuilt request (in the same order) or falls in a named
//! residue category; the startup context (`SessionStart` hook context) is in
//! both, once in the rebuilt; the rebuilt request holds nothing the
//! original did not, except what the rebuild adds on purpose (stamps, the
//! startup header, turns from before a compaction boundary the original
//! resume starts after) and Claude Code's own per-start context. Anything
//! else is "unexplained" and fails the test. The per-file table is printed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::claude_resume::residue_sent;
use crate::support::claude::ClaudeEnv;
use crate::support::fake_api::{FakeApi, Logged, last_user_text};
use crate::support::plan::{STAMP_PREFIX as STAMP, fixture_path as fixture};
use crate::support::sid;
use crate::support::{ResultOrPanic, claude_bin, corpus_dir, example};
use ktr_base::config::{Config, HistoryMode};
use ktr_engine::classify::INJECTED_TAGS;
use ktr_engine::plan::{self, Plan};
use ktr_engine::turns::{ItemKind, Role};
use serde_json::Value;

/// Files resumed at once (the machines have 2 cores).
const WORKERS: usize = 2;

/// Namespace of the fixed session ids of this test.
const NS: uuid::Uuid = uuid::Uuid::from_u128(0x6b74_7200_f1de_4000_8000_0000_0000_0010);

/// How Claude Code 2.1.328 renders a `SessionStart` hook context.
const SESSION_START: &str = "SessionStart hook additional context: ";

fn fixed_id(name: &str) -> String {
    uuid::Uuid::new_v5(&NS, name.as_bytes()).to_string()
}

/// One transcript to compare.
struct Case {
    name: String,
    source: PathBuf,
}

/// The corpus, the example session and this issue's own fixtures.
fn cases() -> Vec<Case> {
    let corpus = corpus_dir();
    let mut files: Vec<PathBuf> = fs::read_dir(&corpus)
        .or_panic(|e| format!("corpus {} is required: {e}", corpus.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    files.push(example());
    for own in [
        "session_start_context",
        "command_expansions",
        "broken_timestamps",
        "startup_meta_reminder",
    ] {
        files.push(fixture(own));
    }
    files
        .into_iter()
        .map(|source| Case {
            name: source.file_name().unwrap().to_string_lossy().into_owned(),
            source,
        })
        .collect()
}

/// One text (or non-text block) of a request, in order.
#[derive(Debug, Clone)]
struct Unit {
    role: String,
    kind: String,
    text: String,
    block: Value,
    /// The message also holds a `tool_result` block.
    beside_tool_result: bool,
}

/// The units of `request` before the probe's own text block.
fn history(request: &Logged, probe: &str) -> Vec<Unit> {
    let mut units = Vec::new();
    for m in request.messages() {
        let role = m["role"].as_str().unwrap_or("").to_string();
        let blocks = match &m["content"] {
            Value::String(s) => vec![serde_json::json!({"type": "text", "text": s})],
            Value::Array(b) => b.clone(),
            _ => Vec::new(),
        };
        let beside_tool_result = blocks.iter().any(|b| b["type"] == "tool_result");
        for block in blocks {
            let kind = block["type"].as_str().unwrap_or("").to_string();
            let text = match kind.as_str() {
                "text" => block["text"].as_str().unwrap_or("").to_string(),
                _ => block.to_string(),
            };
            units.push(Unit {
                role: role.clone(),
                kind,
                text,
                block,
                beside_tool_result,
            });
        }
    }
    let probe_at = units
        .iter()
        .rposition(|u| u.role == "user" && u.kind == "text" && u.text.contains(probe))
        .expect("the probe is in the request");
    units.truncate(probe_at);
    units
}

/// What the source transcript says about a user text.
#[derive(Debug, Default, Clone)]
struct SourceInfo {
    meta: bool,
    companion: bool,
    summary: bool,
    /// Every record with this text is `isSidechain: true`.
    sidechain: bool,
    /// Another agent's message or a prompt Claude Code scheduled itself.
    other_agent: bool,
    /// Every record with this text is a `<synthetic>` reply.
    synthetic: bool,
    /// A `system` `local_command` record.
    local_command: bool,
    line: usize,
}

/// The source's user texts (trimmed) and assistant texts, by text.
struct Source {
    user: HashMap<String, SourceInfo>,
    assistant: HashMap<String, SourceInfo>,
    /// Line of the last compaction boundary (0 when none).
    last_boundary: usize,
    /// The uuids Claude Code loads on `--resume`: the parent chain of the
    /// last user or assistant record (it stops at a compaction boundary).
    loaded: HashSet<String>,
    /// `SessionStart` hook contexts recorded before the first user or
    /// assistant record (this test's own reading): text and uuid.
    session_start: Vec<(String, Option<String>)>,
}

fn read_source(path: &Path) -> Source {
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
fn expected_user_text(text: &str) -> (String, Option<String>) {
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

/// The outcome for one file.
#[derive(Default)]
struct Row {
    file: String,
    status: String,
    original_texts: usize,
    rebuilt_texts: usize,
    conversation: usize,
    startup: String,
    residue: BTreeMap<String, usize>,
    unexplained: Vec<String>,
}

/// A position in the rebuilt conversation: unit index and byte offset.
#[derive(Clone, Copy)]
struct Cursor {
    unit: usize,
    offset: usize,
}

/// The comparison of one file's two requests.
struct Compare<'a> {
    rebuilt: Vec<Unit>,
    cursor: Cursor,
    touched: HashSet<usize>,
    row: &'a mut Row,
}

impl Compare<'_> {
    fn residue(&mut self, category: &str) {
        *self.row.residue.entry(category.to_string()).or_default() += 1;
    }

    fn unexplained(&mut self, what: String) {
        self.row.unexplained.push(what);
    }

    /// Find `text` of `role` in the rebuilt conversation at or after the
    /// cursor, preferring a unit that is exactly `text` (after a stamp);
    /// move the cursor past it.
    fn find(&mut self, role: &str, text: &str) -> bool {
        let text = text.trim();
        if text.is_empty() {
            return true;
        }
        let exact = (self.cursor.unit..self.rebuilt.len()).find(|&i| {
            let unit = &self.rebuilt[i];
            let own = unit.text.trim_end();
            let unstamped = if own.starts_with(STAMP) {
                own.split_once('\n').map_or("", |(_, rest)| rest)
            } else {
                own
            };
            unit.role == role
                && unit.kind == "text"
                && (own == text || unstamped == text)
                && (i > self.cursor.unit || self.cursor.offset == 0)
        });
        if let Some(i) = exact {
            self.touched.insert(i);
            self.cursor = Cursor {
                unit: i,
                offset: self.rebuilt[i].text.len(),
            };
            return true;
        }
        let mut at = self.cursor;
        while at.unit < self.rebuilt.len() {
            let unit = &self.rebuilt[at.unit];
            if unit.role == role && unit.kind == "text" {
                let hay = unit.text.get(at.offset..).unwrap_or("");
                if let Some(i) = hay.find(text) {
                    self.touched.insert(at.unit);
                    self.cursor = Cursor {
                        unit: at.unit,
                        offset: at.offset + i + text.len(),
                    };
                    return true;
                }
            }
            at = Cursor {
                unit: at.unit + 1,
                offset: 0,
            };
        }
        false
    }

    /// A conversation text of the original that must be in the rebuilt.
    fn conversation(&mut self, role: &str, text: &str, left_out: Option<&str>) {
        if self.find(role, text) {
            self.row.conversation += 1;
            return;
        }
        if let Some(reason) = left_out {
            self.residue(&format!("left out: {reason}"));
            return;
        }
        let anywhere = self
            .rebuilt
            .iter()
            .any(|u| u.role == role && u.text.contains(text.trim()));
        let preview: String = text.chars().take(100).collect();
        self.unexplained(if anywhere {
            format!("{role} text out of order in the rebuilt request: {preview:?}")
        } else {
            format!("{role} text missing from the rebuilt request: {preview:?}")
        });
    }
}

/// Compare the original's and the rebuilt's request for one file.
fn compare(
    original: &[Unit],
    rebuilt: Vec<Unit>,
    source: &Path,
    plan: &Plan,
    config: &Config,
    row: &mut Row,
) {
    let src = read_source(source);
    let left_out: HashMap<usize, String> = plan
        .report
        .left_out
        .iter()
        .map(|l| {
            (
                l.line,
                serde_json::json!(l.reason).to_string().replace('"', ""),
            )
        })
        .collect();
    let candidate: Vec<Value> = plan
        .candidate
        .lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let loaded = |m: &ktr_engine::candidate::ManifestEntry| {
        m.source_uuid
            .as_ref()
            .is_some_and(|u| src.loaded.contains(u))
    };
    // The source's SessionStart contexts (read here, not from the plan) and
    // whether the original resume loads their records at all.
    let contexts: Vec<(String, bool)> = src
        .session_start
        .iter()
        .map(|(text, uuid)| {
            (
                text.clone(),
                uuid.as_ref().is_some_and(|u| src.loaded.contains(u)),
            )
        })
        .collect();
    // An older file's startup record, carried under the startup header.
    let header_snapshot = plan
        .candidate
        .manifest
        .iter()
        .position(|m| m.kind == ItemKind::StartupSnapshot && m.role == Role::User)
        .and_then(|p| {
            let text = candidate[p]["message"]["content"].as_str()?;
            let (_, raw) = text.split_once('\n')?;
            Some((raw.trim().to_string(), loaded(&plan.candidate.manifest[p])))
        });
    row.original_texts = original.len();
    row.rebuilt_texts = rebuilt.len();
    let mut cmp = Compare {
        rebuilt,
        cursor: Cursor { unit: 0, offset: 0 },
        touched: HashSet::new(),
        row,
    };
    for unit in original {
        let text = unit.text.trim_end();
        match (unit.role.as_str(), unit.kind.as_str()) {
            ("system", _) => match queued_message(text) {
                Some(words) => cmp.conversation("user", words, None),
                None => cmp.residue("system: attachments and per-start context"),
            },
            (_, "thinking" | "redacted_thinking") => cmp.residue("thinking"),
            (_, "image") => cmp.residue("image"),
            (_, "tool_use") => {
                let name = unit.block["name"].as_str().unwrap_or("");
                match unit.block["input"]["text"].as_str() {
                    Some(words) if config.reply_tool_pattern.is_match(name) => {
                        cmp.conversation("assistant", words, None);
                    }
                    _ => cmp.residue("tool input"),
                }
            }
            (_, "tool_result") => match rejection_words(&unit.block) {
                Some(words) => cmp.conversation("user", &words, None),
                None => cmp.residue("tool result"),
            },
            ("assistant", "text") => match src.assistant.get(text) {
                Some(i) if i.sidechain => cmp.residue("sidechain record"),
                Some(i) if i.synthetic => cmp.residue("synthetic reply"),
                None if text == "No response requested." => cmp.residue("synthetic reply"),
                info => {
                    let reason = info.and_then(|i| left_out.get(&i.line)).map(String::as_str);
                    cmp.conversation("assistant", text, reason);
                }
            },
            ("user", "text") => {
                let header = header_snapshot.as_ref().map(|(raw, _)| raw.as_str());
                user_text(&mut cmp, unit, &src, &left_out, header);
            }
            (role, kind) => cmp.unexplained(format!("{role} {kind} block")),
        }
    }
    startup_context(&mut cmp, original, &contexts, header_snapshot.as_ref());
    rebuilt_extras(&mut cmp, plan, &candidate, &src);
    carried_in_order(&mut cmp, &candidate);
}

/// Every carried user and assistant item reaches the model as its own
/// text block, in the candidate's order (Claude Code ends every block of a
/// merged user message but the last with a newline).
fn carried_in_order(cmp: &mut Compare<'_>, candidate: &[Value]) {
    let mut at = 0;
    for line in candidate.iter().filter(|l| l["type"] != "attachment") {
        let role = line["type"].as_str().unwrap_or("");
        let text = match &line["message"]["content"] {
            Value::String(s) => s.clone(),
            Value::Array(b) => b[0]["text"].as_str().unwrap_or("").to_string(),
            _ => String::new(),
        };
        let found = cmp.rebuilt[at..].iter().position(|u| {
            u.role == role
                && u.kind == "text"
                && (u.text == text || u.text.strip_suffix('\n') == Some(&text))
        });
        let Some(offset) = found else {
            let preview: String = text.chars().take(100).collect();
            cmp.unexplained(format!(
                "carried {role} item not sent in order: {preview:?}"
            ));
            return;
        };
        at += offset + 1;
    }
}

fn user_text(
    cmp: &mut Compare<'_>,
    unit: &Unit,
    src: &Source,
    left_out: &HashMap<usize, String>,
    header_snapshot: Option<&str>,
) {
    let text = unit.text.trim_end();
    if header_snapshot == Some(text.trim()) {
        return; // checked by `startup_context`
    }
    let info = src.user.get(text).cloned();
    let reason = info
        .as_ref()
        .and_then(|i| left_out.get(&i.line))
        .map(String::as_str);
    if let Some(words) = queued_message(text) {
        cmp.conversation("user", words, reason);
        return;
    }
    match info {
        None if unit.beside_tool_result => cmp.residue("tool result"),
        None => {
            // Not from the transcript: an attachment Claude Code renders as
            // a reminder, or its own per-start context.
            let again = cmp.rebuilt.iter().any(|u| u.text.trim_end() == text);
            let reminder = text.starts_with("<system-reminder>")
                && text.ends_with("</system-reminder>")
                && text.matches("<system-reminder>").count() == 1;
            if again || reminder {
                cmp.residue("system-reminder: attachment or per-start context");
            } else {
                cmp.unexplained(format!(
                    "user text neither in the source nor re-added by Claude Code: {:?}",
                    text.chars().take(100).collect::<String>()
                ));
            }
        }
        Some(i) if i.local_command => cmp.residue("local command"),
        Some(i) if i.sidechain => cmp.residue("sidechain record"),
        Some(i) if i.other_agent => cmp.residue("other agent or scheduled prompt"),
        Some(i) if i.summary && reason.is_some() => cmp.residue("compact summary"),
        Some(i) if i.summary => cmp.conversation("user", text, None),
        Some(i) if i.meta && i.companion => cmp.conversation("user", text, reason),
        Some(i) if i.meta && text.trim_start().starts_with("<channel") => {
            cmp.conversation("user", text, reason);
        }
        Some(i) if i.meta => cmp.residue("meta injection"),
        Some(_) => {
            let (words, command) = expected_user_text(text);
            if command.is_none() && words.is_empty() {
                cmp.residue("injected element");
                return;
            }
            if let Some(c) = command {
                cmp.conversation("user", &c, reason);
            }
            if !words.is_empty() {
                cmp.conversation("user", &words, reason);
            }
        }
    }
}

/// A message the user sent while the assistant was working, as Claude
/// Code shows it (a queued input attachment).
fn queued_message(text: &str) -> Option<&str> {
    const HEAD: &str = "The user sent a new message while you were working:\n";
    let at = text.find(HEAD)? + HEAD.len();
    let rest = &text[at..];
    let end = rest
        .find("\n\nThis is how Claude Code surfaces")
        .or_else(|| rest.find("\n\nIMPORTANT:"))
        .unwrap_or(rest.len());
    Some(rest[..end].trim())
}

/// The words typed when rejecting a tool call (`… the user said:\n<words>`).
fn rejection_words(block: &Value) -> Option<String> {
    if block["is_error"] != true {
        return None;
    }
    let content = match &block["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => return None,
    };
    let (_, words) = content.split_once("the user said:\n")?;
    Some(words.trim().to_string()).filter(|w| !w.is_empty())
}

/// The startup context must be in both requests (once in the rebuilt),
/// unless the original resume does not load its record at all.
fn startup_context(
    cmp: &mut Compare<'_>,
    original: &[Unit],
    contexts: &[(String, bool)],
    header_snapshot: Option<&(String, bool)>,
) {
    let mut in_both = 0;
    for (context, loaded) in contexts {
        let needle = format!("{SESSION_START}{context}");
        let count = |units: &[Unit]| {
            units
                .iter()
                .map(|u| u.text.matches(&needle).count())
                .sum::<usize>()
        };
        let (in_original, in_rebuilt) = (count(original), count(&cmp.rebuilt));
        if in_rebuilt != 1 {
            cmp.unexplained(format!(
                "the rebuilt request shows the SessionStart context {in_rebuilt} times"
            ));
        }
        if in_original == 0 && *loaded {
            cmp.unexplained("the original request lacks the SessionStart context".into());
        }
        let before_first_reply = |units: &[Unit]| {
            let at = units.iter().position(|u| u.text.contains(&needle));
            let reply = units.iter().position(|u| u.role == "assistant");
            at.is_some_and(|a| reply.is_none_or(|r| a < r))
        };
        if in_original > 0 {
            in_both += 1;
            if !(before_first_reply(original) && before_first_reply(&cmp.rebuilt)) {
                cmp.unexplained(
                    "the SessionStart context is not before the first reply in both".into(),
                );
            }
        }
    }
    cmp.row.startup = match (contexts.len(), header_snapshot) {
        (0, None) => "-".into(),
        (0, Some((raw, loaded))) => {
            let in_original = original.iter().any(|u| u.text.trim() == raw);
            let in_rebuilt = cmp
                .rebuilt
                .iter()
                .filter(|u| u.text.contains(raw.as_str()))
                .count();
            if (*loaded && !in_original) || in_rebuilt != 1 {
                cmp.unexplained(format!(
                    "startup record: in the original {in_original}, in the rebuilt {in_rebuilt} times"
                ));
            }
            if in_original {
                "reminder record (both)".into()
            } else {
                "reminder record (not loaded by orig)".into()
            }
        }
        (n, _) => format!("{n} SessionStart ({in_both} in both)"),
    };
}

/// Everything of the rebuilt conversation that no original text explained:
/// it must come from a record the original resume does not load (before
/// a compaction boundary, past a broken link), or be the startup header.
fn rebuilt_extras(cmp: &mut Compare<'_>, plan: &Plan, candidate: &[Value], src: &Source) {
    let carried: HashMap<String, &ktr_engine::candidate::ManifestEntry> = candidate
        .iter()
        .zip(&plan.candidate.manifest)
        .filter_map(|(line, m)| {
            let text = match &line["message"]["content"] {
                Value::String(s) => s.clone(),
                Value::Array(b) => b.first()?["text"].as_str()?.to_string(),
                _ => return None,
            };
            Some((text.trim_end().to_string(), m))
        })
        .collect();
    let mut found = Vec::new();
    for (i, unit) in cmp.rebuilt.iter().enumerate() {
        if unit.kind != "text" {
            found.push(Err(format!("a {} block in the rebuilt request", unit.kind)));
            continue;
        }
        if unit.role == "system" || cmp.touched.contains(&i) {
            continue;
        }
        let Some(m) = carried.get(unit.text.trim_end()) else {
            continue; // not carried: Claude Code's own per-start context
        };
        let loaded = m
            .source_uuid
            .as_ref()
            .is_some_and(|u| src.loaded.contains(u));
        found.push(match (m.kind, loaded) {
            (ItemKind::StartupSnapshot, _) => Ok("rebuilt only: the startup header item"),
            (_, false) if m.source_line < src.last_boundary => {
                Ok("rebuilt only: before a compaction boundary")
            }
            (_, false) => Ok("rebuilt only: not on the chain the original resume loads"),
            (_, true) if plan.report.history_mode == HistoryMode::File => {
                Ok("rebuilt only: file order (the chain is ambiguous, history fallback)")
            }
            (_, true) => Err(format!(
                "rebuilt {} text the original request lacks: {:?}",
                unit.role,
                unit.text.chars().take(100).collect::<String>()
            )),
        });
    }
    for f in found {
        match f {
            Ok(why) => cmp.residue(why),
            Err(e) => cmp.unexplained(e),
        }
    }
}

/// Resume `session` with `probe`; the request the model got.
fn resume(env: &ClaudeEnv, api: &FakeApi, session: &str, probe: &str) -> Result<Vec<Unit>, String> {
    let before = api.turns().len();
    let run = env.resume(session, probe);
    if !run.status.success() {
        return Err(format!(
            "claude --resume exited {}: {}",
            run.status,
            run.stderr
                .lines()
                .chain(run.stdout.lines())
                .last()
                .unwrap_or("")
        ));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let turns = api.turns();
        if let Some(request) = turns[before.min(turns.len())..]
            .iter()
            .rev()
            .find(|r| last_user_text(r.messages()).contains(probe))
        {
            return Ok(history(request, probe));
        }
        if std::time::Instant::now() > deadline {
            return Err("no request carried the probe".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Plan `case`, resume its original and its candidate, compare.
fn differential(env: &ClaudeEnv, api: &FakeApi, case: &Case) -> Row {
    let mut row = Row {
        file: case.name.clone(),
        ..Row::default()
    };
    let config = env.config("");
    let id = fixed_id(&format!("rebuilt:{}", case.name));
    let mut plan = plan::build(&config, &case.source, Some(&sid(&id))).unwrap();
    if plan.report.malformed_lines > 0 {
        plan = plan::build(
            &env.config("on_malformed_line = \"skip\""),
            &case.source,
            Some(&sid(&id)),
        )
        .unwrap();
    }
    if let Some(why) = &plan.report.blocked_reason {
        row.status = format!("not planned: {why}");
        return row;
    }
    let original_id = fixed_id(&format!("original:{}", case.name));
    fs::create_dir_all(&env.sandbox.project).unwrap();
    fs::copy(&case.source, env.transcript(&original_id)).unwrap();
    fs::write(env.transcript(&id), plan.candidate.bytes()).unwrap();
    let probe = format!(
        "FIDELITY-PROBE {}: what did we talk about?",
        fixed_id(&case.name)
    );
    let original = match resume(env, api, &original_id, &probe) {
        Ok(units) => units,
        Err(e) => {
            row.status = format!("original does not resume: {e}");
            return row;
        }
    };
    let rebuilt = match resume(env, api, &id, &probe) {
        Ok(units) => units,
        Err(e) => {
            row.status = "compared".into();
            row.unexplained
                .push(format!("the rebuilt candidate does not resume: {e}"));
            return row;
        }
    };
    row.status = "compared".into();
    // What `claude_resume`'s residue check sees: no tool result, tool input
    // or thinking text of the source anywhere in the rebuilt request.
    let sent: String = rebuilt.iter().map(|u| u.text.as_str()).collect();
    for piece in residue_sent(&case.source, &config, &plan.candidate.lines, &sent) {
        row.unexplained
            .push(format!("source residue reached the model: {piece:?}"));
    }
    compare(&original, rebuilt, &case.source, &plan, &config, &mut row);
    row
}

fn print_table(rows: &[Row]) {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nfidelity: original vs rebuilt resume in claude 2.1.328, text by text"
    );
    let _ = writeln!(
        out,
        "{:<44} {:>5} {:>5} {:>5} {:<26} {:>5}  residue by category",
        "file", "orig", "rebuilt", "conv", "startup", "unexp"
    );
    for r in rows {
        let name: String = if r.file.chars().count() > 44 {
            let chars: Vec<char> = r.file.chars().collect();
            let tail: String = chars[chars.len() - 23..].iter().collect();
            format!("{}…{tail}", chars[..20].iter().collect::<String>())
        } else {
            r.file.clone()
        };
        if r.status != "compared" {
            let _ = writeln!(out, "{name:<44} {}", r.status);
            continue;
        }
        let residue: Vec<String> = r.residue.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            out,
            "{name:<44} {:>5} {:>5} {:>5} {:<26} {:>5}  {}",
            r.original_texts,
            r.rebuilt_texts,
            r.conversation,
            r.startup,
            r.unexplained.len(),
            residue.join(", ")
        );
        for u in &r.unexplained {
            let _ = writeln!(out, "    UNEXPLAINED {u}");
        }
    }
    crate::support::report("fidelity", &out);
}

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN) and the corpus (KTR_CORPUS, default ../shared/corpus)"]
fn the_rebuilt_window_shows_what_the_original_resume_shows_minus_residue() {
    let bin = claude_bin();
    let cases = cases();
    let next = AtomicUsize::new(0);
    let rows = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| {
                let api = FakeApi::start(Vec::new());
                let env = ClaudeEnv::new(&bin, &api);
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(case) = cases.get(i) else { break };
                    let row = differential(&env, &api, case);
                    rows.lock().unwrap().push(row);
                }
            });
        }
    });
    let mut rows = rows.into_inner().unwrap();
    rows.sort_by(|a, b| a.file.cmp(&b.file));
    print_table(&rows);
    // Only files without a conversation of their own (subagent transcripts,
    // sidechain-only fixtures) may be refused; every original must resume.
    let skipped: Vec<String> = rows
        .iter()
        .filter(|r| {
            r.status != "compared" && r.status != "not planned: no conversation turns to carry"
        })
        .map(|r| format!("{}: {}", r.file, r.status))
        .collect();
    assert!(skipped.is_empty(), "files not compared: {skipped:?}");
    let compared: Vec<&Row> = rows.iter().filter(|r| r.status == "compared").collect();
    let bad: Vec<&Row> = compared
        .iter()
        .copied()
        .filter(|r| !r.unexplained.is_empty())
        .collect();
    assert!(
        bad.is_empty(),
        "{} file(s) with unexplained differences",
        bad.len()
    );
    // Every own fixture and most of the corpus must really be compared.
    for own in [
        "session_start_context",
        "command_expansions",
        "broken_timestamps",
    ] {
        assert!(
            compared.iter().any(|r| r.file == format!("{own}.jsonl")),
            "{own} was not compared"
        );
    }
    assert!(
        compared.len() >= 20,
        "only {} files compared",
        compared.len()
    );
}

/// Plan `source` into a candidate file `<dir>/<name>.jsonl`; its path.
fn rebuild_into(config: &Config, source: &Path, dir: &Path, name: &str) -> (PathBuf, Plan) {
    let id = fixed_id(name);
    let plan = plan::build(config, source, Some(&sid(&id))).unwrap();
    assert!(!plan.is_blocked(), "{:?}", plan.report.blocked_reason);
    let path = dir.join(format!("{id}.jsonl"));
    fs::write(&path, plan.candidate.bytes()).unwrap();
    (path, plan)
}

/// The texts of a request's history, for an exact comparison.
fn texts(units: &[Unit]) -> Vec<(String, String)> {
    units
        .iter()
        .map(|u| (u.role.clone(), u.text.trim_end().to_string()))
        .collect()
}

/// Rebuilding a rebuilt session changes nothing the model sees: no second
/// `SessionStart` context, header or stamp, the command expansion once.
#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn a_rebuild_of_a_rebuild_shows_the_model_the_same_window() {
    let bin = claude_bin();
    let api = FakeApi::start(Vec::new());
    let env = ClaudeEnv::new(&bin, &api);
    fs::create_dir_all(&env.sandbox.project).unwrap();
    let config = env.config("");
    let dir = env.sandbox.project.clone();
    for fixture_name in [
        "session_start_context",
        "command_expansions",
        "startup_meta_reminder",
    ] {
        let (first, first_plan) = rebuild_into(
            &config,
            &fixture(fixture_name),
            &dir,
            &format!("first:{fixture_name}"),
        );
        let (_, second_plan) =
            rebuild_into(&config, &first, &dir, &format!("second:{fixture_name}"));
        assert_eq!(
            first_plan.report.startup_sha256, second_plan.report.startup_sha256,
            "{fixture_name}: the frozen startup text changed"
        );
        let probe = format!("REBUILD-TWICE-PROBE {fixture_name}");
        let once = resume(&env, &api, &first_plan.candidate.session_id, &probe).unwrap();
        let twice = resume(&env, &api, &second_plan.candidate.session_id, &probe).unwrap();
        // Claude Code's own per-start reminders aside, the windows are equal.
        let own = |units: &[Unit]| -> Vec<(String, String)> {
            texts(units)
                .into_iter()
                .filter(|(role, text)| !(role == "user" && text.starts_with("<system-reminder>")))
                .collect()
        };
        assert_eq!(
            own(&once),
            own(&twice),
            "{fixture_name}: the second rebuild differs"
        );
        let all: String = texts(&twice).into_iter().map(|(_, t)| t + "\n").collect();
        assert!(
            all.matches("[续窗启动快照").count() <= 1,
            "{fixture_name}: stacked header"
        );
        assert!(
            !all.contains("]\n[发生时间:"),
            "{fixture_name}: stacked stamps"
        );
        assert!(
            all.matches(SESSION_START).count() <= 2,
            "{fixture_name}: stacked contexts"
        );
        eprintln!(
            "{fixture_name}: {} texts, identical after a second rebuild",
            own(&twice).len()
        );
    }
}
