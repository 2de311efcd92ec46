//! ktr: rebuild a long-running Claude Code session losslessly.
//!
//! The library behind every ktr executable. Reading order for a newcomer:
//! [`transcript`] (stream records) → [`history`] (which records are the
//! conversation) → [`classify`] (what is speech) → [`turns`] (group and
//! select) → [`carry`] (the candidate session) → [`ledger`] (what pollutes
//! the window) → [`plan`] (all of it together, read-only).

pub mod config;
pub mod error;
pub mod fsutil;
pub mod operation;
pub mod process;
pub mod target;

pub use error::{Error, ErrorKind, Result};
