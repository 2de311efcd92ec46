//! `ktr dirty`: what pollutes the current context window (the ledger).

use ktr::Error;
use ktr::config::Config;
use ktr::engine::{ledger, plan};

use crate::cli::DirtyArgs;
use crate::out;

pub fn run(args: &DirtyArgs) -> Result<u8, Error> {
    let config = Config::load(args.common.config.as_deref())?;
    let given = args.source.path(&config.project_dir);
    let path = plan::resolve_transcript(&config, given.as_deref())?;
    let plan = plan::build(&config, &path, None)?;
    if args.common.json {
        out::json(&plan.report.ledger);
    } else {
        out::print(&format!(
            "transcript {}\n{}",
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
