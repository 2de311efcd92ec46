//! What the engine needs to know of the config: how to read a
//! transcript and what a rebuild carries — 16 of the config's keys, none
//! of its paths but the project folder, nothing about targets, hooks or
//! the state dir. Borrowed from the [`Config`], so building one on a
//! hook's hot path costs nothing.
//!
//! The public entry points take `impl Into<EngineOptions>`: a `&Config`
//! converts, so a caller with a config passes it as it is.

use std::path::Path;

use ktr_base::config::{CarryOverflow, Config, HistoryMode, OnMalformed, Pattern};

#[derive(Debug, Clone, Copy)]
pub struct EngineOptions<'a> {
    /// Where transcripts are (`resolve_transcript` looks only there).
    pub project_dir: &'a Path,
    pub dirty_budget_bytes: u64,
    pub rebuild_on_original_image_view: bool,
    pub carry_max_tokens: u64,
    pub carry_overflow: CarryOverflow,
    pub max_event_chars: u64,
    pub include_open_tail: bool,
    pub freeze_startup_snapshot: bool,
    pub carry_command_expansions: bool,
    pub stamp_turns: bool,
    pub stamp_template: &'a str,
    pub startup_header_template: &'a str,
    pub poison_pattern: &'a Pattern,
    pub reply_tool_pattern: &'a Pattern,
    pub on_malformed_line: OnMalformed,
    pub history: HistoryMode,
}

impl<'a> From<&'a Config> for EngineOptions<'a> {
    fn from(c: &'a Config) -> EngineOptions<'a> {
        EngineOptions {
            project_dir: &c.project_dir,
            dirty_budget_bytes: c.dirty_budget_bytes,
            rebuild_on_original_image_view: c.rebuild_on_original_image_view,
            carry_max_tokens: c.carry_max_tokens,
            carry_overflow: c.carry_overflow,
            max_event_chars: c.max_event_chars,
            include_open_tail: c.include_open_tail,
            freeze_startup_snapshot: c.freeze_startup_snapshot,
            carry_command_expansions: c.carry_command_expansions,
            stamp_turns: c.stamp_turns,
            stamp_template: &c.stamp_template,
            startup_header_template: &c.startup_header_template,
            poison_pattern: &c.poison_pattern,
            reply_tool_pattern: &c.reply_tool_pattern,
            on_malformed_line: c.on_malformed_line,
            history: c.history,
        }
    }
}

impl<'a> From<&EngineOptions<'a>> for EngineOptions<'a> {
    fn from(o: &EngineOptions<'a>) -> EngineOptions<'a> {
        *o
    }
}
