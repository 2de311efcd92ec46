//! Comparing what the model got from the original and from the rebuilt session, unit by unit.

use super::*;
use crate::support::plan::STAMP_PREFIX as STAMP;
use ktr_base::config::{Config, HistoryMode};
use ktr_engine::plan::Plan;
use ktr_engine::turns::{ItemKind, Role};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

/// The outcome for one file.
#[derive(Default)]
pub(super) struct Row {
    pub(super) file: String,
    pub(super) status: String,
    pub(super) original_texts: usize,
    pub(super) rebuilt_texts: usize,
    pub(super) conversation: usize,
    pub(super) startup: String,
    pub(super) residue: BTreeMap<String, usize>,
    pub(super) unexplained: Vec<String>,
}

/// A position in the rebuilt conversation: unit index and byte offset.
#[derive(Clone, Copy)]
pub(super) struct Cursor {
    pub(super) unit: usize,
    pub(super) offset: usize,
}

/// The comparison of one file's two requests.
pub(super) struct Compare<'a> {
    pub(super) rebuilt: Vec<Unit>,
    pub(super) cursor: Cursor,
    pub(super) touched: HashSet<usize>,
    pub(super) row: &'a mut Row,
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
pub(super) fn compare(
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
pub(super) fn carried_in_order(cmp: &mut Compare<'_>, candidate: &[Value]) {
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

pub(super) fn user_text(
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
pub(super) fn queued_message(text: &str) -> Option<&str> {
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
pub(super) fn rejection_words(block: &Value) -> Option<String> {
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
pub(super) fn startup_context(
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
pub(super) fn rebuilt_extras(
    cmp: &mut Compare<'_>,
    plan: &Plan,
    candidate: &[Value],
    src: &Source,
) {
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
