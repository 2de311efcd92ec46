//! What every executable does with `--help`, `--version`, a word it does not
//! take, and a stdout whose reader went away.

use std::io::Read;
use std::process::{Command, Stdio};

/// The executables a person may run by hand (the admin CLI, the stages,
/// the key recorder, the watchdog, the MCP server): a usage error is exit 2
/// on stderr.
const COMMANDS: [&str; 8] = [
    "ktr",
    "ktr-prepare",
    "ktr-verify",
    "ktr-activate",
    "ktr-rollback",
    "ktr-keep",
    "ktr-watch",
    "ktr-mcp",
];

/// The executables Claude Code runs as hooks (and the statusline command).
const HOOKS: [&str; 5] = [
    "ktr-stop",
    "ktr-prompt",
    "ktr-ack",
    "ktr-precompact",
    "ktr-statusline",
];

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run(exe: &str, args: &[&str]) -> Ran {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(exe)
        .args(args)
        .env("HOME", home.path())
        .env_remove("KTR_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn every_executable_answers_help_and_version_on_stdout_with_exit_0() {
    for (name, exe) in COMMANDS
        .iter()
        .chain(HOOKS.iter())
        .map(|n| (n, crate::support::exe(n)))
    {
        for help in ["--help", "-h"] {
            let ran = run(exe, &[help]);
            assert_eq!(ran.code, Some(0), "{name} {help}: {}", ran.stderr);
            assert!(ran.stdout.contains(name), "{name} {help}: {:?}", ran.stdout);
            assert!(ran.stdout.contains("usage") || ran.stdout.contains("Usage"));
            assert_eq!(ran.stderr, "", "{name} {help}");
        }
        let ran = run(exe, &["--version"]);
        assert_eq!(ran.code, Some(0), "{name} --version: {}", ran.stderr);
        assert_eq!(
            ran.stdout,
            format!("{name} {}\n", env!("CARGO_PKG_VERSION")),
            "{name}"
        );
        assert_eq!(ran.stderr, "", "{name} --version");
    }
}

#[test]
fn a_usage_error_names_the_program_once_and_exits_2() {
    for (name, exe) in COMMANDS.map(|n| (n, crate::support::exe(n))) {
        let ran = run(exe, &["--bogus"]);
        assert_eq!(ran.code, Some(2), "{name}: {}", ran.stderr);
        assert_eq!(ran.stdout, "", "{name}");
        assert!(
            ran.stderr
                .starts_with(&format!("{name}: invalid option '--bogus'")),
            "{name}: {:?}",
            ran.stderr
        );
        let named = format!("{name}: ");
        assert_eq!(ran.stderr.matches(&named).count(), 1, "{:?}", ran.stderr);
        assert_eq!(ran.stderr.lines().count(), 1, "{name}: {:?}", ran.stderr);
    }
}

#[test]
fn a_hook_called_with_a_word_it_does_not_take_says_so_and_still_exits_0() {
    // Claude Code reads a hook's exit 2 as "block": a UserPromptSubmit hook's
    // would erase the person's prompt. The hook answers in its protocol.
    for (name, exe) in HOOKS.map(|n| (n, crate::support::exe(n))) {
        let ran = run(exe, &["--bogus"]);
        assert_eq!(ran.code, Some(0), "{name}: {}", ran.stderr);
        let reply: serde_json::Value = serde_json::from_str(ran.stdout.trim()).unwrap();
        let said = reply["systemMessage"].as_str().unwrap();
        assert!(
            said.starts_with(&format!("{name}: invalid option '--bogus'; usage: {name} ")),
            "{name}: {said:?}"
        );
        assert_eq!(said.matches(&format!("{name}:")).count(), 1, "{said:?}");
    }
}

/// A conversation whose candidate is larger than a pipe's buffer, so that
/// printing it meets a reader that went away.
fn long_conversation() -> String {
    let text = "a sentence the person said, kept word for word. ".repeat(8_000);
    let line = |kind: &str, n: u32, parent: &str, message: String| {
        format!(
            r#"{{"type":"{kind}","uuid":"00000000-0000-4000-8000-00000000000{n}","parentUuid":{parent},"isSidechain":false,"sessionId":"5e55a9e0-0000-4000-8000-00000000dddd","timestamp":"2026-11-01T09:00:0{n}.000Z","cwd":"/w","version":"2.1.328","message":{message}}}"#
        ) + "\n"
    };
    [
        line("user", 1, "null", format!(r#"{{"role":"user","content":"{text}"}}"#)),
        line(
            "assistant",
            2,
            r#""00000000-0000-4000-8000-000000000001""#,
            r#"{"role":"assistant","model":"m","id":"msg_2","type":"message","content":[{"type":"text","text":"Noted."}]}"#.to_string(),
        ),
    ]
    .concat()
}

#[test]
fn a_reader_that_goes_away_ends_the_candidate_print_quietly() {
    let home = tempfile::tempdir().unwrap();
    let project = home.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let transcript = project.join("5e55a9e0-0000-4000-8000-00000000dddd.jsonl");
    std::fs::write(&transcript, long_conversation()).unwrap();
    let config = home.path().join("config.toml");
    std::fs::write(&config, format!("project_dir = {project:?}\n")).unwrap();
    let mut child = Command::new(crate::support::exe("ktr"))
        .args([
            "--config",
            config.to_str().unwrap(),
            "plan",
            "--show-candidate",
        ])
        .arg("--transcript")
        .arg(&transcript)
        .env("HOME", home.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read 100 bytes, then close the pipe, as `| head -c 100` does: the
    // candidate (~390 KB) cannot all fit in the pipe before that.
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 100];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert_eq!(stderr, "");
}
