//! The command line shared by the four stage executables:
//!
//! ```text
//! ktr-prepare  --config C --operation ID [--transcript P]
//! ktr-prepare  --config C --transcript P [--confirm REBUILD] [--reason R]   (pointer mode)
//! ktr-verify   --config C --operation ID
//! ktr-activate --config C --operation ID
//! ktr-rollback --config C --operation ID
//! ```
//!
//! Steps go to stderr (`worker.log` when started detached), one final
//! summary line to stdout. Exit 0 when the stage did its step and the
//! operation did not fail, 1 when it failed or was refused, 2 on usage or
//! config errors. With `--operation` the next stage starts detached; in
//! pointer mode (no `--operation`) the whole pipeline runs in this process
//! and returns when the operation stops moving, so a runner can start the
//! next `claude -p --resume "$(cat POINTER)"` right after.

use std::ffi::OsString;
use std::path::PathBuf;

use super::{Outcome, Stage, StageFn, Steps, hand_off, prepare, run_chain, schedule_by_hand};
use crate::operation::{Status, Store};
use ktr_base::cli::Call;
use ktr_base::config::Config;
use ktr_base::error::{Error, Result};
use ktr_base::ids::OperationId;

/// Parsed arguments of a stage executable.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Args {
    pub config: Option<PathBuf>,
    pub operation: Option<OperationId>,
    pub transcript: Option<PathBuf>,
    pub confirm: Option<String>,
    pub reason: Option<String>,
}

impl Args {
    /// Parse `args` (without the program name) for `stage`.
    pub fn parse(stage: Stage, args: impl IntoIterator<Item = OsString>) -> Result<Call<Args>> {
        use lexopt::prelude::*;
        let bad = |what: String| Error::usage(format!("{what}; usage: {}", usage(stage)));
        let mut out = Args::default();
        let mut parser = lexopt::Parser::from_args(args);
        while let Some(arg) = parser.next().map_err(|e| bad(e.to_string()))? {
            let flag = match arg {
                Long("help") | Short('h') => return Ok(Call::Help),
                Long("version") | Short('V') => return Ok(Call::Version),
                Long(name @ ("config" | "operation")) => name.to_string(),
                Long(name @ ("transcript" | "confirm" | "reason")) if stage == Stage::Prepare => {
                    name.to_string()
                }
                other => return Err(bad(other.unexpected().to_string())),
            };
            let value = parser
                .value()
                .map_err(|e| bad(e.to_string()))?
                .into_string()
                .map_err(|_| bad("arguments must be valid UTF-8".into()))?;
            match flag.as_str() {
                "config" => out.config = Some(PathBuf::from(value)),
                "operation" => out.operation = Some(OperationId::parse(&value)?),
                "transcript" => out.transcript = Some(PathBuf::from(value)),
                "confirm" => out.confirm = Some(value),
                _ => out.reason = Some(value),
            }
        }
        if out.operation.is_none() && stage != Stage::Prepare {
            return Err(bad("--operation ID is required".into()));
        }
        Ok(Call::Run(out))
    }
}

/// What `--help` prints.
fn help(stage: Stage) -> String {
    let what = match stage {
        Stage::Prepare => "stage 1 of a rebuild: build the candidate session",
        Stage::Verify => "stage 2 of a rebuild: check the candidate against its source",
        Stage::Activate => "stage 3 of a rebuild: switch the target to the candidate",
        Stage::Rollback => "switch the target back to the session a rebuild replaced",
    };
    format!(
        "{stage}: {what} (run by ktr's hooks and stages; docs/SPEC.md §10).\n\nusage: {}",
        usage(stage)
    )
}

fn usage(stage: Stage) -> String {
    match stage {
        Stage::Prepare => "ktr-prepare --config PATH --operation ID [--transcript PATH] | ktr-prepare --config PATH --transcript PATH [--confirm REBUILD] [--reason TEXT] (pointer mode)".into(),
        other => format!("{other} --config PATH --operation ID"),
    }
}

/// The whole life of `ktr-verify`, `ktr-activate` or `ktr-rollback`: its
/// one stage (`step`), then the next stage started detached. Never returns.
pub fn main(stage: Stage, step: StageFn) -> ! {
    ktr_base::fsutil::ignore_file_size_signal();
    exit_with(
        stage,
        execute(stage, step, None, std::env::args_os().skip(1)),
    )
}

/// The whole life of `ktr-prepare`: its stage, or in pointer mode (no
/// `--operation`) the request and the whole chain in this process (SPEC
/// §12: the runner's next turn waits for it). Never returns.
pub fn main_prepare() -> ! {
    ktr_base::fsutil::ignore_file_size_signal();
    let by_hand = ByHand {
        schedule: schedule_by_hand,
        chain: run_chain,
    };
    exit_with(
        Stage::Prepare,
        execute(
            Stage::Prepare,
            prepare,
            Some(&by_hand),
            std::env::args_os().skip(1),
        ),
    )
}

/// Pointer mode's request: [`schedule_by_hand`] (config, store,
/// transcript, confirmation word, reason).
pub(crate) type Schedule = fn(
    &Config,
    &Store,
    Option<&std::path::Path>,
    Option<&str>,
    Option<&str>,
) -> Result<crate::operation::Operation>;

/// The rest of the chain in this process: [`run_chain`].
pub type Chain = fn(&Config, &Store, Outcome, &mut Steps) -> Result<Outcome>;

/// What only `ktr-prepare` does: schedule by hand and run the chain.
pub(crate) struct ByHand {
    pub schedule: Schedule,
    pub chain: Chain,
}

fn exit_with(stage: Stage, result: Result<Outcome>) -> ! {
    let code = match result {
        Ok(outcome) => {
            ktr_base::cli::print_line(&stage.to_string(), &outcome.summary());
            i32::from(outcome.operation.status == Status::Failed)
        }
        Err(e) => {
            eprintln!("{stage}: {e}");
            e.exit_code()
        }
    };
    std::process::exit(code)
}

/// Parse, load the config, recover stale operations, run the stage, and
/// hand over to the next stage (detached, or in this process in pointer
/// mode, which only `by_hand` allows).
pub(crate) fn execute(
    stage: Stage,
    step: StageFn,
    by_hand: Option<&ByHand>,
    args: impl IntoIterator<Item = OsString>,
) -> Result<Outcome> {
    let args = match Args::parse(stage, args)? {
        Call::Run(args) => args,
        Call::Help => ktr_base::cli::help(&stage.to_string(), &help(stage)),
        Call::Version => ktr_base::cli::version(&stage.to_string()),
    };
    let config = match &args.operation {
        Some(id) => crate::targets::discover::operation_config(
            args.config.as_deref(),
            id,
            args.transcript.as_deref(),
        )?,
        None => Config::load(args.config.as_deref())?,
    };
    let store = Store::for_config(&config)?;
    store.recover_stale()?;
    let (id, chain) = match (&args.operation, by_hand) {
        (Some(id), _) => (id.clone(), None),
        (None, Some(by_hand)) => {
            let op = (by_hand.schedule)(
                &config,
                &store,
                args.transcript.as_deref(),
                args.confirm.as_deref(),
                args.reason.as_deref(),
            )?;
            (op.id, Some(by_hand.chain))
        }
        (None, None) => {
            return Err(Error::usage("--operation ID is required"));
        }
    };
    let mut steps = Steps::new(stage, &id);
    steps.enter(stage, &id);
    let outcome = step(&config, &store, &id, args.transcript.as_deref(), &mut steps)?;
    match (outcome.next, chain) {
        (Some(_), Some(chain)) => chain(&config, &store, outcome, &mut steps),
        (Some(next), None) => {
            let operation = hand_off(&config, &store, &id, next, &mut steps)?;
            let next = (!operation.status.is_terminal()).then_some(next);
            Ok(Outcome { operation, next })
        }
        (None, _) => Ok(outcome),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(stage: Stage, words: &[&str]) -> Result<Call<Args>> {
        Args::parse(stage, words.iter().map(OsString::from))
    }

    fn parse(stage: Stage, words: &[&str]) -> Result<Args> {
        call(stage, words).map(|call| match call {
            Call::Run(args) => args,
            other => panic!("{words:?} is a call to run, not {other:?}"),
        })
    }

    #[test]
    fn help_and_version_are_answered_before_anything_is_required() {
        for stage in [
            Stage::Prepare,
            Stage::Verify,
            Stage::Activate,
            Stage::Rollback,
        ] {
            assert_eq!(call(stage, &["--help"]).unwrap(), Call::Help);
            assert_eq!(call(stage, &["-h"]).unwrap(), Call::Help);
            assert_eq!(call(stage, &["--version"]).unwrap(), Call::Version);
            assert!(help(stage).contains(&usage(stage)), "{stage}");
        }
    }

    #[test]
    fn a_usage_error_does_not_name_the_program_itself() {
        // The program's name is put in front once, where the error is printed.
        let err = parse(Stage::Activate, &["--bogus"]).unwrap_err();
        assert!(!err.message.contains("ktr-activate:"), "{err}");
        assert!(err.message.starts_with("invalid option '--bogus'"), "{err}");
    }

    #[test]
    fn each_stage_takes_its_own_flags() {
        let id = "0123-abcd";
        let a = parse(
            Stage::Prepare,
            &[
                "--config",
                "c.toml",
                "--operation",
                id,
                "--transcript",
                "t.jsonl",
            ],
        )
        .unwrap();
        assert_eq!(a.operation.as_deref(), Some(id));
        assert_eq!(a.transcript, Some(PathBuf::from("t.jsonl")));
        let pointer = parse(
            Stage::Prepare,
            &["--transcript", "t.jsonl", "--confirm", "REBUILD"],
        )
        .unwrap();
        assert_eq!(
            (pointer.operation, pointer.confirm.as_deref()),
            (None, Some("REBUILD"))
        );
        let err = parse(
            Stage::Verify,
            &["--operation", id, "--transcript", "t.jsonl"],
        )
        .unwrap_err();
        assert!(
            err.message.contains("invalid option '--transcript'"),
            "{err}"
        );
        assert_eq!(err.exit_code(), 2);
        let err = parse(Stage::Activate, &["--config", "c"]).unwrap_err();
        assert!(err.message.contains("--operation ID is required"), "{err}");
        let err = parse(Stage::Rollback, &["--operation", "../../etc"]).unwrap_err();
        assert!(err.message.starts_with("invalid operation id"), "{err}");
    }
}
