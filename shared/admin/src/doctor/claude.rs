//! Claude Code's side: the plugin, the hooks, the statusline and the MCP
//! server, each run with this config.

use std::path::{Path, PathBuf};

use super::{Check, absolute, fail, pass, resolve_program};
use crate::settings;
use ktr_base::config::{Config, home_dir};

/// The settings files whose hooks Claude Code runs in `workdir`, each once
/// (with `claude_workdir = "~"` the project's settings are the user's).
pub(super) fn settings_files(workdir: &Path) -> Vec<PathBuf> {
    let project = workdir.join(".claude");
    let mut files: Vec<PathBuf> = Vec::new();
    for path in [
        settings::default_path(),
        project.join("settings.json"),
        project.join("settings.local.json"),
    ] {
        if !files.iter().any(|f| absolute(f) == absolute(&path)) {
            files.push(path);
        }
    }
    files
}

/// The config a hook or server command line names with `--config`, if any.
fn config_arg<'a>(mut args: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    args.find(|a| *a == "--config")?;
    args.next()
}

/// Why a `--config` (or its absence) is not `this` config, if it is not.
fn other_config(found: Option<&str>, this: &Path) -> Option<String> {
    match found {
        Some(c) if absolute(Path::new(c)) == this => None,
        Some(c) => Some(format!("--config {c}")),
        None if absolute(&Config::locate(None)) == this => None,
        None => Some("no --config (the default config)".into()),
    }
}

/// What to run so hooks and MCP server use `this` config.
fn reinstall_fix(this: &Path) -> String {
    format!("run ./install --config {} again", this.display())
}

/// The folder Claude Code loads the enabled plugin `ktr@ktr` from, when it
/// is enabled: a directory marketplace's plugin loads in place from its
/// source folder (measured on 2.1.328; `${CLAUDE_PLUGIN_ROOT}` names it),
/// else from the copy `installed_plugins.json` names. `Err`: enabled, but
/// the folder cannot be found (the fix says what to do).
fn plugin_root(home: &Path) -> Option<std::result::Result<PathBuf, String>> {
    if !ktr_pipeline::plugin::enabled(home) {
        return None;
    }
    let read = |p: PathBuf| -> Option<serde_json::Value> {
        serde_json::from_slice(&std::fs::read(p).ok()?).ok()
    };
    let plugins = home.join(".claude/plugins");
    let in_place = read(plugins.join("known_marketplaces.json"))
        .and_then(|m| Some(PathBuf::from(m.pointer("/ktr/installLocation")?.as_str()?)))
        .and_then(|market| {
            let manifest = read(market.join(".claude-plugin/marketplace.json"))?;
            let entry = manifest["plugins"]
                .as_array()?
                .iter()
                .find(|p| p["name"] == "ktr")?
                .clone();
            Some(market.join(entry["source"].as_str()?))
        });
    let copy = || {
        read(plugins.join("installed_plugins.json")).and_then(|i| {
            Some(PathBuf::from(
                i.pointer("/plugins/ktr@ktr/0/installPath")?.as_str()?,
            ))
        })
    };
    Some(
        in_place
            .filter(|p| p.is_dir())
            .or_else(copy)
            .filter(|p| p.is_dir())
            .ok_or_else(|| {
                format!(
                    "the plugin {} is enabled, but the folder it loads from is gone",
                    ktr_pipeline::plugin::ID
                )
            }),
    )
}

/// The hooks and the MCP server as the plugin runs them: `programs` must be
/// executables in its `bin/`, and `this` the config they find by default.
fn plugin_check(name: &'static str, root: &Path, programs: &[&str], this: &Path) -> Check {
    let fix = "run ./install --plugin again from the checkout".to_string();
    let missing: Vec<&str> = programs
        .iter()
        .copied()
        .filter(|p| resolve_program(&root.join("bin").join(p).to_string_lossy()).is_none())
        .collect();
    if !missing.is_empty() {
        return fail(
            name,
            format!(
                "the plugin {} has no executable {} in {}",
                ktr_pipeline::plugin::ID,
                missing.join(", "),
                root.join("bin").display()
            ),
            fix,
        );
    }
    if let Some(other) = other_config(None, this) {
        return fail(
            name,
            format!(
                "the plugin's {name} run with {other}, not this config {}",
                this.display()
            ),
            format!(
                "move the config to {} or export KTR_CONFIG={} where Claude Code starts",
                absolute(&Config::locate(None)).display(),
                this.display()
            ),
        );
    }
    pass(
        name,
        format!(
            "the plugin {} → {} (the default config {})",
            ktr_pipeline::plugin::ID,
            root.join("bin").display(),
            this.display()
        ),
    )
}

pub(super) fn hooks(workdir: &Path, this: &Path) -> Check {
    let plugin = plugin_root(&home_dir());
    let mut found = Vec::new();
    let mut problems = Vec::new();
    for path in settings_files(workdir) {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        match settings::find_ours(&text) {
            Ok(f) => found.extend(f),
            Err(e) => problems.push(format!("{}: {}", path.display(), e.message)),
        }
    }
    if let Some(root) = plugin {
        if !found.is_empty() {
            return fail(
                "hooks",
                format!(
                    "both the plugin {} and settings.json run ktr's hooks: every hook runs twice",
                    ktr_pipeline::plugin::ID
                ),
                "keep one: ./install --uninstall (settings.json), or ./install --uninstall --plugin",
            );
        }
        return match root {
            Ok(root) => plugin_check(
                "hooks",
                &root,
                &["ktr-stop", "ktr-prompt", "ktr-ack", "ktr-precompact"],
                this,
            ),
            Err(e) => fail("hooks", e, "run ./install --plugin again from the checkout"),
        };
    }
    let want = [
        ("Stop", None, "ktr-stop"),
        ("UserPromptSubmit", None, "ktr-prompt"),
        ("SessionStart", Some("resume"), "ktr-ack"),
        ("PreCompact", None, "ktr-precompact"),
    ];
    for (event, matcher, program) in want {
        let hook = found
            .iter()
            .find(|f| f.event == event && f.program == program && f.matcher.as_deref() == matcher);
        match hook {
            None => problems.push(format!(
                "no {event}{} hook running {program}",
                matcher.map(|m| format!("/{m}")).unwrap_or_default()
            )),
            Some(f) if resolve_program(&f.path).is_none() || !f.path.starts_with('/') => problems
                .push(format!(
                    "the {event} hook runs {}, which is not an executable at an absolute path",
                    f.path
                )),
            Some(f) => {
                if let Some(other) = other_config(f.config.as_deref(), this) {
                    problems.push(format!(
                        "the {event} hook runs {program} with {other}, not this config {}",
                        this.display()
                    ));
                }
            }
        }
    }
    if problems.is_empty() {
        let mut paths: Vec<&str> = found.iter().map(|f| f.path.as_str()).collect();
        paths.dedup();
        pass(
            "hooks",
            format!(
                "Stop, UserPromptSubmit, SessionStart/resume and PreCompact → {} (--config {})",
                paths.join(", "),
                this.display()
            ),
        )
    } else {
        fail("hooks", problems.join("; "), reinstall_fix(this))
    }
}

/// The statusline is optional: it reports, never fails.
pub(super) fn statusline(workdir: &Path) -> Check {
    let lines: Vec<String> = settings_files(workdir)
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter_map(|text| settings::statusline_command(&text))
        .collect();
    let detail = match lines
        .iter()
        .find(|c| c.contains(settings::STATUSLINE_PROGRAM))
    {
        Some(c) => format!("shows the window: {c}"),
        None if !lines.is_empty() => format!(
            "your own statusLine is set ({}); optional: embed `{} --segment` in it to see the window (./install prints how)",
            lines[0],
            settings::STATUSLINE_PROGRAM
        ),
        None => "not set (optional; ./install sets it when there is none)".into(),
    };
    pass("statusline", detail)
}

pub(super) fn mcp(workdir: &Path, this: &Path) -> Check {
    let path = home_dir().join(".claude.json");
    match plugin_root(&home_dir()) {
        Some(Ok(root)) => return plugin_check("mcp", &root, &["ktr-mcp"], this),
        Some(Err(e)) => {
            return fail("mcp", e, "run ./install --plugin again from the checkout");
        }
        None => {}
    }
    let prefix = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("<prefix>"));
    let fix = format!(
        "{}, or: claude mcp remove --scope user ktr; claude mcp add --scope user ktr -- {} --config {}",
        reinstall_fix(this),
        prefix.join("ktr-mcp").display(),
        this.display()
    );
    let doc: serde_json::Value = match std::fs::read(&path) {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(v) => v,
            Err(e) => return fail("mcp", format!("{} is not JSON: {e}", path.display()), fix),
        },
        Err(_) => return fail("mcp", format!("{} does not exist", path.display()), fix),
    };
    let workdir = workdir.to_string_lossy();
    let server = doc.pointer("/mcpServers/ktr").or_else(|| {
        doc.get("projects")?
            .get(workdir.as_ref())?
            .pointer("/mcpServers/ktr")
    });
    let Some(server) = server else {
        return fail(
            "mcp",
            format!("no mcpServers.ktr in {}", path.display()),
            fix,
        );
    };
    let command = server.get("command").and_then(|c| c.as_str()).unwrap_or("");
    let Some(program) = resolve_program(command) else {
        return fail(
            "mcp",
            format!("mcpServers.ktr runs {command:?}, which is not an executable"),
            fix,
        );
    };
    let args = server.get("args").and_then(|a| a.as_array());
    let args = args.into_iter().flatten().filter_map(|a| a.as_str());
    match other_config(config_arg(args), this) {
        None => pass(
            "mcp",
            format!("ktr → {} --config {}", program.display(), this.display()),
        ),
        Some(other) => fail(
            "mcp",
            format!(
                "mcpServers.ktr runs {} with {other}, not this config {}",
                program.display(),
                this.display()
            ),
            fix,
        ),
    }
}
