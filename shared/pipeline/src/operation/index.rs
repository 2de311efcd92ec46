//! The `active` file: which operation each lane has in flight, one line
//! each, so a hook learns in one small read whether its session has
//! anything to do (SPEC §9). The operation files stay the truth: a lost,
//! damaged or older-format `active` is rebuilt from them
//! ([`super::Locked::lane_operation`], [`super::Store::rebuild_active`]).
//!
//! ```text
//! lanes v2
//! <lane> <operation id> <status>
//! ```
//!
//! The previous layout (before several sessions) held one line, `<id>
//! <status>` or `idle`, for the whole household: it reads as
//! [`Active::Unknown`], so the first hook or command rebuilds it from the
//! operation files and an operation in flight under it is never lost.

use std::collections::BTreeMap;

use super::{Lane, Status};
use ktr_base::ids::{OperationId, SessionId};

/// The first line of the `active` file this ktr writes.
const HEADER: &str = "lanes v2";

/// One lane's operation in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    pub lane: Lane,
    pub id: OperationId,
    pub status: Status,
}

/// What the `active` file says ([`super::Store::active_state`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Active {
    /// The operations in flight, at most one per lane (none: idle).
    Known(Index),
    /// The file is missing, damaged or in the previous layout (why):
    /// rebuild it from the operation files.
    Unknown(String),
}

/// The lanes with an operation in flight.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Index {
    lanes: BTreeMap<Lane, (OperationId, Status)>,
}

/// Why an `active` file in the previous layout is rebuilt.
pub(crate) const OLDER_LAYOUT: &str =
    "in the layout of an older ktr (one operation for the household)";

impl Index {
    /// Read the file's text.
    pub fn parse(text: &str) -> Result<Index, String> {
        let mut lines = text.lines();
        match lines.next().map(str::trim) {
            Some(HEADER) => {}
            Some(first) if older_layout(first) && lines.next().is_none() => {
                return Err(OLDER_LAYOUT.into());
            }
            _ => return Err("not what ktr writes there".into()),
        }
        let mut index = Index::default();
        for line in lines {
            let mut words = line.split_whitespace();
            let entry = match (words.next(), words.next(), words.next(), words.next()) {
                (Some(lane), Some(id), Some(status), None) => Lane::parse(lane)
                    .zip(OperationId::parse(id).ok())
                    .zip(Status::parse(status).filter(|s| !s.is_terminal())),
                _ => None,
            };
            let Some(((lane, id), status)) = entry else {
                return Err("not what ktr writes there".into());
            };
            if index.lanes.insert(lane, (id, status)).is_some() {
                return Err("it names a lane twice".into());
            }
        }
        Ok(index)
    }

    /// The file's text.
    pub fn render(&self) -> String {
        let mut text = format!("{HEADER}\n");
        for (lane, (id, status)) in &self.lanes {
            text.push_str(&format!("{} {id} {status}\n", lane.name()));
        }
        text
    }

    /// Every lane's operation in flight, in lane order.
    pub fn entries(&self) -> Vec<InFlight> {
        self.lanes
            .iter()
            .map(|(lane, (id, status))| InFlight {
                lane: lane.clone(),
                id: id.clone(),
                status: *status,
            })
            .collect()
    }

    /// The operation `lane` has in flight.
    pub fn get(&self, lane: &Lane) -> Option<(OperationId, Status)> {
        self.lanes.get(lane).cloned()
    }

    /// What `session`'s hooks have to do with: its own lane's operation,
    /// else a request bound to no session yet.
    pub(crate) fn for_session(&self, session: &SessionId) -> Option<(OperationId, Status)> {
        self.get(&Lane::Session(session.clone()))
            .or_else(|| self.get(&Lane::Unbound))
    }

    /// `id` is in flight in `lane`, in `status` (and in no other lane).
    pub fn set(&mut self, lane: Lane, id: &OperationId, status: Status) {
        self.remove(id);
        self.lanes.insert(lane, (id.clone(), status));
    }

    /// `id` is in flight nowhere.
    pub fn remove(&mut self, id: &OperationId) {
        self.lanes.retain(|_, (named, _)| named != id);
    }

    /// No operation is in flight.
    #[cfg(test)]
    pub(crate) fn is_idle(&self) -> bool {
        self.lanes.is_empty()
    }
}

/// `idle`, or `<id> <status>`: what the previous layout wrote.
fn older_layout(line: &str) -> bool {
    let mut words = line.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some("idle"), None, None) => true,
        (Some(id), Some(status), None) => {
            OperationId::parse(id).is_ok() && Status::parse(status).is_some()
        }
        _ => false,
    }
}
