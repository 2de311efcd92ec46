//! Every session's state: the operation each session has in flight (SPEC
//! §9, "Several sessions"), for `ktr status`, `ktr ops` and the MCP status
//! tool. Read from the operation files themselves, so a lost `active`
//! hides nothing.

use serde::Serialize;

use ktr_base::time::Timestamp;
use ktr_pipeline::operation::{Lane, Operation, Status};

/// One session's operation in flight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionRow {
    /// The session whose operation it is (after a switch, the candidate's:
    /// a rollback works there); null for a request no session holds yet.
    pub session_id: Option<String>,
    pub operation: String,
    pub status: Status,
    pub updated_at: Timestamp,
}

/// The sessions with an operation in flight, in session order, each with
/// its newest one (`list` as [`ktr_pipeline::operation::Store::list`]
/// gives it, oldest first).
pub fn in_flight(list: &[Operation]) -> Vec<SessionRow> {
    let mut rows: Vec<(Lane, SessionRow)> = Vec::new();
    for op in list.iter().filter(|op| !op.status.is_terminal()) {
        let lane = op.lane();
        let row = SessionRow {
            session_id: match &lane {
                Lane::Session(s) => Some(s.to_string()),
                Lane::Unbound => None,
            },
            operation: op.id.to_string(),
            status: op.status,
            updated_at: op.updated_at.clone(),
        };
        match rows.iter_mut().find(|(l, _)| *l == lane) {
            Some((_, kept)) => *kept = row,
            None => rows.push((lane, row)),
        }
    }
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows.into_iter().map(|(_, row)| row).collect()
}

/// One line per session: `session S: operation ID is STATUS`.
pub fn lines(rows: &[SessionRow]) -> Vec<String> {
    rows.iter()
        .map(|r| {
            format!(
                "{}: operation {} is {}",
                r.session_id
                    .as_deref()
                    .map_or_else(|| "no session yet".to_string(), |s| format!("session {s}")),
                r.operation,
                r.status
            )
        })
        .collect()
}
