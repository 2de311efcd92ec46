//! [`Lane`]: the session an operation belongs to. Each lane has at most one
//! operation in flight and its own lock (SPEC §9, "Several sessions").
//!
//! An operation belongs to the session it rebuilds, its source, until it is
//! activated; from then on the lineage goes on under the candidate's id: a
//! rollback works in the candidate's lane (the session it switches away
//! from), and so does the candidate session's next rebuild. A request no
//! session has been bound to yet is in the one [`Lane::Unbound`] lane until
//! a Stop hook binds it.

use std::fmt;

use super::{Operation, Status};
use ktr_base::ids::SessionId;

/// Whose turn an operation is: one session's, or no session's yet.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lane {
    /// The session the operation works for.
    Session(SessionId),
    /// A pending request bound to no session yet.
    Unbound,
}

/// The name of [`Lane::Unbound`] in the `active` file and in `locks/`.
const UNBOUND: &str = "unbound";

impl Lane {
    /// The lane an operation in `status` is in, given its source session
    /// and its candidate's session.
    pub fn of(status: Status, source: Option<&SessionId>, candidate: Option<&SessionId>) -> Lane {
        let session = if status.after_switch() {
            candidate.or(source)
        } else {
            source
        };
        session.map_or(Lane::Unbound, |s| Lane::Session(s.clone()))
    }

    /// The name it is written under (a session id, or `unbound`).
    pub fn name(&self) -> &str {
        match self {
            Lane::Session(s) => s.as_str(),
            Lane::Unbound => UNBOUND,
        }
    }

    /// Read a name [`Lane::name`] wrote.
    pub fn parse(name: &str) -> Option<Lane> {
        if name == UNBOUND {
            return Some(Lane::Unbound);
        }
        SessionId::parse(name).ok().map(Lane::Session)
    }
}

impl fmt::Display for Lane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lane::Session(s) => write!(f, "session {s}"),
            Lane::Unbound => f.write_str("no session yet"),
        }
    }
}

impl Operation {
    /// The lane this operation is in now ([`Lane::of`]).
    pub fn lane(&self) -> Lane {
        Lane::of(
            self.status,
            self.session_id.as_ref(),
            self.candidate.as_ref().map(|c| &c.session_id),
        )
    }
}
