//! The conversation's view of a record that holds speech: where it is,
//! how it was read, and the facts of its text (never the text).

use super::Counts;
use crate::transcript::Record;

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
    /// A user record read by [`crate::classify::read_user`].
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
    /// Starts with a stamp or the startup header ([`super::Markers::carried_before`]).
    pub carried_before: bool,
}

/// A record that holds speech (or a startup snapshot candidate): its kind,
/// where it is, and the facts of its text. Nothing of the text is kept.
///
/// One is kept per speech record of the file, so it is packed into 48
/// bytes (memory grows with the conversation); the accessors
/// give the wide types. Lines and texts are at most 4 GiB and a file has
/// at most 2³² − 1 lines ([`super::Scan::read`] refuses bigger ones).
#[derive(Debug, Clone)]
pub struct Event {
    pub(super) offset: u64,
    pub(super) stamp_offset: u64,
    pub(super) line: u32,
    pub(super) len: u32,
    pub(super) stamp_line_len: u32,
    pub(super) cjk: u32,
    pub(super) other: u32,
    pub(super) bytes: u32,
    pub(super) stamp_len: u16,
    pub(super) speech: Speech,
    pub(super) via: Via,
    pub(super) flags: u8,
}

/// The bits of [`Event::flags`].
pub(super) const BLANK: u8 = 1;
pub(super) const CARRIED_BEFORE: u8 = 1 << 1;
pub(super) const SEEN_SPEECH: u8 = 1 << 2;
pub(super) const SNAPSHOT: u8 = 1 << 3;
pub(super) const TIMESTAMP_BROKEN: u8 = 1 << 4;
pub(super) const HAS_STAMP: u8 = 1 << 5;

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
    pub(crate) fn via(&self) -> Via {
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
    /// The record held a real `<system-reminder>` element and no speech came
    /// before it: its raw text (tags included) is a startup snapshot.
    pub fn snapshot(&self) -> bool {
        self.flag(SNAPSHOT)
    }
    /// The record's own timestamp is missing or does not parse.
    pub(crate) fn timestamp_broken(&self) -> bool {
        self.flag(TIMESTAMP_BROKEN)
    }
    /// The record whose timestamp a stamp may show: this one when its own
    /// parses, else the nearest earlier record with a parseable one, else
    /// none. A stamp is never built from anything else.
    pub(crate) fn stamp_at(&self) -> Option<LineRef> {
        self.flag(HAS_STAMP).then_some(LineRef {
            offset: self.stamp_offset,
            len: u64::from(self.stamp_line_len),
        })
    }
    /// The length of that timestamp (ASCII, so its token count is known
    /// without reading it again).
    pub(crate) fn stamp_len(&self) -> usize {
        usize::from(self.stamp_len)
    }
    fn flag(&self, bit: u8) -> bool {
        self.flags & bit != 0
    }
}

/// A count that fits an [`Event`] field (see there for why it does).
pub(super) fn narrow(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
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
