//! What each tool answers (typed outputs, not `json!`): one
//! struct per answer, serialized as the tool result's structured content
//! and advertised as the tool's `outputSchema` (`rmcp::Json`). The model
//! reads these field names; `tests/integration/mcp.rs` checks every answer
//! against its schema.
//!
//! The schemas describe each answer's own fields. The library reports an
//! answer carries (a plan, a ledger, the window, an operation, a hit) are
//! objects in the schema ([`Nested`]): their fields are those of the CLI's
//! `--json` output, documented in SPEC.md, and the engine and admin crates
//! do not depend on schemars.

use std::collections::BTreeMap;

use rmcp::schemars::JsonSchema;
use serde::Serialize;

use ktr_admin::doctor;
use ktr_admin::report::StatusView;
use ktr_admin::sessions::SessionRow;
use ktr_engine::ledger::LedgerReport;
use ktr_engine::plan::PlanReport;
use ktr_engine::recall::get::Page;
use ktr_engine::recall::{Carried, Hit};
use ktr_engine::window::Window;
use ktr_engine::{LeftOutReason, plan};
use ktr_pipeline::recall::Answer;

/// A library report inside an answer, as an object in the schema.
type Nested = serde_json::Map<String, serde_json::Value>;

/// `thread_rebuild_doctor`: `ktr doctor --json`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct Doctor {
    /// No check failed.
    pub ok: bool,
    /// The config did not load: only the checks that do not need it ran.
    pub config_error: bool,
    /// Each check: `name`, `ok`, `level`, `detail`, and `fix` when it failed or warns.
    #[schemars(with = "Vec<Nested>")]
    pub checks: Vec<doctor::Check>,
}

impl Doctor {
    pub fn of(report: doctor::Report) -> Doctor {
        Doctor {
            ok: report.ok,
            config_error: report.config_error,
            checks: report.checks,
        }
    }
}

/// `thread_rebuild_dirty`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct Dirty {
    /// The transcript read.
    pub transcript: String,
    /// Why this transcript (the session served, or the newest).
    pub transcript_choice: String,
    /// The dirty ledger: residue versus conversation, reasons, `should_rebuild`.
    #[schemars(with = "Nested")]
    pub ledger: LedgerReport,
    /// The window account (SPEC §8), when the transcript's tail could be read.
    #[schemars(with = "Option<Nested>")]
    pub window: Option<Window>,
}

impl Dirty {
    pub fn of(plan: plan::Planned, why: String) -> Dirty {
        Dirty {
            transcript: plan.report.source_path,
            transcript_choice: why,
            ledger: plan.report.ledger,
            window: plan.report.window,
        }
    }
}

/// `thread_rebuild_plan`: every field of `ktr plan --json` except the
/// per-record `left_out` list, summarised by reason (it can hold thousands
/// of entries, and the model reads it inside the very window being
/// measured).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct PlanView {
    /// Every field of `ktr plan --json` but `left_out`.
    #[serde(flatten)]
    #[schemars(with = "Nested")]
    pub report: PlanReport,
    /// Records left out, counted by reason.
    #[schemars(with = "BTreeMap<String, usize>")]
    pub left_out_by_reason: BTreeMap<LeftOutReason, usize>,
    /// Why this transcript (the session served, or the newest).
    pub transcript_choice: String,
    /// What to do next.
    pub next: &'static str,
}

impl PlanView {
    pub fn of(plan: plan::Planned, why: String) -> PlanView {
        let mut report = plan.report;
        let mut left_out_by_reason: BTreeMap<LeftOutReason, usize> = BTreeMap::new();
        for l in std::mem::take(&mut report.left_out) {
            *left_out_by_reason.entry(l.reason).or_default() += 1;
        }
        let next = match &report.blocked_reason {
            Some(_) => "blocked: do not request a rebuild; tell the human the blocked_reason",
            None => "if the human agrees, call thread_rebuild_request with confirmation REBUILD",
        };
        PlanView {
            report,
            left_out_by_reason,
            transcript_choice: why,
            next,
        }
    }
}

/// `thread_rebuild_request`, `thread_rebuild_cancel`,
/// `thread_rebuild_rollback_request`: the operation as `ktr status --json`
/// shows it, and what the model does next.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct Changed {
    /// The operation as `ktr status --json` shows it.
    #[schemars(with = "Nested")]
    pub operation: StatusView,
    /// The target that would be switched (a request only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// What to do next.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<&'static str>,
}

/// `thread_rebuild_status`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct Status {
    /// The operation as `ktr status --json` shows it; null when there is none.
    #[schemars(with = "Option<Nested>")]
    pub operation: Option<StatusView>,
    /// Operations whose worker died, failed by this call.
    pub recovered_stale: Vec<String>,
    /// Every session's operation in flight (several sessions at once).
    #[schemars(with = "Vec<Nested>")]
    pub in_flight: Vec<SessionRow>,
    /// Said when there is no operation.
    pub note: &'static str,
}

/// `thread_rebuild_recall`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct Recalled {
    /// Newest first: session, line, time, turn, kind, tool and its input, a snippet, an `id`.
    #[schemars(with = "Vec<Nested>")]
    pub hits: Vec<Hit>,
    /// Matches on text your window already holds, one each with `older_copies` (they do not use `limit`).
    #[schemars(with = "Vec<Nested>")]
    pub carried: Vec<Carried>,
    /// Hits beyond `limit` seen before the search stopped.
    pub more_at_least: u64,
    /// Every match, with `count`.
    pub total: Option<u64>,
    /// Sessions searched: this one and those it was rebuilt from.
    pub sessions_in_lineage: usize,
    /// Scope all: every session searched, with `resume` (the line that resumes it).
    #[schemars(with = "Vec<Nested>")]
    pub sessions: Vec<ktr_pipeline::recall::SessionInfo>,
    /// Sessions of the lineage whose text is gone: `session` and `why`.
    #[schemars(with = "Vec<Nested>")]
    pub lost_sessions: Vec<ktr_pipeline::recall::Lost>,
    /// Everything was read.
    pub complete: bool,
    pub files_searched: u32,
    pub bytes_searched: u64,
    /// What to do next (none when nothing was found).
    pub next: Option<&'static str>,
}

impl Recalled {
    pub fn of(answer: Answer) -> Recalled {
        let found = answer.found;
        let more = found.more_at_least > 0 || !found.complete;
        Recalled {
            more_at_least: found.more_at_least,
            total: found.total,
            sessions_in_lineage: answer.lineage.len(),
            lost_sessions: answer.lost,
            sessions: answer.sessions,
            complete: found.complete,
            files_searched: found.files_searched,
            bytes_searched: found.bytes_searched,
            next: match (found.hits.is_empty(), more) {
                (true, _) if found.carried.is_empty() => None,
                (true, _) => Some(
                    "only text your window already holds matched: it is in your context; all_copies lists every copy",
                ),
                (false, true) => Some(
                    "more hits exist: narrow with kinds, tool, sessions, since/until or turns; thread_rebuild_recall_get reads one hit whole",
                ),
                (false, false) => Some("thread_rebuild_recall_get with a hit's id reads it whole"),
            },
            hits: found.hits,
            carried: found.carried,
        }
    }
}

/// `thread_rebuild_recall_get`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct RecallPage {
    /// The hit's id, as given.
    pub id: String,
    /// The page: its texts, `page` and `pages`.
    #[schemars(with = "Nested")]
    pub page: Page,
    /// What to do next.
    pub next: String,
}

impl RecallPage {
    pub fn of(id: String, page: Page) -> RecallPage {
        let next = if page.page + 1 < page.pages {
            format!("call again with page {}", page.page + 1)
        } else {
            "this is the last page".into()
        };
        RecallPage { id, page, next }
    }
}
