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
use ktr_base::ids::SessionId;

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
            "-p",
            "ExecMainCode",
            "-p",
            "ExecMainStatus",
            "-p",
            "NRestarts",
            "-p",
            "StartLimitBurst",
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
                "ExecMainCode" => state.exit_code = value.parse().unwrap_or(0),
                "ExecMainStatus" => state.exit_status = value.parse().unwrap_or(0),
                "NRestarts" => state.restarts = value.parse().unwrap_or(0),
                "StartLimitBurst" => state.start_limit_burst = value.parse().unwrap_or(0),
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
    /// Why the unit is down, for an operator: its state, how its main
    /// process last ended, the start limit, and the journal line to run.
    /// Appended to a failed health check (a crash loop otherwise reads as
    /// "process 0 is not running").
    pub(crate) fn why_down(&self) -> String {
        let journal = format!(
            "see `journalctl{} -u {} -n 50`",
            if self.user { " --user" } else { "" },
            self.unit
        );
        match self.state() {
            Ok(state) => format!("unit {}: {}; {journal}", self.unit, state.explained()),
            Err(e) => format!(
                "unit {}: state unknown ({}); {journal}",
                self.unit, e.message
            ),
        }
    }

    pub(super) fn restart_on(&self, session_id: &SessionId) -> Result<()> {
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
    /// `ExecMainCode`: how the main process last ended (1 exited, 2 killed,
    /// 3 dumped core; 0 not yet).
    pub exit_code: u32,
    /// `ExecMainStatus`: its exit status, or the signal number.
    pub exit_status: i32,
    /// `NRestarts`: automatic restarts since the last manual start.
    pub restarts: u32,
    /// `StartLimitBurst`: how many starts within the interval systemd allows.
    pub start_limit_burst: u32,
}

impl UnitState {
    /// The state in words: how the last run ended and whether systemd gave
    /// up restarting it.
    pub fn explained(&self) -> String {
        let mut out = format!("{}/{}, result {}", self.active, self.sub, self.result);
        match self.exit_code {
            1 => out += &format!(", last run exited with status {}", self.exit_status),
            2 => out += &format!(", last run killed by signal {}", self.exit_status),
            3 => out += &format!(", last run dumped core (signal {})", self.exit_status),
            _ => {}
        }
        if self.restarts > 0 {
            out += &format!(", restarted {} times", self.restarts);
        }
        // A crash loop that runs into the limit ends `failed` with the last
        // run's result (`exit-code`), not always `start-limit-hit`.
        let gave_up = self.active == "failed"
            && self.start_limit_burst > 0
            && self.restarts >= self.start_limit_burst;
        if self.result == "start-limit-hit" || gave_up {
            out += ", start limit hit: systemd stopped restarting it until `reset-failed`";
        }
        out
    }
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

#[cfg(test)]
mod tests {
    use super::UnitState;

    fn unit(active: &str, result: &str, code: u32, status: i32, restarts: u32) -> UnitState {
        UnitState {
            load: "loaded".into(),
            active: active.into(),
            sub: active.into(),
            result: result.into(),
            main_pid: 0,
            exit_code: code,
            exit_status: status,
            restarts,
            start_limit_burst: 5,
        }
    }

    #[test]
    fn a_crash_loop_says_how_it_ended_and_that_systemd_gave_up() {
        assert_eq!(
            unit("failed", "exit-code", 1, 3, 5).explained(),
            "failed/failed, result exit-code, last run exited with status 3, restarted 5 times, \
             start limit hit: systemd stopped restarting it until `reset-failed`"
        );
        assert_eq!(
            unit("activating", "exit-code", 2, 9, 2).explained(),
            "activating/activating, result exit-code, last run killed by signal 9, restarted 2 times"
        );
        assert_eq!(
            unit("inactive", "success", 0, 0, 0).explained(),
            "inactive/inactive, result success"
        );
    }
}
