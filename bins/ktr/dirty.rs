//! `ktr dirty`: what pollutes the current context window (the ledger).

use ktr_base::Error;
use ktr_base::config::Config;
use ktr_engine::{ledger, plan};
use ktr_pipeline::window_cache;

use crate::cli::DirtyArgs;
use crate::out;

/// How `ktr dirty` and `ktr plan` say to ask for a rebuild.
pub const ASK: &str = "`ktr request --confirm REBUILD` asks for it";

/// `ktr dirty --json`: the ledger's fields and the `window` object.
#[derive(serde::Serialize)]
struct Dirty<'a> {
    #[serde(flatten)]
    ledger: &'a ktr_engine::LedgerReport,
    window: Option<&'a ktr_engine::window::Window>,
    /// The newest context Claude Code dropped without a compaction
    /// boundary, as the hooks' running account saw it (SPEC §8).
    cleared: Option<ktr_engine::window::cleared::Cleared>,
}

pub fn run(args: &DirtyArgs) -> Result<u8, Error> {
    let config = Config::here(args.common.config.as_deref())?;
    let given = args.source.path(&config.project_dir);
    let path = match given {
        Some(given) => plan::resolve_transcript(&config, Some(&given))?,
        // The session the Claude Code that runs this serves, else the newest.
        None => ktr_pipeline::binding::default_transcript(&config)?,
    };
    let plan = window_cache::assess(&config, &path)?;
    // What the hooks' running account saw (read, not saved).
    let running = ktr_base::ids::SessionId::parse(&plan.report.session_id)
        .ok()
        .and_then(|s| window_cache::running::peek(&config, &s, &path));
    let cleared = running.as_ref().and_then(|r| r.clearing.last.clone());
    if args.common.json {
        out::json(&Dirty {
            ledger: &plan.report.ledger,
            window: plan.report.window.as_ref(),
            cleared,
        });
    } else {
        let window = plan
            .report
            .window
            .as_ref()
            .map(|w| {
                let offer = ktr_engine::window::offer(w, ASK)
                    .map(|o| format!("compacted: {o}\n"))
                    .unwrap_or_default();
                let cleared = cleared
                    .as_ref()
                    .map(|c| {
                        format!(
                            "cleared: {}\n",
                            ktr_engine::window::cleared::said(
                                c,
                                plan.report.selected_turns as u64,
                                w.after_rebuild_tokens,
                                ASK
                            )
                        )
                    })
                    .unwrap_or_default();
                format!("{}\n{offer}{cleared}", ktr_engine::window::one_line(w))
            })
            .unwrap_or_default();
        out::print(&format!(
            "{window}transcript {}\n{}",
            plan.report.source_path,
            human(&plan.report.ledger)
        ));
    }
    Ok(0)
}

/// The ledger as a readable table.
pub fn human(l: &ledger::LedgerReport) -> String {
    let mut s = format!(
        "current window (from line {}): {} residue vs {} conversation ({} turns), noise {:.1} %\n",
        l.window_start_line,
        out::bytes(l.total_bytes),
        out::bytes(l.conversation_bytes),
        l.conversation_turns,
        l.noise_ratio * 100.0
    );
    for c in &l.categories {
        s.push_str(&format!("  {:<16}{:>12}\n", c.name, out::bytes(c.bytes)));
    }
    if l.per_start_bytes > 0 {
        s.push_str(&format!(
            "Claude Code's per-start attachments {} (written again on every start: overhead, not residue)\n",
            out::bytes(l.per_start_bytes)
        ));
    }
    s.push_str(&format!(
        "images: {} pasted, {} viewed through tools; file-only records {} (never sent to the model)\n",
        l.preview_image_count,
        l.original_image_view_count,
        out::bytes(l.file_only_bytes)
    ));
    s.push_str(&format!(
        "whole file: {} in {} lines\n",
        out::bytes(l.file_bytes),
        l.file_lines
    ));
    if l.should_rebuild {
        s.push_str(&format!("advice: rebuild ({})\n", l.reasons.join("; ")));
    } else {
        s.push_str("advice: no rebuild needed yet\n");
    }
    s
}
