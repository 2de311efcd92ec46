//! What every Claude Code hook shares: the command line (`--config PATH`,
//! and the flags a hook declares), stdin read with a cap, the exact wire
//! types of each event's stdin (unknown fields ignored), and the reply
//! printed on stdout. The `statusLine` command is run the same way and its
//! wire type lives here too.
//!
//! A hook never fails Claude Code: it always exits 0 with one JSON line on
//! stdout. The wire types stay apart from the domain: the conversion (e.g.
//! a session id that must validate) is where each hook's policy lives.

use std::ffi::OsString;
use std::path::PathBuf;

use serde::Deserialize;

use crate::{plugin, process};
use ktr_base::cli::Call;
use ktr_base::error::{Error, Result};

/// Larger hook input than this is refused unread.
pub(crate) const STDIN_LIMIT: usize = 1 << 20;

/// The Stop hook's stdin as Claude Code 2.1.x writes it.
#[derive(Debug, Deserialize)]
pub(crate) struct StopInput {
    pub session_id: String,
    pub transcript_path: PathBuf,
    /// The reply's text (2.1.x); the advice waits until the transcript
    /// holds it (Claude Code starts the hook before flushing the turn).
    #[serde(default)]
    pub last_assistant_message: Option<String>,
    /// The prompt this reply answered (2.1.x; Claude Code writes it on the
    /// prompt's user records as `promptId`): ties the advice to this very
    /// reply.
    #[serde(default)]
    pub prompt_id: Option<String>,
}

/// The `PreCompact` hook's stdin (2.1.328).
#[derive(Debug, Deserialize)]
pub struct PreCompactInput {
    pub session_id: String,
    pub transcript_path: PathBuf,
    /// `manual` (`/compact` typed by hand) or `auto`.
    #[serde(default)]
    pub trigger: Option<String>,
    /// The prompt whose sending triggered it (2.1.328: the same id
    /// `UserPromptSubmit` was given for it, just before).
    #[serde(default)]
    pub prompt_id: Option<String>,
}

/// The `statusLine` command's stdin (2.1.328; the fields ktr reads).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct StatuslineInput {
    pub session_id: Option<String>,
    pub transcript_path: Option<PathBuf>,
    pub model: Option<StatuslineModel>,
    pub context_window: Option<StatuslineWindow>,
    pub workspace: Option<StatuslineWorkspace>,
}

/// `model` of [`StatuslineInput`].
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct StatuslineModel {
    pub id: Option<String>,
    pub display_name: Option<String>,
}

/// `context_window` of [`StatuslineInput`]; `current_usage` is null
/// before the first reply.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct StatuslineWindow {
    pub context_window_size: Option<u64>,
    pub current_usage: Option<StatuslineUsage>,
}

/// `context_window.current_usage` (the API's field names).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
#[allow(clippy::struct_field_names)]
pub(crate) struct StatuslineUsage {
    pub input_tokens: Option<u64>,
    pub cache_creation_input_tokens: Option<u64>,
    pub cache_read_input_tokens: Option<u64>,
}

/// `workspace` of [`StatuslineInput`].
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct StatuslineWorkspace {
    pub current_dir: Option<String>,
}

/// The `SessionStart` hook's stdin.
#[derive(Debug, Deserialize)]
pub(crate) struct SessionStartInput {
    pub session_id: String,
    /// `startup`, `resume`, `clear` or `compact`.
    #[serde(default)]
    pub source: Option<String>,
    /// A number of tokens; tolerated as any JSON value.
    #[serde(default)]
    pub context_tokens: Option<serde_json::Value>,
}

/// The `UserPromptSubmit` hook's stdin.
#[derive(Debug, Deserialize)]
pub(crate) struct PromptInput {
    pub session_id: String,
    /// The session's transcript (every hook's common field): which
    /// config serves it.
    #[serde(default)]
    pub transcript_path: Option<PathBuf>,
    /// The prompt's text.
    #[serde(default)]
    pub prompt: Option<String>,
    /// Claude Code's id for this prompt (2.1.328).
    #[serde(default)]
    pub prompt_id: Option<String>,
}

/// What a hook tells Claude Code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Nothing to show: `{"suppressOutput":true}`.
    Quiet,
    /// One line the human sees: `{"systemMessage":…}`.
    Message(String),
    /// `UserPromptSubmit`: do not send the prompt; Claude Code shows the
    /// reason and gives the text back. `PreCompact`: do not compact.
    /// (`{"decision":"block","reason":…}`)
    Block(String),
    /// The `statusLine` command: one plain line, not JSON.
    Line(String),
    /// `SessionStart`: text added to the model's context
    /// (`hookSpecificOutput.additionalContext`), and a line the human sees.
    Context {
        context: String,
        message: Option<String>,
    },
    /// No output at all: where Claude Code would show even
    /// `{"suppressOutput":true}` (a `PreCompact` hook on `/compact`).
    Nothing,
}

use ktr_base::text::printable;

impl Reply {
    /// The line for stdout (JSON, except [`Reply::Line`]).
    pub fn to_json(&self) -> String {
        match self {
            Reply::Quiet => serde_json::json!({"suppressOutput": true}),
            // Claude Code shows these on the person's terminal.
            Reply::Message(m) => serde_json::json!({"systemMessage": printable(m)}),
            Reply::Block(reason) => {
                serde_json::json!({"decision": "block", "reason": printable(reason)})
            }
            Reply::Line(line) => return line.clone(),
            Reply::Context { context, message } => {
                let mut v = serde_json::json!({
                    "suppressOutput": true,
                    "hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": context},
                });
                if let Some(m) = message {
                    v["systemMessage"] = printable(m).into();
                }
                v
            }
            Reply::Nothing => return String::new(),
        }
        .to_string()
    }
}

/// A hook's invocation: its `--config`, the declared flags given, and
/// stdin (None when over [`STDIN_LIMIT`]).
#[derive(Debug)]
pub struct Invocation {
    pub config: Option<PathBuf>,
    pub flags: Vec<&'static str>,
    pub input: Option<Vec<u8>>,
}

impl Invocation {
    /// Whether `--<flag>` was given.
    pub fn has(&self, flag: &str) -> bool {
        self.flags.contains(&flag)
    }
}

/// The words a hook was run with: `[--config PATH]` and the declared flags
/// given.
#[derive(Debug, PartialEq, Eq)]
pub struct Words {
    pub config: Option<PathBuf>,
    pub flags: Vec<&'static str>,
}

/// Parse `[--config PATH] [--FLAG…] | --help | --version` for the hook
/// `name`, whose declared flags (without `--`) are `flags`.
pub fn parse_args(
    name: &str,
    flags: &[&'static str],
    args: impl IntoIterator<Item = OsString>,
) -> Result<Call<Words>> {
    use lexopt::prelude::*;
    let mut config = None;
    let mut given = Vec::new();
    let mut parser = lexopt::Parser::from_iter(std::iter::once(OsString::from(name)).chain(args));
    let usage = |e: &dyn std::fmt::Display| Error::usage(e.to_string());
    while let Some(arg) = parser.next().map_err(|e| usage(&e))? {
        match arg {
            Long("help") | Short('h') => return Ok(Call::Help),
            Long("version") | Short('V') => return Ok(Call::Version),
            Long("config") => config = Some(PathBuf::from(parser.value().map_err(|e| usage(&e))?)),
            Long(flag) if flags.contains(&flag) => {
                given.extend(flags.iter().copied().filter(|f| *f == flag));
            }
            other => {
                let extra: String = flags.iter().map(|f| format!(" [--{f}]")).collect();
                return Err(usage(&format!(
                    "{}; usage: {name} [--config PATH]{extra}",
                    other.unexpected()
                )));
            }
        }
    }
    Ok(Call::Run(Words {
        config,
        flags: given,
    }))
}

/// Run a hook binary: parse the command line, read stdin (before anything
/// else, so Claude Code never writes into a closed pipe), call `run`, print
/// its reply and exit 0. `help` is printed for `--help`. With `--plugin`
/// (how the Claude Code plugin calls every hook), a call for a session ktr
/// does not serve prints nothing at all ([`plugin::serves`]).
pub fn main(name: &str, help: &str, run: impl FnOnce(Invocation) -> Reply) -> ! {
    main_with_flags(name, help, &[], run)
}

/// [`main`] for a command that also takes the flags `flags` (without
/// `--`), e.g. `ktr-statusline --segment`.
pub fn main_with_flags(
    name: &str,
    help: &str,
    flags: &[&'static str],
    run: impl FnOnce(Invocation) -> Reply,
) -> ! {
    // Every hook also takes `--plugin` (ktr as a Claude Code plugin):
    // silent where ktr does not serve the session ([`plugin::serves`]).
    let mut declared = flags.to_vec();
    declared.push(plugin::FLAG);
    let reply = match parse_args(name, &declared, std::env::args_os().skip(1)) {
        Ok(Call::Help) => ktr_base::cli::help(name, help),
        Ok(Call::Version) => ktr_base::cli::version(name),
        Ok(Call::Run(Words { config, flags })) => match process::read_stdin_capped(STDIN_LIMIT) {
            Ok(input)
                if flags.contains(&plugin::FLAG)
                    && !plugin::serves(config.as_deref(), input.as_deref()) =>
            {
                Reply::Nothing
            }
            Ok(input) => run(Invocation {
                config,
                flags,
                input,
            }),
            Err(e) => Reply::Message(format!("ktr: cannot read the {name} hook input: {e}")),
        },
        // Claude Code reads a hook's exit 2 as "block" (a UserPromptSubmit
        // hook's erases the person's prompt), so a hook called with words it
        // does not take says so on the terminal and still exits 0.
        Err(e) => Reply::Message(format!("{name}: {e}")),
    };
    let line = reply.to_json();
    if !line.is_empty() {
        ktr_base::cli::print_line(name, &line);
    }
    std::process::exit(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn hooks_take_config_or_help_and_refuse_anything_else() {
        assert_eq!(
            parse_args("ktr-stop", &[], args(&["--config", "/c.toml"])).unwrap(),
            Call::Run(Words {
                config: Some("/c.toml".into()),
                flags: vec![]
            })
        );
        assert_eq!(
            parse_args("ktr-stop", &[], args(&[])).unwrap(),
            Call::Run(Words {
                config: None,
                flags: vec![]
            })
        );
        assert_eq!(
            parse_args("ktr-ack", &[], args(&["--help"])).unwrap(),
            Call::Help
        );
        assert_eq!(
            parse_args("ktr-ack", &[], args(&["--version"])).unwrap(),
            Call::Version
        );
        let err = parse_args("ktr-stop", &[], args(&["--bogus"])).unwrap_err();
        assert!(
            err.message.contains("usage: ktr-stop [--config PATH]"),
            "{err}"
        );
        // A declared flag is taken; the same flag on another hook is not.
        assert_eq!(
            parse_args(
                "ktr-statusline",
                &["segment", "color"],
                args(&["--segment"])
            )
            .unwrap(),
            Call::Run(Words {
                config: None,
                flags: vec!["segment"]
            })
        );
        let err = parse_args("ktr-stop", &[], args(&["--segment"])).unwrap_err();
        assert!(
            err.message.starts_with("invalid option '--segment'"),
            "{err}"
        );
        let err = parse_args("ktr-statusline", &["segment"], args(&["--x"])).unwrap_err();
        assert!(
            err.message
                .contains("usage: ktr-statusline [--config PATH] [--segment]"),
            "{err}"
        );
    }

    #[test]
    fn replies_are_one_json_line() {
        assert_eq!(Reply::Quiet.to_json(), r#"{"suppressOutput":true}"#);
        assert_eq!(
            Reply::Message("a\nb".into()).to_json(),
            r#"{"systemMessage":"a\nb"}"#
        );
        assert_eq!(Reply::Line("ktr 5%".into()).to_json(), "ktr 5%");
    }
}
