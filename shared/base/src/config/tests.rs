//! Unit tests of the config.
use super::*;

fn err(text: &str) -> String {
    Config::from_toml(text).unwrap_err().message
}

#[test]
fn defaults_apply() {
    let c = Config::from_toml("project_dir = \"/p\"").unwrap();
    assert_eq!(c.activation, Activation::Tmux);
    assert_eq!(c.tmux_target, "cc:0.0");
    assert_eq!(c.resume_command, ["claude", "--resume", "{session_id}"]);
    assert_eq!(c.dirty_budget_bytes, 524_288);
    assert_eq!(c.stamp_template, "[发生时间: {timestamp}]");
    assert!(c.poison_pattern.is_match("acceptable use"));
    assert!(
        c.reply_tool_pattern
            .is_match("mcp__plugin_telegram_telegram__reply")
    );
    assert!(c.reply_tool_pattern.is_match("mcp__companion__reply"));
    // ktr's own tools, under both names (the plugin's too), are not speech.
    for own in [
        "mcp__ktr__thread_rebuild_plan",
        "mcp__plugin_ktr_ktr__thread_rebuild_plan",
    ] {
        assert!(!c.reply_tool_pattern.is_match(own), "{own}");
    }
}

#[test]
fn unknown_key_is_named_with_a_hint() {
    let m = err("project_dir = \"/p\"\ninclude_open_tial = true");
    assert!(
        m.contains("include_open_tial") && m.contains("include_open_tail"),
        "{m}"
    );
}

#[test]
fn wrong_types_name_the_key() {
    assert_eq!(
        err("project_dir = \"/p\"\nstamp_turns = \"yes\""),
        "stamp_turns must be true or false, not string"
    );
    assert!(err("project_dir = \"/p\"\ndirty_budget_bytes = 1.5").contains("dirty_budget_bytes"));
    assert!(err("project_dir = 3").contains("project_dir must be a string"));
    assert!(err("project_dir = \"/p\"\nresume_env = { A = 1 }").contains("resume_env.A"));
}

#[test]
fn rules_are_enforced() {
    assert!(err("").contains("project_dir is required"));
    assert!(err("project_dir = \"/p\"\ncarry_max_tokens = 100").contains("carry_max_tokens"));
    assert!(err("project_dir = \"/p\"\nmax_event_chars = 10").contains("max_event_chars"));
    assert!(err("project_dir = \"/p\"\nstamp_template = \"x\"").contains("{timestamp}"));
    assert!(err("project_dir = \"/p\"\nresume_command = [\"claude\"]").contains("{session_id}"));
    assert!(
        err("project_dir = \"/p\"\nactivation = \"systemd\"\nsystemd_unit = \"x\"")
            .contains(".service")
    );
    assert!(
        err("project_dir = \"/p\"\nstable_file_seconds = 15")
            .contains("stable_file_timeout_seconds")
    );
    assert!(err("project_dir = \"/p\"\npoison_pattern = \"(\"").contains("poison_pattern"));
    assert!(err("project_dir = \"/p\"\ntmux_target = \"a\\nb\"").contains("tmux_target"));
    // tmux takes an argument ending in `;` for its command separator.
    for target in [";", "cc:0.0;", "cc\\\\;"] {
        let e = err(&format!("project_dir = \"/p\"\ntmux_target = \"{target}\""));
        assert!(
            e.starts_with("tmux_target must not end in ';'"),
            "{target}: {e}"
        );
        assert!(!e.contains('\n'), "{e}");
    }
    for fine in ["cc:0.0", "%3", "my session:1.2", "a;b"] {
        let text = format!("project_dir = \"/p\"\ntmux_target = \"{fine}\"");
        assert_eq!(Config::from_toml(&text).unwrap().tmux_target, fine);
    }
    assert_eq!(
        err("project_dir = \"/p\"\nsystemd_restart_timeout_seconds = 3"),
        "systemd_restart_timeout_seconds must be between 10 and 3600"
    );
    assert!(err("not toml [").starts_with("not valid TOML"));
    assert_eq!(
        err("project_dir = \"/p\"\nhealthcheck_min_seconds = 6"),
        "healthcheck_min_seconds must not be greater than healthcheck_seconds"
    );
}

#[test]
fn the_minimum_life_defaults_to_one_second_within_the_window() {
    let min = |text: &str| Config::from_toml(text).unwrap().healthcheck_min_seconds;
    assert!((min("project_dir = \"/p\"") - 1.0).abs() < f64::EPSILON);
    let short = "project_dir = \"/p\"\nhealthcheck_seconds = 0.5";
    assert!((min(short) - 0.25).abs() < f64::EPSILON);
    let explicit = "project_dir = \"/p\"\nhealthcheck_min_seconds = 0";
    assert!(min(explicit).abs() < f64::EPSILON);
}

#[test]
fn resume_command_string_is_split_like_a_shell() {
    let c = Config::from_toml(
        "project_dir = \"/p\"\nresume_command = \"claude --resume {session_id} --append-system-prompt 'be kind'\"",
    )
    .unwrap();
    assert_eq!(
        c.resume_argv(&crate::ids::SessionId::parse("abc").unwrap()),
        [
            "claude",
            "--resume",
            "abc",
            "--append-system-prompt",
            "be kind"
        ]
    );
}

#[test]
fn every_numeric_key_has_a_range_and_huge_values_name_the_key() {
    let numeric = KEYS.iter().filter_map(|k| match k.ty {
        Type::Whole(r) | Type::Number(r) => Some((k.name, r)),
        _ => None,
    });
    for (key, r) in numeric {
        for bad in ["1e300", "-1", "1e20", "nan", "inf"] {
            let m = err(&format!("project_dir = \"/p\"\n{key} = {bad}"));
            assert!(m.starts_with(key), "{key} = {bad}: {m}");
        }
        let ok = Config::from_toml(&format!("project_dir = \"/p\"\n{key} = {}", r.max));
        // Keys bounded by another key too.
        let lower_ok = ![
            "stable_file_timeout_seconds",
            "stable_file_seconds",
            "healthcheck_min_seconds",
        ]
        .contains(&key);
        assert!(ok.is_ok() || !lower_ok, "{key} = max refused");
    }
    assert_eq!(
        err("project_dir = \"/p\"\nhealthcheck_seconds = 1e300"),
        "healthcheck_seconds must be greater than 0 and at most 3600"
    );
    assert_eq!(
        err("project_dir = \"/p\"\ncarry_max_tokens = 100"),
        "carry_max_tokens must be 0 (off) or between 5000 and 100000000"
    );
    assert!(
        err("project_dir = \"/p\"\nstate_dir = \"\"").starts_with("state_dir must not be empty")
    );
}

#[test]
fn relative_paths_are_taken_from_the_config_folder() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ktr.toml");
    std::fs::write(&file, "project_dir = \"proj\"\nstate_dir = \"st/ate\"\n").unwrap();
    let c = Config::load(Some(&file)).unwrap();
    assert_eq!(c.project_dir, dir.path().join("proj"));
    assert_eq!(c.state_dir, dir.path().join("st/ate"));
}

#[test]
fn project_names_encode_like_claude_code() {
    assert_eq!(
        encode_project_name(Path::new("/home/u/my.proj_x/a b+c")),
        "-home-u-my-proj-x-a-b-c"
    );
    assert_eq!(encode_project_name(Path::new("/root")), "-root");
}

#[test]
fn config_errors_carry_what_was_wrong() {
    let what = |text: &str| {
        Config::from_toml(text)
            .unwrap_err()
            .find::<ConfigError>()
            .cloned()
    };
    assert_eq!(
        what("project_dir = \"/p\"\ninclude_open_tial = true"),
        Some(ConfigError::UnknownKey {
            key: "include_open_tial".into(),
            close: Some("include_open_tail"),
        })
    );
    assert!(matches!(
        what(""),
        Some(ConfigError::Required {
            key: "project_dir",
            ..
        })
    ));
    assert!(matches!(what("a = ["), Some(ConfigError::NotToml { .. })));
    assert!(matches!(
        what("project_dir = \"/p\"\nstamp_turns = 1"),
        Some(ConfigError::WrongType { key, expected: "true or false", got: "integer" }) if key == "stamp_turns"
    ));
    assert!(matches!(
        what("project_dir = \"/p\"\nhistory = \"tree\""),
        Some(ConfigError::Rule { key, .. }) if key == "history"
    ));
    // Through load, under the error that names the file.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    let load = |bytes: &[u8]| {
        std::fs::write(&file, bytes).unwrap();
        Config::load(Some(&file)).unwrap_err()
    };
    let err = load(b"colour = 1");
    assert!(err.message.starts_with("config "), "{err}");
    assert!(matches!(
        err.find(),
        Some(ConfigError::UnknownKey { close: None, .. })
    ));
    assert!(matches!(
        load(b"\xff").find(),
        Some(ConfigError::NotUtf8 { .. })
    ));
    std::fs::remove_file(&file).unwrap();
    let err = Config::load(Some(&file)).unwrap_err();
    assert!(
        matches!(err.find(), Some(ConfigError::Missing { .. })),
        "{err}"
    );
}

#[test]
fn every_declared_default_is_a_value_the_key_accepts() {
    assert!(!KEYS.is_empty());
    for key in KEYS {
        let Some(value) = key.default_value() else {
            continue;
        };
        let mut table = toml::Table::new();
        table.insert("project_dir".into(), "/p".into());
        table.insert(key.name.into(), value);
        let text = toml::to_string(&table).unwrap();
        assert!(Config::from_toml(&text).is_ok(), "{text}");
    }
    let names: std::collections::BTreeSet<_> = KEYS.iter().map(|k| k.name).collect();
    assert_eq!(names.len(), KEYS.len(), "a key declared twice");
}

#[test]
fn resume_command_string_keeps_quoted_words_and_refuses_an_open_quote() {
    let argv = |command: &str| {
        Config::from_toml(&format!(
            "project_dir = \"/p\"\nresume_command = {}",
            toml::Value::String(command.into())
        ))
        .map(|c| c.resume_argv(&crate::ids::SessionId::parse("abc").unwrap()))
    };
    assert_eq!(
        argv(r#"claude --resume {session_id} --x "a \"b\" \$c" d\ e"#).unwrap(),
        ["claude", "--resume", "abc", "--x", "a \"b\" $c", "d e"]
    );
    for open in [
        "claude --resume {session_id} 'x",
        "claude --resume {session_id} \\",
    ] {
        let m = argv(open).unwrap_err().to_string();
        assert!(m.starts_with("resume_command"), "{m}");
    }
}
