//! Context Claude Code dropped without a compaction boundary, found line
//! by line as the hooks' running account reads the bytes appended since
//! its last call:
//!
//! - a `system` record with subtype `microcompact_boundary` (Claude Code's
//!   microcompaction: old tool results cleared from the window);
//! - a tool result whose content is `[Old tool result content cleared]`
//!   (what Claude Code puts in place of a cleared result) — once per
//!   window (until the next compaction boundary);
//! - the usage rule: the API's count for a main-chain reply falls to less
//!   than half of the previous main-chain reply's, with no compaction
//!   boundary between them, and the second descends from the first (a
//!   `/rewind` or a branch to a point before the first reply makes the
//!   second a reply to another conversation: not compared).
//!
//! Sidechain and subagent records are ignored. Each finding has a key
//! (a record's uuid) so that the Stop hook says it once.

use serde::{Deserialize, Serialize};

/// What a content of a cleared tool result reads.
pub(crate) const CLEARED_TEXT: &str = "[Old tool result content cleared]";

/// How many uuids of the records since the last reply are kept (the
/// records between two replies are a handful; past this the comparison
/// is skipped rather than the memory grown).
const TIP_MAX: usize = 4096;

/// A kind of silent clearing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A `microcompact_boundary` system record.
    Microcompact,
    /// Tool results replaced by `[Old tool result content cleared]`.
    ToolResultsCleared,
    /// The usage fell by more than half between two consecutive replies.
    UsageDrop,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cleared {
    pub kind: Kind,
    /// What makes it this finding (said once per key).
    pub key: String,
    /// For [`Kind::UsageDrop`]: the earlier and the later reply's count.
    #[serde(default)]
    pub from_tokens: u64,
    #[serde(default)]
    pub to_tokens: u64,
}

/// The detector's state, kept with the running account.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clearing {
    /// The newest finding.
    #[serde(default)]
    pub last: Option<Cleared>,
    /// The previous main-chain reply's count.
    #[serde(default)]
    prev_tokens: Option<u64>,
    /// The uuids descending from that reply (the reply first).
    #[serde(default)]
    tip: Vec<String>,
    /// The newest compaction boundary's uuid ("start" before one).
    #[serde(default)]
    epoch: String,
    /// A cleared tool result was reported in this epoch.
    #[serde(default)]
    cleared_in_epoch: bool,
}

#[derive(Deserialize)]
struct Line {
    #[serde(rename = "type")]
    kind: Option<String>,
    subtype: Option<String>,
    uuid: Option<String>,
    #[serde(rename = "parentUuid", default)]
    parent: Option<String>,
    #[serde(rename = "isSidechain")]
    sidechain: Option<bool>,
    #[serde(rename = "agentId")]
    agent_id: Option<String>,
    #[serde(rename = "isApiErrorMessage")]
    api_error: Option<bool>,
    message: Option<Message>,
}

#[derive(Deserialize)]
struct Message {
    model: Option<String>,
    usage: Option<Usage>,
}

/// A user line that names the cleared marker, read again for its content
/// (only then: a tool result can be megabytes).
#[derive(Deserialize)]
struct WithContent {
    message: Option<Content>,
}

#[derive(Deserialize)]
struct Content {
    content: Option<serde_json::Value>,
}

#[allow(clippy::struct_field_names)]
#[derive(Deserialize)]
struct Usage {
    input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

impl Clearing {
    /// Read one transcript line (file order).
    pub fn line(&mut self, line: &[u8]) {
        let mapped = crate::lone::map_line(line);
        let Ok(l) = serde_json::from_slice::<Line>(mapped.as_deref().unwrap_or(line)) else {
            return;
        };
        if l.sidechain == Some(true) || l.agent_id.is_some() {
            return;
        }
        let uuid = l.uuid.clone().unwrap_or_default();
        match (l.kind.as_deref(), l.subtype.as_deref()) {
            (Some("system"), Some("compact_boundary")) => {
                // A new window: what was cleared before it is in the
                // summary now (the offer of its turns says that).
                self.epoch = uuid;
                self.cleared_in_epoch = false;
                self.last = None;
                self.forget_reply();
                return;
            }
            (Some("system"), Some("microcompact_boundary")) => {
                self.found(Kind::Microcompact, uuid, 0, 0);
                self.forget_reply();
                return;
            }
            _ => {}
        }
        let message = l.message.as_ref();
        if l.kind.as_deref() == Some("user")
            && !self.cleared_in_epoch
            && memchr::memmem::find(line, CLEARED_TEXT.as_bytes()).is_some()
            && serde_json::from_slice::<WithContent>(mapped.as_deref().unwrap_or(line))
                .ok()
                .and_then(|w| w.message?.content)
                .is_some_and(|c| holds_cleared_result(&c))
        {
            self.cleared_in_epoch = true;
            let key = format!(
                "cleared:{}",
                if self.epoch.is_empty() {
                    "start"
                } else {
                    &self.epoch
                }
            );
            self.found(Kind::ToolResultsCleared, key, 0, 0);
        }
        let tokens = (l.kind.as_deref() == Some("assistant")
            && l.api_error != Some(true)
            && message.is_some_and(|m| m.model.as_deref() != Some("<synthetic>")))
        .then(|| message.and_then(|m| m.usage.as_ref()))
        .flatten()
        .and_then(|u| {
            Some(
                u.input_tokens?
                    + u.cache_creation_input_tokens.unwrap_or(0)
                    + u.cache_read_input_tokens.unwrap_or(0),
            )
        });
        let descends = l.parent.as_ref().is_some_and(|p| self.tip.contains(p));
        match tokens {
            Some(now) => {
                if let Some(before) = self.prev_tokens.filter(|_| descends)
                    && now * 2 < before
                {
                    self.found(Kind::UsageDrop, uuid.clone(), before, now);
                }
                self.prev_tokens = Some(now);
                self.tip = vec![uuid];
            }
            None if descends && !uuid.is_empty() && self.tip.len() < TIP_MAX => {
                self.tip.push(uuid);
            }
            None => {}
        }
    }

    fn forget_reply(&mut self) {
        self.prev_tokens = None;
        self.tip.clear();
    }

    fn found(&mut self, kind: Kind, key: String, from_tokens: u64, to_tokens: u64) {
        self.last = Some(Cleared {
            kind,
            key,
            from_tokens,
            to_tokens,
        });
    }
}

/// A `tool_result` block whose content is the cleared marker (a string,
/// or a single text block).
fn holds_cleared_result(content: &serde_json::Value) -> bool {
    content.as_array().is_some_and(|blocks| {
        blocks.iter().any(|b| {
            b["type"] == "tool_result"
                && (b["content"] == CLEARED_TEXT
                    || b["content"]
                        .as_array()
                        .is_some_and(|c| c.iter().any(|t| t["text"] == CLEARED_TEXT)))
        })
    })
}

/// The line a person reads about `c`, with what a rebuild would carry
/// (`turns`, at ≈ `after` tokens) and how to ask for it.
pub fn said(c: &Cleared, turns: u64, after: u64, ask: &str) -> String {
    format!(
        "{}; a rebuild would carry all {turns} turns of the conversation word for word at ≈ {} tokens — {ask}",
        what(c),
        super::short(after)
    )
}

/// What happened, as a person reads it.
pub fn what(c: &Cleared) -> String {
    match c.kind {
        Kind::Microcompact => {
            "Claude Code cleared old tool results from this window without compacting (microcompact)"
                .to_string()
        }
        Kind::ToolResultsCleared => format!(
            "Claude Code cleared old tool results from this window without compacting (`{CLEARED_TEXT}`)"
        ),
        Kind::UsageDrop => format!(
            "Claude Code dropped context without compacting (the window fell from {} to {} tokens between two replies)",
            super::short(c.from_tokens),
            super::short(c.to_tokens)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rec(kind: &str, uuid: &str, parent: Option<&str>) -> serde_json::Value {
        json!({"type": kind, "uuid": uuid, "parentUuid": parent, "isSidechain": false,
               "sessionId": "s", "timestamp": "2026-12-04T00:00:00Z"})
    }

    fn reply(uuid: &str, parent: &str, tokens: u64) -> serde_json::Value {
        let mut r = rec("assistant", uuid, Some(parent));
        r["message"] = json!({"id": format!("msg_{uuid}"), "role": "assistant",
            "model": "claude-opus-5-5", "content": [{"type": "text", "text": "ok"}],
            "usage": {"input_tokens": tokens, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "output_tokens": 5}});
        r
    }

    fn user(uuid: &str, parent: Option<&str>) -> serde_json::Value {
        let mut r = rec("user", uuid, parent);
        r["message"] = json!({"role": "user", "content": "go on"});
        r
    }

    fn read(records: &[serde_json::Value]) -> Clearing {
        let mut c = Clearing::default();
        for r in records {
            c.line(r.to_string().as_bytes());
        }
        c
    }

    #[test]
    fn a_microcompact_boundary_is_a_clearing() {
        let mut mc = rec("system", "m1", Some("a1"));
        mc["subtype"] = "microcompact_boundary".into();
        mc["content"] = "Context microcompacted".into();
        let c = read(&[user("u1", None), reply("a1", "u1", 90_000), mc]);
        let last = c.last.unwrap();
        assert_eq!((last.kind, last.key.as_str()), (Kind::Microcompact, "m1"));
    }

    #[test]
    fn a_compaction_after_a_clearing_starts_a_window_without_one() {
        let mut mc = rec("system", "m1", Some("a1"));
        mc["subtype"] = "microcompact_boundary".into();
        let mut b = rec("system", "b1", None);
        b["subtype"] = "compact_boundary".into();
        let c = read(&[user("u1", None), reply("a1", "u1", 90_000), mc, b]);
        assert_eq!(c.last, None);
    }

    #[test]
    fn a_cleared_tool_result_is_a_clearing_once_per_window() {
        let cleared = |uuid: &str, parent: &str, as_block: bool| {
            let mut r = rec("user", uuid, Some(parent));
            let content = if as_block {
                json!([{"type": "text", "text": CLEARED_TEXT}])
            } else {
                json!(CLEARED_TEXT)
            };
            r["message"] = json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": content}]});
            r
        };
        let c = read(&[
            user("u1", None),
            reply("a1", "u1", 50_000),
            cleared("r1", "a1", false),
        ]);
        let first = c.last.clone().unwrap();
        assert_eq!(first.kind, Kind::ToolResultsCleared);
        // A second one in the same window is the same finding.
        let mut c2 = c.clone();
        c2.line(cleared("r2", "r1", true).to_string().as_bytes());
        assert_eq!(c2.last, Some(first.clone()));
        // After a compaction boundary it is a new one.
        let mut b = rec("system", "b1", None);
        b["subtype"] = "compact_boundary".into();
        c2.line(b.to_string().as_bytes());
        c2.line(cleared("r3", "b1", true).to_string().as_bytes());
        assert_ne!(c2.last.as_ref().unwrap().key, first.key);
        // The marker quoted in speech is not a clearing.
        let mut said = rec("user", "q1", Some("a1"));
        said["message"] =
            json!({"role": "user", "content": format!("what does {CLEARED_TEXT} mean?")});
        let c = read(&[user("u1", None), reply("a1", "u1", 50_000), said]);
        assert_eq!(c.last, None);
    }

    #[test]
    fn usage_falling_by_more_than_half_between_consecutive_replies_is_reported() {
        let c = read(&[
            user("u1", None),
            reply("a1", "u1", 612_000),
            user("u2", Some("a1")),
            reply("a2", "u2", 275_000),
        ]);
        let last = c.last.unwrap();
        assert_eq!(
            (
                last.kind,
                last.key.as_str(),
                last.from_tokens,
                last.to_tokens
            ),
            (Kind::UsageDrop, "a2", 612_000, 275_000)
        );
        assert_eq!(
            said(&last, 12, 41_000, "say REBUILD"),
            "Claude Code dropped context without compacting (the window fell from 612k to 275k tokens between two replies); a rebuild would carry all 12 turns of the conversation word for word at ≈ 41k tokens — say REBUILD"
        );
        // Half or more is not a drop.
        let c = read(&[
            user("u1", None),
            reply("a1", "u1", 600_000),
            user("u2", Some("a1")),
            reply("a2", "u2", 300_000),
        ]);
        assert_eq!(c.last, None);
    }

    #[test]
    fn no_drop_across_a_boundary_a_rewind_or_a_branch() {
        let mut b = rec("system", "b1", None);
        b["subtype"] = "compact_boundary".into();
        b["logicalParentUuid"] = "a1".into();
        let across_boundary = read(&[
            user("u1", None),
            reply("a1", "u1", 612_000),
            b,
            user("s1", Some("b1")),
            user("u2", Some("s1")),
            reply("a2", "u2", 30_000),
        ]);
        assert_eq!(across_boundary.last, None);
        // /rewind: the next prompt hangs off a record before the big reply.
        let rewound = read(&[
            user("u1", None),
            reply("a1", "u1", 20_000),
            user("u2", Some("a1")),
            reply("a2", "u2", 612_000),
            user("u3", Some("a1")),
            reply("a3", "u3", 21_000),
        ]);
        assert_eq!(rewound.last, None);
        // A new root (a branch that starts over).
        let branched = read(&[
            user("u1", None),
            reply("a1", "u1", 612_000),
            user("u2", None),
            reply("a2", "u2", 1_000),
        ]);
        assert_eq!(branched.last, None);
        // Records between the replies (tool results, attachments) keep
        // the line: a drop after them is still reported.
        let mut tool = rec("user", "t1", Some("a1"));
        tool["message"] = json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "x", "content": "ok"}]});
        let mut att = rec("attachment", "at1", Some("t1"));
        att["attachment"] = json!({"type": "todo_reminder"});
        let linked = read(&[
            user("u1", None),
            reply("a1", "u1", 612_000),
            tool,
            att,
            reply("a2", "at1", 100_000),
        ]);
        assert_eq!(linked.last.unwrap().kind, Kind::UsageDrop);
        // Sidechain replies are not the window's.
        let mut side = reply("s2", "a1", 1_000);
        side["isSidechain"] = true.into();
        let c = read(&[user("u1", None), reply("a1", "u1", 612_000), side]);
        assert_eq!(c.last, None);
    }
}
