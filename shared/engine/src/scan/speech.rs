//! Reading each kind of record for speech: user, assistant, attachment.

use super::{
    BLANK, CARRIED_BEFORE, Event, HAS_STAMP, KNOWN_ATTACHMENT_TYPES, LineRef, Options,
    PER_START_ATTACHMENT_TYPES, SEEN_SPEECH, SNAPSHOT, Scan, Speech, TIMESTAMP_BROKEN, Via, narrow,
};
use crate::classify::{self, AssistantReading, NotSpeech, UserReading};
use crate::ledger::Category;
use crate::transcript::{self, Attachment, Content, Record};

impl Scan {
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

    pub(super) fn user(
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
            let len = json_len(raw.get());
            self.tally(cat, len);
            self.unsent(len);
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

    pub(super) fn assistant(
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

    pub(super) fn attachment(
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

/// The bytes raw JSON from a line had in its file (a long string in it is
/// a span's token here, see [`crate::span`]).
fn json_len(raw: &str) -> usize {
    crate::span::json_len(raw)
}

/// The `type` of a raw block, found without parsing the block.
fn block_kind(raw: &str) -> &str {
    crate::rawjson::top_level_str(raw, "type").unwrap_or("other")
}
