//! One pass over a transcript.
//!
//! The scan keeps only what later steps need: a small [`Node`] per record
//! (links for the chain walk), an [`Event`] per record that holds speech
//! (the conversation itself), ledger tallies, and drift counters. Tool
//! results and other residue are measured and forgotten.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;

use regex::Regex;

use crate::classify::{self, AssistantReading, NotSpeech, UserReading};
use crate::ledger::{Category, Tally};
use crate::transcript::{self, Attachment, Content, Line, Parent, Record};

pub use crate::symbols::Sym;
use crate::symbols::Symbols;

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

/// The chain-relevant facts of one record, in 32 bytes (one per record
/// with a uuid: the biggest table of a long session's plan). The message
/// id is kept as its key (no table of message ids during the scan).
#[derive(Debug, Clone)]
pub struct Node {
    message: u64,
    line: u32,
    uuid: u32,
    parent: u32,
    logical_parent: u32,
    event: u32,
    parent_kind: ParentKind,
    pub role: RecordRole,
    bits: u8,
}

/// The bits of [`Node::bits`].
const BOUNDARY: u8 = 1;
const SIDECHAIN: u8 = 1 << 1;
const HAS_MESSAGE: u8 = 1 << 2;

/// How [`Node::parent`] reads its `parent` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ParentKind {
    Missing,
    Root,
    To,
}

/// "None" in a node's `u32` fields.
const NONE: u32 = u32::MAX;

fn opt(v: u32) -> Option<u32> {
    (v != NONE).then_some(v)
}

impl Node {
    /// The record's line number.
    pub fn line(&self) -> usize {
        self.line as usize
    }
    pub fn uuid(&self) -> Option<Sym> {
        opt(self.uuid)
    }
    pub fn parent(&self) -> Link {
        match self.parent_kind {
            ParentKind::Missing => Link::Missing,
            ParentKind::Root => Link::Root,
            ParentKind::To => Link::To(self.parent),
        }
    }
    pub fn logical_parent(&self) -> Option<Sym> {
        opt(self.logical_parent)
    }
    /// The key of the record's `message.id` (assistant records).
    pub fn message_id(&self) -> Option<u64> {
        (self.bits & HAS_MESSAGE != 0).then_some(self.message)
    }
    /// A `compact_boundary` system record.
    pub fn boundary(&self) -> bool {
        self.bits & BOUNDARY != 0
    }
    pub fn sidechain(&self) -> bool {
        self.bits & SIDECHAIN != 0
    }
    /// Index into [`Scan::events`] when the record holds speech.
    pub fn event(&self) -> Option<usize> {
        opt(self.event).map(|e| e as usize)
    }
}

/// What a speech-bearing record says (its kind; the text itself is read
/// again from the file when the candidate is written, see
/// [`crate::reread`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speech {
    /// Typed, channel or queued words, or words typed when rejecting a tool.
    User,
    /// A slash command rendered `/name args` (speech only if answered).
    Slash,
    /// Assistant text (and reply-tool texts).
    Assistant,
    /// A compaction summary.
    Summary,
    /// A slash command's expansion (`isMeta` + `turnCompanion`), carried
    /// with the command it follows.
    Expansion,
    /// A `SessionStart` hook's context recorded before any speech in the file
    /// (the startup snapshot of today's format), carried verbatim as an
    /// `attachment` line so Claude Code renders it as it did for the original.
    StartupContext,
    /// Only injected elements including a `<system-reminder>` (a startup
    /// snapshot candidate when it comes before any speech).
    Injected,
}

/// How the scan read a record, so that the second read reads it the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// A user text ktr wrote itself (a stamp or the startup header first).
    CarriedBefore,
    /// A user record read by [`classify::read_user`].
    User,
    /// A `queued_command` attachment.
    Queued,
    /// An assistant record.
    Assistant,
    /// A `SessionStart` hook context attachment.
    StartupContext,
}

/// Where a record's line is in the bytes the scan read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LineRef {
    pub offset: u64,
    pub len: u64,
}

/// The characters of a text, counted the way the token estimate needs
/// (SPEC §6), so that estimates of joined texts need no text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    pub cjk: u64,
    pub other: u64,
}

impl Counts {
    /// Count `text`.
    pub fn of(text: &str) -> Counts {
        let mut c = Counts::default();
        for ch in text.chars() {
            let u = ch as u32;
            let is_cjk = matches!(u,
                0x3000..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF | 0xFF00..=0xFFEF);
            if is_cjk {
                c.cjk += 1;
            } else {
                c.other += 1;
            }
        }
        c
    }
    /// Token estimate (SPEC §6): CJK code points × 1.1 + others ÷ 1.5, truncated.
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    pub fn tokens(self) -> u64 {
        (self.cjk as f64 * 1.1 + self.other as f64 / 1.5) as u64
    }
    /// Characters counted.
    pub fn chars(self) -> u64 {
        self.cjk + self.other
    }
}

impl std::ops::Add for Counts {
    type Output = Counts;
    fn add(self, o: Counts) -> Counts {
        Counts {
            cjk: self.cjk + o.cjk,
            other: self.other + o.other,
        }
    }
}

/// Metadata copied onto the candidate line (read again with the text).
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
}

/// What selection needs to know of a speech text without holding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TextFacts {
    pub counts: Counts,
    pub bytes: u64,
    /// Only whitespace.
    pub blank: bool,
    /// Starts with a stamp or the startup header ([`Markers::carried_before`]).
    pub carried_before: bool,
}

/// A record that holds speech (or a startup snapshot candidate): its kind,
/// where it is, and the facts of its text. Nothing of the text is kept.
///
/// One is kept per speech record of the file, so it is packed into 48
/// bytes (issue 12: memory grows with the conversation); the accessors
/// give the wide types. Lines and texts are at most 4 GiB and a file has
/// at most 2³² − 1 lines ([`Scan::read`] refuses bigger ones).
#[derive(Debug, Clone)]
pub struct Event {
    offset: u64,
    stamp_offset: u64,
    line: u32,
    len: u32,
    stamp_line_len: u32,
    cjk: u32,
    other: u32,
    bytes: u32,
    stamp_len: u16,
    speech: Speech,
    via: Via,
    flags: u8,
}

/// The bits of [`Event::flags`].
const BLANK: u8 = 1;
const CARRIED_BEFORE: u8 = 1 << 1;
const SEEN_SPEECH: u8 = 1 << 2;
const SNAPSHOT: u8 = 1 << 3;
const TIMESTAMP_BROKEN: u8 = 1 << 4;
const HAS_STAMP: u8 = 1 << 5;

impl Event {
    /// The record's line number.
    pub fn line(&self) -> usize {
        self.line as usize
    }
    /// Where the record's line is.
    pub fn at(&self) -> LineRef {
        LineRef {
            offset: self.offset,
            len: u64::from(self.len),
        }
    }
    pub fn speech(&self) -> Speech {
        self.speech
    }
    pub fn via(&self) -> Via {
        self.via
    }
    /// The facts of the record's text.
    pub fn text(&self) -> TextFacts {
        TextFacts {
            counts: Counts {
                cjk: u64::from(self.cjk),
                other: u64::from(self.other),
            },
            bytes: u64::from(self.bytes),
            blank: self.flag(BLANK),
            carried_before: self.flag(CARRIED_BEFORE),
        }
    }
    /// Speech came before this record in the file (the reading depends on it).
    pub fn seen_speech(&self) -> bool {
        self.flag(SEEN_SPEECH)
    }
    /// The record held a real `<system-reminder>` element and no speech came
    /// before it: its raw text (tags included) is a startup snapshot.
    pub fn snapshot(&self) -> bool {
        self.flag(SNAPSHOT)
    }
    /// The record's own timestamp is missing or does not parse.
    pub fn timestamp_broken(&self) -> bool {
        self.flag(TIMESTAMP_BROKEN)
    }
    /// The record whose timestamp a stamp may show: this one when its own
    /// parses, else the nearest earlier record with a parseable one, else
    /// none. A stamp is never built from anything else.
    pub fn stamp_at(&self) -> Option<LineRef> {
        self.flag(HAS_STAMP).then_some(LineRef {
            offset: self.stamp_offset,
            len: u64::from(self.stamp_line_len),
        })
    }
    /// The length of that timestamp (ASCII, so its token count is known
    /// without reading it again).
    pub fn stamp_len(&self) -> usize {
        usize::from(self.stamp_len)
    }
    fn flag(&self, bit: u8) -> bool {
        self.flags & bit != 0
    }
}

/// A count that fits an [`Event`] field (see there for why it does).
fn narrow(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
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
    /// Lone surrogate escapes in the file ([`crate::lone`]).
    pub lone_surrogates: usize,
    /// Lines holding a real character of the lone surrogates' stand-ins.
    pub reserved_lines: usize,
    /// Speech texts holding a lone surrogate.
    pub lone_surrogate_texts: usize,
    /// Speech texts holding a NUL character (`\u0000`).
    pub nul_texts: usize,

    /// uuid → symbol and message id → symbol (two numberings), keyed by a
    /// 64-bit hash of the string instead of the string itself; dropped
    /// when the read ends (the symbols stay in the nodes).
    symbols: Symbols,
    symbol_count: usize,
    /// One bit per uuid symbol: a user/assistant record had it.
    speech_uuids: Vec<u64>,
    seen_speech: bool,
    /// The record with the last parseable timestamp so far (file order),
    /// and the timestamp's length.
    last_timestamp_at: Option<(LineRef, usize)>,
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
        let mut too_big = false;
        transcript::for_each_line(input, |at, line| {
            let number = at.number;
            scan.lines = number;
            if u32::try_from(number).is_err() || u32::try_from(at.len).is_err() {
                too_big = true;
                return;
            }
            scan.bytes += at.len as u64 + 1;
            scan.lone_surrogates += at.surrogates.lone;
            scan.reserved_lines += usize::from(at.surrogates.reserved);
            match line {
                Line::Blank => {}
                Line::Malformed(why) => {
                    scan.malformed_count += 1;
                    if scan.malformed.len() < MALFORMED_KEPT {
                        scan.malformed.push((number, why));
                    }
                }
                Line::Record(record) => {
                    let at = LineRef {
                        offset: at.offset,
                        len: at.len as u64,
                    };
                    scan.record(number, at, &record, opts);
                }
            }
        })?;
        if too_big {
            return Err(std::io::Error::other(
                "the transcript has a line of 4 GiB or more, or more than 4,294,967,295 lines: ktr cannot plan it",
            ));
        }
        // The slack of the tables' last doubling goes back before the chain
        // walk and selection allocate theirs.
        scan.nodes.shrink_to_fit();
        scan.events.shrink_to_fit();
        scan.symbol_count = scan.symbols.len();
        scan.symbols = Symbols::default();
        scan.speech_uuids = Vec::new();
        Ok(scan)
    }

    /// How many distinct uuids were seen (uuid symbols are `0..n`).
    pub fn symbol_count(&self) -> usize {
        self.symbol_count
    }

    fn intern(&mut self, s: &str) -> Sym {
        self.symbols.intern(key_of(s))
    }

    /// Mark `sym` as a user/assistant record's uuid; false when it was
    /// already (a repeated uuid).
    fn first_speech(&mut self, sym: Sym) -> bool {
        let (word, bit) = (sym as usize / 64, sym % 64);
        if word >= self.speech_uuids.len() {
            self.speech_uuids.resize(word + 1, 0);
        }
        let seen = self.speech_uuids[word] & (1 << bit) != 0;
        self.speech_uuids[word] |= 1 << bit;
        !seen
    }

    fn tally(&mut self, category: Category, bytes: usize) {
        self.window.add(category, bytes);
        self.file.add(category, bytes);
    }

    /// Words of the conversation (user, assistant, expansion speech):
    /// counted into both tallies.
    fn conversation(&mut self, bytes: u64, counts: Counts) {
        for t in [&mut self.window, &mut self.file] {
            t.conversation_bytes += bytes;
            t.conversation_estimate += counts.tokens();
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

    fn record(&mut self, number: usize, at: LineRef, r: &Record<'_>, opts: &Options<'_>) {
        let len = usize::try_from(at.len).unwrap_or(usize::MAX);
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
            "user" => (RecordRole::User, self.user(number, at, r, opts)),
            "assistant" => (RecordRole::Assistant, self.assistant(number, at, r, opts)),
            "attachment" => (RecordRole::Other, self.attachment(number, at, r, opts)),
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
            self.last_timestamp_at = Some((at, ts.len()));
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
                if role != RecordRole::Other && !self.first_speech(sym) {
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
                .map(|m| key_of(&m)),
            _ => None,
        };
        let (parent_kind, parent) = match parent {
            Link::Missing => (ParentKind::Missing, NONE),
            Link::Root => (ParentKind::Root, NONE),
            Link::To(p) => (ParentKind::To, p),
        };
        self.nodes.push(Node {
            line: narrow(number as u64),
            uuid: uuid.unwrap_or(NONE),
            parent,
            logical_parent: logical_parent.unwrap_or(NONE),
            message: message_id.unwrap_or(0),
            event: event.and_then(|e| u32::try_from(e).ok()).unwrap_or(NONE),
            parent_kind,
            bits: [
                (
                    r.kind() == "system"
                        && r.subtype.get().is_some_and(|s| s == "compact_boundary"),
                    BOUNDARY,
                ),
                (r.sidechain(), SIDECHAIN),
                (message_id.is_some(), HAS_MESSAGE),
            ]
            .iter()
            .filter(|(on, _)| *on)
            .fold(0, |bits, (_, bit)| bits | bit),
            role,
        });
    }

    fn push_event(&mut self, read: &Read<'_>, r: &Record<'_>, opts: &Options<'_>) -> usize {
        let own = r.timestamp.get().filter(|t| transcript::is_timestamp(t));
        let stamp = match own {
            Some(ts) => Some((read.at, ts.len())),
            None => self.last_timestamp_at,
        };
        // A long text is a span ([`crate::span`]): its facts stand in for it.
        let counts = crate::span::counts(read.text);
        let bytes = crate::span::bytes(read.text);
        let head = crate::span::head(read.text);
        let marks = crate::span::marks(read.text);
        self.lone_surrogate_texts += usize::from(marks.lone);
        self.nul_texts += usize::from(marks.nul);
        if matches!(
            read.speech,
            Speech::User | Speech::Assistant | Speech::Expansion
        ) {
            self.conversation(bytes, counts);
        }
        let flags = [
            (crate::span::blank(read.text), BLANK),
            (opts.markers.carried_before(&head), CARRIED_BEFORE),
            (read.seen_speech, SEEN_SPEECH),
            (read.snapshot, SNAPSHOT),
            (own.is_none(), TIMESTAMP_BROKEN),
            (stamp.is_some(), HAS_STAMP),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .fold(0, |flags, (_, bit)| flags | bit);
        let (stamp_at, stamp_len) = stamp.unwrap_or_default();
        self.events.push(Event {
            offset: read.at.offset,
            stamp_offset: stamp_at.offset,
            line: narrow(read.number as u64),
            len: narrow(read.at.len),
            stamp_line_len: narrow(stamp_at.len),
            cjk: narrow(counts.cjk),
            other: narrow(counts.other),
            bytes: narrow(bytes),
            // Only a hostile fraction of a second is longer (its stamp's
            // estimate is then short, nothing else).
            stamp_len: u16::try_from(stamp_len).unwrap_or(u16::MAX),
            speech: read.speech,
            via: read.via,
            flags,
        });
        self.events.len() - 1
    }

    fn user(
        &mut self,
        number: usize,
        at: LineRef,
        r: &Record<'_>,
        opts: &Options<'_>,
    ) -> Option<usize> {
        self.tally_user_blocks(r);
        if let Some(raw) = r.tool_use_result {
            let cat = if r.sidechain() {
                Category::Sidechain
            } else {
                Category::ToolResult
            };
            self.tally(cat, json_len(raw.get()));
        }
        let seen_speech = self.seen_speech;
        let read = |speech, via, text, snapshot| Read {
            number,
            at,
            speech,
            via,
            text,
            seen_speech,
            snapshot,
        };
        // Text ktr wrote itself (stamped items, the startup header) is carried as it is.
        if let Content::Text(t) = &r.message.content
            && !r.sidechain()
            && !r.meta()
            && opts.markers.carried_before(&crate::span::head(t))
        {
            // A startup snapshot frozen by an earlier rebuild stays the
            // startup snapshot (same digest), under the header once.
            let snapshot = !seen_speech && opts.markers.is_header(&crate::span::head(t));
            self.seen_speech = true;
            return Some(self.push_event(
                &read(Speech::User, Via::CarriedBefore, t, snapshot),
                r,
                opts,
            ));
        }
        let reading = classify::read_user(r);
        let content_len = r.message.content.byte_len();
        let snapshot = reading.had_reminder && !seen_speech;
        let (speech, text) = match &reading.reading {
            UserReading::Speech(text) => {
                self.tally(Category::InjectedBlock, reading.injected_bytes);
                self.seen_speech = true;
                (Speech::User, text.as_ref())
            }
            UserReading::Slash(text) => {
                self.tally(Category::InjectedBlock, reading.injected_bytes);
                (Speech::Slash, text.as_str())
            }
            UserReading::CompactSummary(text) => {
                self.tally(Category::CompactSummary, content_len);
                (Speech::Summary, text.as_ref())
            }
            UserReading::Expansion(text) if opts.command_expansions => {
                (Speech::Expansion, text.as_ref())
            }
            UserReading::Expansion(_) => {
                self.not_speech(NotSpeech::MetaInjection, content_len, 0);
                return None;
            }
            UserReading::NotSpeech(why) => {
                self.not_speech(*why, content_len, reading.injected_bytes);
                if !snapshot {
                    return None;
                }
                (Speech::Injected, "")
            }
        };
        Some(self.push_event(&read(speech, Via::User, text, snapshot), r, opts))
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
            let text = *raw;
            let kind = block_kind(text);
            if r.sidechain() {
                continue; // counted whole as sidechain
            }
            match kind {
                "tool_result" => {
                    self.tally(Category::ToolResult, json_len(text));
                    if memchr::memmem::find(text.as_bytes(), b"\"image\"").is_some() {
                        self.window.original_image_view_count += 1;
                        self.file.original_image_view_count += 1;
                    }
                }
                "image" => {
                    self.tally(Category::Image, json_len(text));
                    self.window.preview_image_count += 1;
                    self.file.preview_image_count += 1;
                }
                _ => {}
            }
        }
    }

    fn assistant(
        &mut self,
        number: usize,
        at: LineRef,
        r: &Record<'_>,
        opts: &Options<'_>,
    ) -> Option<usize> {
        if let Content::Blocks(blocks) = &r.message.content {
            let cat_for_sidechain = r.sidechain() || r.meta();
            for raw in blocks {
                let text = *raw;
                let cat = match block_kind(text) {
                    _ if cat_for_sidechain => Some(Category::Sidechain),
                    "thinking" | "redacted_thinking" => Some(Category::Thinking),
                    "tool_use" | "server_tool_use" => Some(Category::ToolUse),
                    "image" => Some(Category::Image),
                    "text" => None,
                    _ => Some(Category::ToolResult),
                };
                if let Some(cat) = cat {
                    self.tally(cat, json_len(text));
                }
            }
        }
        match classify::read_assistant(r, opts.reply_tool) {
            AssistantReading::Speech(text) => {
                let read = Read {
                    number,
                    at,
                    speech: Speech::Assistant,
                    via: Via::Assistant,
                    text: &text,
                    seen_speech: self.seen_speech,
                    snapshot: false,
                };
                self.seen_speech = true;
                Some(self.push_event(&read, r, opts))
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

    fn attachment(
        &mut self,
        number: usize,
        at: LineRef,
        r: &Record<'_>,
        opts: &Options<'_>,
    ) -> Option<usize> {
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
            self.tally(Category::Sidechain, json_len(raw.get()));
            return None;
        }
        let seen_speech = self.seen_speech;
        let read = |speech, via, text| Read {
            number,
            at,
            speech,
            via,
            text,
            seen_speech,
            snapshot: false,
        };
        if !seen_speech && let Some(text) = classify::session_start_context(&attachment) {
            self.tally(Category::Attachment, json_len(raw.get()));
            let read = read(Speech::StartupContext, Via::StartupContext, &text);
            return Some(self.push_event(&read, r, opts));
        }
        match classify::read_queued(&attachment) {
            Some(UserReading::Speech(text)) => {
                self.seen_speech = true;
                Some(self.push_event(&read(Speech::User, Via::Queued, &text), r, opts))
            }
            Some(_) => {
                self.not_speech.queued_commands_other += 1;
                None
            }
            None if PER_START_ATTACHMENT_TYPES.contains(&kind) => {
                self.per_start(kind, json_len(raw.get()));
                None
            }
            None => {
                self.tally(Category::Attachment, json_len(raw.get()));
                None
            }
        }
    }
}

/// One speech-bearing record as the scan read it (its text only borrowed).
struct Read<'t> {
    number: usize,
    at: LineRef,
    speech: Speech,
    via: Via,
    text: &'t str,
    seen_speech: bool,
    snapshot: bool,
}

/// The key of an interned string: its 64-bit SipHash-1-3 digest. Two
/// uuids of one transcript sharing a key by chance: about 3 in 10^8 for a
/// million records. Even then nothing is lost silently: a wrong link ends
/// in the file-order fallback or in verification's independent
/// conservation check refusing the candidate.
fn key_of(s: &str) -> u64 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut h = DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// The bytes raw JSON from a line had in its file (a long string in it is
/// a span's token here, see [`crate::span`]).
fn json_len(raw: &str) -> usize {
    crate::span::json_len(raw)
}

/// The `type` of a raw block, found without parsing the block.
fn block_kind(raw: &str) -> &str {
    crate::rawjson::top_level_str(raw, "type").unwrap_or("other")
}

/// The fields of a record the candidate line copies.
pub fn meta(number: usize, r: &Record<'_>) -> Meta {
    let own = |s: &crate::transcript::Lenient<crate::transcript::Str<'_>>| {
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
    }
}

#[cfg(test)]
mod tests {
    use super::{Event, Node};
    use crate::turns::Item;

    /// One of each is kept per record (per speech record, per carried
    /// record) of the file: their size is the plan's memory per turn
    /// (issue 12).
    #[test]
    fn the_per_record_tables_stay_packed() {
        assert_eq!(size_of::<Node>(), 32);
        assert_eq!(size_of::<Event>(), 48);
        assert_eq!(size_of::<Item>(), 48);
    }
}
