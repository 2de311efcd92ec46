//! `ktr plan`: what a rebuild would carry. Writes nothing anywhere.

use ktr_admin::report;
use ktr_base::Error;
use ktr_base::config::Config;
use ktr_base::ids::SessionId;
use ktr_engine::candidate::{Discard, ManifestEntry, Sink};
use ktr_engine::plan;
use ktr_pipeline::window_cache;

use crate::cli::PlanArgs;
use crate::{dirty, out};

pub fn run(args: &PlanArgs) -> Result<u8, Error> {
    let config = Config::here(args.common.config.as_deref())?;
    let given = args.source.path(&config.project_dir);
    let path = plan::resolve_transcript(&config, given.as_deref())?;
    // Parsed here, where it enters: the engine takes a SessionId.
    let new_session = args
        .new_session
        .as_deref()
        .map(SessionId::parse)
        .transpose()?;
    let new_session = new_session.as_ref();
    let blocked = match (args.common.json, args.show_candidate) {
        (true, true) => {
            let mut plan = plan::build(&config, &path, new_session)?;
            window_cache::measure(&config, &path, &mut plan.report, plan.window_estimate)?;
            // The lines as written (raw: a lone surrogate escape is valid
            // JSON that a `serde_json::Value` cannot hold).
            let candidate = plan
                .candidate
                .lines
                .iter()
                .map(|l| serde_json::from_str(l).expect("candidate lines are JSON"))
                .collect();
            out::json(&WithCandidate {
                report: &plan.report,
                candidate,
            });
            plan.is_blocked()
        }
        (false, true) => {
            let mut stdout = Printed(std::io::stdout().lock());
            let mut plan = plan::build_into(&config, &path, new_session, &mut stdout)?;
            window_cache::measure(&config, &path, &mut plan.report, plan.window_estimate)?;
            plan.is_blocked()
        }
        (json, false) => {
            let mut plan = plan::build_into(&config, &path, new_session, &mut Discard)?;
            window_cache::measure(&config, &path, &mut plan.report, plan.window_estimate)?;
            if json {
                out::json(&plan.report);
            } else {
                out::print(&human(&plan.report));
            }
            plan.is_blocked()
        }
    };
    Ok(u8::from(blocked))
}

/// `ktr plan --json --show-candidate`: the report and the candidate's lines.
#[derive(serde::Serialize)]
struct WithCandidate<'a> {
    #[serde(flatten)]
    report: &'a plan::PlanReport,
    candidate: Vec<&'a serde_json::value::RawValue>,
}

/// The candidate printed line by line as it is planned (`--show-candidate`).
struct Printed<W>(W);

impl<W: std::io::Write> Sink for Printed<W> {
    fn line(&mut self, json: &str, _: ManifestEntry) -> Result<(), Error> {
        let failed = |e: std::io::Error| {
            // A reader that went away (`| head`) ends the program quietly.
            if ktr_base::cli::is_closed_pipe(&e) {
                std::process::exit(0);
            }
            Error::io(format!("cannot print the candidate: {e}"))
        };
        ktr_engine::span::expand_json(json, &mut |b| self.0.write_all(b).map_err(failed))?;
        self.0.write_all(b"\n").map_err(failed)
    }
}

pub fn human(r: &plan::PlanReport) -> String {
    let history = match &r.history_fallback_reason {
        Some(why) => format!("{} (fallback: {why})", r.history_mode),
        None => r.history_mode.to_string(),
    };
    let mut rows: Vec<(&str, String)> = r
        .window
        .as_ref()
        .map(|w| ("window", ktr_engine::window::one_line(w)))
        .into_iter()
        .collect();
    rows.extend(
        r.window
            .as_ref()
            .and_then(|w| ktr_engine::window::offer(w, dirty::ASK))
            .map(|o| ("compacted", o)),
    );
    rows.extend([
        ("source", r.source_path.clone()),
        ("session", r.session_id.clone()),
        ("sha256", r.source_sha256.clone()),
        (
            "size",
            if r.source_changed_while_read {
                format!(
                    "{} (the file changed while it was read: this plan covers the size it had when opened; run plan again)",
                    out::bytes(r.source_bytes)
                )
            } else {
                out::bytes(r.source_bytes)
            },
        ),
        ("claude code versions", r.versions_seen.join(", ")),
        ("history", history),
        (
            "turns (source → carried)",
            format!("{} → {}", r.source_turns, r.selected_turns),
        ),
        ("carried items", r.carried_items.to_string()),
        (
            "left out",
            report::left_out_summary(&report::left_out_by_reason(&r.left_out)),
        ),
        (
            "open tail",
            format!("{} (kept: {})", r.open_tail, r.open_tail_kept),
        ),
        ("dropped oldest turns", r.dropped_oldest_turns.to_string()),
        (
            "leading assistant turns",
            r.leading_assistant_turns.to_string(),
        ),
        (
            "estimated tokens",
            match &r.window {
                Some(w) => format!(
                    "{} (formula; + overhead {} of a fresh window, see window)",
                    r.estimated_tokens, w.overhead_tokens
                ),
                None => format!(
                    "{} (formula; + the fixed overhead of a fresh window)",
                    r.estimated_tokens
                ),
            },
        ),
        ("startup snapshot frozen", r.startup_frozen.to_string()),
        (
            "commands carried with their expansion",
            r.command_expansions_carried.to_string(),
        ),
        (
            "turns with a broken timestamp",
            r.broken_timestamps.to_string(),
        ),
        (
            "compact summaries dropped",
            r.compact_summaries_dropped.to_string(),
        ),
        ("compactions undone", undone(&r.compactions_undone)),
        (
            "abandoned branch records",
            r.abandoned_branch_records.to_string(),
        ),
        (
            "malformed lines",
            format!("{} {:?}", r.malformed_lines, r.malformed_line_numbers),
        ),
        (
            "unknown record types",
            format!("{:?}", r.unknown_record_types),
        ),
        (
            "unknown attachment types",
            format!("{:?}", r.unknown_attachment_types),
        ),
        ("poison hits (last 10 turns)", r.poison_hits.to_string()),
    ]);
    rows.extend(
        r.first_carried
            .as_ref()
            .map(|p| ("first carried", preview(p))),
    );
    rows.extend(
        r.last_carried
            .as_ref()
            .map(|p| ("last carried", preview(p))),
    );
    // Every label gets its own column, however long the longest is.
    let width = rows
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0)
        + 2;
    let mut s: String = rows
        .iter()
        .map(|(k, v)| format!("{k:<width$}{v}\n"))
        .collect();
    s.push('\n');
    s.push_str(&dirty::human(&r.ledger));
    s.push('\n');
    match &r.blocked_reason {
        Some(why) => s.push_str(&format!("BLOCKED: {why}\n")),
        None => s.push_str("plan ok: a rebuild would carry the turns above\n"),
    }
    s
}

/// `2: the summary at line 4 (1 of 1 turn before it carried word for
/// word), at line 8 (2 of 2 turns …)`, or `none`.
fn undone(all: &[plan::Undone]) -> String {
    if all.is_empty() {
        return "none".into();
    }
    let shown = 5;
    let mut each: Vec<String> = all
        .iter()
        .rev()
        .take(shown)
        .rev()
        .map(|c| {
            format!(
                "line {} ({} of {} turn{} before it carried)",
                c.summary_line,
                c.turns_restored,
                c.turns_before,
                if c.turns_before == 1 { "" } else { "s" }
            )
        })
        .collect();
    if all.len() > shown {
        each.insert(0, format!("… {} older", all.len() - shown));
    }
    format!(
        "{}: Claude Code's summary dropped, the turns before it carried word for word — {}",
        all.len(),
        each.join(", ")
    )
}

fn preview(p: &plan::Preview) -> String {
    let text: String = p
        .text
        .chars()
        .take(80)
        .collect::<String>()
        .replace('\n', " ⏎ ");
    let role = if p.role == ktr_engine::turns::Role::User {
        "user"
    } else {
        "assistant"
    };
    format!("{role}: {text}")
}
