//! A transcript record taken apart into the texts recall searches, each
//! with its kind: what the person typed, what the assistant said, its
//! thinking, its tool calls and their results, injections, images.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a searched text is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A user record's text (typed prompts, channel messages).
    User,
    /// The assistant's text.
    Assistant,
    /// A tool call (its input, as JSON).
    ToolUse,
    /// A tool's result (including an offloaded `tool-results/` file).
    ToolResult,
    /// The assistant's thinking.
    Thinking,
    /// What Claude Code, hooks or MCP servers put in: `isMeta` user
    /// records, attachments, system records.
    Injection,
    /// An image: its type and size only.
    Image,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::User,
        Kind::Assistant,
        Kind::ToolUse,
        Kind::ToolResult,
        Kind::Thinking,
        Kind::Injection,
        Kind::Image,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::User => "user",
            Kind::Assistant => "assistant",
            Kind::ToolUse => "tool_use",
            Kind::ToolResult => "tool_result",
            Kind::Thinking => "thinking",
            Kind::Injection => "injection",
            Kind::Image => "image",
        }
    }

    /// A kind by name (`attachment` is `injection`).
    pub fn parse(name: &str) -> Option<Kind> {
        let name = if name == "attachment" {
            "injection"
        } else {
            name
        };
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// The name of a call to ktr's own recall tools (`mcp__ktr__…`, or the
/// plugin's `mcp__plugin_ktr_ktr__…`).
pub(crate) fn is_recall_call(name: &str) -> bool {
    name.starts_with("mcp__")
        && (name.ends_with("__thread_rebuild_recall")
            || name.ends_with("__thread_rebuild_recall_get"))
}

/// The bytes every line holding such a call holds.
pub(crate) const RECALL_CALL: &[u8] = b"__thread_rebuild_recall";

/// One searchable text of a record.
#[derive(Debug)]
pub struct Part<'a> {
    pub kind: Kind,
    /// The tool's name (tool calls).
    pub tool: Option<&'a str>,
    /// The call a result answers, or the call's own id.
    pub tool_use_id: Option<&'a str>,
    /// A tool call's input.
    pub input: Option<&'a Value>,
    pub text: std::borrow::Cow<'a, str>,
}

/// A line as JSON. A string holding a lone surrogate (half an emoji, as
/// JavaScript writes it: Claude Code loads it, `serde_json` refuses it)
/// is read with the surrogate's stand-in ([`crate::lone`]), so the rest of
/// the record is searched as any other.
pub fn decode(bytes: &[u8]) -> Option<Value> {
    serde_json::from_slice(bytes).ok().or_else(|| {
        let mapped = crate::lone::map_line(bytes)?;
        serde_json::from_slice(&mapped).ok()
    })
}

/// A character as a person is shown it: a lone surrogate's stand-in as
/// U+FFFD, the replacement character (what a terminal shows for it).
pub fn visible(c: char) -> char {
    if crate::lone::is_stand_in(c) {
        char::REPLACEMENT_CHARACTER
    } else {
        c
    }
}

/// The record's `timestamp`, if it has one.
pub fn timestamp(record: &Value) -> Option<&str> {
    record.get("timestamp").and_then(Value::as_str)
}

/// The record's `uuid`, if it has one.
pub fn uuid(record: &Value) -> Option<&str> {
    record.get("uuid").and_then(Value::as_str)
}

/// The fields of `toolUseResult` that hold text found nowhere else in its
/// record (measured on the corpus: the file an edit changed, its patch,
/// the to-do lists, the questions asked, how a command's exit was read…);
/// its copies of the output itself (`stdout`, `content`) are not searched
/// twice. A `toolUseResult` that is a string (an error) is searched whole.
pub const TOOL_USE_RESULT_FIELDS: [&str; 10] = [
    "originalFile",
    "originalFileContents",
    "structuredPatch",
    "oldTodos",
    "newTodos",
    "file",
    "questions",
    "returnCodeInterpretation",
    "url",
    "routing",
];

/// The texts of `toolUseResult` that only it holds, joined by lines.
fn tool_use_result(record: &Value) -> Option<String> {
    match record.get("toolUseResult")? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => {
            let texts: Vec<String> = TOOL_USE_RESULT_FIELDS
                .iter()
                .filter_map(|k| Some((*k, o.get(*k)?)))
                .filter_map(|(k, v)| match k {
                    // A Read's `file`: only its path (its content is the output).
                    "file" => v
                        .get("filePath")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    _ => Some(strings_of(v)),
                })
                .filter(|t| !t.is_empty())
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
        _ => None,
    }
}

/// Every searchable text of `record`, in order.
pub fn parts(record: &Value) -> Vec<Part<'_>> {
    let mut out = Vec::new();
    let kind = record.get("type").and_then(Value::as_str).unwrap_or("");
    let meta = record.get("isMeta").and_then(Value::as_bool) == Some(true);
    let content = record.get("message").and_then(|m| m.get("content"));
    match kind {
        "user" => {
            let said = if meta { Kind::Injection } else { Kind::User };
            content_parts(content, said, &mut out);
            // What only `toolUseResult` holds, with the result it belongs to.
            let id = out
                .iter()
                .find(|p| p.kind == Kind::ToolResult)
                .and_then(|p| p.tool_use_id);
            if let (Some(id), Some(text)) = (id, tool_use_result(record)) {
                out.push(Part {
                    kind: Kind::ToolResult,
                    tool: None,
                    tool_use_id: Some(id),
                    input: None,
                    text: text.into(),
                });
            }
        }
        "assistant" => content_parts(content, Kind::Assistant, &mut out),
        "system" => {
            if let Some(text) = record.get("content").and_then(Value::as_str) {
                out.push(plain(Kind::Injection, text));
            }
        }
        "attachment" => {
            if let Some(a) = record.get("attachment") {
                out.push(Part {
                    kind: Kind::Injection,
                    tool: None,
                    tool_use_id: None,
                    input: None,
                    text: strings_of(a).into(),
                });
            }
        }
        _ => {}
    }
    out
}

fn plain(kind: Kind, text: &str) -> Part<'_> {
    Part {
        kind,
        tool: None,
        tool_use_id: None,
        input: None,
        text: text.into(),
    }
}

/// A message's content: a string or a list of blocks.
fn content_parts<'a>(content: Option<&'a Value>, said: Kind, out: &mut Vec<Part<'a>>) {
    match content {
        Some(Value::String(s)) => out.push(plain(said, s)),
        Some(Value::Array(blocks)) => blocks.iter().for_each(|b| block(b, said, out)),
        _ => {}
    }
}

fn block<'a>(b: &'a Value, said: Kind, out: &mut Vec<Part<'a>>) {
    let text = |key: &str| b.get(key).and_then(Value::as_str);
    match text("type").unwrap_or("") {
        "text" => out.extend(text("text").map(|t| plain(said, t))),
        "thinking" => out.extend(
            text("thinking")
                .filter(|t| !t.is_empty())
                .map(|t| plain(Kind::Thinking, t)),
        ),
        "image" => out.push(plain(Kind::Image, "").with_text(image_line(b))),
        // Recall's own calls hold nothing but the query: searching for a
        // term would find the very call that asks for it (Claude Code may
        // write it before the tool runs).
        "tool_use" if text("name").is_some_and(is_recall_call) => {}
        "tool_use" => out.push(Part {
            kind: Kind::ToolUse,
            tool: text("name"),
            tool_use_id: text("id"),
            input: b.get("input"),
            text: b
                .get("input")
                .map(Value::to_string)
                .unwrap_or_default()
                .into(),
        }),
        "tool_result" => {
            let id = text("tool_use_id");
            let mut inner = Vec::new();
            content_parts(b.get("content"), Kind::ToolResult, &mut inner);
            for mut p in inner {
                if p.kind == Kind::Assistant || p.kind == Kind::User {
                    p.kind = Kind::ToolResult;
                }
                p.tool_use_id = id;
                out.push(p);
            }
        }
        _ => {}
    }
}

impl<'a> Part<'a> {
    fn with_text(mut self, text: String) -> Part<'a> {
        self.text = text.into();
        self
    }
}

/// An image as recall shows it: its type and size, never its bytes.
fn image_line(b: &Value) -> String {
    let source = b.get("source");
    let media = source
        .and_then(|s| s.get("media_type"))
        .and_then(Value::as_str)
        .unwrap_or("unknown type");
    let data = source.and_then(|s| s.get("data")).and_then(Value::as_str);
    match data {
        Some(d) => format!("[image {media}, {} bytes]", d.len() / 4 * 3),
        None => format!("[image {media}]"),
    }
}

/// Every string inside `v`, one per line (an attachment's texts).
fn strings_of(v: &Value) -> String {
    let mut out = String::new();
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(s);
            }
            Value::Array(a) => stack.extend(a.iter().rev()),
            Value::Object(o) => stack.extend(o.values().rev()),
            _ => {}
        }
    }
    out
}

/// A tool call's input in one line: the command, the file, the pattern or
/// the address, else the start of its JSON.
pub fn input_summary(input: &Value) -> String {
    const KEYS: [&str; 8] = [
        "command",
        "file_path",
        "path",
        "pattern",
        "url",
        "query",
        "notebook_path",
        "description",
    ];
    let found = KEYS.iter().find_map(|k| {
        input
            .get(k)
            .and_then(Value::as_str)
            .map(|v| format!("{k}: {v}"))
    });
    one_line(&found.unwrap_or_else(|| input.to_string()), 160)
}

/// `text` on one line (whitespace runs folded), at most `max` characters.
pub fn one_line(text: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, word) in text.split_whitespace().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(word);
        if out.chars().count() > max {
            break;
        }
    }
    if let Some((at, _)) = out.char_indices().nth(max) {
        out.truncate(at);
        out.push('…');
    }
    out
}
