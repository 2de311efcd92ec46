//! Turns and selection (SPEC §5 startup snapshot and summaries, §6).
//!
//! Consecutive user items form one turn; the assistant speech that follows
//! belongs to it; the next user item after assistant speech starts a new
//! turn. Everything else is transparent. Selection then applies the open
//! tail rule, stamps, elision, the token cap and the poison check.

use crate::options::EngineOptions;
use crate::reread::Reread;
use crate::scan::{Counts, Event, Markers, Speech};
use crate::span;
use ktr_base::config::CarryOverflow;
use ktr_base::error::Result;

/// Who speaks an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
    /// A carried `SessionStart` context line (startup snapshot): in the
    /// manifest and the candidate only, never an item of a turn.
    Attachment,
}

impl Role {
    /// `user` or `assistant`: the record type and the API role.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Attachment => "attachment",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an item is, for the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    Speech,
    SlashCommand,
    StartupSnapshot,
    CompactSummary,
}

/// One carried item: where its text comes from and what is done to it.
/// The text itself is read again only when it is needed
/// ([`Item::text`]); its token estimate is known without it. One is kept
/// per carried record (48 bytes).
#[derive(Debug, Clone)]
pub struct Item {
    pub role: Role,
    pub kind: ItemKind,
    /// Index into `scan.events` (the command's for a slash command).
    event: u32,
    pub body: Body,
    /// The text starts with a stamp line (SPEC §6) showing the time of
    /// the event's `stamp_at` record.
    pub stamped: bool,
    /// Characters removed by `max_event_chars` (0 = whole).
    elided_chars: u32,
    /// Of the final text (stamp included).
    counts: Packed,
    /// The final text starts with a stamp or the startup header.
    carried_before: bool,
}

/// [`Counts`] as an item keeps them: a carried text is shorter than its
/// line, and a line is shorter than 4 GiB ([`Scan::read`]).
///
/// [`Scan::read`]: crate::scan::Scan::read
#[derive(Debug, Clone, Copy, Default)]
struct Packed {
    cjk: u32,
    other: u32,
}

impl From<Counts> for Packed {
    fn from(c: Counts) -> Packed {
        let narrow = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        Packed {
            cjk: narrow(c.cjk),
            other: narrow(c.other),
        }
    }
}

/// What an item's text (before its stamp) is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// The event's own text.
    Said,
    /// A slash command followed by its expansion (`carry_command_expansions`).
    Command { expansion: u32 },
    /// A text made here: the startup snapshot under its header, or an elided
    /// text (both bounded: a snapshot is read once, elision keeps
    /// `max_event_chars`).
    Made(Box<str>),
}

/// The turns of the conversation: each a user question (or channel
/// message…) and the answer that followed. The items of all turns are one
/// table (one large block, not one small block a turn: flat memory), the turns
/// are where each starts in it.
#[derive(Debug, Clone, Default)]
pub struct Turns {
    items: Vec<Item>,
    starts: Vec<u32>,
}

impl Turns {
    /// How many turns.
    pub fn len(&self) -> usize {
        self.starts.len()
    }
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }
    /// Every carried item, turn after turn.
    pub fn items(&self) -> &[Item] {
        &self.items
    }
    /// The items of turn `t`.
    pub fn turn(&self, t: usize) -> &[Item] {
        &self.items[self.range(t)]
    }
    fn range(&self, t: usize) -> std::ops::Range<usize> {
        let end = self
            .starts
            .get(t + 1)
            .map_or(self.items.len(), |&e| e as usize);
        self.starts[t] as usize..end
    }
    fn last_has_assistant(&self) -> bool {
        !self.is_empty() && has_assistant(self.turn(self.len() - 1))
    }
    /// Start a new turn with `item`.
    fn start(&mut self, item: Item) {
        self.starts.push(index(self.items.len()));
        self.items.push(item);
    }
    /// Add `item` to the last turn (there is one).
    fn push(&mut self, item: Item) {
        self.items.push(item);
    }
    /// Remove the last turn, giving back its items.
    fn pop(&mut self) -> Vec<Item> {
        match self.starts.pop() {
            Some(start) => self.items.split_off(start as usize),
            None => Vec::new(),
        }
    }
    /// Remove the first `n` turns, giving back their items.
    fn drain_first(&mut self, n: usize) -> std::vec::Drain<'_, Item> {
        let cut = self.starts.get(n).map_or(self.items.len(), |&c| c as usize);
        self.starts.drain(..n);
        let shift = index(cut);
        for s in &mut self.starts {
            *s -= shift;
        }
        self.items.drain(..cut)
    }
}

fn has_assistant(items: &[Item]) -> bool {
    items.iter().any(|i| i.role == Role::Assistant)
}

/// Estimated tokens of a turn's items.
fn tokens(items: &[Item]) -> u64 {
    items.iter().map(|i| i.counts().tokens()).sum()
}

/// Why an event of the conversation was not carried.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum LeftOutReason {
    AbandonedBranch,
    CompactSummaryDropped,
    LocalCommand,
    OpenTailDropped,
    DroppedOldest,
}

/// The outcome of selection.
#[derive(Debug, Default)]
pub struct Selection {
    pub turns: Turns,
    pub source_turns: usize,
    pub open_tail: bool,
    pub open_tail_kept: bool,
    pub dropped_oldest_turns: usize,
    pub leading_assistant_turns: usize,
    pub startup_sha256: Option<String>,
    /// The frozen startup text (`startup_snapshot.txt`): while selecting,
    /// this thread's text (a long context a span's token, see [`span`]).
    pub startup_text: Option<String>,
    /// [`Selection::startup_text`], frozen: never held whole.
    pub startup_frozen: Option<span::Frozen>,
    /// Events of the `SessionStart` contexts carried as attachment lines
    /// ahead of the first item (today's format of the startup snapshot).
    pub startup_context: Vec<usize>,
    pub compact_summaries_dropped: usize,
    pub compact_summaries_carried: usize,
    /// The compactions crossed (a summary dropped after speech), in
    /// conversation order.
    pub compactions: Vec<Crossed>,
    pub local_commands: usize,
    pub elided_items: usize,
    /// Stamped items whose own timestamp was missing or did not parse
    /// (stamped with the nearest parseable earlier time, or not at all).
    pub broken_timestamps: usize,
    /// Slash commands carried with their expansion.
    pub command_expansions_carried: usize,
    pub poison_hits: usize,
    pub estimated_tokens: u64,
    pub blocked_reason: Option<String>,
    /// (event index, reason) for every conversation event not carried.
    pub left_out: Vec<(usize, LeftOutReason)>,
}

/// A compaction the conversation crosses: Claude Code's summary, dropped
/// because the turns it summarised are carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crossed {
    /// The summary's event.
    pub summary: usize,
    /// Turns before it (in the conversation, before any cap).
    pub turns_before: usize,
}

/// Token estimate (SPEC §6): CJK code points × 1.1 + others ÷ 1.5, truncated.
pub fn estimate_tokens(text: &str) -> u64 {
    Counts::of(text).tokens()
}

/// Group the conversation's events into turns and apply every selection
/// rule. Texts are read again (`rd`) only where a rule needs one: startup
/// snapshots, over-long items, the poison check of the last turns.
pub fn select(
    events: &[Event],
    order: &[usize],
    options: &EngineOptions<'_>,
    rd: &Reread<'_>,
) -> Result<Selection> {
    let mut sel = Selection::default();
    let mut builder = Builder::default();
    let mut seen_speech = false;
    let mut pending_slash: Option<usize> = None;
    // The expansion recorded right after the pending command, if any.
    let mut pending_expansion: Option<usize> = None;
    let mut snapshot_done = !options.freeze_startup_snapshot;
    for &e in order {
        let event = &events[e];
        match event.speech() {
            Speech::StartupContext => {
                // Every SessionStart context before the first speech (one
                // per hook); it replaces the older reminder snapshot.
                if !seen_speech && options.freeze_startup_snapshot {
                    sel.startup_context.push(e);
                    let text = rd.said(event)?.text;
                    let frozen = sel.startup_text.get_or_insert_with(String::new);
                    if !frozen.is_empty() {
                        frozen.push_str("\n\n");
                    }
                    frozen.push_str(&text);
                    snapshot_done = true;
                }
            }
            Speech::Injected => {
                if !seen_speech && !snapshot_done && event.snapshot() {
                    freeze_reminder(&mut sel, &mut builder, options, e, event, rd)?;
                    snapshot_done = true;
                }
            }
            Speech::Expansion => {
                if pending_slash.is_some() {
                    pending_expansion = Some(e);
                }
            }
            Speech::User => {
                pending_expansion = None;
                if let Some(s) = pending_slash.take() {
                    sel.local_commands += 1;
                    sel.left_out.push((s, LeftOutReason::LocalCommand));
                }
                if event.snapshot() && !(seen_speech || snapshot_done) {
                    freeze_reminder(&mut sel, &mut builder, options, e, event, rd)?;
                    snapshot_done = true;
                } else {
                    builder.user(Item::said(Role::User, ItemKind::Speech, e, event));
                }
                seen_speech = true;
            }
            Speech::Slash => {
                pending_expansion = None;
                if let Some(s) = pending_slash.replace(e) {
                    sel.local_commands += 1;
                    sel.left_out.push((s, LeftOutReason::LocalCommand));
                }
            }
            Speech::Assistant => {
                if let Some(s) = pending_slash.take() {
                    let mut item = Item::said(Role::User, ItemKind::SlashCommand, s, &events[s]);
                    if let Some(x) = pending_expansion.take() {
                        item.body = Body::Command {
                            expansion: index(x),
                        };
                        item.add(Counts::of("\n\n") + events[x].text().counts);
                        sel.command_expansions_carried += 1;
                    }
                    builder.user(item);
                }
                if builder.assistant(Item::said(Role::Assistant, ItemKind::Speech, e, event)) {
                    sel.leading_assistant_turns += 1;
                }
                seen_speech = true;
            }
            Speech::Summary => {
                // A blank summary carries nothing (and an empty user item
                // is not a message Claude Code can send): dropped, counted.
                if seen_speech {
                    sel.compactions.push(Crossed {
                        summary: e,
                        turns_before: builder.turns.len(),
                    });
                }
                if seen_speech || event.text().blank {
                    sel.compact_summaries_dropped += 1;
                    sel.left_out.push((e, LeftOutReason::CompactSummaryDropped));
                } else {
                    sel.compact_summaries_carried += 1;
                    builder.user(Item::said(Role::User, ItemKind::CompactSummary, e, event));
                    seen_speech = true;
                }
            }
        }
    }
    if let Some(s) = pending_slash.take() {
        sel.local_commands += 1;
        sel.left_out.push((s, LeftOutReason::LocalCommand));
    }
    if !sel.startup_context.is_empty() {
        // A long context stays spans of the source: digested and frozen
        // as a stream of decoded chunks, never held whole.
        sel.startup_sha256 = sel.startup_text.as_deref().map(span::sha256).transpose()?;
        sel.startup_frozen = sel
            .startup_text
            .as_deref()
            .map(span::Frozen::of)
            .transpose()?;
    }
    let mut turns = builder.turns;
    sel.source_turns = turns.len();
    sel.open_tail = !turns.is_empty() && !turns.last_has_assistant();
    sel.open_tail_kept = sel.open_tail && options.include_open_tail;
    if sel.open_tail && !options.include_open_tail {
        sel.left_out.extend(
            turns
                .pop()
                .iter()
                .map(|i| (i.event(), LeftOutReason::OpenTailDropped)),
        );
    }
    for t in 0..turns.len() {
        let range = turns.range(t);
        finish_turn(&mut turns.items[range], events, options, rd, &mut sel)?;
    }
    apply_cap(&mut turns, options, &mut sel);
    sel.poison_hits = poison_hits(&turns, options, events, rd)?;
    if sel.blocked_reason.is_none() && sel.poison_hits >= 2 {
        sel.blocked_reason = Some(format!(
            "recent context looks poisoned: {} matches of poison_pattern in the last 10 turns; rebuild from durable memory instead, or adjust poison_pattern if this is a false alarm",
            sel.poison_hits
        ));
    }
    sel.estimated_tokens = tokens(turns.items());
    sel.turns = turns;
    Ok(sel)
}

/// An event index as an item keeps it ([`Scan::read`] refuses files with
/// more lines than a `u32` counts, so every index fits).
///
/// [`Scan::read`]: crate::scan::Scan::read
fn index(e: usize) -> u32 {
    u32::try_from(e).unwrap_or(u32::MAX)
}

impl Item {
    /// Index into `scan.events` (the command's for a slash command).
    pub fn event(&self) -> usize {
        self.event as usize
    }

    /// Characters removed by `max_event_chars` (0 = whole).
    pub fn elided_chars(&self) -> usize {
        self.elided_chars as usize
    }

    /// The characters of the final text (stamp included).
    pub fn counts(&self) -> Counts {
        Counts {
            cjk: u64::from(self.counts.cjk),
            other: u64::from(self.counts.other),
        }
    }

    fn add(&mut self, more: Counts) {
        self.counts = Packed::from(self.counts() + more);
    }

    /// An item whose text is `event`'s own.
    fn said(role: Role, kind: ItemKind, e: usize, event: &Event) -> Item {
        Item {
            role,
            kind,
            event: index(e),
            body: Body::Said,
            stamped: false,
            elided_chars: 0,
            counts: Packed::from(event.text().counts),
            carried_before: event.text().carried_before,
        }
    }

    /// An item whose text is made here.
    fn made(role: Role, kind: ItemKind, e: usize, text: String, markers: &Markers) -> Item {
        Item {
            role,
            kind,
            event: index(e),
            counts: Packed::from(span::counts(&text)),
            carried_before: markers.carried_before(&span::head(&text)),
            body: Body::Made(text.into()),
            stamped: false,
            elided_chars: 0,
        }
    }

    /// The item's text before its stamp; `own` is the event's text when the
    /// caller has already read it (the record is read again otherwise).
    fn body_text(&self, events: &[Event], rd: &Reread<'_>, own: Option<String>) -> Result<String> {
        let said = || match own {
            Some(text) => Ok(text),
            None => rd.said(&events[self.event()]).map(|s| s.text),
        };
        Ok(match &self.body {
            Body::Made(text) => text.to_string(),
            Body::Said => said()?,
            Body::Command { expansion } => {
                let mut text = said()?;
                let expansion = rd.said(&events[*expansion as usize])?.text;
                text.push_str("\n\n");
                text.push_str(&expansion);
                text
            }
        })
    }

    /// The carried text: the stamp, then the body. `own` is the event's
    /// record when the caller has already read it: its text (used, not
    /// copied) and its own timestamp (otherwise they are read again).
    pub fn text(
        &self,
        events: &[Event],
        rd: &Reread<'_>,
        options: &EngineOptions<'_>,
        own: Option<(String, Option<&str>)>,
    ) -> Result<String> {
        let event = &events[self.event()];
        let own_stamp = self.stamped && event.stamp_at() == Some(event.at());
        let read;
        let (own_text, own_time) = match own {
            Some((text, time)) => (Some(text), time),
            // Stamped with its own time: text and time from one read (a
            // huge record is not parsed twice).
            None if own_stamp && !matches!(self.body, Body::Made(_)) => {
                let (said, meta) = rd.said_and_meta(event)?;
                read = meta.timestamp;
                (Some(said.text), read.as_deref())
            }
            None => (None, None),
        };
        let text = self.body_text(events, rd, own_text)?;
        let time = match (self.stamped, event.stamp_at()) {
            (true, Some(at)) if at == event.at() && own_time.is_some() => {
                own_time.map(str::to_string)
            }
            (true, Some(at)) => rd.timestamp(at)?,
            _ => None,
        };
        Ok(match time {
            Some(ts) => {
                let mut stamped = stamp_line(options, &ts);
                stamped.push_str(&text);
                stamped
            }
            None => text,
        })
    }
}

/// Freeze an older file's startup record (raw text with its
/// `<system-reminder>`) as the first item, under the startup header.
fn freeze_reminder(
    sel: &mut Selection,
    builder: &mut Builder,
    options: &EngineOptions<'_>,
    e: usize,
    event: &Event,
    rd: &Reread<'_>,
) -> Result<()> {
    let raw = rd.said(event)?.snapshot.unwrap_or_default();
    let ts = match event.stamp_at() {
        Some(at) => rd.timestamp(at)?.unwrap_or_default(),
        None => String::new(),
    };
    let text = options.startup_header_template.replace("{timestamp}", &ts) + "\n" + &raw;
    sel.startup_sha256 = Some(span::sha256(&raw)?);
    sel.startup_frozen = Some(span::Frozen::of(&text)?);
    let markers = Markers::new(options.stamp_template, options.startup_header_template);
    builder.user(Item::made(
        Role::User,
        ItemKind::StartupSnapshot,
        e,
        text,
        &markers,
    ));
    Ok(())
}

/// Elide over-long items, then stamp the turn's first user item.
fn finish_turn(
    turn: &mut [Item],
    events: &[Event],
    options: &EngineOptions<'_>,
    rd: &Reread<'_>,
    sel: &mut Selection,
) -> Result<()> {
    let markers = Markers::new(options.stamp_template, options.startup_header_template);
    if options.max_event_chars > 0 {
        for item in turn.iter_mut() {
            if item.counts().chars() > options.max_event_chars {
                elide(item, options.max_event_chars as usize, events, rd, &markers)?;
                sel.elided_items += 1;
            }
        }
    }
    if !options.stamp_turns {
        return Ok(());
    }
    let Some(first) = turn.iter_mut().find(|i| i.role == Role::User) else {
        return Ok(());
    };
    if first.kind == ItemKind::StartupSnapshot || first.carried_before {
        return Ok(());
    }
    let event = &events[first.event()];
    if event.timestamp_broken() {
        sel.broken_timestamps += 1;
    }
    if event.stamp_at().is_none() {
        return Ok(());
    }
    // A timestamp is ASCII: any string of its length counts the same.
    first.add(Counts::of(&stamp_line(
        options,
        &"0".repeat(event.stamp_len()),
    )));
    first.stamped = true;
    Ok(())
}

/// The stamp line for `time`, newline included.
fn stamp_line(options: &EngineOptions<'_>, time: &str) -> String {
    options.stamp_template.replace("{timestamp}", time) + "\n"
}

/// Keep the head and tail of an over-long item with a visible marker.
fn elide(
    item: &mut Item,
    max: usize,
    events: &[Event],
    rd: &Reread<'_>,
    markers: &Markers,
) -> Result<()> {
    let text = item.body_text(events, rd, None)?;
    let keep = max / 2;
    // Read a piece at a time: a long text is a span ([`span::ends`]).
    let (count, head, tail) = span::ends(&text, keep)?;
    let removed = count - 2 * keep;
    let elided = format!("{head}\n[… ktr elided {removed} characters (max_event_chars) …]\n{tail}");
    item.counts = Packed::from(Counts::of(&elided));
    item.carried_before = markers.carried_before(&elided);
    item.body = Body::Made(elided.into());
    item.elided_chars = u32::try_from(removed).unwrap_or(u32::MAX);
    Ok(())
}

fn apply_cap(turns: &mut Turns, options: &EngineOptions<'_>, sel: &mut Selection) {
    if options.carry_max_tokens == 0 {
        return;
    }
    let cap = options.carry_max_tokens;
    let mut total: u64 = tokens(turns.items());
    if total <= cap {
        return;
    }
    match options.carry_overflow {
        CarryOverflow::Block => {
            sel.blocked_reason = Some(format!(
                "conversation is {total} estimated tokens, over carry_max_tokens {cap} by {}; raise the cap, set carry_overflow = \"drop_oldest\", or rebuild more often",
                total - cap
            ));
        }
        CarryOverflow::DropOldest => {
            let mut drop = 0;
            while total > cap && drop + 1 < turns.len() {
                total -= tokens(turns.turn(drop));
                drop += 1;
            }
            sel.dropped_oldest_turns += drop;
            sel.left_out.extend(
                turns
                    .drain_first(drop)
                    .map(|i| (i.event(), LeftOutReason::DroppedOldest)),
            );
        }
    }
}

fn poison_hits(
    turns: &Turns,
    options: &EngineOptions<'_>,
    events: &[Event],
    rd: &Reread<'_>,
) -> Result<usize> {
    let pattern = options.poison_pattern;
    let start = turns.len().saturating_sub(10);
    let first = if start < turns.len() {
        turns.range(start).start
    } else {
        turns.items().len()
    };
    let mut hits = 0;
    for item in turns.items()[first..]
        .iter()
        .filter(|i| i.kind != ItemKind::StartupSnapshot)
    {
        let text = item.text(events, rd, options, None)?;
        hits += span::count_matches(&text, pattern)?;
    }
    Ok(hits)
}

/// Builds turns from a stream of items.
#[derive(Default)]
struct Builder {
    turns: Turns,
}

impl Builder {
    fn user(&mut self, item: Item) {
        if self.turns.is_empty() || self.turns.last_has_assistant() {
            self.turns.start(item);
        } else {
            self.turns.push(item);
        }
    }
    /// Returns true when this opened a leading assistant-only turn.
    fn assistant(&mut self, item: Item) -> bool {
        if self.turns.is_empty() {
            self.turns.start(item);
            true
        } else {
            self.turns.push(item);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_estimate_matches_the_formula() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abc"), 2); // 3 / 1.5
        assert_eq!(estimate_tokens("你好"), 2); // 2 × 1.1 = 2.2
        assert_eq!(estimate_tokens("你好abc"), 4); // 2.2 + 2
    }

    #[test]
    fn builder_groups_turns() {
        let mut b = Builder::default();
        let it = |role| Item {
            role,
            kind: ItemKind::Speech,
            event: 0,
            body: Body::Said,
            stamped: false,
            elided_chars: 0,
            counts: Packed::default(),
            carried_before: false,
        };
        assert!(b.assistant(it(Role::Assistant)));
        b.user(it(Role::User));
        b.user(it(Role::User));
        b.assistant(it(Role::Assistant));
        b.assistant(it(Role::Assistant));
        b.user(it(Role::User));
        assert_eq!(b.turns.len(), 3);
        assert_eq!(b.turns.turn(1).len(), 4);
        assert!(!b.turns.last_has_assistant());
        assert_eq!(b.turns.pop().len(), 1);
        assert_eq!(b.turns.drain_first(1).len(), 1);
        assert_eq!(b.turns.len(), 1);
        assert_eq!(b.turns.turn(0).len(), 4);
    }
}
