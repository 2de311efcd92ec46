//! Command-line parsing: raw lexopt parsing into plain structs, then
//! validation. Usage errors exit 2.

use std::ffi::OsString;
use std::path::PathBuf;

use ktr_base::Error;
use ktr_base::ids::{OperationId, SessionId};
use lexopt::prelude::*;

pub const HELP: &str = "\
ktr — rebuild a long-running Claude Code session losslessly

Usage: ktr [--config PATH] <command> [options]

Read-only checks:
  doctor [--json]                       check the installation and explain each item
  dirty  [--session ID | --transcript P] [--json]
                                        what pollutes the current context window
  plan   [--session ID | --transcript P] [--json] [--show-candidate] [--new-session UUID]
                                        what a rebuild would carry (writes nothing)

Changes (each needs the human's confirmation word):
  request --confirm REBUILD [--reason TEXT] [--session ID] [--json]
                                        ask for a rebuild after the current reply
  cancel OP --confirm CANCEL [--json]   cancel a pending operation
  rollback-request OP --confirm ROLLBACK [--json]
                                        switch an activated operation back

Operations:
  status [OP] [--json]                  one operation (default: the latest), every session's in flight
  ops [--json]                          every operation, newest first
  config KEY                            one setting as ktr reads it (for scripts)
  recall QUERY [filters] [--json]       find anything the history held, verbatim (ktr recall --help)
  prune --older-than DAYS [--yes] [--confirm FORGET] [--json]
                                        forget old finished operations (dry run without --yes;
                                        the last copy of a session's history only with FORGET)
  repair [--confirm REPAIR] [--json]    set damaged operation files aside into state/damaged/
                                        (lists them without --confirm; never deletes)
  purge [--confirm PURGE] [--json]      remove ktr's state dir and the candidates never activated
                                        (lists them without --confirm; never a source transcript
                                        or the transcript of a session that ran)

Try it:
  demo [--keep]                         a complete rebuild drill in a throwaway sandbox

Options:
  --config PATH    config file (default: $KTR_CONFIG, else ~/.config/ktr/config.toml)
  --session ID     the Claude Code session to read or bind (its <ID>.jsonl in project_dir;
                   default: the newest transcript there)
  --new-session UUID  the candidate's session id, for byte-identical plans
  -h, --help       this help
  -V, --version    version

Exit codes: 0 ok, 1 refused or failed, 2 usage or configuration error.
";

/// Options shared by the read-only commands.
#[derive(Debug, Default, Clone)]
pub struct Common {
    pub config: Option<PathBuf>,
    pub json: bool,
}

/// Which transcript a read-only command reads.
#[derive(Debug, Default, Clone)]
pub enum Source {
    /// The newest `*.jsonl` in `project_dir`.
    #[default]
    Newest,
    /// `--session ID`: `<project_dir>/<ID>.jsonl`.
    Session(String),
    /// `--transcript P`.
    Transcript(PathBuf),
}

impl Source {
    /// The transcript path asked for, if any (checked by `resolve_transcript`).
    pub fn path(&self, project_dir: &std::path::Path) -> Option<PathBuf> {
        match self {
            Source::Newest => None,
            Source::Session(id) => Some(project_dir.join(format!("{id}.jsonl"))),
            Source::Transcript(p) => Some(p.clone()),
        }
    }
}

/// `ktr plan`.
#[derive(Debug, Default)]
pub struct PlanArgs {
    pub common: Common,
    pub source: Source,
    pub show_candidate: bool,
    /// The candidate's session id (a UUID).
    pub new_session: Option<String>,
}

/// `ktr dirty`.
#[derive(Debug, Default)]
pub struct DirtyArgs {
    pub common: Common,
    pub source: Source,
}

/// `ktr doctor`.
#[derive(Debug, Default)]
pub struct DoctorArgs {
    pub common: Common,
}

/// `ktr request`.
#[derive(Debug, Default)]
pub struct RequestArgs {
    pub common: Common,
    pub confirm: String,
    pub reason: String,
    pub session: Option<SessionId>,
}

/// `ktr cancel` and `ktr rollback-request`: one operation and a word.
#[derive(Debug, Default)]
pub struct ConfirmArgs {
    pub common: Common,
    pub operation: OperationId,
    pub confirm: String,
}

/// `ktr status`.
#[derive(Debug, Default)]
pub struct StatusArgs {
    pub common: Common,
    pub operation: Option<OperationId>,
}

/// `ktr ops`.
#[derive(Debug, Default)]
pub struct OpsArgs {
    pub common: Common,
}

/// `ktr prune`.
#[derive(Debug, Default)]
pub struct PruneArgs {
    pub common: Common,
    pub older_than_days: u64,
    pub yes: bool,
    /// `--confirm FORGET`: the last copy of a session's history may go too.
    pub forget: bool,
}

/// `ktr repair` and `ktr purge`.
#[derive(Debug, Default)]
pub struct RepairArgs {
    pub common: Common,
    /// `Some("REPAIR")` moves; `None` only lists.
    pub confirm: Option<String>,
}

/// `ktr demo`.
#[derive(Debug, Default)]
pub struct DemoArgs {
    pub keep: bool,
}

/// The reason recorded when `ktr request` is given none.
pub const DEFAULT_REASON: &str = "requested with ktr request";

/// `ktr hooks merge|statusline|unmerge|registered` (hidden; the installer's settings.json edits).
#[derive(Debug, Default)]
pub struct HooksArgs {
    pub common: Common,
    /// `merge` or `unmerge`.
    pub action: String,
    pub settings: Option<PathBuf>,
    pub prefix: Option<PathBuf>,
    pub dry_run: bool,
}

/// A parsed command line.
#[derive(Debug)]
pub enum Command {
    Help,
    Version,
    Plan(PlanArgs),
    Dirty(DirtyArgs),
    Doctor(DoctorArgs),
    Request(RequestArgs),
    Status(StatusArgs),
    Cancel(ConfirmArgs),
    RollbackRequest(ConfirmArgs),
    Ops(OpsArgs),
    Prune(PruneArgs),
    Repair(RepairArgs),
    Purge(RepairArgs),
    Demo(DemoArgs),
    Hooks(HooksArgs),
    Config(ConfigArgs),
    Recall(crate::recall::RecallArgs),
}

/// `ktr config KEY`.
#[derive(Debug, Default)]
pub struct ConfigArgs {
    pub common: Common,
    pub key: String,
}

/// Everything the command line said, before validation.
#[derive(Default)]
struct Raw {
    command: Option<String>,
    config: Option<PathBuf>,
    json: bool,
    transcript: Option<PathBuf>,
    show_candidate: bool,
    new_session: Option<String>,
    confirm: Option<String>,
    reason: Option<String>,
    session: Option<String>,
    older_than: Option<String>,
    yes: bool,
    keep: bool,
    operands: Vec<String>,
    help: bool,
    version: bool,
    seen: Vec<&'static str>,
    action: Option<String>,
    settings: Option<PathBuf>,
    prefix: Option<PathBuf>,
    dry_run: bool,
}

/// Parse the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, Error> {
    let args: Vec<OsString> = args.into_iter().collect();
    if let Some((config, rest)) = recall_words(&args) {
        return crate::recall::parse(config, rest).map(Command::Recall);
    }
    let raw = parse_raw(args).map_err(|e| Error::usage(format!("{e}; see ktr --help")))?;
    validate(raw)
}

/// `[--config PATH] recall …`: recall parses its own words.
fn recall_words(args: &[OsString]) -> Option<(Option<PathBuf>, Vec<OsString>)> {
    let mut config = None;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].to_str()?;
        if a == "--config" {
            config = Some(PathBuf::from(args.get(i + 1)?));
            i += 2;
        } else if let Some(p) = a.strip_prefix("--config=") {
            config = Some(PathBuf::from(p));
            i += 1;
        } else {
            return (a == "recall").then(|| (config, args[i + 1..].to_vec()));
        }
    }
    None
}

fn parse_raw(args: impl IntoIterator<Item = OsString>) -> Result<Raw, lexopt::Error> {
    let mut raw = Raw::default();
    let mut parser = lexopt::Parser::from_args(args);
    while let Some(arg) = parser.next()? {
        match arg {
            Short('h') | Long("help") => raw.help = true,
            Short('V') | Long("version") => raw.version = true,
            Long("config") => raw.config = Some(parser.value()?.into()),
            Long("json") => {
                raw.json = true;
                raw.seen.push("--json");
            }
            Long("transcript") => {
                raw.transcript = Some(parser.value()?.into());
                raw.seen.push("--transcript");
            }
            Long("show-candidate") => {
                raw.show_candidate = true;
                raw.seen.push("--show-candidate");
            }
            // `--session-id` is the old name, kept as a hidden alias.
            Long("new-session" | "session-id") => {
                raw.new_session = Some(parser.value()?.string()?);
                raw.seen.push("--new-session");
            }
            Long("confirm") => {
                raw.confirm = Some(parser.value()?.string()?);
                raw.seen.push("--confirm");
            }
            Long("reason") => {
                raw.reason = Some(parser.value()?.string()?);
                raw.seen.push("--reason");
            }
            Long("session") => {
                raw.session = Some(parser.value()?.string()?);
                raw.seen.push("--session");
            }
            Long("older-than") => {
                raw.older_than = Some(parser.value()?.string()?);
                raw.seen.push("--older-than");
            }
            Long("yes") => {
                raw.yes = true;
                raw.seen.push("--yes");
            }
            Long("keep") => {
                raw.keep = true;
                raw.seen.push("--keep");
            }
            Value(v) if raw.command.is_none() => raw.command = Some(v.string()?),
            Value(v) if raw.command.as_deref() == Some("hooks") && raw.action.is_none() => {
                raw.action = Some(v.string()?);
            }
            Long("settings") => {
                raw.settings = Some(parser.value()?.into());
                raw.seen.push("--settings");
            }
            Long("prefix") => {
                raw.prefix = Some(parser.value()?.into());
                raw.seen.push("--prefix");
            }
            Long("dry-run") => {
                raw.dry_run = true;
                raw.seen.push("--dry-run");
            }
            Value(v) => raw.operands.push(v.string()?),
            _ => return Err(arg.unexpected()),
        }
    }
    Ok(raw)
}

fn validate(raw: Raw) -> Result<Command, Error> {
    if raw.help {
        return Ok(Command::Help);
    }
    if raw.version {
        return Ok(Command::Version);
    }
    let common = Common {
        config: raw.config.clone(),
        json: raw.json,
    };
    let command = raw.command.as_deref().unwrap_or("");
    let allowed: &[&str] = match command {
        "plan" => &[
            "--json",
            "--transcript",
            "--session",
            "--show-candidate",
            "--new-session",
        ],
        "dirty" => &["--json", "--transcript", "--session"],
        "doctor" | "ops" | "status" => &["--json"],
        "config" => &[],
        "request" => &["--json", "--confirm", "--reason", "--session"],
        "cancel" | "rollback-request" | "repair" | "purge" => &["--json", "--confirm"],
        "prune" => &["--json", "--older-than", "--yes", "--confirm"],
        "demo" => &["--keep"],
        "hooks" => &["--settings", "--prefix", "--dry-run"],
        "" => return Err(Error::usage("no command given; see ktr --help")),
        other => {
            return Err(Error::usage(format!(
                "unknown command {other:?}; see ktr --help"
            )));
        }
    };
    if let Some(flag) = raw.seen.iter().find(|f| !allowed.contains(f)) {
        return Err(Error::usage(format!(
            "{flag} does not apply to ktr {command}; see ktr --help"
        )));
    }
    if command == "demo" && raw.config.is_some() {
        return Err(Error::usage(
            "ktr demo builds its own throwaway config; it takes no --config",
        ));
    }
    let max_operands = match command {
        "status" | "cancel" | "rollback-request" | "config" => 1,
        _ => 0,
    };
    if let Some(extra) = raw.operands.get(max_operands) {
        return Err(Error::usage(format!(
            "unexpected argument {extra:?} for ktr {command}; see ktr --help"
        )));
    }
    let operand = raw.operands.into_iter().next();
    let session = raw.session.as_deref().map(SessionId::parse).transpose()?;
    let operation = || operand.as_deref().map(OperationId::parse).transpose();
    Ok(match command {
        "request" => Command::Request(RequestArgs {
            common,
            confirm: required(raw.confirm, "request", "--confirm REBUILD")?,
            reason: raw.reason.unwrap_or_else(|| DEFAULT_REASON.into()),
            session,
        }),
        "cancel" | "rollback-request" => {
            let word = if command == "cancel" {
                "CANCEL"
            } else {
                "ROLLBACK"
            };
            let args = ConfirmArgs {
                common,
                operation: required(operation()?, command, "an operation id (see ktr ops)")?,
                confirm: required(raw.confirm, command, &format!("--confirm {word}"))?,
            };
            if command == "cancel" {
                Command::Cancel(args)
            } else {
                Command::RollbackRequest(args)
            }
        }
        "status" => Command::Status(StatusArgs {
            common,
            operation: operation()?,
        }),
        "ops" => Command::Ops(OpsArgs { common }),
        "config" => Command::Config(ConfigArgs {
            common,
            key: required(operand, "config", "a key")?,
        }),
        "repair" => Command::Repair(RepairArgs {
            common,
            confirm: raw.confirm,
        }),
        "purge" => Command::Purge(RepairArgs {
            common,
            confirm: raw.confirm,
        }),
        "prune" => Command::Prune(PruneArgs {
            common,
            older_than_days: days(raw.older_than)?,
            yes: raw.yes,
            forget: forget_word(raw.confirm.as_deref())?,
        }),
        "demo" => Command::Demo(DemoArgs { keep: raw.keep }),
        "plan" => Command::Plan(PlanArgs {
            common,
            source: source(raw.session, raw.transcript)?,
            show_candidate: raw.show_candidate,
            new_session: raw.new_session.map(uuid_arg).transpose()?,
        }),
        "dirty" => Command::Dirty(DirtyArgs {
            common,
            source: source(raw.session, raw.transcript)?,
        }),
        "hooks" => Command::Hooks(HooksArgs {
            common,
            action: raw.action.unwrap_or_default(),
            settings: raw.settings,
            prefix: raw.prefix,
            dry_run: raw.dry_run,
        }),
        _ => Command::Doctor(DoctorArgs { common }),
    })
}

/// `--session ID` or `--transcript P` (not both), else the newest transcript.
fn source(session: Option<String>, transcript: Option<PathBuf>) -> Result<Source, Error> {
    match (session, transcript) {
        (Some(_), Some(_)) => Err(Error::usage(
            "--session and --transcript both name the transcript to read; give one",
        )),
        (Some(id), None) => Ok(Source::Session(id)),
        (None, Some(p)) => Ok(Source::Transcript(p)),
        (None, None) => Ok(Source::Newest),
    }
}

/// `--new-session`: Claude Code names sessions by UUID (`<uuid>.jsonl`,
/// `--resume <uuid>`), so the candidate's id must be one.
fn uuid_arg(id: String) -> Result<String, Error> {
    let is_uuid = id.len() == 36
        && id.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        });
    if is_uuid {
        return Ok(id);
    }
    Err(Error::usage(format!(
        "--new-session takes a session id like 0d15ea5e-0000-4000-8000-00000000beef (a UUID), not {:?}",
        id.chars().take(80).collect::<String>()
    )))
}

/// `ktr prune --confirm FORGET`: nothing else is a confirmation.
fn forget_word(word: Option<&str>) -> Result<bool, Error> {
    match word {
        None => Ok(false),
        Some("FORGET") => Ok(true),
        Some(other) => Err(Error::usage(format!(
            "ktr prune --confirm takes exactly FORGET (to remove the last copy of a session's history), not {:?}",
            other.chars().take(40).collect::<String>()
        ))),
    }
}

/// A value the command cannot do without.
fn required<T>(value: Option<T>, command: &str, what: &str) -> Result<T, Error> {
    value.ok_or_else(|| Error::usage(format!("ktr {command} needs {what}; see ktr --help")))
}

/// `--older-than DAYS`: a whole number of days.
fn days(value: Option<String>) -> Result<u64, Error> {
    let text = required(value, "prune", "--older-than DAYS")?;
    text.trim().parse().map_err(|_| {
        Error::usage(format!(
            "--older-than takes a whole number of days, not {text:?}"
        ))
    })
}
