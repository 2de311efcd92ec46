//! The install script in a temp HOME: install, reinstall, uninstall, the plugin, the package, the demo.

use super::*;
use ktr_admin::settings::{self};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

#[allow(clippy::struct_field_names)] // a Home has a home dir
struct Home {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    prefix: PathBuf,
    path_dir: PathBuf,
    settings: PathBuf,
    config: PathBuf,
    claude_log: PathBuf,
}

impl Home {
    fn new() -> Home {
        let tmp = temp();
        let root = tmp.path().to_path_buf();
        let h = Home {
            home: root.join("home"),
            prefix: root.join("prefix/bin"),
            path_dir: root.join("path"),
            settings: root.join("home/.claude/settings.json"),
            config: root.join("home/.config/ktr/config.toml"),
            claude_log: root.join("claude-argv.log"),
            _tmp: tmp,
        };
        fs::create_dir_all(h.home.join(".claude")).unwrap();
        fs::create_dir_all(&h.path_dir).unwrap();
        // A stand-in `claude`: records argv and keeps ~/.claude.json the
        // way `claude mcp add/remove --scope user` does.
        let claude = h.path_dir.join("claude");
        fs::write(
            &claude,
            format!(
                r#"#!/bin/sh
printf '%s\n' "$*" >> '{log}'
case "$1 $2" in
"mcp add")
    shift 6
    cmd=$1; shift
    args=""
    for a in "$@"; do args="$args${{args:+,}}\"$a\""; done
    printf '{{"mcpServers":{{"ktr":{{"type":"stdio","command":"%s","args":[%s],"env":{{}}}}}}}}\n' "$cmd" "$args" > "$HOME/.claude.json" ;;
"mcp remove")
    [ -f "$HOME/.claude.json" ] || exit 1
    printf '{{"mcpServers":{{}}}}\n' > "$HOME/.claude.json" ;;
esac
"#,
                log = h.claude_log.display()
            ),
        )
        .unwrap();
        fs::set_permissions(&claude, fs::Permissions::from_mode(0o755)).unwrap();
        h
    }

    /// Run `install` with `args` (plus --prefix and the built binaries).
    fn install(&self, args: &[&str]) -> (String, i32) {
        let bin_dir = Path::new(crate::support::exe("ktr")).parent().unwrap();
        let out = Command::new("sh")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("install"))
            .arg("--prefix")
            .arg(&self.prefix)
            .arg("--bin-dir")
            .arg(bin_dir)
            .args(args)
            .env_clear()
            .env("HOME", &self.home)
            .env("PATH", format!("{}:/usr/bin:/bin", self.path_dir.display()))
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (text, out.status.code().unwrap_or(-1))
    }

    fn claude_calls(&self) -> Vec<String> {
        fs::read_to_string(&self.claude_log)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    fn files(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![self.home.parent().unwrap().to_path_buf()];
        while let Some(dir) = stack.pop() {
            for e in fs::read_dir(&dir).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push((p.clone(), fs::read(&p).unwrap()));
                }
            }
        }
        out.sort();
        out
    }
}

const FOREIGN: &str = r#"{
  "model": "opus",
  "hooks": {
    "Stop": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "notify-send done"
          }
        ]
      }
    ]
  }
}
"#;

#[test]
fn install_reinstall_and_uninstall_in_a_temp_home() {
    let h = Home::new();
    fs::write(&h.settings, FOREIGN).unwrap();
    // The household's own config exists already: never overwritten.
    fs::create_dir_all(h.config.parent().unwrap()).unwrap();
    let own_config = "# mine\nproject_dir = \"~/.claude/projects/-work\"\n";
    fs::write(&h.config, own_config).unwrap();

    let (out, code) = h.install(&[]);
    assert_eq!(code, 0, "{out}");
    let bin_dir = Path::new(crate::support::exe("ktr")).parent().unwrap();
    for b in ["ktr", "ktr-stop", "ktr-prompt", "ktr-ack", "ktr-mcp"] {
        let installed = h.prefix.join(b);
        assert_eq!(
            fs::read(&installed).unwrap(),
            fs::read(bin_dir.join(b)).unwrap(),
            "{b}"
        );
        assert_eq!(
            fs::metadata(&installed).unwrap().permissions().mode() & 0o777,
            0o755
        );
    }
    assert_eq!(fs::read_to_string(&h.config).unwrap(), own_config);
    let merged = fs::read_to_string(&h.settings).unwrap();
    assert!(merged.contains("notify-send done"));
    let found = settings::find_ours(&merged).unwrap();
    assert_eq!(found.len(), 4);
    // No statusLine was set: ktr's is.
    assert_eq!(
        settings::statusline_command(&merged),
        Some(format!(
            "{} --config {}",
            h.prefix.join("ktr-statusline").display(),
            h.config.display()
        ))
    );
    for f in &found {
        assert!(Path::new(&f.path).starts_with(&h.prefix), "{f:?}");
        assert!(Path::new(&f.path).is_file());
    }
    assert!(merged.contains(&format!("--config {}", h.config.display())));
    let backups: Vec<_> = fs::read_dir(h.settings.parent().unwrap())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("ktr-backup"))
        .collect();
    assert_eq!(backups.len(), 1);
    assert_eq!(fs::read_to_string(backups[0].path()).unwrap(), FOREIGN);
    let mcp = h.prefix.join("ktr-mcp");
    assert_eq!(
        h.claude_calls().last().unwrap(),
        &format!(
            "mcp add --scope user ktr -- {} --config {}",
            mcp.display(),
            h.config.display()
        )
    );

    // The installed doctor sees the hooks and the MCP server.
    let doctor = Command::new(h.prefix.join("ktr"))
        .args(["--config"])
        .arg(&h.config)
        .args(["doctor", "--json"])
        .env_clear()
        .env("HOME", &h.home)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    for name in ["hooks", "statusline", "mcp"] {
        let c = report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap();
        assert_eq!(c["ok"], true, "{c}");
    }

    // Reinstalling changes nothing: same bytes everywhere, no new backup,
    // no new claude call.
    let before = h.files();
    let calls = h.claude_calls().len();
    let (out, code) = h.install(&[]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(h.files(), before, "reinstall changed files: {out}");
    assert_eq!(h.claude_calls().len(), calls);
    assert!(
        out.contains("already up to date") && out.contains("already registered"),
        "{out}"
    );

    // A dry-run uninstall writes nothing.
    let (out, code) = h.install(&["--uninstall", "--dry-run"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(h.files(), before);
    assert!(
        out.contains("- ") && out.contains("ktr-stop"),
        "shows the diff: {out}"
    );

    // Uninstall: the original settings bytes, no binaries, MCP removed,
    // the household's config kept.
    let (out, code) = h.install(&["--uninstall"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(fs::read_to_string(&h.settings).unwrap(), FOREIGN);
    assert_eq!(
        fs::read_dir(h.settings.parent().unwrap()).unwrap().count(),
        1,
        "the install's backup was restored and removed; uninstall keeps none of its own: {out}"
    );
    for b in ["ktr", "ktr-stop", "ktr-ack", "ktr-mcp"] {
        assert!(!h.prefix.join(b).exists(), "{b}");
    }
    assert_eq!(
        h.claude_calls().last().unwrap(),
        "mcp remove --scope user ktr"
    );
    assert_eq!(fs::read_to_string(&h.config).unwrap(), own_config);
}

#[test]
fn a_statusline_of_their_own_is_kept_and_uninstall_restores_every_byte() {
    let h = Home::new();
    let own = "{\n  \"statusLine\": {\"type\": \"command\", \"command\": \"my-line\"}\n}\n";
    fs::write(&h.settings, own).unwrap();
    let (out, code) = h.install(&[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("statusLine is already set (my-line); kept it")
            && out.contains("ktr-statusline --config")
            && out.contains("--segment"),
        "no embed hint: {out}"
    );
    let merged = fs::read_to_string(&h.settings).unwrap();
    assert_eq!(
        settings::statusline_command(&merged).as_deref(),
        Some("my-line")
    );
    assert_eq!(settings::find_ours(&merged).unwrap().len(), 4);
    let (out, code) = h.install(&["--uninstall"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(fs::read_to_string(&h.settings).unwrap(), own);
}

#[test]
fn dry_run_shows_the_diff_and_writes_nothing() {
    let h = Home::new();
    fs::write(&h.settings, FOREIGN).unwrap();
    let before = h.files();
    let (out, code) = h.install(&["--dry-run"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(h.files(), before, "dry run wrote something");
    assert!(h.claude_calls().is_empty());
    assert!(out.contains("+             \"command\": \""), "{out}");
    assert!(out.contains("would write a config template"), "{out}");
    assert!(
        out.contains("would run: claude mcp add --scope user ktr"),
        "{out}"
    );
    assert!(!h.prefix.exists());
}

#[test]
fn a_fresh_install_writes_a_private_template_and_uninstall_removes_it_untouched() {
    let h = Home::new();
    fs::remove_file(h.path_dir.join("claude")).unwrap();
    let (out, code) = h.install(&[]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        fs::metadata(&h.config).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(
        fs::read_to_string(&h.config)
            .unwrap()
            .contains("# project_dir =")
    );
    // Without claude on PATH the exact command is printed.
    assert!(
        out.contains(&format!(
            "claude mcp add --scope user ktr -- {} --config {}",
            h.prefix.join("ktr-mcp").display(),
            h.config.display()
        )),
        "{out}"
    );
    let (out, code) = h.install(&["--uninstall", "--dry-run"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.trim_end().ends_with("dry run: nothing was removed") && !out.contains("uninstalled"),
        "{out}"
    );
    let (out, code) = h.install(&["--uninstall"]);
    assert_eq!(code, 0, "{out}");
    assert!(!h.config.exists(), "the untouched template goes: {out}");
    assert!(
        !h.settings.exists(),
        "install created settings.json, uninstall removes it: {out}"
    );
    assert_eq!(
        fs::read_dir(h.settings.parent().unwrap()).unwrap().count(),
        0,
        "no backup is left either"
    );
}

#[test]
fn a_broken_settings_file_stops_the_install_and_stays_untouched() {
    let h = Home::new();
    fs::write(&h.settings, "{\"hooks\": [}").unwrap();
    let (out, code) = h.install(&[]);
    assert_ne!(code, 0);
    assert!(
        out.contains("not valid JSON") && out.contains("nothing was changed"),
        "{out}"
    );
    assert_eq!(fs::read_to_string(&h.settings).unwrap(), "{\"hooks\": [}");
    assert!(
        h.claude_calls().is_empty(),
        "no MCP registration after a refused merge"
    );
    // Checked before anything else: no binary, no config template.
    assert!(!h.prefix.exists(), "binaries were copied: {out}");
    assert!(!h.config.exists(), "a config was written: {out}");
    assert!(out.contains("nothing was installed"), "{out}");
}

/// Uninstall says what ktr leaves on disk (its
/// copies of the conversation) and where; `--purge PURGE` removes them.
#[test]
fn uninstall_names_what_ktr_leaves_and_purge_removes_it() {
    let h = Home::new();
    let project = h.home.join(".claude/projects/-work");
    let state = h.home.join(".local/state/ktr");
    fs::create_dir_all(&project).unwrap();
    fs::create_dir_all(h.config.parent().unwrap()).unwrap();
    fs::write(
        &h.config,
        format!("project_dir = {project:?}\nstate_dir = {state:?}\n"),
    )
    .unwrap();
    let source = project.join("s.jsonl");
    fs::write(&source, "{\"type\":\"user\"}\n").unwrap();
    // What a ktr that ran leaves: a finished operation's frozen backup, logs.
    fs::create_dir_all(state.join("artifacts/0000aaaa-0000-4000-8000-000000000001")).unwrap();
    fs::write(
        state.join("artifacts/0000aaaa-0000-4000-8000-000000000001/s.jsonl"),
        "{\"type\":\"user\"}\n",
    )
    .unwrap();
    fs::write(state.join("ktr.log"), "{}\n").unwrap();

    assert_eq!(h.install(&[]).1, 0);
    let (out, code) = h.install(&["--uninstall"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("would remove folder") && out.contains(&state.display().to_string()),
        "names what stays and where: {out}"
    );
    assert!(state.join("ktr.log").exists());
    // The hint names a command that works after the uninstall, as printed.
    let hint = out
        .lines()
        .find_map(|l| l.strip_prefix("ktr's state and candidates stay; "))
        .and_then(|l| l.strip_suffix(" removes them (also after this uninstall)"))
        .unwrap_or_else(|| panic!("no purge hint: {out}"));
    let words: Vec<&str> = hint.split(' ').collect();
    assert_eq!(&words[1..4], ["--uninstall", "--purge", "PURGE"], "{hint}");
    let after = Command::new("sh")
        .args(&words)
        .env_clear()
        .env("HOME", &h.home)
        .env("PATH", format!("{}:/usr/bin:/bin", h.path_dir.display()))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&after.stderr).into_owned()
        + &String::from_utf8_lossy(&after.stdout);
    assert_eq!(after.status.code(), Some(0), "{hint}: {said}");
    assert!(!state.exists(), "the hint's command purged: {said}");
    assert!(source.exists(), "a source transcript is never removed");
    fs::create_dir_all(state.join("artifacts/0000aaaa-0000-4000-8000-000000000001")).unwrap();
    fs::write(state.join("ktr.log"), "{}\n").unwrap();

    assert_eq!(h.install(&[]).1, 0);
    let (out, code) = h.install(&["--uninstall", "--purge", "yes"]);
    assert_ne!(code, 0);
    assert!(out.contains("--purge needs the confirmation word"), "{out}");
    let (out, code) = h.install(&["--uninstall", "--purge", "PURGE"]);
    assert_eq!(code, 0, "{out}");
    assert!(!state.exists(), "the state dir is gone: {out}");
    assert!(source.exists(), "a source transcript is never removed");
    assert!(!h.prefix.join("ktr").exists());
}

/// `./install --plugin` refuses, before writing anything, what
/// would make the plugin's hooks run twice or never find their config.
#[test]
fn the_plugin_install_refuses_a_second_wiring_and_a_config_it_would_not_find() {
    let h = Home::new();
    let (out, code) = h.install(&["--statusline"]);
    assert_ne!(code, 0);
    assert!(out.contains("--statusline goes with --plugin"), "{out}");

    // The plugin's hooks take no --config: only the default one works.
    let elsewhere = h.home.join("elsewhere.toml");
    let (out, code) = h.install(&["--plugin", "--config", &elsewhere.to_string_lossy()]);
    assert_ne!(code, 0);
    assert!(
        out.contains(&format!("read the config at {}", h.config.display()))
            && out.contains("KTR_CONFIG"),
        "{out}"
    );
    assert!(!h.prefix.exists() && !h.config.exists(), "{out}");

    // A household wired by ./install: both wirings would run every hook twice.
    let (out, code) = h.install(&[]);
    assert_eq!(code, 0, "{out}");
    let before = h.files();
    let calls = h.claude_calls().len();
    let (out, code) = h.install(&["--plugin"]);
    assert_ne!(code, 0);
    assert!(
        out.contains("runs ktr's hooks (./install); run ./install --uninstall first"),
        "{out}"
    );
    assert_eq!(h.files(), before, "something was written: {out}");
    assert_eq!(h.claude_calls().len(), calls, "claude was run: {out}");
}

/// `./install --plugin --dry-run` says every step and writes nothing: no
/// binary, no config, no claude call, no settings edit.
#[test]
fn the_plugin_dry_run_writes_nothing() {
    let h = Home::new();
    let before = h.files();
    let (out, code) = h.install(&["--plugin", "--statusline", "--dry-run"]);
    assert_eq!(code, 0, "{out}");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    for step in [
        format!(
            "would copy the binaries to {}",
            repo.join("plugin/bin").display()
        ),
        format!(
            "would run: claude plugin marketplace add {}",
            repo.display()
        ),
        "would run: claude plugin install ktr@ktr".to_string(),
        "/prefix/bin/ktr-statusline --plugin\"".to_string(),
        "dry run: nothing was written".to_string(),
    ] {
        assert!(out.contains(&step), "{step:?} not in:\n{out}");
    }
    assert_eq!(h.files(), before, "{out}");
    assert!(h.claude_calls().is_empty(), "{out}");
}

/// `./install --package` writes one archive, `ktr-<version>-<host
/// triple>.tar.gz`, holding one folder: the marketplace file, the plugin's
/// files and every binary in `plugin/bin`, executable. Twice, from the same
/// binaries, it is the same bytes. (Stand-in binaries: the real CLI
/// installs a real archive in `claude_plugin`.)
#[test]
fn the_package_is_one_named_archive_with_the_plugin_and_every_binary_and_the_same_twice() {
    let tmp = temp();
    let bins: Vec<String> = fs::read_dir(crate::support::repo_file("bins"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(bins.len(), 13, "{bins:?}");
    let bin_dir = tmp.path().join("built");
    fs::create_dir_all(&bin_dir).unwrap();
    for b in &bins {
        fs::write(bin_dir.join(b), format!("#!/bin/sh\necho {b}\n")).unwrap();
        fs::set_permissions(bin_dir.join(b), fs::Permissions::from_mode(0o700)).unwrap();
    }
    let host = Command::new("rustc").arg("-vV").output().unwrap();
    let host = String::from_utf8_lossy(&host.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(String::from))
        .unwrap();
    let name = format!("ktr-{}-{host}", env!("CARGO_PKG_VERSION"));
    let package = |out: &str| {
        let out = tmp.path().join(out);
        let run = Command::new("sh")
            .arg(crate::support::repo_file("install"))
            .args(["--package", "--bin-dir"])
            .arg(&bin_dir)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert!(run.status.success(), "{}", crate::support::printed(&run));
        let written: Vec<String> = fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(written, [format!("{name}.tar.gz")]);
        out.join(format!("{name}.tar.gz"))
    };
    let (first, second) = (package("one"), package("two"));
    assert_eq!(fs::read(&first).unwrap(), fs::read(&second).unwrap());

    let listing = Command::new("tar")
        .arg("-tvzf")
        .arg(&first)
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    let files: Vec<&str> = listing
        .lines()
        .filter(|l| !l.starts_with('d'))
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    for f in [
        ".claude-plugin/marketplace.json",
        "plugin/.claude-plugin/plugin.json",
        "plugin/hooks/hooks.json",
        "plugin/commands/status.md",
    ] {
        assert!(
            files.contains(&format!("{name}/{f}").as_str()),
            "{f}: {listing}"
        );
    }
    for b in &bins {
        let line = listing
            .lines()
            .find(|l| l.ends_with(&format!("{name}/plugin/bin/{b}")))
            .unwrap_or_else(|| panic!("{b} is not in the archive: {listing}"));
        assert!(line.starts_with("-rwxr-xr-x 0/0"), "{line}");
    }
    assert!(
        files.iter().all(|f| f.starts_with(&format!("{name}/"))),
        "{listing}"
    );
}

/// `./install --demo` (the README's first command) runs the drill with the
/// binaries `./install` would install — the build installing reuses — and
/// installs nothing: no binary in the prefix, no settings, no config.
#[test]
fn the_demo_runs_the_drill_with_the_install_build_and_installs_nothing() {
    let h = Home::new();
    let before = crate::support::tree(&h.home);
    let (out, code) = h.install(&["--demo"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("demo finished: operation activated"), "{out}");
    assert!(!h.prefix.exists(), "the demo installed binaries:\n{out}");
    assert_eq!(crate::support::tree(&h.home), before, "{out}");
    assert!(h.claude_calls().is_empty(), "{:?}", h.claude_calls());
    let (out, code) = h.install(&["--demo", "--plugin"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("--demo only runs the drill"), "{out}");
}
