//! Turns and selection (SPEC §5 startup snapshot and summaries, §6).
//!
//! Consecutive user items form one turn; the assistant speech that follows
//! belongs to it; the next user item after assistant speech starts a new
//! turn. Everything else is transparent. Selection then applies the open
//! tail rule, stamps, elision, the token cap and the poison check.

use regex::Regex;

use crate::config::{CarryOverflow, Config};
use crate::engine::scan::{Event, Markers, Speech};

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

/// One carried item: the final text and where it came from.
#[derive(Debug, Clone)]
pub struct Item {
    pub role: Role,
    pub kind: ItemKind,
    pub text: String,
    /// Index into `scan.events`.
    pub event: usize,
    /// Characters removed by `max_event_chars` (0 = whole).
    pub elided_chars: usize,
}

/// A user question (or channel message…) and the answer that followed.
#[derive(Debug, Clone, Default)]
pub struct Turn {
    pub items: Vec<Item>,
}

impl Turn {
    fn has_assistant(&self) -> bool {
        self.items.iter().any(|i| i.role == Role::Assistant)
    }
    /// Estimated tokens of the turn.
    pub fn tokens(&self) -> u64 {
        self.items.iter().map(|i| estimate_tokens(&i.text)).sum()
    }
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
    pub turns: Vec<Turn>,
    pub source_turns: usize,
    pub open_tail: bool,
    pub open_tail_kept: bool,
    pub dropped_oldest_turns: usize,
    pub leading_assistant_turns: usize,
    pub startup_sha256: Option<String>,
    /// The frozen startup text (`startup_snapshot.txt`).
    pub startup_text: Option<String>,
    /// Events of the `SessionStart` contexts carried as attachment lines
    /// ahead of the first item (today's format of the startup snapshot).
    pub startup_context: Vec<usize>,
    pub compact_summaries_dropped: usize,
    pub compact_summaries_carried: usize,
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

/// Token estimate (SPEC §6): CJK code points × 1.1 + others ÷ 1.5, truncated.
pub fn estimate_tokens(text: &str) -> u64 {
    let (mut cjk, mut other) = (0u64, 0u64);
    for c in text.chars() {
        let u = c as u32;
        let is_cjk = matches!(u,
            0x3000..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF | 0xFF00..=0xFFEF);
        if is_cjk {
            cjk += 1;
        } else {
            other += 1;
        }
    }
    (cjk as f64 * 1.1 + other as f64 / 1.5) as u64
}

/// Group the conversation's events into turns and apply every selection rule.
pub fn select(events: &[Event], order: &[usize], config: &Config) -> Selection {
    let mut sel = Selection::default();
    let mut builder = Builder::default();
    let mut seen_speech = false;
    let mut pending_slash: Option<usize> = None;
    // The expansion recorded right after the pending command, if any.
    let mut pending_expansion: Option<usize> = None;
    let mut snapshot_done = !config.freeze_startup_snapshot;
    for &e in order {
        let event = &events[e];
        match &event.speech {
            Speech::StartupContext { text, .. } => {
                // Every SessionStart context before the first speech (one
                // per hook); it replaces the older reminder snapshot.
                if !seen_speech && config.freeze_startup_snapshot {
                    sel.startup_context.push(e);
                    let frozen = sel.startup_text.get_or_insert_with(String::new);
                    if !frozen.is_empty() {
                        frozen.push_str("\n\n");
                    }
                    frozen.push_str(text);
                    snapshot_done = true;
                }
            }
            Speech::Injected => {
                if !seen_speech
                    && !snapshot_done
                    && let Some(raw) = &event.snapshot
                {
                    freeze_reminder(&mut sel, &mut builder, config, e, event, raw);
                    snapshot_done = true;
                }
            }
            Speech::Expansion(_) => {
                if pending_slash.is_some() {
                    pending_expansion = Some(e);
                }
            }
            Speech::User(text) => {
                pending_expansion = None;
                if let Some(s) = pending_slash.take() {
                    sel.local_commands += 1;
                    sel.left_out.push((s, LeftOutReason::LocalCommand));
                }
                match (&event.snapshot, seen_speech || snapshot_done) {
                    (Some(raw), false) => {
                        freeze_reminder(&mut sel, &mut builder, config, e, event, raw);
                        snapshot_done = true;
                    }
                    _ => builder.user(Item::new(Role::User, ItemKind::Speech, text.clone(), e)),
                }
                seen_speech = true;
            }
            Speech::Slash(_) => {
                pending_expansion = None;
                if let Some(s) = pending_slash.replace(e) {
                    sel.local_commands += 1;
                    sel.left_out.push((s, LeftOutReason::LocalCommand));
                }
            }
            Speech::Assistant(text) => {
                if let Some(s) = pending_slash.take()
                    && let Speech::Slash(cmd) = &events[s].speech
                {
                    let mut text = cmd.clone();
                    if let Some(Speech::Expansion(expansion)) =
                        pending_expansion.take().map(|x| &events[x].speech)
                    {
                        text = format!("{text}\n\n{expansion}");
                        sel.command_expansions_carried += 1;
                    }
                    builder.user(Item::new(Role::User, ItemKind::SlashCommand, text, s));
                }
                if builder.assistant(Item::new(
                    Role::Assistant,
                    ItemKind::Speech,
                    text.clone(),
                    e,
                )) {
                    sel.leading_assistant_turns += 1;
                }
                seen_speech = true;
            }
            Speech::Summary(text) => {
                // A blank summary carries nothing (and an empty user item
                // is not a message Claude Code can send): dropped, counted.
                if seen_speech || text.trim().is_empty() {
                    sel.compact_summaries_dropped += 1;
                    sel.left_out.push((e, LeftOutReason::CompactSummaryDropped));
                } else {
                    sel.compact_summaries_carried += 1;
                    builder.user(Item::new(
                        Role::User,
                        ItemKind::CompactSummary,
                        text.clone(),
                        e,
                    ));
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
        sel.startup_sha256 = sel
            .startup_text
            .as_deref()
            .map(|t| crate::fsutil::sha256_hex(t.as_bytes()));
    }
    let mut turns = builder.turns;
    sel.source_turns = turns.len();
    sel.open_tail = turns.last().is_some_and(|t| !t.has_assistant());
    sel.open_tail_kept = sel.open_tail && config.include_open_tail;
    if sel.open_tail && !config.include_open_tail {
        let tail = turns.pop().unwrap_or_default();
        sel.left_out.extend(
            tail.items
                .iter()
                .map(|i| (i.event, LeftOutReason::OpenTailDropped)),
        );
    }
    let markers = Markers::new(&config.stamp_template, &config.startup_header_template);
    for turn in &mut turns {
        finish_turn(turn, events, config, &markers, &mut sel);
    }
    apply_cap(&mut turns, config, &mut sel);
    sel.poison_hits = poison_hits(&turns, &config.poison_pattern);
    if sel.blocked_reason.is_none() && sel.poison_hits >= 2 {
        sel.blocked_reason = Some(format!(
            "recent context looks poisoned: {} matches of poison_pattern in the last 10 turns; rebuild from durable memory instead, or adjust poison_pattern if this is a false alarm",
            sel.poison_hits
        ));
    }
    sel.estimated_tokens = turns.iter().map(Turn::tokens).sum();
    sel.turns = turns;
    sel
}

impl Item {
    fn new(role: Role, kind: ItemKind, text: String, event: usize) -> Item {
        Item {
            role,
            kind,
            text,
            event,
            elided_chars: 0,
        }
    }
}

/// Freeze an older file's startup record (raw text with its
/// `<system-reminder>`) as the first item, under the startup header.
fn freeze_reminder(
    sel: &mut Selection,
    builder: &mut Builder,
    config: &Config,
    e: usize,
    event: &Event,
    raw: &str,
) {
    let text = header(config, event) + raw;
    sel.startup_sha256 = Some(crate::fsutil::sha256_hex(raw.as_bytes()));
    sel.startup_text = Some(text.clone());
    builder.user(Item::new(Role::User, ItemKind::StartupSnapshot, text, e));
}

fn header(config: &Config, event: &Event) -> String {
    let ts = event.meta.stamp_time.as_deref().unwrap_or("");
    config.startup_header_template.replace("{timestamp}", ts) + "\n"
}

/// Elide over-long items, then stamp the turn's first user item.
fn finish_turn(
    turn: &mut Turn,
    events: &[Event],
    config: &Config,
    markers: &Markers,
    sel: &mut Selection,
) {
    if config.max_event_chars > 0 {
        for item in &mut turn.items {
            if elide(item, config.max_event_chars as usize) {
                sel.elided_items += 1;
            }
        }
    }
    if !config.stamp_turns {
        return;
    }
    let Some(first) = turn.items.iter_mut().find(|i| i.role == Role::User) else {
        return;
    };
    if first.kind == ItemKind::StartupSnapshot || markers.carried_before(&first.text) {
        return;
    }
    let meta = &events[first.event].meta;
    if meta.timestamp_broken() {
        sel.broken_timestamps += 1;
    }
    let Some(ts) = meta.stamp_time.as_deref() else {
        return;
    };
    first.text = format!(
        "{}\n{}",
        config.stamp_template.replace("{timestamp}", ts),
        first.text
    );
}

/// Keep the head and tail of an over-long item with a visible marker.
fn elide(item: &mut Item, max: usize) -> bool {
    let count = item.text.chars().count();
    if count <= max {
        return false;
    }
    let keep = max / 2;
    let removed = count - 2 * keep;
    let head: String = item.text.chars().take(keep).collect();
    let tail: String = item.text.chars().skip(count - keep).collect();
    item.text = format!("{head}\n[… ktr elided {removed} characters (max_event_chars) …]\n{tail}");
    item.elided_chars = removed;
    true
}

fn apply_cap(turns: &mut Vec<Turn>, config: &Config, sel: &mut Selection) {
    if config.carry_max_tokens == 0 {
        return;
    }
    let cap = config.carry_max_tokens;
    let mut total: u64 = turns.iter().map(Turn::tokens).sum();
    if total <= cap {
        return;
    }
    match config.carry_overflow {
        CarryOverflow::Block => {
            sel.blocked_reason = Some(format!(
                "conversation is {total} estimated tokens, over carry_max_tokens {cap} by {}; raise the cap, set carry_overflow = \"drop_oldest\", or rebuild more often",
                total - cap
            ));
        }
        CarryOverflow::DropOldest => {
            let mut drop = 0;
            while total > cap && drop + 1 < turns.len() {
                total -= turns[drop].tokens();
                drop += 1;
            }
            sel.dropped_oldest_turns += drop;
            for turn in turns.drain(..drop) {
                sel.left_out.extend(
                    turn.items
                        .iter()
                        .map(|i| (i.event, LeftOutReason::DroppedOldest)),
                );
            }
        }
    }
}

fn poison_hits(turns: &[Turn], pattern: &Regex) -> usize {
    let start = turns.len().saturating_sub(10);
    turns[start..]
        .iter()
        .flat_map(|t| &t.items)
        .filter(|i| i.kind != ItemKind::StartupSnapshot)
        .map(|i| pattern.find_iter(&i.text).count())
        .sum()
}

/// Builds turns from a stream of items.
#[derive(Default)]
struct Builder {
    turns: Vec<Turn>,
}

impl Builder {
    fn user(&mut self, item: Item) {
        match self.turns.last_mut() {
            Some(t) if !t.has_assistant() => t.items.push(item),
            _ => self.turns.push(Turn { items: vec![item] }),
        }
    }
    /// Returns true when this opened a leading assistant-only turn.
    fn assistant(&mut self, item: Item) -> bool {
        if let Some(t) = self.turns.last_mut() {
            t.items.push(item);
            false
        } else {
            self.turns.push(Turn { items: vec![item] });
            true
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
        let it = |r| Item::new(r, ItemKind::Speech, "x".into(), 0);
        assert!(b.assistant(it(Role::Assistant)));
        b.user(it(Role::User));
        b.user(it(Role::User));
        b.assistant(it(Role::Assistant));
        b.assistant(it(Role::Assistant));
        b.user(it(Role::User));
        assert_eq!(b.turns.len(), 3);
        assert_eq!(b.turns[1].items.len(), 4);
        assert!(!b.turns[2].has_assistant());
    }
}
