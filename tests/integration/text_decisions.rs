//! No decision in ktr's code reads an error's or a note's words: rewording
//! a message must never change what ktr does. Callers decide by typed
//! values (`Error::find`, typed fields); this test reads the non-test
//! source and fails on a comparison with a message's text, and on a
//! search for a phrase (words with a space) in any text.

use std::path::{Path, PathBuf};

/// What people read: an error's message, any `to_string()`, a history
/// note, the `*_source` and reason texts.
const SUBJECTS: &[&str] = &[
    "message",
    "to_string()",
    "note",
    "_source",
    ".source",
    ".why",
    ".reason",
    ".error",
    ".detail",
];

/// Ways of deciding by words: a search in the text, or equality with a
/// string literal (equality with a typed value is what callers should do).
const TESTS: &[&str] = &[
    ".contains(",
    ".starts_with(",
    ".ends_with(",
    ".strip_prefix(",
    ".find(",
    "==\"",
    "!=\"",
    "==r\"",
    "==r#\"",
];

/// Phrases searched for in another program's words, which are the only
/// sign it gives: (file, phrase).
const OTHERS_WORDS: &[(&str, &str)] = &[
    // tmux says on stderr that no server listens (targets::NoServer).
    ("shared/pipeline/src/targets/tmux.rs", "no server running"),
    ("shared/pipeline/src/targets/tmux.rs", "error connecting"),
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() && name != "tests" {
            sources(&path, out);
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// The code before the file's inline test module.
fn non_test_code(text: &str) -> String {
    let mut rest = text;
    let mut code = String::new();
    while let Some(at) = rest.find("#[cfg(test)]") {
        let after = rest[at + "#[cfg(test)]".len()..].trim_start();
        let item = match after.strip_prefix("pub") {
            Some(public) => public.split_once(' ').map_or(public, |(_, item)| item),
            None => after,
        };
        let inline_module = item
            .strip_prefix("mod ")
            .and_then(|m| m.split_once(|c: char| !c.is_alphanumeric() && c != '_'))
            .is_some_and(|(_, tail)| tail.trim_start().starts_with('{'));
        code.push_str(&rest[..at]);
        if inline_module {
            rest = "";
            break;
        }
        rest = &rest[at + 1..];
    }
    code.push_str(rest);
    code
}

/// The comparisons with words in `code`, each with where it stands.
fn comparisons(path: &str, code: &str) -> Vec<String> {
    let mut found = phrases(path, code);
    // Without whitespace, a chain split over lines reads as one.
    let code: String = code.split_whitespace().collect();
    for subject in SUBJECTS {
        for test in TESTS {
            let needle = format!("{subject}{test}");
            for (at, _) in code.match_indices(&needle) {
                let mut start = at.saturating_sub(40);
                while !code.is_char_boundary(start) {
                    start -= 1;
                }
                let mut end = (at + needle.len() + 40).min(code.len());
                while !code.is_char_boundary(end) {
                    end += 1;
                }
                found.push(format!("{path}: …{}…", &code[start..end]));
            }
        }
    }
    found
}

/// Searches for a phrase of two or more words: `.contains("two words")` and the like, on
/// whatever text (not another program's words listed in [`OTHERS_WORDS`]).
fn phrases(path: &str, code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for test in &TESTS[..5] {
        let opening = format!("{test}\"");
        for (at, _) in code.match_indices(&opening) {
            let literal = &code[at + opening.len()..];
            let Some(end) = literal.find('"') else {
                continue;
            };
            let phrase = &literal[..end];
            let others = OTHERS_WORDS
                .iter()
                .any(|(file, words)| path.ends_with(file) && phrase == *words);
            let words = phrase
                .split_whitespace()
                .filter(|w| w.chars().any(char::is_alphabetic))
                .count();
            if words >= 2 && !others {
                found.push(format!("{path}: {test}\"{phrase}\")"));
            }
        }
    }
    found
}

#[test]
fn no_decision_in_the_code_reads_a_messages_words() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("bins"), &mut files);
    sources(&root.join("shared"), &mut files);
    assert!(files.len() > 100, "{} source files", files.len());
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let name = file.strip_prefix(root).unwrap().display().to_string();
        found.extend(comparisons(&name, &non_test_code(&text)));
    }
    assert!(
        found.is_empty(),
        "decisions by a message's words (decide by a typed value instead: Error::find, a typed field):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_finds_what_the_code_once_did() {
    // The comparisons this test replaced, as they were written.
    for (line, caught) in [
        (
            r#"if !e.message.starts_with("verification failed") {"#,
            true,
        ),
        (
            r#"let assumed = if w.size_source.contains("assumed") {"#,
            true,
        ),
        (
            "if w.compaction_point_source\n    .contains(\"no auto-compaction\") {",
            true,
        ),
        (r#"} else if message.contains("unknown key") {"#, true),
        (r"op.history.iter().any(|t| t.note.starts_with(HOOK))", true),
        (r#"if err.to_string().contains("denied") {"#, true),
        (r"if e.find::<ConfigError>().is_some() {", false),
        (r#"if w.used_source == "estimate" {"#, true),
        (
            r#"let lost = problems.iter().any(|p| p.contains("could not be replayed"));"#,
            true,
        ),
        (
            r#"if name.ends_with(".rs") && line.starts_with("//") {"#,
            false,
        ),
        ("if w.used_source == UsedSource::Estimate {", false),
    ] {
        let code = non_test_code(line);
        assert_eq!(!comparisons("x.rs", &code).is_empty(), caught, "{line}");
    }
    // A comparison inside the inline test module is not looked at; one
    // after a `#[cfg(test)]` item that is not the module is.
    let with_tests = "fn a() {}\n#[cfg(test)]\npub(crate) mod tests {\n fn t() { e.message.contains(\"x\"); }\n}";
    assert!(comparisons("x.rs", &non_test_code(with_tests)).is_empty());
    let after_item = "#[cfg(test)]\nmod tests;\nfn b() { e.message.contains(\"x\"); }";
    assert_eq!(comparisons("x.rs", &non_test_code(after_item)).len(), 1);
    // tmux's own words, where they are read.
    let tmux = r#"said.contains("no server running")"#;
    assert!(comparisons("shared/pipeline/src/targets/tmux.rs", tmux).is_empty());
    assert_eq!(
        comparisons("shared/pipeline/src/targets/x.rs", tmux).len(),
        1
    );
}
