//! Classification (SPEC §5): which records hold real speech, and what text
//! of them is the speaker's own.

use std::borrow::Cow;

use regex::Regex;

use crate::rawjson::{top_level, top_level_str};
use crate::transcript::{Attachment, Block, Content, Record, text_of, text_of_str};

/// Elements Claude Code injects into user text. Removed only where Claude
/// Code puts them: as whole blocks, or complete elements at the start or end.
pub const INJECTED_TAGS: &[&str] = &[
    "system-reminder",
    "local-command-caveat",
    "local-command-stdout",
    "local-command-stderr",
    "command-name",
    "command-message",
    "command-args",
    "bash-stdout",
    "bash-stderr",
    "memory-retrieval",
    "heartbeat",
    "scheduled-task",
    "task-notification",
    "ide_selection",
    "ide-selection",
    "ide_opened_file",
    "ide_diagnostics",
];

/// What stripping found in one text.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stripped<'t> {
    /// The speaker's own text (possibly empty): a part of the text stripped.
    pub text: &'t str,
    /// Bytes of the injected elements removed.
    pub injected_bytes: usize,
    /// A `<system-reminder>` element was removed.
    pub had_reminder: bool,
    /// Content of a removed `<command-name>` element.
    pub command_name: Option<String>,
    /// Content of a removed `<command-args>` element.
    pub command_args: Option<String>,
}

/// Remove injected elements from the start and the end of `text`.
///
/// Several elements in a row, with or without whitespace between them, are
/// removed along with the whitespace that separated them; a tag mentioned in
/// the middle of prose stays.
pub fn strip_injected(text: &str) -> Stripped<'_> {
    let mut out = Stripped::default();
    let (mut start, mut end) = (0, text.len());
    // From the front.
    loop {
        let rest = &text[start..end];
        let trimmed = rest.trim_start();
        let Some((tag, len)) = leading_element(trimmed) else {
            break;
        };
        out.note(tag, &trimmed[..len]);
        start += (rest.len() - trimmed.len()) + len;
    }
    // From the back.
    loop {
        let rest = &text[start..end];
        let trimmed = rest.trim_end();
        let Some((tag, len)) = trailing_element(trimmed) else {
            break;
        };
        out.note(tag, &trimmed[trimmed.len() - len..]);
        end = start + trimmed.len() - len;
    }
    let removed_any = start > 0 || end < text.len();
    let middle = &text[start..end];
    out.text = if removed_any { middle.trim() } else { middle };
    if out.text.trim().is_empty() {
        out.text = "";
    }
    out
}

impl Stripped<'_> {
    fn note(&mut self, tag: &str, element: &str) {
        self.injected_bytes += element.len();
        match tag {
            "system-reminder" => self.had_reminder = true,
            "command-name" => self.command_name = Some(inner(element).trim().to_string()),
            "command-args" => self.command_args = Some(inner(element).to_string()),
            _ => {}
        }
    }
}

fn inner(element: &str) -> &str {
    let open_end = element.find('>').map_or(0, |i| i + 1);
    let close_start = element.rfind("</").unwrap_or(element.len());
    element.get(open_end..close_start).unwrap_or("")
}

/// An injected element at the very start of `s`: (tag, length).
fn leading_element(s: &str) -> Option<(&'static str, usize)> {
    let after_lt = s.strip_prefix('<')?;
    let tag = INJECTED_TAGS.iter().find(|t| {
        after_lt.starts_with(*t)
            && matches!(
                after_lt.as_bytes().get(t.len()),
                Some(b'>' | b' ' | b'\n' | b'\t')
            )
    })?;
    let close = format!("</{tag}>");
    let end = s.find(&close)? + close.len();
    Some((tag, end))
}

/// An injected element at the very end of `s`: (tag, length).
fn trailing_element(s: &str) -> Option<(&'static str, usize)> {
    let tag = INJECTED_TAGS.iter().find(|t| {
        s.strip_suffix('>')
            .and_then(|x| x.strip_suffix(*t))
            .is_some_and(|x| x.ends_with("</"))
    })?;
    let body_end = s.len() - tag.len() - 3;
    let open_plain = format!("<{tag}>");
    let open_attr = format!("<{tag} ");
    let begin = [
        s[..body_end].rfind(&open_plain),
        s[..body_end].rfind(&open_attr),
    ]
    .into_iter()
    .flatten()
    .max()?;
    Some((tag, s.len() - begin))
}

/// Why a user record is not speech (counted in the plan).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotSpeech {
    Sidechain,
    ToolResult,
    TeammateMessage,
    TaskNotification,
    SystemPrompt,
    MetaInjection,
    /// Only injected elements, no words.
    Injection,
    /// A queued slash command or other non-prompt queue entry.
    QueuedCommand,
}

/// The reading of one user record (or `queued_command` attachment). A
/// text borrows from the record when it can: a huge message is not copied
/// to be classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UserReading<'r> {
    /// Words the person (or a channel) sent.
    Speech(Cow<'r, str>),
    /// A slash command, rendered `/name args`; speech only if answered.
    Slash(String),
    /// A compaction summary (machine text).
    CompactSummary(Cow<'r, str>),
    /// The expansion of a slash command (`isMeta` + `turnCompanion`), sent
    /// to the model with the command's own record.
    Expansion(Cow<'r, str>),
    /// Not speech.
    NotSpeech(NotSpeech),
}

/// What one user record gives: its reading plus what the ledger and the
/// startup snapshot need.
#[derive(Debug, Clone)]
pub(crate) struct UserRecord<'r> {
    pub reading: UserReading<'r>,
    /// Raw text of the record before stripping (text blocks joined).
    pub raw_text: Cow<'r, str>,
    /// A real injected `<system-reminder>` element was present.
    pub had_reminder: bool,
    /// Bytes of injected elements removed from speech.
    pub injected_bytes: usize,
}

const REJECTION_MARKER: &str = "the user said:\n";

/// Classify a `user` record.
pub(crate) fn read_user<'r>(record: &'r Record<'_>) -> UserRecord<'r> {
    let mut raw_parts: Vec<Cow<'r, str>> = Vec::new();
    let mut tool_result: Option<String> = None;
    match &record.message.content {
        Content::None => {}
        Content::Text(t) => raw_parts.push(Cow::Borrowed(t.as_ref())),
        Content::Blocks(blocks) => {
            for raw in blocks {
                match top_level_str(raw, "type") {
                    Some("text") => {
                        if let Some(t) = Block::parse(raw).text.0 {
                            raw_parts.push(t);
                        }
                    }
                    Some("tool_result") => {
                        // Only a rejected call can hold the user's words;
                        // other results are never decoded.
                        let rejected = memchr::memmem::find(raw.as_bytes(), b"the user said:")
                            .is_some()
                            && top_level(raw, "is_error") == Some("true");
                        let feedback = if rejected {
                            top_level(raw, "content").and_then(|c| rejection_words(&text_of_str(c)))
                        } else {
                            None
                        };
                        tool_result = Some(feedback.unwrap_or_default());
                    }
                    _ => {}
                }
            }
        }
    }
    // One part (the usual case) is the raw text itself, not a copy of it.
    let (raw_text, raw_parts) = if raw_parts.len() <= 1 {
        (raw_parts.pop().unwrap_or_default(), raw_parts)
    } else {
        (Cow::Owned(raw_parts.join("\n\n")), raw_parts)
    };
    let parts: Vec<&Cow<'r, str>> = if raw_parts.is_empty() {
        vec![&raw_text]
    } else {
        raw_parts.iter().collect()
    };
    let not = |kind| UserRecord {
        reading: UserReading::NotSpeech(kind),
        raw_text: Cow::Borrowed(""),
        had_reminder: false,
        injected_bytes: 0,
    };
    if record.sidechain() {
        return not(NotSpeech::Sidechain);
    }
    if record.is_compact_summary.0 == Some(true) {
        return UserRecord {
            reading: UserReading::CompactSummary(raw_text),
            raw_text: Cow::Borrowed(""),
            had_reminder: false,
            injected_bytes: 0,
        };
    }
    if let Some(words) = tool_result {
        return if words.is_empty() {
            not(NotSpeech::ToolResult)
        } else {
            UserRecord {
                reading: UserReading::Speech(Cow::Owned(words)),
                raw_text: Cow::Borrowed(""),
                had_reminder: false,
                injected_bytes: 0,
            }
        };
    }
    if matches!(record.origin_kind(), Some("task-notification" | "peer")) {
        return not(NotSpeech::TaskNotification);
    }
    if record.prompt_source.get().is_some_and(|s| s == "system") {
        return not(NotSpeech::SystemPrompt);
    }
    if record.meta() {
        if is_channel(&raw_text) {
            return UserRecord {
                reading: UserReading::Speech(raw_text.clone()),
                raw_text,
                had_reminder: false,
                injected_bytes: 0,
            };
        }
        if record.turn_companion.0 == Some(true) && !raw_text.trim().is_empty() {
            return UserRecord {
                reading: UserReading::Expansion(part_of(&raw_text, raw_text.trim_end())),
                raw_text,
                had_reminder: false,
                injected_bytes: 0,
            };
        }
        let had_reminder = parts.iter().any(|p| strip_injected(p).had_reminder);
        return UserRecord {
            reading: UserReading::NotSpeech(NotSpeech::MetaInjection),
            had_reminder,
            raw_text,
            injected_bytes: 0,
        };
    }
    if raw_text.trim_start().starts_with("<teammate-message") {
        return not(NotSpeech::TeammateMessage);
    }
    let (reading, had_reminder, injected_bytes) = read_typed(&parts);
    UserRecord {
        reading,
        raw_text,
        had_reminder,
        injected_bytes,
    }
}

/// `piece` (a part of `whole`) borrowed as long as `whole` is, when
/// `whole` borrows; a copy otherwise.
fn part_of<'r>(whole: &Cow<'r, str>, piece: &str) -> Cow<'r, str> {
    match whole {
        Cow::Borrowed(w) => {
            let start = (piece.as_ptr() as usize).wrapping_sub(w.as_ptr() as usize);
            match w.get(start..start + piece.len()) {
                Some(p) if p.as_ptr() == piece.as_ptr() => Cow::Borrowed(p),
                _ => Cow::Owned(piece.to_string()),
            }
        }
        Cow::Owned(_) => Cow::Owned(piece.to_string()),
    }
}

/// Strip each text part, then decide between speech, slash command and
/// pure injection: (reading, a `<system-reminder>` was removed, injected
/// bytes removed).
fn read_typed<'r>(parts: &[&Cow<'r, str>]) -> (UserReading<'r>, bool, usize) {
    let mut kept: Vec<Cow<'r, str>> = Vec::new();
    let mut had_reminder = false;
    let mut injected_bytes = 0;
    let mut commands: Vec<String> = Vec::new();
    for part in parts {
        let s = strip_injected(part);
        had_reminder |= s.had_reminder;
        injected_bytes += s.injected_bytes;
        if let Some(name) = s.command_name {
            commands.push(render_command(
                &name,
                s.command_args.as_deref().unwrap_or(""),
            ));
        }
        if !s.text.is_empty() {
            kept.push(part_of(part, s.text));
        }
    }
    let text = if kept.len() == 1 {
        kept.pop().unwrap_or_default()
    } else {
        Cow::Owned(kept.join("\n\n"))
    };
    let reading = if !commands.is_empty() {
        if !text.is_empty() {
            commands.push(text.into_owned());
        }
        UserReading::Slash(commands.join("\n\n"))
    } else if text.is_empty() {
        UserReading::NotSpeech(NotSpeech::Injection)
    } else {
        UserReading::Speech(text)
    };
    (reading, had_reminder, injected_bytes)
}

/// `/name args` (or `/name`).
fn render_command(name: &str, args: &str) -> String {
    let mut rendered = if name.starts_with('/') {
        name.to_string()
    } else {
        format!("/{name}")
    };
    let args = args.trim();
    if !args.is_empty() {
        rendered.push(' ');
        rendered.push_str(args);
    }
    rendered
}

/// The words typed when rejecting a tool call, if any.
fn rejection_words(result: &str) -> Option<String> {
    let at = result.find(REJECTION_MARKER)? + REJECTION_MARKER.len();
    let words = result[at..].trim();
    (!words.is_empty()).then(|| words.to_string())
}

/// A channel message envelope: `<channel … source="…">`.
pub(crate) fn is_channel(text: &str) -> bool {
    let t = text.trim_start();
    t.starts_with("<channel")
        && matches!(t.as_bytes().get(8), Some(b' ' | b'\n' | b'\t' | b'>'))
        && t[..t.find('>').unwrap_or(t.len())].contains("source=")
}

/// Classify a `queued_command` attachment: typed or channel input queued
/// while the assistant was working.
pub(crate) fn read_queued(attachment: &Attachment<'_>) -> Option<UserReading<'static>> {
    if attachment.kind() != "queued_command" {
        return None;
    }
    let mode = attachment
        .command_mode
        .get()
        .map_or("prompt", |m| m.as_ref());
    let text = attachment.prompt.map(text_of).unwrap_or_default();
    if mode != "prompt" || text.trim().is_empty() {
        return Some(UserReading::NotSpeech(NotSpeech::QueuedCommand));
    }
    if is_slash_command(&text) {
        return Some(UserReading::NotSpeech(NotSpeech::QueuedCommand));
    }
    Some(UserReading::Speech(Cow::Owned(text)))
}

fn is_slash_command(text: &str) -> bool {
    let t = text.trim_start();
    let Some(rest) = t.strip_prefix('/') else {
        return false;
    };
    let name_len = rest
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b':'))
        .count();
    name_len > 0
        && rest[name_len..]
            .chars()
            .next()
            .is_none_or(char::is_whitespace)
}

/// The text of a `SessionStart` hook's `hook_additional_context` attachment
/// (Claude Code replays it on `--resume` as `SessionStart hook additional
/// context: …`); `None` for every other attachment, including the
/// per-prompt `UserPromptSubmit` contexts.
pub fn session_start_context(attachment: &Attachment<'_>) -> Option<String> {
    if attachment.kind() != "hook_additional_context"
        || attachment.hook_event.get().map(AsRef::as_ref) != Some("SessionStart")
    {
        return None;
    }
    let raw = attachment.content?.get();
    let text = match serde_json::from_str::<serde_json::Value>(raw).ok()? {
        serde_json::Value::String(s) => s,
        serde_json::Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.as_str().or_else(|| p["text"].as_str()))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => return None,
    };
    (!text.trim().is_empty()).then_some(text)
}

/// The reading of an assistant record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AssistantReading {
    /// Text and reply-tool texts, in block order, joined by a blank line.
    Speech(String),
    /// A `<synthetic>` filler record.
    Synthetic,
    /// Sidechain or meta.
    Sidechain,
    /// Only thinking, tool calls, images, whitespace.
    Silent,
}

/// Classify an `assistant` record.
pub(crate) fn read_assistant(record: &Record<'_>, reply_tool: &Regex) -> AssistantReading {
    if record.sidechain() || record.meta() {
        return AssistantReading::Sidechain;
    }
    if record.message.model.as_deref() == Some("<synthetic>") {
        return AssistantReading::Synthetic;
    }
    let mut pieces: Vec<String> = Vec::new();
    match &record.message.content {
        Content::None => {}
        Content::Text(t) => pieces.push(t.to_string()),
        Content::Blocks(blocks) => {
            for raw in blocks {
                match top_level_str(raw, "type") {
                    Some("text") => {
                        pieces.extend(Block::parse(raw).text.0.map(std::borrow::Cow::into_owned));
                    }
                    Some("tool_use")
                        if top_level_str(raw, "name").is_some_and(|n| reply_tool.is_match(n)) =>
                    {
                        pieces.extend(Block::parse(raw).input.and_then(reply_text));
                    }
                    _ => {}
                }
            }
        }
    }
    pieces.retain(|p| !p.trim().is_empty());
    if pieces.is_empty() {
        AssistantReading::Silent
    } else {
        AssistantReading::Speech(pieces.join("\n\n"))
    }
}

fn reply_text(input: &serde_json::value::RawValue) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Input {
        text: Option<String>,
    }
    serde_json::from_str::<Input>(input.get()).ok()?.text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_and_trailing_elements_are_removed() {
        let s = strip_injected("<system-reminder>\nctx\n</system-reminder>\n\nHello there");
        assert_eq!(s.text, "Hello there");
        assert!(s.had_reminder);
        let s = strip_injected("Hello<ide_selection>x</ide_selection>");
        assert_eq!(s.text, "Hello");
        let s = strip_injected(
            "<command-message>plan is running</command-message>\n<command-name>/plan</command-name>\n<command-args>do it</command-args>",
        );
        assert_eq!(s.text, "");
        assert_eq!(s.command_name.as_deref(), Some("/plan"));
        assert_eq!(s.command_args.as_deref(), Some("do it"));
    }

    #[test]
    fn prose_mentions_stay() {
        for text in [
            "explain the `<system-reminder>` tag",
            "Quote:<ide_selection>x</ide_selection> and more",
            "what does <system-reminder>x</system-reminder> mean?",
        ] {
            assert_eq!(strip_injected(text).text, text);
        }
    }

    #[test]
    fn unmatched_tags_stay() {
        assert_eq!(
            strip_injected("<system-reminder> open").text,
            "<system-reminder> open"
        );
    }

    #[test]
    fn channel_envelopes() {
        assert!(is_channel(
            "<channel source=\"telegram\" chat_id=\"1\">\nhi\n</channel>"
        ));
        assert!(!is_channel("<channels are great"));
        assert!(!is_channel("<channel>no source</channel>"));
    }

    #[test]
    fn slash_detection() {
        assert!(is_slash_command("/cost"));
        assert!(is_slash_command("/plan do it"));
        assert!(!is_slash_command("/home/u is a path"));
        assert!(!is_slash_command("hello /cost"));
    }
}
