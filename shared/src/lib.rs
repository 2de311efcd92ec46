//! ktr: rebuild a long-running Claude Code session losslessly.
//!
//! The library behind every ktr executable. Reading order for a newcomer:
//! [`transcript`] (stream records) → [`classify`] (what is speech) →
//! [`scan`] (one pass: links, speech, ledger tallies) → [`history`] (which
//! records are the conversation) → [`turns`] (group and select) →
//! [`carry`] (the candidate session) → [`ledger`] (what pollutes the
//! window) → [`plan`] (all of it together, read-only). The pipeline that
//! acts on a plan: [`operation`] (state machine) → [`stages`] (prepare,
//! verify, activate, rollback) → [`target`] (what gets switched).

pub mod carry;
pub mod classify;
pub mod config;
pub mod doctor;
pub mod error;
pub mod fsutil;
pub mod history;
pub mod ledger;
pub mod operation;
pub mod plan;
pub mod process;
pub mod prune;
pub mod rawjson;
pub mod report;
pub mod scan;
pub mod settings;
pub mod stages;
pub mod target;
pub mod transcript;
pub mod turns;
pub mod verify;

pub use error::{Error, ErrorKind, Result};
