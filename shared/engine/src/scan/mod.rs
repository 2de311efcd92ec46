//! One pass over a transcript.
//!
//! The scan keeps only what later steps need: a small [`Node`] per record
//! (links for the chain walk), an [`Event`] per record that holds speech
//! (the conversation itself), ledger tallies, and drift counters. Tool
//! results and other residue are measured and forgotten.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;

use regex::Regex;

use crate::ledger::{Category, Tally};
use crate::transcript::{self, Line, Parent, Record};

pub use crate::symbols::Sym;
use crate::symbols::Symbols;

mod event;
mod kinds;
mod markers;
mod node;
mod speech;

pub use crate::counts::Counts;
use event::{BLANK, CARRIED_BEFORE, HAS_STAMP, SEEN_SPEECH, SNAPSHOT, TIMESTAMP_BROKEN, narrow};
pub use event::{Event, LineRef, Meta, Speech, Via, meta};
use kinds::{KNOWN_ATTACHMENT_TYPES, KNOWN_RECORD_TYPES};
pub use kinds::{NotSpeechCounts, PER_START_ATTACHMENT_TYPES};
pub use markers::Markers;
use node::{BOUNDARY, HAS_MESSAGE, NONE, ParentKind, SIDECHAIN};
pub use node::{Link, Node, RecordRole};

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
pub(crate) struct Scan {
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
    /// The newest compaction boundary (`compact_boundary`): its uuid (else
    /// `line N`) and how many events the scan had read before it.
    pub last_boundary: Option<(String, usize)>,
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
    pub(crate) fn symbol_count(&self) -> usize {
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

    /// Residue already tallied that no request carries ([`Tally::unsent_bytes`]).
    fn unsent(&mut self, bytes: usize) {
        for t in [&mut self.window, &mut self.file] {
            t.unsent_bytes += bytes as u64;
        }
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
                    let uuid = r.uuid.get().map_or_else(
                        || format!("line {number}"),
                        std::string::ToString::to_string,
                    );
                    self.last_boundary = Some((uuid, self.events.len()));
                }
                self.tally(Category::System, len);
                // Claude Code 2.1.328 sends only a local command's output
                // of its system records (its bundle's display-only filter).
                if r.subtype.get().is_none_or(|s| s != "local_command") {
                    self.unsent(len);
                }
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

#[cfg(test)]
mod tests {
    use super::{Event, Node};
    use crate::turns::Item;

    /// One of each is kept per record (per speech record, per carried
    /// record) of the file: their size is the plan's memory per turn.
    #[test]
    fn the_per_record_tables_stay_packed() {
        assert_eq!(size_of::<Node>(), 32);
        assert_eq!(size_of::<Event>(), 48);
        assert_eq!(size_of::<Item>(), 48);
    }
}
