//! `ktr plan`: what a rebuild would carry. Writes nothing anywhere.

use ktr::config::Config;
use ktr::{Error, plan};

use crate::cli::PlanArgs;
use crate::{dirty, out};

pub fn run(args: &PlanArgs) -> Result<u8, Error> {
    let config = Config::load(args.common.config.as_deref())?;
    let path = plan::resolve_transcript(&config, args.transcript.as_deref())?;
    let plan = plan::build(&config, &path, args.session_id.as_deref())?;
    if args.common.json {
        let mut value = serde_json::to_value(&plan.report).expect("reports serialize");
        if args.show_candidate {
            let lines: Vec<serde_json::Value> = plan
                .candidate
                .lines
                .iter()
                .map(|l| serde_json::from_str(l).expect("candidate lines are JSON"))
                .collect();
            value["candidate"] = serde_json::Value::Array(lines);
        }
        out::json(&value);
    } else if args.show_candidate {
        out::print(&String::from_utf8_lossy(&plan.candidate.bytes()));
    } else {
        out::print(&human(&plan.report));
    }
    Ok(if plan.is_blocked() { 1 } else { 0 })
}

fn human(r: &plan::Report) -> String {
    let mut s = String::new();
    let mut line = |k: &str, v: String| s.push_str(&format!("{k:<28}{v}\n"));
    line("source", r.source_path.clone());
    line("session", r.session_id.clone());
    line("sha256", r.source_sha256.clone());
    line("size", out::bytes(r.source_bytes));
    line("claude code versions", r.versions_seen.join(", "));
    let mode = match &r.history_fallback_reason {
        Some(why) => format!("{} (fallback: {why})", r.history_mode),
        None => r.history_mode.to_string(),
    };
    line("history", mode);
    line(
        "turns (source → carried)",
        format!("{} → {}", r.source_turns, r.selected_turns),
    );
    line("carried items", r.carried_items.to_string());
    line(
        "open tail",
        format!("{} (kept: {})", r.open_tail, r.open_tail_kept),
    );
    line("dropped oldest turns", r.dropped_oldest_turns.to_string());
    line(
        "leading assistant turns",
        r.leading_assistant_turns.to_string(),
    );
    line(
        "estimated tokens",
        format!(
            "{} (+ ~37k fixed overhead of a fresh window)",
            r.estimated_tokens
        ),
    );
    line("startup snapshot frozen", r.startup_frozen.to_string());
    line(
        "compact summaries dropped",
        r.compact_summaries_dropped.to_string(),
    );
    line(
        "abandoned branch records",
        r.abandoned_branch_records.to_string(),
    );
    line(
        "malformed lines",
        format!("{} {:?}", r.malformed_lines, r.malformed_line_numbers),
    );
    line(
        "unknown record types",
        format!("{:?}", r.unknown_record_types),
    );
    line(
        "unknown attachment types",
        format!("{:?}", r.unknown_attachment_types),
    );
    line("poison hits (last 10 turns)", r.poison_hits.to_string());
    if let Some(first) = &r.first_carried {
        line("first carried", preview(first));
    }
    if let Some(last) = &r.last_carried {
        line("last carried", preview(last));
    }
    s.push('\n');
    s.push_str(&dirty::human(&r.ledger));
    s.push('\n');
    match &r.blocked_reason {
        Some(why) => s.push_str(&format!("BLOCKED: {why}\n")),
        None => s.push_str("plan ok: a rebuild would carry the turns above\n"),
    }
    s
}

fn preview(p: &plan::Preview) -> String {
    let text: String = p
        .text
        .chars()
        .take(80)
        .collect::<String>()
        .replace('\n', " ⏎ ");
    let role = if p.role == ktr::turns::Role::User {
        "user"
    } else {
        "assistant"
    };
    format!("{role}: {text}")
}
