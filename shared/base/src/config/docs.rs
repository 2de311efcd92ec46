//! The config tables of README, its Chinese copy and SPEC, and the install
//! template, held to [`KEYS`]: a key missing or listed twice, or a default,
//! range or choice that differs, fails here.

use super::declared::{KEYS, Key, Type, Unset};
use super::ranges::Words;

const README: &str = include_str!("../../../../README.md");
const README_ZH: &str = include_str!("../../../../README.zh-CN.md");
const SPEC: &str = include_str!("../../../../docs/SPEC.md");
const INSTALL: &str = include_str!("../../../../install");

/// The rows of the first table after `heading`, below its header.
fn rows<'a>(doc: &'a str, heading: &str) -> Vec<&'a str> {
    let after = doc
        .split_once(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("no heading {heading:?}"))
        .1;
    after
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .collect()
}

/// The rows of the first table after `heading`: each row's cells, with
/// Markdown's `\|` read back as `|`.
fn table(doc: &str, heading: &str) -> Vec<Vec<String>> {
    rows(doc, heading)
        .into_iter()
        .map(|row| {
            let row = row.trim().trim_start_matches('|').trim_end_matches('|');
            let row = row.replace("\\|", "\u{0}");
            row.split('|')
                .map(|c| c.trim().replace('\u{0}', "|"))
                .collect()
        })
        .collect()
}

/// README's row of `key`, as rendered from its declaration.
fn readme_row(key: &Key) -> String {
    let rule = key.rule();
    let rule = if rule.is_empty() {
        String::new()
    } else {
        format!(" {rule}")
    };
    format!("| `{}` | {} |{rule} |", key.name, key.default_cell())
}

/// What in `doc`'s table under `heading` differs from [`KEYS`].
fn drift(doc: &str, heading: &str, words: &Words) -> Vec<String> {
    let rows = table(doc, heading);
    let mut problems = Vec::new();
    for row in &rows {
        let name = row[0].trim_matches('`');
        if !KEYS.iter().any(|k| k.name == name) {
            problems.push(format!(
                "{name}: listed, but no key of that name is declared"
            ));
        }
    }
    for key in KEYS {
        let mine: Vec<_> = rows
            .iter()
            .filter(|r| r[0] == format!("`{}`", key.name))
            .collect();
        let [row] = mine.as_slice() else {
            problems.push(format!(
                "{}: listed {} times, not once",
                key.name,
                mine.len()
            ));
            continue;
        };
        let (default, rule) = (&row[1], &row[2]);
        match key.default {
            Unset::Is(value) if !default.starts_with(&format!("`{value}`")) => {
                problems.push(format!(
                    "{}: default {default}, declared `{value}`",
                    key.name
                ));
            }
            Unset::Required | Unset::Means(_) if default.starts_with('`') => {
                problems.push(format!("{}: default {default}, declared none", key.name));
            }
            _ => {}
        }
        match key.ty {
            Type::Whole(range) | Type::Number(range) if !rule.contains(&range.words(words)) => {
                problems.push(format!(
                    "{}: rule {rule:?} does not say {:?}",
                    key.name,
                    range.words(words)
                ));
            }
            Type::OneOf(choices) => {
                for choice in choices {
                    if !rule.contains(&format!("`{choice}`")) {
                        problems.push(format!("{}: rule does not name `{choice}`", key.name));
                    }
                }
            }
            _ => {}
        }
    }
    problems
}

#[test]
fn readmes_table_is_the_declared_keys() {
    let written = rows(README, "## Configuration");
    let declared: Vec<String> = KEYS.iter().map(readme_row).collect();
    assert!(
        written == declared,
        "README's Configuration table differs from the declared keys (config/declared.rs); the table from them:\n{}",
        declared.join("\n")
    );
    assert!(drift(README, "## Configuration", &Words::EN).is_empty());
}

#[test]
fn spec_and_the_chinese_readme_list_every_key_once_with_its_default_and_range() {
    let spec = drift(SPEC, "## 2. Configuration (TOML)", &Words::EN);
    assert!(spec.is_empty(), "docs/SPEC.md §2:\n{}", spec.join("\n"));
    let zh = drift(README_ZH, "## 配置", &Words::ZH);
    assert!(zh.is_empty(), "README.zh-CN.md 配置:\n{}", zh.join("\n"));
}

#[test]
fn a_row_edited_by_hand_is_drift() {
    let edits = [
        (
            "| `tmux_target` | `cc:0.0` |",
            "| `tmux_target` | `cc:1.0` |",
        ),
        ("| 10 to 3600 |", "| 10 to 600 |"),
        (
            "| `history` | `chain` | `chain` \\| `file` |",
            "| `history` | `chain` | `chain` |",
        ),
    ];
    for (row, edited) in edits {
        assert!(README.contains(row), "{row}");
        let readme = README.replacen(row, edited, 1);
        assert_eq!(
            drift(&readme, "## Configuration", &Words::EN).len(),
            1,
            "{edited}"
        );
    }
    let without = README.replacen("| `resume_env` |", "| `resume_environment` |", 1);
    assert_eq!(drift(&without, "## Configuration", &Words::EN).len(), 2);
}

/// The `# key = value` lines of the template `install` writes.
fn template_lines() -> Vec<(String, String)> {
    let body = INSTALL
        .split_once("config_template() {\n    cat <<'EOF'\n")
        .unwrap()
        .1
        .split_once("\nEOF\n")
        .unwrap()
        .0;
    body.lines()
        .filter_map(|l| l.strip_prefix("# "))
        .filter_map(|l| {
            let (key, rest) = l.split_once(" = ")?;
            let ok = !key.is_empty() && key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
            ok.then(|| (key.to_string(), rest.to_string()))
        })
        .collect()
}

#[test]
fn the_install_template_shows_declared_keys_with_their_defaults_and_ranges() {
    // Shown with an example instead of the default: the one key to set,
    // and the English alternative to the Chinese stamps.
    let examples = [
        "project_dir",
        "stamp_template",
        "startup_header_template",
        "stamp_turns",
    ];
    let lines = template_lines();
    assert!(lines.len() >= 15, "{lines:?}");
    for (name, rest) in lines {
        let key = KEYS
            .iter()
            .find(|k| k.name == name)
            .unwrap_or_else(|| panic!("the template sets {name}, which is not declared"));
        // `value   # comment`: the value is TOML, the comment its rule.
        let text = format!("{name} = {rest}");
        let table: toml::Table = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        let mut config = table.clone();
        config.entry("project_dir").or_insert("/p".into());
        let parsed = super::Config::from_toml(&toml::to_string(&config).unwrap());
        assert!(parsed.is_ok(), "{text}: {parsed:?}");
        if !examples.contains(&name.as_str()) {
            assert_eq!(table.get(&name), key.default_value().as_ref(), "{text}");
        }
        if let (Type::Whole(range) | Type::Number(range), Some((_, comment))) =
            (key.ty, rest.split_once('#'))
            && comment
                .trim_start()
                .starts_with(|c: char| c.is_ascii_digit())
        {
            let words = range.words(&Words::EN);
            assert!(
                comment.trim_start().starts_with(&words),
                "{text}: not {words}"
            );
        }
    }
}
