//! [`Stage`]: the four pipeline stages, each its own executable, and the
//! status each one expects to find its operation in.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::Status;

/// One stage of the pipeline, each its own executable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Prepare,
    Verify,
    Activate,
    Rollback,
}

impl Stage {
    /// `prepare`, `verify`, `activate`, `rollback` (recorded as the worker).
    pub fn name(self) -> &'static str {
        match self {
            Stage::Prepare => "prepare",
            Stage::Verify => "verify",
            Stage::Activate => "activate",
            Stage::Rollback => "rollback",
        }
    }

    /// The executable: `ktr-<name>`.
    pub fn program(self) -> &'static str {
        match self {
            Stage::Prepare => "ktr-prepare",
            Stage::Verify => "ktr-verify",
            Stage::Activate => "ktr-activate",
            Stage::Rollback => "ktr-rollback",
        }
    }

    /// The status an operation must have when this stage starts.
    pub fn expects(self) -> Status {
        match self {
            Stage::Prepare => Status::Scheduled,
            Stage::Verify | Stage::Activate => Status::Verifying,
            Stage::Rollback => Status::RollbackScheduled,
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.program())
    }
}
