//! A systemd service whose start script reads the pointer file (SPEC
//! §12): its identity is `MainPID`, a switch writes the pointer and
//! restarts the unit.

use std::fmt;
use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use super::CONTROL_TIMEOUT;
use super::pointer::write_pointer;
use crate::process;
use ktr_base::error::{Error, Result};
use ktr_base::fsutil::{Existing, write_atomic};

/// A systemd service whose start script reads the pointer file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Systemd {
    /// The systemctl program (`systemctl`).
    pub systemctl: String,
    /// The user's service manager (`systemctl --user`) instead of the system's.
    pub user: bool,
    pub unit: String,
    pub pointer: PathBuf,
    pub restart_timeout: Duration,
}

impl Systemd {
    /// `systemctl [--user] ARGS…`.
    pub(super) fn argv(&self, args: &[&str]) -> Vec<String> {
        let mut argv = vec![self.systemctl.clone()];
        if self.user {
            argv.push("--user".into());
        }
        argv.extend(args.iter().map(|a| (*a).to_string()));
        argv
    }

    /// `MainPID` of the unit (`0` when it is not running).
    pub(super) fn main_pid(&self) -> Result<u32> {
        let argv = self.argv(&["show", "-p", "MainPID", "--value", &self.unit]);
        let out = process::run_checked(&argv, CONTROL_TIMEOUT)?;
        out.parse().map_err(|_| {
            Error::io(format!(
                "systemctl gave no MainPID for {} (got {out:?})",
                self.unit
            ))
        })
    }

    /// The unit's load and run state (`systemctl show` prints defaults with
    /// exit 0 even for a unit that does not exist: `LoadState=not-found`).
    pub fn state(&self) -> Result<UnitState> {
        let argv = self.argv(&[
            "show",
            "-p",
            "LoadState",
            "-p",
            "ActiveState",
            "-p",
            "SubState",
            "-p",
            "Result",
            "-p",
            "MainPID",
            &self.unit,
        ]);
        let out = process::run_checked(&argv, CONTROL_TIMEOUT)?;
        let mut state = UnitState::default();
        for line in out.lines() {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let value = value.trim().to_string();
            match key {
                "LoadState" => state.load = value,
                "ActiveState" => state.active = value,
                "SubState" => state.sub = value,
                "Result" => state.result = value,
                "MainPID" => state.main_pid = value.parse().unwrap_or(0),
                _ => {}
            }
        }
        Ok(state)
    }

    /// Write the pointer, then `systemctl reset-failed` (a unit that
    /// crash-looped into its start limit refuses every start until then)
    /// and `systemctl restart`. When the restart fails the pointer is put
    /// back, so the next ordinary restart does not resume a session that
    /// never ran; the error says what state the unit is in.
    pub(super) fn restart_on(&self, session_id: &str) -> Result<()> {
        let before = match fs::read(&self.pointer) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io_at("read pointer", &self.pointer, &e)),
        };
        write_pointer(&self.pointer, session_id)?;
        let _ =
            process::run_with_timeout(&self.argv(&["reset-failed", &self.unit]), CONTROL_TIMEOUT);
        let restart = self.argv(&["restart", &self.unit]);
        let Err(e) = process::run_checked(&restart, self.restart_timeout) else {
            return Ok(());
        };
        let state = self.state().map_or_else(
            |s| format!("state unknown: {}", s.message),
            |s| s.to_string(),
        );
        let put_back = match before {
            Some(bytes) => write_atomic(&self.pointer, &bytes, 0o600, Existing::Replace),
            None => fs::remove_file(&self.pointer)
                .map_err(|e| Error::io_at("remove pointer", &self.pointer, &e)),
        };
        let pointer = match put_back {
            Ok(()) => "pointer put back".to_string(),
            Err(p) => format!("pointer NOT put back: {}", p.message),
        };
        Err(Error::io(format!(
            "{} (unit {}: {state}); {pointer}",
            e.message, self.unit
        )))
    }
}

/// What `systemctl show` says about a unit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitState {
    /// `loaded`, `not-found`, `masked`, …
    pub load: String,
    /// `active`, `inactive`, `failed`, `activating`, …
    pub active: String,
    pub sub: String,
    /// `success`, `exit-code`, `start-limit-hit`, …
    pub result: String,
    pub main_pid: u32,
}

impl fmt::Display for UnitState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}, {}/{}, result {}, MainPID {}",
            self.load, self.active, self.sub, self.result, self.main_pid
        )
    }
}
