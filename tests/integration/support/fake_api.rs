//! A fake Anthropic Messages API on 127.0.0.1 for driving the real Claude
//! Code CLI offline.
//!
//! It answers `POST /v1/messages` (streaming as SSE or plain JSON) from a
//! script of [`Rule`]s matched against the last user text, answers
//! `count_tokens` and every other path harmlessly, and logs every request
//! body: the `messages` array of a logged request is exactly what the model
//! would have seen.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// One content block of a scripted reply.
#[derive(Debug, Clone)]
pub enum Block {
    Text(String),
    /// Thinking text and its signature (sent as `thinking_delta` +
    /// `signature_delta`).
    Thinking(String, String),
    /// A tool call: tool name and input. A reply holding one stops with
    /// `stop_reason: "tool_use"`.
    ToolUse(String, Value),
}

/// Shorthand constructors for scripts.
pub fn text(s: &str) -> Block {
    Block::Text(s.to_string())
}
pub fn thinking(s: &str, signature: &str) -> Block {
    Block::Thinking(s.to_string(), signature.to_string())
}
pub fn tool(name: &str, input: Value) -> Block {
    Block::ToolUse(name.to_string(), input)
}

/// A scripted answer to a user message containing `trigger`: the first
/// reply answers that message; each following reply answers the tool
/// results of the one before (a reply with no tool call ends the rule).
#[derive(Debug, Clone)]
pub struct Rule {
    pub trigger: String,
    pub replies: Vec<Vec<Block>>,
}

impl Rule {
    pub fn new(trigger: &str, replies: Vec<Vec<Block>>) -> Rule {
        Rule {
            trigger: trigger.to_string(),
            replies,
        }
    }
}

/// A request the fake API received.
#[derive(Debug, Clone)]
pub struct Logged {
    pub path: String,
    /// The body parsed (lone surrogates through their stand-ins, as ktr
    /// reads them: a `Value` cannot hold one).
    pub body: Value,
    /// The body as it came.
    pub raw: Vec<u8>,
    /// Raw body size in bytes.
    pub bytes: usize,
    pub at: Instant,
    /// The session the CLI sent it for (its `x-claude-code-session-id`
    /// header), if it named one.
    pub session: Option<String>,
    /// Whether it asks the model to summarise the conversation: Claude
    /// Code compacting.
    pub compaction: bool,
}

impl Logged {
    /// Whether this is a turn of the conversation (a Messages call that
    /// offers tools), not a side call such as title generation.
    pub fn is_turn(&self) -> bool {
        self.path.starts_with("/v1/messages")
            && !self.path.contains("count_tokens")
            && self.body["tools"].as_array().is_some_and(|t| !t.is_empty())
    }

    /// The `messages` array.
    pub fn messages(&self) -> &[Value] {
        self.body["messages"].as_array().map_or(&[], Vec::as_slice)
    }

    /// Bytes of the serialized `messages` array: the size of the
    /// conversation the model was sent.
    pub fn messages_bytes(&self) -> usize {
        serde_json::to_string(&self.body["messages"]).map_or(0, |s| s.len())
    }
}

#[derive(Default)]
struct State {
    rules: Vec<Rule>,
    /// `tool_use` id → the replies still to come for that rule.
    continuations: HashMap<String, Vec<Vec<Block>>>,
    log: Vec<Logged>,
    next_id: u64,
    /// How long every conversation turn's reply is held back.
    turn_delay: Duration,
    /// The input tokens conversation turns report (None: about four bytes
    /// per token of what was sent).
    usage: Option<u64>,
    /// Keep only the newest message of each request (long runs).
    slim: bool,
    /// When each conversation turn's reply was sent whole (its
    /// `message_stop` is the last event of the one response body), with
    /// the reply's text blocks.
    replied: Vec<(Instant, Vec<String>)>,
}

/// The running fake API. Stops when dropped.
pub struct FakeApi {
    server: Arc<tiny_http::Server>,
    state: Arc<Mutex<State>>,
    pub port: u16,
    thread: Option<JoinHandle<()>>,
}

impl FakeApi {
    /// Listen on 127.0.0.1 on a free port and serve `rules`.
    pub fn start(rules: Vec<Rule>) -> FakeApi {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind 127.0.0.1:0"));
        let port = server.server_addr().to_ip().expect("an IP listener").port();
        let state = Arc::new(Mutex::new(State {
            rules,
            ..State::default()
        }));
        let thread = {
            let server = Arc::clone(&server);
            let state = Arc::clone(&state);
            thread::spawn(move || {
                for request in server.incoming_requests() {
                    // One thread per request: a delayed reply holds up no other.
                    let state = Arc::clone(&state);
                    thread::spawn(move || serve(request, &state));
                }
            })
        };
        FakeApi {
            server,
            state,
            port,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`, for `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Add rules (tried before the older ones).
    pub fn add_rules(&self, rules: Vec<Rule>) {
        let mut state = self.state.lock().unwrap();
        let old = std::mem::take(&mut state.rules);
        state.rules = rules.into_iter().chain(old).collect();
    }

    /// Make every conversation turn from now on report `input_tokens`
    /// (None: the default count), e.g. to fill Claude Code's window.
    pub fn set_usage(&self, input_tokens: Option<u64>) {
        self.state.lock().unwrap().usage = input_tokens;
    }

    /// Hold every later conversation reply back for `delay` (the model
    /// "thinks"); side calls and token counts are answered at once.
    pub fn set_turn_delay(&self, delay: Duration) {
        self.state.lock().unwrap().turn_delay = delay;
    }

    /// Keep only what a long run needs of each later request: its newest
    /// message (of `messages`), whether it offered tools, its session and
    /// whether it was a compaction — not its body.
    pub fn set_slim(&self) {
        self.state.lock().unwrap().slim = true;
    }

    /// How many conversation turns so far had `needle` in their newest
    /// user text.
    pub fn turns_asking(&self, needle: &str) -> usize {
        let state = self.state.lock().unwrap();
        state
            .log
            .iter()
            .filter(|l| l.is_turn() && last_user_text(l.messages()).contains(needle))
            .count()
    }

    /// Every request so far.
    pub fn log(&self) -> Vec<Logged> {
        self.state.lock().unwrap().log.clone()
    }

    /// When the last conversation turn's reply (its `message_stop`) was sent.
    pub fn last_reply_end(&self) -> Option<Instant> {
        self.state
            .lock()
            .unwrap()
            .replied
            .iter()
            .map(|(at, _)| *at)
            .max()
    }

    /// When each conversation turn's reply was sent whole, in order.
    pub fn reply_ends(&self) -> Vec<Instant> {
        let state = self.state.lock().unwrap();
        state.replied.iter().map(|(at, _)| *at).collect()
    }

    /// Whether a conversation reply holding a text block `text` was sent
    /// whole.
    pub fn replied_with(&self, text: &str) -> bool {
        let state = self.state.lock().unwrap();
        state
            .replied
            .iter()
            .any(|(_, texts)| texts.iter().any(|t| t == text))
    }

    /// The conversation turns so far (see [`Logged::is_turn`]).
    pub fn turns(&self) -> Vec<Logged> {
        self.log().into_iter().filter(Logged::is_turn).collect()
    }

    /// Wait until a conversation request whose last user text contains
    /// `needle` arrives; returns it.
    pub fn wait_turn(&self, needle: &str, timeout: Duration) -> Option<Logged> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(found) = self
                .turns()
                .into_iter()
                .find(|r| last_user_text(r.messages()).contains(needle))
            {
                return Some(found);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// All text of a message's content (string or text blocks), in order.
pub fn message_texts(message: &Value) -> Vec<String> {
    content_texts(&message["content"])
}

/// Text of a content value: a string, or the `text` of its text blocks.
pub fn content_texts(content: &Value) -> Vec<String> {
    match content {
        Value::String(s) => vec![s.clone()],
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

/// Append every string inside `v` to `out`, each followed by a NUL (so a
/// needle cannot match across two strings).
/// The text the model was sent in `request`, system messages left aside.
pub fn conversation(request: &Logged) -> String {
    request
        .messages()
        .iter()
        .filter(|m| m["role"] != "system")
        .flat_map(message_texts)
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn all_strings(v: &Value, out: &mut String) {
    match v {
        Value::String(s) => {
            out.push_str(s);
            out.push('\0');
        }
        Value::Array(a) => a.iter().for_each(|x| all_strings(x, out)),
        Value::Object(o) => o.values().for_each(|x| all_strings(x, out)),
        _ => {}
    }
}

/// The text of the last user message (all its text blocks joined).
pub fn last_user_text(messages: &[Value]) -> String {
    messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(|m| message_texts(m).join("\n"))
        .unwrap_or_default()
}

fn serve(mut request: tiny_http::Request, state: &Mutex<State>) {
    let path = request.url().to_string();
    let mut raw = Vec::new();
    let _ = std::io::Read::read_to_end(request.as_reader(), &mut raw);
    let mapped = ktr_engine::lone::map_line(&raw);
    let body: Value =
        serde_json::from_slice(mapped.as_deref().unwrap_or(&raw)).unwrap_or(Value::Null);
    let is_post = *request.method() == tiny_http::Method::Post;
    let session = request
        .headers()
        .iter()
        .find(|h| h.field.equiv("x-claude-code-session-id"))
        .map(|h| h.value.as_str().to_string());
    let logged = Logged {
        path: path.clone(),
        bytes: raw.len(),
        body,
        raw: raw.clone(),
        at: Instant::now(),
        session,
        compaction: raw
            .windows(SUMMARY_ASKED.len())
            .any(|w| w == SUMMARY_ASKED.as_bytes()),
    };
    // Logged on arrival, so a test sees a request whose reply is delayed.
    let mut log = state.lock().unwrap();
    let kept = if log.slim {
        slimmed(&logged)
    } else {
        logged.clone()
    };
    log.log.push(kept);
    drop(log);
    let mut said = Vec::new();
    let response = if is_post && path.starts_with("/v1/messages/count_tokens") {
        // A rough, deterministic count: about four bytes per token.
        json_response(&json!({ "input_tokens": 1 + logged.messages_bytes() / 4 }))
    } else if is_post && path.starts_with("/v1/messages") {
        let (id, blocks, tool_ids, delay, usage) = {
            let mut state = state.lock().unwrap();
            state.next_id += 1;
            let id = format!("msg_fake_{:06}", state.next_id);
            let (blocks, rest) = choose(&mut state, &logged);
            let tool_ids = register_tools(&mut state, &id, &blocks, rest);
            let delay = if logged.is_turn() {
                state.turn_delay
            } else {
                Duration::ZERO
            };
            let usage = usage(&logged, state.usage.filter(|_| logged.is_turn()));
            (id, blocks, tool_ids, delay, usage)
        };
        thread::sleep(delay);
        said = blocks
            .iter()
            .filter_map(|b| match b {
                Block::Text(t) => Some(t.clone()),
                _ => None,
            })
            .collect();
        if logged.body["stream"] == Value::Bool(true) {
            sse_response(&id, &logged, &blocks, &tool_ids, &usage)
        } else {
            json_response(&message_json(&id, &logged, &blocks, &tool_ids, &usage))
        }
    } else {
        json_response(&json!({}))
    };
    let _ = request.respond(response);
    if is_post && logged.is_turn() {
        state.lock().unwrap().replied.push((Instant::now(), said));
    }
}

/// What Claude Code's compaction request asks the model (2.1.x).
const SUMMARY_ASKED: &str = "create a detailed summary of the conversation";

/// `logged` without its body but for the newest non-system message and
/// whether tools were offered.
fn slimmed(logged: &Logged) -> Logged {
    let newest = logged
        .messages()
        .iter()
        .rev()
        .find(|m| m["role"] != "system")
        .cloned();
    let tools = if logged.body["tools"]
        .as_array()
        .is_some_and(|t| !t.is_empty())
    {
        json!([{"name": "kept"}])
    } else {
        json!([])
    };
    Logged {
        body: json!({"messages": newest.into_iter().collect::<Vec<_>>(), "tools": tools}),
        raw: Vec::new(),
        ..logged.clone()
    }
}

/// The reply for a request and the replies still to come: the
/// continuation of a tool call it answers, else the first rule whose
/// trigger is in the last user text, else a short default text.
fn choose(state: &mut State, logged: &Logged) -> (Vec<Block>, Vec<Vec<Block>>) {
    let default = || (vec![Block::Text("Fake reply.".to_string())], Vec::new());
    let messages = logged.messages();
    // Claude Code also sends `role: "system"` messages (environment,
    // listings); the turn answers the last user or assistant message.
    let Some(last) = messages
        .iter()
        .rev()
        .find(|m| m["role"] != "system")
        .filter(|m| m["role"] == "user")
    else {
        return default();
    };
    if !logged.is_turn() {
        return default();
    }
    let answered: Vec<&str> = last["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .filter_map(|b| b["tool_use_id"].as_str())
        .collect();
    let mut replies = if answered.is_empty() {
        let text = last_user_text(messages);
        match state.rules.iter().find(|r| text.contains(&r.trigger)) {
            Some(rule) => rule.replies.clone(),
            None => return default(),
        }
    } else {
        match answered
            .iter()
            .find_map(|id| state.continuations.remove(*id))
        {
            Some(rest) => rest,
            None => return default(),
        }
    };
    if replies.is_empty() {
        return default();
    }
    let first = replies.remove(0);
    (first, replies)
}

/// Give every tool call an id; the replies still to come continue when
/// the first tool call's result comes back.
fn register_tools(
    state: &mut State,
    message_id: &str,
    blocks: &[Block],
    rest: Vec<Vec<Block>>,
) -> Vec<String> {
    let ids: Vec<String> = blocks
        .iter()
        .enumerate()
        .filter(|(_, b)| matches!(b, Block::ToolUse(..)))
        .map(|(i, _)| format!("toolu_{}_{i}", message_id.trim_start_matches("msg_")))
        .collect();
    if let (Some(first), false) = (ids.first(), rest.is_empty()) {
        state.continuations.insert(first.clone(), rest);
    }
    ids
}

fn model(logged: &Logged) -> String {
    logged.body["model"]
        .as_str()
        .unwrap_or("claude-fake")
        .to_string()
}

/// The usage a reply reports: `input_tokens` when the test chose it.
fn usage(logged: &Logged, input_tokens: Option<u64>) -> Value {
    json!({
        "input_tokens": input_tokens.unwrap_or(1 + logged.messages_bytes() as u64 / 4),
        "output_tokens": 10,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    })
}

fn stop_reason(blocks: &[Block]) -> &'static str {
    if blocks.iter().any(|b| matches!(b, Block::ToolUse(..))) {
        "tool_use"
    } else {
        "end_turn"
    }
}

fn message_json(
    id: &str,
    logged: &Logged,
    blocks: &[Block],
    tool_ids: &[String],
    usage: &Value,
) -> Value {
    let mut tools = tool_ids.iter();
    let content: Vec<Value> = blocks
        .iter()
        .map(|b| match b {
            Block::Text(t) => json!({"type": "text", "text": t}),
            Block::Thinking(t, s) => json!({"type": "thinking", "thinking": t, "signature": s}),
            Block::ToolUse(name, input) => json!({
                "type": "tool_use", "id": tools.next(), "name": name, "input": input,
            }),
        })
        .collect();
    json!({
        "id": id, "type": "message", "role": "assistant", "model": model(logged),
        "content": content, "stop_reason": stop_reason(blocks), "stop_sequence": null,
        "usage": usage,
    })
}

/// The streamed form of a reply: the event sequence of the Messages API.
fn sse_response(
    id: &str,
    logged: &Logged,
    blocks: &[Block],
    tool_ids: &[String],
    usage: &Value,
) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let mut out = String::new();
    let mut event = |name: &str, data: Value| {
        out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    };
    event(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "model": model(logged),
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": usage,
        }}),
    );
    let mut tools = tool_ids.iter();
    for (index, block) in blocks.iter().enumerate() {
        let (start, deltas) = match block {
            Block::Text(t) => (
                json!({"type": "text", "text": ""}),
                vec![json!({"type": "text_delta", "text": t})],
            ),
            Block::Thinking(t, s) => (
                json!({"type": "thinking", "thinking": "", "signature": ""}),
                vec![
                    json!({"type": "thinking_delta", "thinking": t}),
                    json!({"type": "signature_delta", "signature": s}),
                ],
            ),
            Block::ToolUse(name, input) => (
                json!({"type": "tool_use", "id": tools.next(), "name": name, "input": {}}),
                vec![json!({"type": "input_json_delta", "partial_json": input.to_string()})],
            ),
        };
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": start}),
        );
        for delta in deltas {
            event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": delta}),
            );
        }
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        );
    }
    event(
        "message_delta",
        json!({"type": "message_delta",
               "delta": {"stop_reason": stop_reason(blocks), "stop_sequence": null},
               "usage": {"output_tokens": 10}}),
    );
    event("message_stop", json!({"type": "message_stop"}));
    tiny_http::Response::from_data(out.into_bytes())
        .with_header(header("Content-Type", "text/event-stream"))
        .with_header(header("request-id", &format!("req_{id}")))
}

fn json_response(value: &Value) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    tiny_http::Response::from_data(value.to_string().into_bytes())
        .with_header(header("Content-Type", "application/json"))
}

fn header(name: &str, value: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("ASCII header")
}
