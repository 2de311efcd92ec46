//! What each tool answers (issue 26: typed outputs, not `json!`): one
//! struct per answer, serialized as the tool result's structured content.
//! The model reads these field names; `tests/integration/mcp.rs` checks them.

use std::collections::BTreeMap;

use serde::Serialize;

use ktr_admin::report::StatusView;
use ktr_engine::ledger::LedgerReport;
use ktr_engine::plan::PlanReport;
use ktr_engine::recall::Hit;
use ktr_engine::recall::get::Page;
use ktr_engine::window::Window;
use ktr_engine::{LeftOutReason, plan};
use ktr_pipeline::recall::Answer;

/// `thread_rebuild_dirty`.
#[derive(Debug, Serialize)]
pub struct Dirty {
    pub transcript: String,
    /// Why this transcript (the session served, or the newest).
    pub transcript_choice: String,
    pub ledger: LedgerReport,
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
#[derive(Debug, Serialize)]
pub struct PlanView {
    #[serde(flatten)]
    pub report: PlanReport,
    pub left_out_by_reason: BTreeMap<LeftOutReason, usize>,
    pub transcript_choice: String,
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
#[derive(Debug, Serialize)]
pub struct Changed {
    pub operation: StatusView,
    /// The target that would be switched (a request only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<&'static str>,
}

/// `thread_rebuild_status`.
#[derive(Debug, Serialize)]
pub struct Status {
    pub operation: Option<StatusView>,
    /// Operations whose worker died, failed by this call.
    pub recovered_stale: Vec<String>,
    pub note: &'static str,
}

/// `thread_rebuild_recall`.
#[derive(Debug, Serialize)]
pub struct Recalled {
    pub hits: Vec<Hit>,
    pub more_at_least: u64,
    pub total: Option<u64>,
    pub sessions_in_lineage: usize,
    pub lost_sessions: Vec<String>,
    pub complete: bool,
    pub files_searched: u32,
    pub bytes_searched: u64,
    pub next: &'static str,
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
            complete: found.complete,
            files_searched: found.files_searched,
            bytes_searched: found.bytes_searched,
            hits: found.hits,
            next: if more {
                "more hits exist: narrow with kinds, tool, sessions, since/until or turns; thread_rebuild_recall_get reads one hit whole"
            } else {
                "thread_rebuild_recall_get with a hit's id reads it whole"
            },
        }
    }
}

/// `thread_rebuild_recall_get`.
#[derive(Debug, Serialize)]
pub struct RecallPage {
    pub id: String,
    pub page: Page,
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
