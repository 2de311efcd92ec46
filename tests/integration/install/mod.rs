//! The settings.json merge (golden cases) and the `install` script run for
//! real into a temp HOME and prefix, with a stand-in `claude` on PATH.

mod script;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use ktr_admin::settings::{self, Change, Edit, Json, Wanted};

const WHAT: &str = "settings.json";

fn wanted() -> Vec<Wanted> {
    settings::wanted(
        Path::new("/opt/ktr"),
        Some(Path::new("/home/u/.config/ktr/config.toml")),
    )
    .unwrap()
}

fn events() -> Vec<&'static str> {
    vec!["Stop", "UserPromptSubmit", "SessionStart", "PreCompact"]
}

const OURS_ONLY: &str = r#"{
  "hooks": {
    "Stop": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "/opt/ktr/ktr-stop --config /home/u/.config/ktr/config.toml",
            "timeout": 10
          }
        ]
      }
    ],
    "UserPromptSubmit": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "/opt/ktr/ktr-prompt --config /home/u/.config/ktr/config.toml",
            "timeout": 10
          }
        ]
      }
    ],
    "SessionStart": [
      {
        "matcher": "resume",
        "hooks": [
          {
            "type": "command",
            "command": "/opt/ktr/ktr-ack --config /home/u/.config/ktr/config.toml",
            "timeout": 10
          }
        ]
      }
    ],
    "PreCompact": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "/opt/ktr/ktr-precompact --config /home/u/.config/ktr/config.toml",
            "timeout": 120
          }
        ]
      }
    ]
  }
}
"#;

#[test]
fn absent_and_empty_files_get_exactly_our_four_hooks() {
    assert_eq!(settings::merge(None, WHAT, &wanted()).unwrap(), OURS_ONLY);
    assert_eq!(
        settings::merge(Some(""), WHAT, &wanted()).unwrap(),
        OURS_ONLY
    );
    assert_eq!(
        settings::merge(Some(" \n"), WHAT, &wanted()).unwrap(),
        OURS_ONLY
    );
    assert_eq!(
        settings::merge(Some("{}"), WHAT, &wanted()).unwrap(),
        OURS_ONLY.trim_end()
    );
}

#[test]
fn merging_twice_changes_nothing() {
    let once = settings::merge(None, WHAT, &wanted()).unwrap();
    let twice = settings::merge(Some(&once), WHAT, &wanted()).unwrap();
    assert_eq!(once, twice);
}

#[test]
fn foreign_hooks_in_every_position_keep_their_place_and_content() {
    let original = r#"{
  "model": "opus",
  "permissions": {"allow": ["mcp__ktr__thread_rebuild_plan"]},
  "hooks": {
    "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "guard.sh"}]}],
    "Stop": [
      {"hooks": [{"type": "command", "command": "notify-send before"}]},
      {"matcher": "", "hooks": [{"type": "command", "command": "say done", "timeout": 3}]}
    ],
    "SessionStart": [
      {"matcher": "startup", "hooks": [{"type": "command", "command": "load-memory.sh"}]},
      {"matcher": "resume", "hooks": [{"type": "command", "command": "echo resumed"}]}
    ],
    "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "remind.sh"}]}]
  },
  "zeta": true
}"#;
    let merged = settings::merge(Some(original), WHAT, &wanted()).unwrap();
    let doc = Json::parse(&merged).unwrap();
    let keys = |v: &Json| match v {
        Json::Object(e) => e.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        _ => panic!("not an object"),
    };
    assert_eq!(keys(&doc), ["model", "permissions", "hooks", "zeta"]);
    let hooks = doc.get("hooks").unwrap();
    assert_eq!(
        keys(hooks),
        [
            "PreToolUse",
            "Stop",
            "SessionStart",
            "UserPromptSubmit",
            "PreCompact"
        ]
    );
    // Every foreign entry is still there, in order, unchanged; ours come last.
    let commands = |event: &str| -> Vec<String> {
        let Json::Array(groups) = hooks.get(event).unwrap() else {
            panic!()
        };
        groups
            .iter()
            .flat_map(|g| match g.get("hooks") {
                Some(Json::Array(h)) => h.clone(),
                _ => vec![],
            })
            .map(|h| match h.get("command") {
                Some(Json::String(c)) => c.clone(),
                _ => String::new(),
            })
            .collect()
    };
    assert_eq!(commands("PreToolUse"), ["guard.sh"]);
    assert_eq!(
        commands("Stop"),
        [
            "notify-send before",
            "say done",
            "/opt/ktr/ktr-stop --config /home/u/.config/ktr/config.toml"
        ]
    );
    assert_eq!(
        commands("SessionStart"),
        [
            "load-memory.sh",
            "echo resumed",
            "/opt/ktr/ktr-ack --config /home/u/.config/ktr/config.toml"
        ]
    );
    assert_eq!(
        commands("UserPromptSubmit"),
        [
            "remind.sh",
            "/opt/ktr/ktr-prompt --config /home/u/.config/ktr/config.toml"
        ]
    );
    // And taking ours out gives the same document back.
    let back = settings::unmerge(Some(&merged), WHAT, &events()).unwrap();
    assert_eq!(Json::parse(&back).unwrap(), Json::parse(original).unwrap());
}

#[test]
fn stale_paths_from_an_older_install_are_updated_in_place_not_duplicated() {
    let old = r#"{
  "hooks": {
    "Stop": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "/usr/local/bin/ktr-stop",
            "timeout": 30
          },
          {
            "type": "command",
            "command": "notify-send after-ktr"
          }
        ]
      },
      {
        "hooks": [
          {
            "type": "command",
            "command": "'/old prefix/ktr-stop'"
          }
        ]
      }
    ],
    "SessionStart": [
      {
        "matcher": "resume",
        "hooks": [
          {
            "type": "command",
            "command": "/usr/local/bin/ktr-ack"
          }
        ]
      }
    ]
  }
}
"#;
    let merged = settings::merge(Some(old), WHAT, &wanted()).unwrap();
    let expected = old
        .replace(
            "\"command\": \"/usr/local/bin/ktr-stop\",\n            \"timeout\": 30",
            "\"command\": \"/opt/ktr/ktr-stop --config /home/u/.config/ktr/config.toml\",\n            \"timeout\": 10",
        )
        .replace(
            ",\n      {\n        \"hooks\": [\n          {\n            \"type\": \"command\",\n            \"command\": \"'/old prefix/ktr-stop'\"\n          }\n        ]\n      }",
            "",
        )
        .replace(
            "\"command\": \"/usr/local/bin/ktr-ack\"",
            "\"command\": \"/opt/ktr/ktr-ack --config /home/u/.config/ktr/config.toml\",\n            \"timeout\": 10",
        )
        // The hooks an older install did not have come last.
        .replace(
            "      }\n    ]\n  }\n}\n",
            "      }\n    ],\n    \"UserPromptSubmit\": [\n      {\n        \"hooks\": [\n          {\n            \"type\": \"command\",\n            \"command\": \"/opt/ktr/ktr-prompt --config /home/u/.config/ktr/config.toml\",\n            \"timeout\": 10\n          }\n        ]\n      }\n    ],\n    \"PreCompact\": [\n      {\n        \"hooks\": [\n          {\n            \"type\": \"command\",\n            \"command\": \"/opt/ktr/ktr-precompact --config /home/u/.config/ktr/config.toml\",\n            \"timeout\": 120\n          }\n        ]\n      }\n    ]\n  }\n}\n",
        );
    assert_eq!(merged, expected);
    assert_eq!(settings::find_ours(&merged).unwrap().len(), 4);
}

#[test]
fn our_ack_hook_under_the_wrong_matcher_moves_to_resume() {
    let text = r#"{"hooks": {"SessionStart": [{"matcher": "startup", "hooks": [
        {"type": "command", "command": "load.sh"},
        {"type": "command", "command": "/x/ktr-ack"}]}]}}"#;
    let merged = settings::merge(Some(text), WHAT, &wanted()).unwrap();
    let found = settings::find_ours(&merged).unwrap();
    let ack: Vec<_> = found.iter().filter(|f| f.program == "ktr-ack").collect();
    assert_eq!(ack.len(), 1);
    assert_eq!(ack[0].matcher.as_deref(), Some("resume"));
    assert!(
        merged.contains("load.sh"),
        "the foreign hook beside it stays"
    );
}

#[test]
fn wrong_shapes_are_refused_with_what_to_fix() {
    let cases = [
        ("[]", "the top level must be an object"),
        (r#"{"hooks": []}"#, "\"hooks\" must be an object"),
        (
            r#"{"hooks": {"Stop": {}}}"#,
            "\"hooks.Stop\" must be a list",
        ),
        (
            r#"{"hooks": {"Stop": ["x"]}}"#,
            "\"hooks.Stop[0]\" must be an object",
        ),
        (
            r#"{"hooks": {"SessionStart": [{"hooks": "x"}]}}"#,
            "\"hooks.SessionStart[0].hooks\" must be a list",
        ),
        (
            r#"{"hooks": {"SessionStart": [{"matcher": 1, "hooks": []}]}}"#,
            "\"hooks.SessionStart[0].matcher\" must be a string",
        ),
        ("{\"model\": ", "is not valid JSON"),
    ];
    for (text, why) in cases {
        let err = settings::merge(Some(text), WHAT, &wanted()).unwrap_err();
        assert!(err.message.contains(why), "{text}: {err}");
        assert!(err.message.contains("nothing was changed"), "{err}");
        let err = settings::unmerge(Some(text), WHAT, &events()).unwrap_err();
        assert!(err.message.contains(why), "{text}: {err}");
    }
    // Foreign events of any shape are none of our business.
    assert!(settings::merge(Some(r#"{"hooks": {"Other": 5}}"#), WHAT, &wanted()).is_ok());
}

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn an_unparseable_file_is_left_untouched_without_a_backup() {
    let dir = temp();
    let path = dir.path().join("settings.json");
    fs::write(&path, "{ \"model\": opus }").unwrap();
    let err = Edit::merge(&path, Path::new("/opt/ktr"), None).unwrap_err();
    assert!(err.message.contains("not valid JSON"), "{err}");
    assert_eq!(fs::read_to_string(&path).unwrap(), "{ \"model\": opus }");
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn apply_keeps_the_mode_and_writes_a_timestamped_backup() {
    let dir = temp();
    let path = dir.path().join("settings.json");
    let original = "{\n  \"model\": \"opus\"\n}";
    fs::write(&path, original).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
    let applied = Edit::merge(&path, Path::new("/opt/ktr"), None)
        .unwrap()
        .apply()
        .unwrap()
        .change;
    let Change::Updated { backup } = applied else {
        panic!("expected an update with a backup, got {applied:?}");
    };
    assert!(
        backup
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("settings.json.ktr-backup-2")
    );
    assert_eq!(fs::read_to_string(&backup).unwrap(), original);
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o640
    );
    assert!(
        fs::read_to_string(&path)
            .unwrap()
            .starts_with("{\n  \"model\": \"opus\",\n  \"hooks\"")
    );
    // Again: nothing to do, no new backup.
    let again = Edit::merge(&path, Path::new("/opt/ktr"), None).unwrap();
    assert!(!again.changes());
    assert_eq!(again.apply().unwrap().change, Change::Unchanged);
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2);
    // Unmerge restores the original bytes (no trailing newline, key order)
    // and takes the backup it restored from: no file is left behind.
    assert_eq!(
        Edit::unmerge(&path).unwrap().apply().unwrap().change,
        Change::Restored { from: backup }
    );
    assert_eq!(fs::read_to_string(&path).unwrap(), original);
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn unmerge_restores_the_absence_of_a_file_install_created() {
    let dir = temp();
    let path = dir.path().join("settings.json");
    let merge = Edit::merge(&path, Path::new("/opt/ktr"), None).unwrap();
    assert_eq!(merge.apply().unwrap().change, Change::Created);
    let unmerge = Edit::unmerge(&path).unwrap();
    assert_eq!(unmerge.after, None);
    assert!(
        unmerge.diff().contains("(removed: install created it)"),
        "{}",
        unmerge.diff()
    );
    assert_eq!(unmerge.apply().unwrap().change, Change::Removed);
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    // A file that held `{}` before install gets its `{}` back.
    fs::write(&path, "{}").unwrap();
    Edit::merge(&path, Path::new("/opt/ktr"), None)
        .unwrap()
        .apply()
        .unwrap();
    Edit::unmerge(&path).unwrap().apply().unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap(), "{}");
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    // What Claude Code added since install stays (and a backup is kept).
    fs::remove_file(&path).unwrap();
    Edit::merge(&path, Path::new("/opt/ktr"), None)
        .unwrap()
        .apply()
        .unwrap();
    let merged = fs::read_to_string(&path).unwrap();
    fs::write(&path, merged.replacen('{', "{\n  \"model\": \"opus\",", 1)).unwrap();
    let applied = Edit::unmerge(&path).unwrap().apply().unwrap().change;
    assert!(matches!(applied, Change::Updated { .. }), "{applied:?}");
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        "{\n  \"model\": \"opus\"\n}\n"
    );
}
