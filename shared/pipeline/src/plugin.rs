//! ktr as a Claude Code plugin (SPEC §13a). A user-scope plugin's hooks and
//! MCP server run in every project the person opens. With no config file
//! (zero config), or one without `project_dir`, ktr serves every session
//! whose transcript lies in Claude Code's projects folder; a config naming
//! `project_dir` serves that one project. The plugin calls every binary
//! with `--plugin`; then, before anything else, [`serves`] decides whether
//! this call belongs to a served session. When it does not, the hook
//! prints nothing and exits 0, and `ktr-mcp` offers no tools.
//!
//! The check reads only the small config file (as TOML, only `project_dir`)
//! and the hook's stdin: a hook in a project ktr does not serve costs about
//! what `/bin/true` does. A config that is named but missing, or exists but
//! cannot be read, or has an unusable `project_dir`, counts as served: the
//! hook then runs and says what is wrong with it, as it does without
//! `--plugin` (a person who wrote a config wants to hear that it is broken).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use ktr_base::config::{
    Config, config_folder, encode_project_name, expand_home, home_dir, project_of_transcript,
};

/// The flag the plugin passes to every ktr binary it runs.
pub(crate) const FLAG: &str = "plugin";

/// The plugin's id: plugin `ktr` of the marketplace `ktr` (this repository).
pub const ID: &str = "ktr@ktr";

/// How the model sees ktr's tools when `ktr-mcp` is registered as the MCP
/// server `ktr` (`./install`, `claude mcp add`): `mcp__ktr__thread_rebuild_plan`.
pub(crate) const TOOL_PREFIX: &str = "mcp__ktr__";

/// How the model sees them when the plugin `ktr` provides the server `ktr`
/// (measured on 2.1.328: `mcp__plugin_<plugin>_<server>__<tool>`).
pub(crate) const PLUGIN_TOOL_PREFIX: &str = "mcp__plugin_ktr_ktr__";

/// Whether the user settings of `home` enable the plugin ([`ID`]):
/// `"enabledPlugins": {"ktr@ktr": true}` in `~/.claude/settings.json`,
/// which `claude plugin install` writes and `/plugin` toggles.
pub fn enabled(home: &Path) -> bool {
    use ktr_base::open::{Links, cap, read_capped};
    let path = home.join(".claude/settings.json");
    let Ok(Some(bytes)) = read_capped(&path, cap::SETTINGS, Links::Follow) else {
        return false;
    };
    serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|doc| doc.get("enabledPlugins")?.get(ID)?.as_bool())
        .unwrap_or(false)
}

/// Whom the config found by [`Config::find`] serves.
enum Serves {
    /// The one project folder its `project_dir` names.
    One(PathBuf),
    /// Every session whose transcript lies in Claude Code's projects
    /// folder: no config file (zero config), or one without `project_dir`.
    Every,
    /// A config is named or there but unusable (the full load will say why).
    Unsure,
}

fn configured(explicit: Option<&Path>) -> Serves {
    let path = match Config::find(explicit) {
        Ok(Some(path)) => path,
        Ok(None) => return Serves::Every,
        Err(_) => return Serves::Unsure,
    };
    let table = match ktr_base::config::read_config_file(&path) {
        Ok(Some(bytes)) => String::from_utf8(bytes)
            .ok()
            .and_then(|text| text.parse::<toml::Table>().ok()),
        _ => None,
    };
    let Some(table) = table else {
        return Serves::Unsure;
    };
    match table.get("project_dir") {
        None => Serves::Every,
        Some(toml::Value::String(s)) if !s.is_empty() => {
            let dir = expand_home(s, &home_dir());
            Serves::One(if dir.is_relative() {
                config_folder(&path).join(dir)
            } else {
                dir
            })
        }
        Some(_) => Serves::Unsure,
    }
}

/// The fields of any hook's (or the statusline's) stdin that say which
/// project it runs for; every other field is skipped unread.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Where {
    transcript_path: Option<PathBuf>,
    cwd: Option<PathBuf>,
    workspace: Option<Workspace>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Workspace {
    current_dir: Option<PathBuf>,
}

/// Whether `a` and `b` name the same directory (spelled alike, or alike
/// once symlinks are resolved).
fn same_dir(a: &Path, b: &Path) -> bool {
    a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

/// Whether Claude Code's project folder for working directory `cwd` is
/// `project_dir` (its name is `cwd` encoded, SPEC §2).
fn cwd_in(cwd: &Path, project_dir: &Path) -> bool {
    project_dir
        .file_name()
        .is_some_and(|name| name.to_string_lossy() == encode_project_name(cwd))
}

/// Whether the hook call with stdin `input` (None: over the cap) is one
/// ktr serves: with a config naming `project_dir`, the session's
/// transcript lies in it (without a transcript path, the working
/// directory's project folder is it); otherwise — no config, or one
/// without `project_dir` — the transcript lies in a project folder of
/// Claude Code's projects folder. Anything this cannot decide counts as
/// served.
pub fn serves(explicit: Option<&Path>, input: Option<&[u8]>) -> bool {
    let serves = configured(explicit);
    if matches!(serves, Serves::Unsure) {
        return true;
    }
    let Some(Ok(at)) = input.map(serde_json::from_slice::<Where>) else {
        return true;
    };
    let transcript = at.transcript_path.as_deref();
    match serves {
        Serves::One(project) => {
            if let Some(parent) = transcript.and_then(Path::parent) {
                return same_dir(parent, &project);
            }
            match at.cwd.or(at.workspace.and_then(|w| w.current_dir)) {
                Some(cwd) => cwd_in(&cwd, &project),
                None => true,
            }
        }
        Serves::Every => transcript.is_none_or(|t| project_of_transcript(t).is_ok()),
        Serves::Unsure => true,
    }
}

/// Whether a process started in working directory `cwd` (Claude Code starts
/// its MCP servers in the session's directory) is one ktr serves: with a
/// config naming `project_dir`, `cwd`'s project folder is it; otherwise
/// every session is.
pub fn serves_dir(explicit: Option<&Path>, cwd: &Path) -> bool {
    match configured(explicit) {
        Serves::One(project) => cwd_in(cwd, &project),
        Serves::Every | Serves::Unsure => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    struct Fixture {
        dir: tempfile::TempDir,
    }

    impl Fixture {
        fn new(config: Option<&str>) -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            fs::create_dir_all(dir.path().join("projects/-w")).unwrap();
            fs::create_dir_all(dir.path().join("projects/-other")).unwrap();
            if let Some(text) = config {
                fs::write(dir.path().join("config.toml"), text).unwrap();
            }
            Fixture { dir }
        }
        fn config(&self) -> PathBuf {
            self.dir.path().join("config.toml")
        }
        fn transcript(&self, project: &str) -> String {
            let p = self.dir.path().join(format!("projects/{project}/s.jsonl"));
            serde_json::json!({"session_id": "s", "transcript_path": p, "cwd": "/elsewhere"})
                .to_string()
        }
    }

    #[test]
    fn the_plugin_is_enabled_by_claude_codes_user_settings() {
        let home = tempfile::tempdir().unwrap();
        assert!(!enabled(home.path()));
        fs::create_dir_all(home.path().join(".claude")).unwrap();
        let settings = home.path().join(".claude/settings.json");
        fs::write(&settings, r#"{"enabledPlugins": {"ktr@ktr": true}}"#).unwrap();
        assert!(enabled(home.path()));
        fs::write(&settings, r#"{"enabledPlugins": {"ktr@ktr": false}}"#).unwrap();
        assert!(!enabled(home.path()));
        fs::write(&settings, r#"{"enabledPlugins": {}}"#).unwrap();
        assert!(!enabled(home.path()));
    }

    #[test]
    fn only_the_configured_project_is_served() {
        let f = Fixture::new(Some("project_dir = \"projects/-w\"\n"));
        let config = f.config();
        let c = Some(config.as_path());
        assert!(serves(c, Some(f.transcript("-w").as_bytes())));
        assert!(!serves(c, Some(f.transcript("-other").as_bytes())));
        // Without a transcript path, the working directory decides.
        assert!(serves(c, Some(br#"{"cwd": "/w"}"#)));
        assert!(!serves(c, Some(br#"{"cwd": "/other"}"#)));
        assert!(serves(c, Some(br#"{"workspace": {"current_dir": "/w"}}"#)));
        assert!(serves_dir(c, Path::new("/w")));
        assert!(!serves_dir(c, Path::new("/w/sub")));
    }

    #[test]
    fn a_named_config_that_is_missing_runs_the_hook_which_says_so() {
        let f = Fixture::new(None);
        let config = f.config();
        assert!(serves(Some(&config), Some(f.transcript("-w").as_bytes())));
        assert!(serves_dir(Some(&config), Path::new("/w")));
    }

    #[test]
    fn a_config_without_project_dir_serves_every_project() {
        let f = Fixture::new(Some("advise_at_percent = 0\n"));
        let config = f.config();
        assert!(serves_dir(Some(&config), Path::new("/w")));
        assert!(serves_dir(Some(&config), Path::new("/other")));
        // A transcript outside Claude Code's projects folder is no session
        // ktr serves (the fixture's folder is not it).
        assert!(!serves(Some(&config), Some(f.transcript("-w").as_bytes())));
        assert!(serves(Some(&config), Some(br#"{"cwd": "/other"}"#)));
    }

    #[test]
    fn what_cannot_be_decided_runs_the_hook_which_says_why() {
        for broken in ["project_dir = ", "project_dir = 3\n"] {
            let f = Fixture::new(Some(broken));
            let config = f.config();
            assert!(serves(
                Some(&config),
                Some(f.transcript("-other").as_bytes())
            ));
            assert!(serves_dir(Some(&config), Path::new("/other")));
        }
        let f = Fixture::new(Some("project_dir = \"projects/-w\"\n"));
        let config = f.config();
        assert!(serves(Some(&config), None), "stdin over the cap");
        assert!(serves(Some(&config), Some(b"not json")));
        assert!(serves(Some(&config), Some(b"{}")));
    }
}
