//! One pass over a transcript.
//!
//! The scan keeps only what later steps need: a small [`Node`] per record
//! (links for the chain walk), an [`Event`] per record that holds speech
//! (the conversation itself), ledger tallies, and drift counters. Tool
//! results and other residue are measured and forgotten.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::BufRead;

use regex::Regex;
use sha2::{Digest, Sha256};

use crate::engine::classify::{self, AssistantReading, NotSpeech, UserReading};
use crate::engine::ledger::{Category, Tally};
use crate::engine::transcript::{self, Attachment, Content, Line, Parent, Record};
use crate::fsutil::hex;

/// Interned uuid or message id.
pub type Sym = u32;

/// How a record points at its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// No `parentUuid` field.
    Missing,
    /// `parentUuid: null`.
    Root,
    /// `parentUuid: "<uuid>"`.
    To(Sym),
}

/// The role a record plays in the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordRole {
    User,
    Assistant,
    /// Attachments, system records, progress…: links only.
    Other,
}

/// The chain-relevant facts of one record.
#[derive(Debug, Clone)]
pub struct Node {
    pub line: usize,
    pub uuid: Option<Sym>,
    pub parent: Link,
    pub logical_parent: Option<Sym>,
    pub boundary: bool,
    pub role: RecordRole,
    pub sidechain: bool,
    pub message_id: Option<Sym>,
    /// Index into [`Scan::events`] when the record holds speech.
    pub event: Option<usize>,
}

/// What a speech-bearing record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Speech {
    /// Typed, channel or queued words, or words typed when rejecting a tool.
    User(String),
    /// A slash command rendered `/name args` (speech only if answered).
    Slash(String),
    /// Assistant text (and reply-tool texts).
    Assistant(String),
    /// A compaction summary.
    Summary(String),
    /// A slash command's expansion (`isMeta` + `turnCompanion`), carried
    /// with the command it follows.
    Expansion(String),
    /// A `SessionStart` hook's context recorded before any speech in the file
    /// (the startup snapshot of today's format): its text and the raw
    /// `attachment` object, carried verbatim so Claude Code renders it as
    /// it did for the original.
    StartupContext { text: String, attachment: String },
    /// Only injected elements including a `<system-reminder>` (a startup
    /// snapshot candidate when it comes before any speech).
    Injected,
}

/// Metadata copied onto the candidate line.
#[derive(Debug, Clone, Default)]
pub struct Meta {
    pub line: usize,
    pub uuid: Option<String>,
    pub timestamp: Option<String>,
    pub message_id: Option<String>,
    pub cwd: Option<String>,
    pub version: Option<String>,
    pub git_branch: Option<String>,
    pub user_type: Option<String>,
    pub entrypoint: Option<String>,
    /// The time a stamp may show: the record's own timestamp when it
    /// parses, else the nearest parseable one before it in the file, else
    /// none. A stamp is never built from anything else.
    pub stamp_time: Option<String>,
}

impl Meta {
    /// The record's own timestamp is missing or does not parse.
    pub fn timestamp_broken(&self) -> bool {
        !self
            .timestamp
            .as_deref()
            .is_some_and(transcript::is_timestamp)
    }
}

/// A record that holds speech (or a startup snapshot candidate).
#[derive(Debug, Clone)]
pub struct Event {
    pub meta: Meta,
    pub speech: Speech,
    /// SHA-256 of the source text before any stripping.
    pub source_sha256: String,
    /// Raw text with tags, when the record held a real `<system-reminder>`
    /// element and no speech came before it in the file.
    pub snapshot: Option<String>,
}

/// Counters of records that are not speech.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NotSpeechCounts {
    pub teammate_messages: u64,
    pub task_notifications: u64,
    pub system_prompts: u64,
    pub meta_injections: u64,
    pub local_commands: u64,
    pub synthetic_assistant: u64,
    pub sidechain_records: u64,
    pub queued_commands_other: u64,
}

/// Markers of text ktr itself wrote (stamps, startup header): such text is
/// carried as it is, never stripped or stamped again.
#[derive(Debug, Clone)]
pub struct Markers {
    pub stamp_prefix: String,
    pub stamp_suffix: String,
    pub header_prefix: String,
}

impl Markers {
    /// Split templates at `{timestamp}`.
    pub fn new(stamp_template: &str, header_template: &str) -> Markers {
        let (sp, ss) = stamp_template
            .split_once("{timestamp}")
            .unwrap_or((stamp_template, ""));
        let hp = header_template
            .split("{timestamp}")
            .next()
            .unwrap_or(header_template);
        Markers {
            stamp_prefix: sp.to_string(),
            stamp_suffix: ss.to_string(),
            header_prefix: hp.to_string(),
        }
    }
    /// Whether `text` starts with the startup header.
    pub fn is_header(&self, text: &str) -> bool {
        !self.header_prefix.trim().is_empty() && text.starts_with(&self.header_prefix)
    }

    /// Whether `text` already starts with a stamp or the startup header.
    pub fn carried_before(&self, text: &str) -> bool {
        let is_stamp = !self.stamp_prefix.is_empty()
            && text.strip_prefix(&self.stamp_prefix).is_some_and(|rest| {
                let head: String = rest.chars().take(64).collect();
                self.stamp_suffix.is_empty() || head.contains(&self.stamp_suffix)
            });
        is_stamp || self.is_header(text)
    }
}

/// What the scan needs from the configuration.
pub struct Options<'a> {
    pub reply_tool: &'a Regex,
    pub markers: &'a Markers,
    /// `carry_command_expansions`: read `turnCompanion` expansions as part
    /// of the conversation instead of as meta injections.
    pub command_expansions: bool,
}

/// Everything one pass learned about a transcript.
#[derive(Debug, Default)]
pub struct Scan {
    pub nodes: Vec<Node>,
    pub events: Vec<Event>,
    pub lines: usize,
    pub bytes: u64,
    pub malformed: Vec<(usize, &'static str)>,
    pub malformed_count: usize,
    pub unknown_record_types: BTreeMap<String, u64>,
    pub unknown_attachment_types: BTreeMap<String, u64>,
    pub versions: BTreeSet<String>,
    pub not_speech: NotSpeechCounts,
    pub earliest_timestamp: Option<String>,
    pub window: Tally,
    pub file: Tally,
    pub window_start_line: usize,
    /// Bytes of the newest per-start attachment of each kind in the window.
    per_start_newest: [u64; PER_START_ATTACHMENT_TYPES.len()],
    /// uuids that appear on more than one user/assistant record.
    pub repeated_uuids: usize,
    /// user/assistant records without `uuid` or without the `parentUuid` field.
    pub unlinked_records: usize,
    symbols: HashMap<Box<str>, Sym>,
    speech_uuids: HashSet<Sym>,
    seen_speech: bool,
    /// The last parseable timestamp seen so far (file order).
    last_timestamp: Option<String>,
}

const KNOWN_RECORD_TYPES: &[&str] = &[
    "user",
    "assistant",
    "system",
    "attachment",
    "summary",
    "progress",
    "queue-operation",
    "file-history-snapshot",
    "file-history-delta",
    "last-prompt",
    "permission-mode",
    "mode",
    "ai-title",
    "custom-title",
    "pr-link",
    "bridge-session",
    "atis-latch",
    "api-request",
    "api-request-blob",
    "api-request-shape",
    "cost-state",
    "tools-used",
    "agent-name",
    "worktree-state",
    "frame-link",
    "started",
    "result",
    "relocated",
];

/// Attachments Claude Code writes again on every start (measured on
/// 2.1.328, `--resume` and fresh): a rebuild does not remove them for good.
pub const PER_START_ATTACHMENT_TYPES: &[&str] = &[
    "agent_listing_delta",
    "date",
    "deferred_tools_delta",
    "environment",
    "mcp_instructions_delta",
    "model",
    "prompt_snapshot",
    "remote_session_change",
    "session_context",
    "skill_listing",
];

const KNOWN_ATTACHMENT_TYPES: &[&str] = &[
    "agent_listing_delta",
    "auto_mode",
    "batching_reminder_sent",
    "budget_usd",
    "command_permissions",
    "compact_file_reference",
    "date",
    "date_change",
    "deferred_tools_delta",
    "dynamic_skill",
    "edited_text_file",
    "environment",
    "file",
    "hook_additional_context",
    "hook_blocking_error",
    "hook_non_blocking_error",
    "hook_success",
    "hook_system_message",
    "invoked_skills",
    "mcp_instructions_delta",
    "model",
    "nested_memory",
    "plan_mode",
    "plan_mode_exit",
    "prompt_snapshot",
    "queued_command",
    "read_truncation_notice",
    "remote_session_change",
    "session_context",
    "silent_turn_reminder",
    "skill_listing",
    "structured_output",
    "task_reminder",
    "task_status",
    "todo_reminder",
    "total_tokens_reminder",
    "ultra_effort_enter",
    "ultra_effort_exit",
    "edited_image_file",
    "opened_file_in_ide",
    "selected_lines_in_ide",
    "diagnostics",
    "mcp_resource",
    "hook_cancelled",
    "memory",
];

/// How many malformed line numbers are kept for the report.
pub const MALFORMED_KEPT: usize = 20;

impl Scan {
    /// Read a whole transcript.
    pub fn read<R: BufRead>(input: R, opts: &Options<'_>) -> std::io::Result<Scan> {
        let mut scan = Scan {
            window_start_line: 1,
            ..Scan::default()
        };
        transcript::for_each_line(input, |number, raw, line| {
            scan.lines = number;
            scan.bytes += raw.len() as u64 + 1;
            match line {
                Line::Blank => {}
                Line::Malformed(why) => {
                    scan.malformed_count += 1;
                    if scan.malformed.len() < MALFORMED_KEPT {
                        scan.malformed.push((number, why));
                    }
                }
                Line::Record(record) => scan.record(number, raw.len(), &record, opts),
            }
        })?;
        Ok(scan)
    }

    fn intern(&mut self, s: &str) -> Sym {
        if let Some(&id) = self.symbols.get(s) {
            return id;
        }
        let id = self.symbols.len() as Sym;
        self.symbols.insert(s.into(), id);
        id
    }

    fn tally(&mut self, category: Category, bytes: usize) {
        self.window.add(category, bytes);
        self.file.add(category, bytes);
    }

    fn conversation(&mut self, text: &str) {
        let estimate = crate::engine::turns::estimate_tokens(text);
        for t in [&mut self.window, &mut self.file] {
            t.conversation_bytes += text.len() as u64;
            t.conversation_estimate += estimate;
        }
    }

    /// A per-start attachment of `kind`: the newest of each kind in the
    /// window is overhead; the one it replaces becomes residue, except a
    /// replaced `prompt_snapshot`: it records the system prompt and tools
    /// Claude Code sends once, beside the messages (2.1.328 writes two per
    /// start, before the first request and after its reply), so an older
    /// copy is in no request: file-only.
    fn per_start(&mut self, name: &str, bytes: usize) {
        let kind = PER_START_ATTACHMENT_TYPES
            .iter()
            .position(|k| *k == name)
            .unwrap_or(0);
        let replaced = std::mem::replace(&mut self.per_start_newest[kind], bytes as u64);
        self.window.per_start_bytes = self.window.per_start_bytes - replaced + bytes as u64;
        self.file.per_start_bytes += bytes as u64;
        if name == "prompt_snapshot" {
            self.window.file_only_bytes += replaced;
            self.file.file_only_bytes += replaced;
            return;
        }
        self.window.add(
            Category::Attachment,
            usize::try_from(replaced).unwrap_or(usize::MAX),
        );
        self.file.add(
            Category::Attachment,
            usize::try_from(replaced).unwrap_or(usize::MAX),
        );
    }

    fn record(&mut self, number: usize, len: usize, r: &Record<'_>, opts: &Options<'_>) {
        if let Some(v) = r.version.get()
            && !self.versions.contains(v.as_ref())
        {
            self.versions.insert(v.to_string());
        }
        if let Some(ts) = r.timestamp.get().filter(|t| transcript::is_timestamp(t))
            && self
                .earliest_timestamp
                .as_deref()
                .is_none_or(|e| ts.as_ref() < e)
        {
            self.earliest_timestamp = Some(ts.to_string());
        }
        let kind = r.kind();
        if !KNOWN_RECORD_TYPES.contains(&kind) {
            let name = if kind.is_empty() { "(none)" } else { kind };
            *self
                .unknown_record_types
                .entry(name.to_string())
                .or_default() += 1;
        }
        let (role, event) = match kind {
            "user" => (RecordRole::User, self.user(number, r, opts)),
            "assistant" => (RecordRole::Assistant, self.assistant(number, r, opts)),
            "attachment" => (RecordRole::Other, self.attachment(number, r)),
            "system" => {
                if r.subtype.get().is_some_and(|s| s == "compact_boundary") {
                    self.window = Tally::default();
                    self.per_start_newest = [0; PER_START_ATTACHMENT_TYPES.len()];
                    self.window_start_line = number + 1;
                }
                self.tally(Category::System, len);
                (RecordRole::Other, None)
            }
            _ => {
                self.window.file_only_bytes += len as u64;
                self.file.file_only_bytes += len as u64;
                (RecordRole::Other, None)
            }
        };
        self.node(number, r, role, event);
        if let Some(ts) = r.timestamp.get().filter(|t| transcript::is_timestamp(t)) {
            self.last_timestamp = Some(ts.to_string());
        }
    }

    fn node(&mut self, number: usize, r: &Record<'_>, role: RecordRole, event: Option<usize>) {
        let uuid = r.uuid.get().map(std::string::ToString::to_string);
        if uuid.is_none() && role == RecordRole::Other {
            return; // file-only records carry no links
        }
        if role != RecordRole::Other && (uuid.is_none() || matches!(r.parent_uuid, Parent::Missing))
        {
            self.unlinked_records += 1;
        }
        let uuid = match uuid {
            Some(u) => {
                let sym = self.intern(&u);
                if role != RecordRole::Other && !self.speech_uuids.insert(sym) {
                    self.repeated_uuids += 1;
                }
                Some(sym)
            }
            None => None,
        };
        let parent = match &r.parent_uuid {
            Parent::Missing => Link::Missing,
            Parent::Null => Link::Root,
            Parent::Uuid(p) => Link::To(self.intern(p)),
        };
        let logical_parent = r
            .logical_parent_uuid
            .get()
            .map(std::string::ToString::to_string)
            .map(|p| self.intern(&p));
        let message_id = match role {
            RecordRole::Assistant => r
                .message
                .id
                .as_deref()
                .map(std::string::ToString::to_string)
                .map(|m| self.intern(&m)),
            _ => None,
        };
        self.nodes.push(Node {
            line: number,
            uuid,
            parent,
            logical_parent,
            boundary: r.kind() == "system"
                && r.subtype.get().is_some_and(|s| s == "compact_boundary"),
            role,
            sidechain: r.sidechain(),
            message_id,
            event,
        });
    }

    fn push_event(
        &mut self,
        number: usize,
        r: &Record<'_>,
        speech: Speech,
        raw: &str,
        snapshot: Option<String>,
    ) -> usize {
        let mut meta = meta(number, r);
        meta.stamp_time = if meta.timestamp_broken() {
            self.last_timestamp.clone()
        } else {
            meta.timestamp.clone()
        };
        self.events.push(Event {
            meta,
            speech,
            source_sha256: hex(&Sha256::digest(raw.as_bytes())),
            snapshot,
        });
        self.events.len() - 1
    }

    fn user(&mut self, number: usize, r: &Record<'_>, opts: &Options<'_>) -> Option<usize> {
        self.tally_user_blocks(r);
        if let Some(raw) = r.tool_use_result {
            let cat = if r.sidechain() {
                Category::Sidechain
            } else {
                Category::ToolResult
            };
            self.tally(cat, raw.get().len());
        }
        // Text ktr wrote itself (stamped items, the startup header) is carried as it is.
        if let Content::Text(t) = &r.message.content
            && !r.sidechain()
            && !r.meta()
            && opts.markers.carried_before(t)
        {
            // A startup snapshot frozen by an earlier rebuild stays the
            // startup snapshot (same digest), under the header once.
            let snapshot = (!self.seen_speech && opts.markers.is_header(t))
                .then(|| t.split_once('\n').map_or("", |(_, raw)| raw).to_string());
            self.conversation(t);
            self.seen_speech = true;
            return Some(self.push_event(number, r, Speech::User(t.to_string()), t, snapshot));
        }
        let reading = classify::read_user(r);
        let content_len = r.message.content.byte_len();
        let snapshot =
            (reading.had_reminder && !self.seen_speech).then(|| reading.raw_text.clone());
        let speech = match reading.reading {
            UserReading::Speech(text) => {
                self.tally(Category::InjectedBlock, reading.injected_bytes);
                self.conversation(&text);
                self.seen_speech = true;
                Speech::User(text)
            }
            UserReading::Slash(text) => {
                self.tally(Category::InjectedBlock, reading.injected_bytes);
                Speech::Slash(text)
            }
            UserReading::CompactSummary(text) => {
                self.tally(Category::CompactSummary, content_len);
                Speech::Summary(text)
            }
            UserReading::Expansion(text) if opts.command_expansions => {
                self.conversation(&text);
                Speech::Expansion(text)
            }
            UserReading::Expansion(_) => {
                self.not_speech(NotSpeech::MetaInjection, content_len, 0);
                return None;
            }
            UserReading::NotSpeech(why) => {
                self.not_speech(why, content_len, reading.injected_bytes);
                snapshot.as_ref()?;
                Speech::Injected
            }
        };
        let raw = if reading.raw_text.is_empty() {
            speech_text(&speech)
        } else {
            &reading.raw_text
        };
        let raw = raw.to_string();
        Some(self.push_event(number, r, speech, &raw, snapshot))
    }

    fn not_speech(&mut self, why: NotSpeech, content_len: usize, injected: usize) {
        let c = &mut self.not_speech;
        match why {
            NotSpeech::Sidechain => {
                c.sidechain_records += 1;
                self.tally(Category::Sidechain, content_len);
            }
            NotSpeech::ToolResult => {}
            NotSpeech::TeammateMessage => {
                c.teammate_messages += 1;
                self.tally(Category::MetaInjection, content_len);
            }
            NotSpeech::TaskNotification => {
                c.task_notifications += 1;
                self.tally(Category::MetaInjection, content_len);
            }
            NotSpeech::SystemPrompt => {
                c.system_prompts += 1;
                self.tally(Category::MetaInjection, content_len);
            }
            NotSpeech::MetaInjection => {
                c.meta_injections += 1;
                self.tally(Category::MetaInjection, content_len);
            }
            NotSpeech::Injection => self.tally(Category::InjectedBlock, injected.max(content_len)),
            NotSpeech::QueuedCommand => c.queued_commands_other += 1,
        }
    }

    /// Ledger bytes of tool results and images inside a user message.
    fn tally_user_blocks(&mut self, r: &Record<'_>) {
        let Content::Blocks(blocks) = &r.message.content else {
            return;
        };
        for raw in blocks {
            let text = raw.get();
            let kind = block_kind(text);
            if r.sidechain() {
                continue; // counted whole as sidechain
            }
            match kind {
                "tool_result" => {
                    self.tally(Category::ToolResult, text.len());
                    if memchr::memmem::find(text.as_bytes(), b"\"image\"").is_some() {
                        self.window.original_image_view_count += 1;
                        self.file.original_image_view_count += 1;
                    }
                }
                "image" => {
                    self.tally(Category::Image, text.len());
                    self.window.preview_image_count += 1;
                    self.file.preview_image_count += 1;
                }
                _ => {}
            }
        }
    }

    fn assistant(&mut self, number: usize, r: &Record<'_>, opts: &Options<'_>) -> Option<usize> {
        if let Content::Blocks(blocks) = &r.message.content {
            let cat_for_sidechain = r.sidechain() || r.meta();
            for raw in blocks {
                let text = raw.get();
                let cat = match block_kind(text) {
                    _ if cat_for_sidechain => Some(Category::Sidechain),
                    "thinking" | "redacted_thinking" => Some(Category::Thinking),
                    "tool_use" | "server_tool_use" => Some(Category::ToolUse),
                    "image" => Some(Category::Image),
                    "text" => None,
                    _ => Some(Category::ToolResult),
                };
                if let Some(cat) = cat {
                    self.tally(cat, text.len());
                }
            }
        }
        match classify::read_assistant(r, opts.reply_tool) {
            AssistantReading::Speech(text) => {
                self.conversation(&text);
                self.seen_speech = true;
                let raw = text.clone();
                Some(self.push_event(number, r, Speech::Assistant(text), &raw, None))
            }
            AssistantReading::Synthetic => {
                self.not_speech.synthetic_assistant += 1;
                self.tally(Category::System, r.message.content.byte_len());
                None
            }
            AssistantReading::Sidechain => {
                self.not_speech.sidechain_records += 1;
                None
            }
            AssistantReading::Silent => None,
        }
    }

    fn attachment(&mut self, number: usize, r: &Record<'_>) -> Option<usize> {
        let raw = r.attachment?;
        let attachment = Attachment::parse(raw);
        let kind = attachment.kind();
        if !KNOWN_ATTACHMENT_TYPES.contains(&kind) {
            let name = if kind.is_empty() { "(none)" } else { kind };
            *self
                .unknown_attachment_types
                .entry(name.to_string())
                .or_default() += 1;
        }
        if r.sidechain() {
            self.tally(Category::Sidechain, raw.get().len());
            return None;
        }
        if !self.seen_speech
            && let Some(text) = classify::session_start_context(&attachment)
        {
            self.tally(Category::Attachment, raw.get().len());
            let speech = Speech::StartupContext {
                attachment: raw.get().to_string(),
                text: text.clone(),
            };
            return Some(self.push_event(number, r, speech, &text, None));
        }
        match classify::read_queued(&attachment) {
            Some(UserReading::Speech(text)) => {
                self.conversation(&text);
                self.seen_speech = true;
                let raw_text = text.clone();
                Some(self.push_event(number, r, Speech::User(text), &raw_text, None))
            }
            Some(_) => {
                self.not_speech.queued_commands_other += 1;
                None
            }
            None if PER_START_ATTACHMENT_TYPES.contains(&kind) => {
                self.per_start(kind, raw.get().len());
                None
            }
            None => {
                self.tally(Category::Attachment, raw.get().len());
                None
            }
        }
    }
}

fn speech_text(speech: &Speech) -> &str {
    match speech {
        Speech::User(t)
        | Speech::Slash(t)
        | Speech::Assistant(t)
        | Speech::Summary(t)
        | Speech::Expansion(t)
        | Speech::StartupContext { text: t, .. } => t,
        Speech::Injected => "",
    }
}

/// The `type` of a raw block, found without parsing the block.
fn block_kind(raw: &str) -> &str {
    crate::engine::rawjson::top_level_str(raw, "type").unwrap_or("other")
}

fn meta(number: usize, r: &Record<'_>) -> Meta {
    let own = |s: &crate::engine::transcript::Lenient<crate::engine::transcript::Str<'_>>| {
        s.get().map(std::string::ToString::to_string)
    };
    Meta {
        line: number,
        uuid: own(&r.uuid),
        timestamp: own(&r.timestamp),
        message_id: r.message.id.as_deref().map(str::to_string),
        cwd: own(&r.cwd),
        version: own(&r.version),
        git_branch: own(&r.git_branch),
        user_type: own(&r.user_type),
        entrypoint: own(&r.entrypoint),
        stamp_time: None,
    }
}
