//! `ktr-watch`, a stage's watchdog: the moment a detached stage ends, its
//! operation is failed if the stage left it in flight (killed, out of
//! memory), so an operation ends even when no hook or command runs after
//! it — a person who went quiet right after asking finds it failed, told
//! at their next reply, never "running" for good (SPEC §9).
//!
//! [`start`] runs beside [`super::spawn`]: `ktr-watch --operation ID --pid
//! PID`, a process of its own that sleeps on the stage's pidfd and ends
//! with it. It fails only an operation whose recorded worker is gone (a
//! stage that handed over recorded the next one first). Without it (not
//! installed, killed itself, or taken with the Claude Code service whose
//! hook started it) the next hook or command fails the operation after
//! the grace, as before.

use std::ffi::OsString;
use std::path::PathBuf;

use super::{Stage, advice, append_log, bin_dir, config_args, stop};
use crate::operation::{Lane, Operation, Store};
use crate::process;
use ktr_base::cli::Call;
use ktr_base::config::Config;
use ktr_base::error::{Error, Result};
use ktr_base::ids::OperationId;
use ktr_base::time::now_rfc3339;

const PROGRAM: &str = "ktr-watch";
const USAGE: &str = "usage: ktr-watch [--config PATH] --operation ID --pid PID";
const HELP: &str = "ktr-watch: a stage's watchdog (started beside each stage; docs/SPEC.md §9).
Waits until process PID ends; if that left operation ID in flight with no live worker,
fails it at once and leaves the line that says so for the session's next Stop.

usage: ktr-watch [--config PATH] --operation ID --pid PID";

/// What `ktr-watch` was asked to watch.
#[derive(Debug, PartialEq, Eq)]
struct Args {
    config: Option<PathBuf>,
    operation: OperationId,
    pid: u32,
}

/// The whole life of `ktr-watch`: exit 0 when the stage left nothing in
/// flight, 1 when it failed the operation, 2 on a usage error.
pub fn main() -> ! {
    let code = match parse(std::env::args_os().skip(1)) {
        Ok(Call::Help) => ktr_base::cli::help(PROGRAM, HELP),
        Ok(Call::Version) => ktr_base::cli::version(PROGRAM),
        Ok(Call::Run(args)) => {
            process::wait_gone(args.pid);
            match watch(&args) {
                Ok(None) => 0,
                Ok(Some(op)) => {
                    ktr_base::cli::print_line(PROGRAM, &stop::failed_notice(&op));
                    1
                }
                Err(e) => {
                    eprintln!("{PROGRAM}: {e}");
                    e.exit_code()
                }
            }
        }
        Err(e) => ktr_base::cli::usage_error(PROGRAM, &format!("{}; {USAGE}", e.message)),
    };
    std::process::exit(code)
}

fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Call<Args>> {
    use lexopt::prelude::*;
    let bad = |e: lexopt::Error| Error::usage(e.to_string());
    let mut parser = lexopt::Parser::from_args(args);
    let (mut config, mut operation, mut pid) = (None, None, None);
    while let Some(arg) = parser.next().map_err(bad)? {
        match arg {
            Long("config") => config = Some(PathBuf::from(parser.value().map_err(bad)?)),
            Long("operation") => {
                operation = Some(OperationId::parse(
                    &parser.value().map_err(bad)?.string().map_err(bad)?,
                )?);
            }
            Long("pid") => pid = Some(parser.value().map_err(bad)?.parse::<u32>().map_err(bad)?),
            Long("help") | Short('h') => return Ok(Call::Help),
            Long("version") | Short('V') => return Ok(Call::Version),
            _ => return Err(bad(arg.unexpected())),
        }
    }
    match (operation, pid.filter(|p| *p > 0)) {
        (Some(operation), Some(pid)) => Ok(Call::Run(Args {
            config,
            operation,
            pid,
        })),
        _ => Err(Error::usage("--operation ID and --pid PID are required")),
    }
}

/// `ktr-watch` beside the stages ([`bin_dir`]); it may be missing (then
/// the next hook fails an operation whose stage died, after the grace).
pub fn program() -> Result<PathBuf> {
    Ok(bin_dir()?.join(PROGRAM))
}

/// Start the watchdog of `stage` (pid `pid`) for operation `op_id`,
/// detached, its output in `worker.log`. Best effort: a watchdog that
/// cannot start is written to the log and leaves recovery to the next hook.
pub(super) fn start(config: &Config, store: &Store, stage: Stage, op_id: &OperationId, pid: u32) {
    let started = program().and_then(|program| {
        let mut argv = vec![program.to_string_lossy().into_owned()];
        argv.extend(config_args(config)?);
        argv.extend(["--operation".into(), op_id.to_string()]);
        argv.extend(["--pid".into(), pid.to_string()]);
        process::spawn_detached(&argv, &[], &store.worker_log())
    });
    if let Err(e) = started {
        let line = format!(
            "{} cannot watch {stage} (pid {pid}) of operation {op_id}: {e}; the next hook fails the operation if the stage dies\n",
            now_rfc3339()
        );
        let _ = append_log(&store.worker_log(), &line);
    }
}

/// Once the stage ended ([`process::wait_gone`]): fail the operation if that left
/// it in flight with no live worker. The line that says so is left for
/// the next Stop of each session the person may be in (its lane's; killed
/// mid-switch, each of its sessions), before the failure is saved.
/// Returns the operation it failed.
fn watch(args: &Args) -> Result<Option<Operation>> {
    let config =
        crate::targets::discover::operation_config(args.config.as_deref(), &args.operation, None)?;
    let (config, id) = (&config, &args.operation);
    let store = Store::for_config(config)?;
    let dir = store.dir().to_path_buf();
    store.recover_now(id, |op, lane| {
        let line = stop::failed_notice(op);
        let mut sessions = vec![];
        if let Lane::Session(s) = lane {
            sessions.push(s);
        }
        // Killed mid-switch: the pane runs one of its sessions.
        if op.needs_attention {
            sessions.extend(op.session_id.as_ref());
            sessions.extend(op.candidate.as_ref().map(|c| &c.session_id));
            sessions.extend(op.restore.as_ref().map(|r| &r.session_id));
        }
        sessions.sort();
        sessions.dedup();
        for session in sessions {
            advice::leave_notice(&dir, session, &line);
        }
    })
}
