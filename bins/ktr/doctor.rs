//! `ktr doctor`: check the installation and explain each item.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use ktr::Error;
use ktr::config::{self, Config};
use serde::Serialize;

use crate::cli::DoctorArgs;
use crate::out;

/// One checked item.
#[derive(Serialize)]
struct Check {
    name: &'static str,
    ok: bool,
    detail: String,
    /// What to do when it fails.
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

#[derive(Serialize)]
struct Report {
    ok: bool,
    checks: Vec<Check>,
}

pub fn run(args: &DoctorArgs) -> Result<u8, Error> {
    let mut checks = Vec::new();
    let path = Config::locate(args.common.config.as_deref());
    match Config::load(args.common.config.as_deref()) {
        Ok(config) => {
            checks.push(pass("config", format!("{} is valid", path.display())));
            check_config(&config, &mut checks);
        }
        Err(e) => checks.push(fail(
            "config",
            e.message,
            "fix the config file as the message says",
        )),
    }
    let report = Report {
        ok: checks.iter().all(|c| c.ok),
        checks,
    };
    if args.common.json {
        out::json(&report);
    } else {
        let mut s = String::new();
        for c in &report.checks {
            s.push_str(&format!(
                "{} {:<22}{}\n",
                if c.ok { "ok  " } else { "FAIL" },
                c.name,
                c.detail
            ));
            if let Some(fix) = &c.fix {
                s.push_str(&format!("     {:<22}fix: {fix}\n", ""));
            }
        }
        s.push_str(if report.ok {
            "all checks passed\n"
        } else {
            "some checks failed\n"
        });
        out::print(&s);
    }
    Ok(if report.ok { 0 } else { 1 })
}

fn pass(name: &'static str, detail: String) -> Check {
    Check {
        name,
        ok: true,
        detail,
        fix: None,
    }
}

fn fail(name: &'static str, detail: String, fix: &str) -> Check {
    Check {
        name,
        ok: false,
        detail,
        fix: Some(fix.to_string()),
    }
}

fn check_config(config: &Config, checks: &mut Vec<Check>) {
    checks.push(project_dir(&config.project_dir));
    checks.push(workdir(config));
    checks.push(resume_binary(&config.resume_command[0]));
    checks.push(state_dir(&config.state_dir));
}

fn project_dir(dir: &Path) -> Check {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return fail(
            "project dir",
            format!("{} does not exist or cannot be read", dir.display()),
            "set project_dir to ~/.claude/projects/<encoded cwd> of the session to rebuild",
        );
    };
    let count = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".jsonl"))
        .count();
    if count == 0 {
        return fail(
            "project dir",
            format!("{} holds no *.jsonl transcript", dir.display()),
            "check that project_dir is the folder Claude Code writes this session into",
        );
    }
    pass(
        "project dir",
        format!("{} ({count} transcripts)", dir.display()),
    )
}

fn workdir(config: &Config) -> Check {
    let expected = config::encode_project_name(&config.claude_workdir);
    let actual = config
        .project_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if expected == actual {
        return pass(
            "workdir ↔ project",
            format!("{} encodes to {actual}", config.claude_workdir.display()),
        );
    }
    let detail = format!(
        "claude_workdir {} encodes to {expected}, but project_dir is named {actual}",
        config.claude_workdir.display()
    );
    if config.verify_workdir_matches_project {
        fail(
            "workdir ↔ project",
            detail,
            "set claude_workdir to the directory Claude Code runs in (the `-` vs `-root` incident)",
        )
    } else {
        pass(
            "workdir ↔ project",
            detail + " (check disabled by verify_workdir_matches_project)",
        )
    }
}

fn resume_binary(program: &str) -> Check {
    match resolve_program(program) {
        Some(p) => pass("resume binary", format!("{program} → {}", p.display())),
        None => fail(
            "resume binary",
            format!("{program} is not an executable file or on PATH"),
            "put an absolute path to claude in resume_command",
        ),
    }
}

/// Resolve a program name the way `execvp` would.
pub fn resolve_program(program: &str) -> Option<PathBuf> {
    let is_exec = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        return is_exec(&p).then(|| p.canonicalize().unwrap_or(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| is_exec(p))
}

fn state_dir(dir: &Path) -> Check {
    match std::fs::metadata(dir) {
        Err(_) => pass(
            "state dir",
            format!("{} will be created (0700) on first use", dir.display()),
        ),
        Ok(m) if !m.is_dir() => fail(
            "state dir",
            format!("{} is not a directory", dir.display()),
            "point state_dir at a directory",
        ),
        Ok(m) => {
            let mode = m.permissions().mode() & 0o777;
            if mode & 0o077 == 0 {
                pass("state dir", format!("{} (mode {mode:o})", dir.display()))
            } else {
                fail(
                    "state dir",
                    format!(
                        "{} is mode {mode:o}; others can read operation files",
                        dir.display()
                    ),
                    &format!("chmod 700 {}", dir.display()),
                )
            }
        }
    }
}
