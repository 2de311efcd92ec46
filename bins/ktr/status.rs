//! `ktr status [OP]`: one operation (default: the latest), with the
//! estimate next to Claude Code's own measurement and every transition.

use std::time::SystemTime;

use ktr_admin::report::{StatusView, age, human_age};
use ktr_base::Error;
use ktr_pipeline::targets::Target;

use crate::cli::StatusArgs;
use crate::{out, state};

pub fn run(args: &StatusArgs) -> Result<u8, Error> {
    let (config, store) = state::open(args.common.config.as_deref())?;
    let op = match &args.operation {
        Some(id) => Some(store.load(id)?),
        None => store.latest()?,
    };
    let view = op.as_ref().map(|op| {
        StatusView::of(op)
            .looking_at(&Target::from_config(&config))
            .with_window(op, &config)
            .with_progress(&store)
    });
    match (&view, args.common.json) {
        (_, true) => out::json(&view),
        (Some(v), false) => out::print(&human(v)),
        (None, false) => {
            out::print("no operations yet; `ktr request --confirm REBUILD` asks for one\n");
        }
    }
    Ok(0)
}

/// The readable report of one operation.
pub fn human(v: &StatusView) -> String {
    let now = SystemTime::now();
    let when = |at: &str| match age(at, now) {
        Some(a) => format!("{at} ({} ago)", human_age(a)),
        None => at.to_string(),
    };
    let mut s = String::new();
    let mut line = |k: &str, v: String| s.push_str(&format!("{k:<18}{v}\n"));
    line("operation", v.id.to_string());
    line("status", v.status.to_string());
    line("next", v.next.clone());
    line("reasons", v.reasons.join("; "));
    line("created", when(&v.created_at));
    line("updated", when(&v.updated_at));
    line(
        "session",
        v.session_id
            .clone()
            .unwrap_or_else(|| "(not bound yet)".into()),
    );
    if let Some(p) = &v.transcript_path {
        line("transcript", p.display().to_string());
    }
    line("attempts", v.attempts.to_string());
    if let Some(w) = &v.worker {
        line("worker", format!("{} (pid {})", w.stage, w.pid));
    }
    if let Some(c) = &v.candidate_session_id {
        line("candidate", c.clone());
    }
    if let Some(p) = &v.candidate_path {
        let gone = if v.candidate_discarded {
            " (discarded: it never ran)"
        } else {
            ""
        };
        line("candidate file", format!("{}{gone}", p.display()));
    }
    if let Some(p) = &v.backup {
        line("frozen backup", p.display().to_string());
    }
    if v.manifest_items > 0 {
        line(
            "carried items",
            format!(
                "{}; left out: {}",
                v.manifest_items,
                ktr_admin::report::left_out_summary(&v.left_out_by_reason)
            ),
        );
    }
    if let Some(ok) = v.verified {
        line("verified", if ok { "yes".into() } else { "NO".into() });
    }
    let measured = match v.context_tokens {
        Some(t) => format!(
            "{t} counted by Claude Code at resume (the carried messages; system prompt and tools come on top)"
        ),
        None => "not measured (no SessionStart ack yet)".into(),
    };
    let estimated = match v.estimated_tokens {
        Some(t) => format!("{t} estimated (+ the fixed overhead of a fresh window)"),
        None => "not estimated yet".into(),
    };
    line("tokens", format!("{estimated}; {measured}"));
    if let Some(p) = &v.progress {
        line("progress", format!("{}: {}", p.stage, p.line));
    }
    if let Some(w) = &v.window {
        let short = ktr_engine::window::short;
        line(
            "window",
            format!(
                "{} of {} (session {}: {}; size: {}); {} {} ({}); after a rebuild ≈ {}",
                w.used_tokens.map_or("unknown".into(), short),
                short(w.size_tokens),
                w.session_id.chars().take(8).collect::<String>(),
                w.used_source,
                w.size_source,
                if w.auto_compaction {
                    "Claude Code compacts at"
                } else {
                    "no auto-compaction, hard limit"
                },
                short(w.compaction_point_tokens),
                w.compaction_point_source,
                w.after_rebuild_tokens
                    .map_or(w.after_rebuild_source.clone(), |t| format!(
                        "{} ({})",
                        short(t),
                        w.after_rebuild_source
                    )),
            ),
        );
    }
    if let Some(t) = &v.target_before {
        line("target before", t.clone());
    }
    if let Some(t) = &v.target_ran {
        line("target ran", t.clone());
    }
    if let Some(t) = &v.target_after {
        line("target after", t.clone());
    }
    if let Some(t) = &v.target_now {
        line("target now", t.clone());
    }
    if let Some(e) = &v.error {
        line("error", e.clone());
    }
    if v.session_conflict {
        line(
            "session conflict",
            "yes: a third party changed the target; never retry blindly".into(),
        );
    }
    if v.needs_attention {
        line(
            "NEEDS ATTENTION",
            "a human must check what the target runs now".into(),
        );
    }
    if let Some(r) = &v.restore {
        line(
            "restore session",
            format!(
                "{} ({}: the old session's {} records, then {} since the switch)",
                r.session_id,
                r.path.display(),
                r.old_records,
                r.new_records
            ),
        );
    }
    if let Some(said) = &v.rolled_back {
        line("rolled back", said.clone());
    }
    if let Some(ok) = v.rollback_ok {
        line("fallback worked", ok.to_string());
    }
    s.push_str("history\n");
    if v.history.is_empty() {
        s.push_str("  (no transitions yet)\n");
    }
    for t in &v.history {
        s.push_str(&format!("  {}  {} → {}  {}\n", t.at, t.from, t.to, t.note));
    }
    s
}
