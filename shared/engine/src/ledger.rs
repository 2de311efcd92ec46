//! The dirty ledger (SPEC §8): what pollutes the current context window.
//!
//! The window is what follows the last compaction boundary (Claude Code
//! resumes from there). Bytes are the raw JSON bytes of each part as it
//! appears in the line; injected elements inside user text are measured as
//! decoded UTF-8 bytes. The ledger only advises; it never starts a rebuild.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The categories of residue, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Category {
    ToolResult,
    ToolUse,
    Thinking,
    Image,
    MetaInjection,
    InjectedBlock,
    Attachment,
    Sidechain,
    System,
    CompactSummary,
}

impl Category {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Category::ToolResult => "tool_result",
            Category::ToolUse => "tool_use",
            Category::Thinking => "thinking",
            Category::Image => "image",
            Category::MetaInjection => "meta_injection",
            Category::InjectedBlock => "injected_block",
            Category::Attachment => "attachment",
            Category::Sidechain => "sidechain",
            Category::System => "system",
            Category::CompactSummary => "compact_summary",
        }
    }
}

/// Byte counters for one stretch of a transcript.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub categories: BTreeMap<Category, u64>,
    pub conversation_bytes: u64,
    /// Formula estimate of the conversation's tokens (SPEC §6, CJK-aware).
    pub conversation_estimate: u64,
    /// Bytes of Claude Code's per-start attachments (environment, tool and
    /// skill listings, date…): the newest of each kind is not residue, it
    /// comes back on every start (window overhead); older copies are.
    pub per_start_bytes: u64,
    pub file_only_bytes: u64,
    /// Residue counted in the categories that Claude Code keeps in the
    /// file but never sends: a record's `toolUseResult`, the copy of a
    /// tool's output its screen shows (whole, where the model got a 2 KB
    /// preview of an output Claude Code saved to a file), and its `system`
    /// records but a local command's output (turn durations, Stop hook
    /// summaries, boundaries).
    pub unsent_bytes: u64,
    pub preview_image_count: u64,
    pub original_image_view_count: u64,
}

impl Tally {
    /// Count `bytes` of residue.
    pub fn add(&mut self, category: Category, bytes: usize) {
        if bytes > 0 {
            *self.categories.entry(category).or_default() += bytes as u64;
        }
    }
    /// Sum of all residue.
    pub fn total(&self) -> u64 {
        self.categories.values().sum()
    }
}

/// One category line of the report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CategoryBytes {
    pub name: String,
    pub bytes: u64,
}

/// The ledger as reported by `ktr dirty` and inside `ktr plan`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerReport {
    /// Residue bytes in the current window.
    pub total_bytes: u64,
    /// Residue per category, largest first.
    pub categories: Vec<CategoryBytes>,
    /// Bytes of real speech in the window (for comparison only).
    pub conversation_bytes: u64,
    /// Turns of the conversation that would be carried.
    pub conversation_turns: usize,
    /// total / (total + conversation).
    pub noise_ratio: f64,
    /// Images pasted by the user in the window.
    pub preview_image_count: u64,
    /// Images shown through a tool (e.g. Read on an image file).
    pub original_image_view_count: u64,
    pub dirty_budget_bytes: u64,
    pub should_rebuild: bool,
    pub reasons: Vec<String>,
    /// Line where the window starts (after the last compaction boundary).
    pub window_start_line: usize,
    /// Bytes of Claude Code's per-start attachments in the window (they
    /// come back on every start: overhead, not residue). Absent in
    /// operation files written before it existed.
    #[serde(default)]
    pub per_start_bytes: u64,
    /// Bytes of records that never reach the model (never counted).
    pub file_only_bytes: u64,
    /// Whole-file totals.
    pub file_bytes: u64,
    pub file_lines: usize,
    pub file_residue_bytes: u64,
    pub file_conversation_bytes: u64,
}

/// Settings the verdict depends on.
pub struct Budget {
    pub dirty_budget_bytes: u64,
    pub rebuild_on_original_image_view: bool,
}

/// What the scan measured, turned into a report.
pub struct Measured<'a> {
    pub window: &'a Tally,
    pub file: &'a Tally,
    pub window_start_line: usize,
    pub file_bytes: u64,
    pub file_lines: usize,
    pub conversation_turns: usize,
}

/// Build the report and its verdict.
pub fn report(m: &Measured<'_>, budget: &Budget) -> LedgerReport {
    let mut categories: Vec<CategoryBytes> = m
        .window
        .categories
        .iter()
        .map(|(c, b)| CategoryBytes {
            name: c.name().to_string(),
            bytes: *b,
        })
        .collect();
    categories.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.name.cmp(&b.name)));
    let total = m.window.total();
    let denominator = total + m.window.conversation_bytes;
    let noise_ratio = if denominator == 0 {
        0.0
    } else {
        (total as f64 / denominator as f64 * 10_000.0).round() / 10_000.0
    };
    let mut reasons = Vec::new();
    if budget.dirty_budget_bytes > 0 && total >= budget.dirty_budget_bytes {
        reasons.push(format!(
            "residue {total} bytes reached dirty_budget_bytes {}",
            budget.dirty_budget_bytes
        ));
    }
    if budget.rebuild_on_original_image_view && m.window.original_image_view_count > 0 {
        reasons.push(format!(
            "{} original image view(s) in the window (rebuild_on_original_image_view)",
            m.window.original_image_view_count
        ));
    }
    LedgerReport {
        total_bytes: total,
        categories,
        conversation_bytes: m.window.conversation_bytes,
        conversation_turns: m.conversation_turns,
        noise_ratio,
        preview_image_count: m.window.preview_image_count,
        original_image_view_count: m.window.original_image_view_count,
        dirty_budget_bytes: budget.dirty_budget_bytes,
        should_rebuild: !reasons.is_empty(),
        reasons,
        window_start_line: m.window_start_line,
        per_start_bytes: m.window.per_start_bytes,
        file_only_bytes: m.file.file_only_bytes,
        file_bytes: m.file_bytes,
        file_lines: m.file_lines,
        file_residue_bytes: m.file.total(),
        file_conversation_bytes: m.file.conversation_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_and_ratio() {
        let mut w = Tally::default();
        w.add(Category::ToolResult, 900);
        w.add(Category::Thinking, 50);
        w.conversation_bytes = 50;
        w.original_image_view_count = 1;
        let run = |dirty_budget_bytes, rebuild_on_original_image_view| {
            let measured = Measured {
                window: &w,
                file: &w,
                window_start_line: 1,
                file_bytes: 2000,
                file_lines: 9,
                conversation_turns: 2,
            };
            report(
                &measured,
                &Budget {
                    dirty_budget_bytes,
                    rebuild_on_original_image_view,
                },
            )
        };
        let r = run(500, true);
        assert_eq!(r.total_bytes, 950);
        assert!((r.noise_ratio - 0.95).abs() < 1e-9);
        assert_eq!(
            r.categories[0],
            CategoryBytes {
                name: "tool_result".into(),
                bytes: 900
            }
        );
        assert!(r.should_rebuild);
        assert_eq!(r.reasons.len(), 2);
        let r = run(0, false);
        assert!(!r.should_rebuild);
    }
}
