//! `ktr status [OP]`: one operation (default: the latest), every session's
//! operation in flight, and, for the one shown,
//! the estimate next to Claude Code's own measurement and every transition.

use std::time::SystemTime;

use ktr_admin::report::{StatusView, WindowView, age, human_age};
use ktr_admin::sessions::{self, SessionRow};
use ktr_base::Error;
use ktr_base::config::Config;
use ktr_base::ids::SessionId;
use ktr_pipeline::targets::Target;
use ktr_pipeline::window_cache::not_switched::{self, NotSwitched};

use crate::cli::StatusArgs;
use crate::{out, state};

pub fn run(args: &StatusArgs) -> Result<u8, Error> {
    let (config, store) = state::open(args.common.config.as_deref())?;
    let op = match &args.operation {
        Some(id) => Some(store.load(id)?),
        None => store.latest()?,
    };
    let target = Target::from_config(&config);
    let not_switched = not_switched::read(&config.state_dir);
    let Some(op) = op else {
        let idle = Idle::now(&config, &target, not_switched);
        if args.common.json {
            out::json(&idle);
        } else {
            out::print(&idle.human());
        }
        return Ok(0);
    };
    let view = StatusView::of(&op)
        .looking_at(&target)
        .with_window(&op, &config)
        .with_progress(&store);
    let sessions = sessions::in_flight(&store.list()?);
    if args.common.json {
        out::json(&Shown {
            view: &view,
            not_switched: not_switched.as_ref(),
            in_flight: &sessions,
        });
    } else {
        out::print(
            &(human(&view)
                + &not_switched_line(not_switched.as_ref())
                + &in_flight_lines(&sessions)),
        );
    }
    Ok(0)
}

/// `ktr status --json` of an operation: its view, and the last session
/// found not to be the one ktr switches.
#[derive(serde::Serialize)]
struct Shown<'a> {
    #[serde(flatten)]
    view: &'a StatusView,
    #[serde(skip_serializing_if = "Option::is_none")]
    not_switched: Option<&'a NotSwitched>,
    /// Every session's operation in flight (several sessions at once).
    in_flight: &'a [SessionRow],
}

/// The `in flight` rows: one per session with an operation in flight.
fn in_flight_lines(rows: &[SessionRow]) -> String {
    sessions::lines(rows)
        .into_iter()
        .map(|l| format!("{:<18}{l}\n", "in flight"))
        .collect()
}

/// `ktr status` before any operation exists: always an object, with the
/// window of the session a command defaults to (the one the Claude Code
/// running it serves, else the newest transcript).
#[derive(serde::Serialize)]
struct Idle {
    /// No operation: `null`.
    id: Option<String>,
    next: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_now: Option<String>,
    window: Option<WindowView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    not_switched: Option<NotSwitched>,
}

impl Idle {
    fn now(config: &Config, target: &Target, not_switched: Option<NotSwitched>) -> Idle {
        let window = ktr_pipeline::binding::default_transcript(config)
            .ok()
            .and_then(|path| {
                let session = SessionId::parse(&path.file_stem()?.to_string_lossy()).ok()?;
                WindowView::of(&session, &path, config, None)
            });
        Idle {
            id: None,
            next: NO_OPERATIONS.into(),
            target_now: target
                .running()
                .ok()
                .map(|r| format!("{target} runs {}", r.describe())),
            window,
            not_switched,
        }
    }

    fn human(&self) -> String {
        let mut s = format!("{}\n", self.next);
        if let Some(w) = &self.window {
            s.push_str(&format!("{:<18}{}\n", "window", window_line(w)));
        }
        if let Some(t) = &self.target_now {
            s.push_str(&format!("{:<18}{t}\n", "target now"));
        }
        s + &not_switched_line(self.not_switched.as_ref())
    }
}

const NO_OPERATIONS: &str = "no operations yet; `ktr request --confirm REBUILD` asks for one";

/// The `not switched` row: which session, when, and why.
fn not_switched_line(n: Option<&NotSwitched>) -> String {
    n.map(|n| {
        format!(
            "{:<18}session {} ({}): {}\n",
            "not switched", n.session_id, n.at, n.why
        )
    })
    .unwrap_or_default()
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
        line("window", window_line(w));
    }
    if let Some(w) = v.window.as_ref().filter(|w| w.summarised_turns > 0) {
        line(
            "compacted",
            format!(
                "{} turns from before Claude Code's last compaction are only in its summary; a rebuild carries them word for word (`ktr plan` shows what it restores)",
                w.summarised_turns
            ),
        );
    }
    if let Some(c) = v.window.as_ref().and_then(|w| w.cleared.as_ref()) {
        line(
            "cleared",
            format!(
                "{}; a rebuild carries the whole conversation word for word",
                ktr_engine::window::cleared::what(c)
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

/// The `window` row: the session's window, each figure with its source.
fn window_line(w: &WindowView) -> String {
    let short = ktr_engine::window::short;
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
    )
}
