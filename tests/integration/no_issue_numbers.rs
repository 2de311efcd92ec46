//! Code says the reason in words, never a tracker's number: a reader of
//! the source has no tracker. No comment, doc or test name in the code
//! cites one (the word, then a number, in any case or with `#` or `_`).

use std::path::{Path, PathBuf};

/// The folders and files of code (prose documents may name issues).
const CODE: &[&str] = &[
    "bins", "shared", "tests", "bench", "fuzz", "examples", ".ci", "install",
];

/// Source files: Rust, shell, Python, TOML.
fn code_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let Ok(entries) = std::fs::read_dir(path) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name != "target" && name != "artifacts" && name != "corpus" {
                code_files(&entry.path(), out);
            }
        }
    } else if path.file_name().is_some_and(|n| n == "install")
        || path
            .extension()
            .is_some_and(|e| ["rs", "sh", "py", "toml"].iter().any(|x| e == *x))
    {
        out.push(path.to_path_buf());
    }
}

/// Where `line` cites an issue: the word, then at most a space, `#` or
/// `_`, then a digit.
fn cites_an_issue(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    let word = ["iss", "ue"].concat();
    lower.match_indices(&word).any(|(at, w)| {
        let rest = lower[at + w.len()..].trim_start_matches([' ', '#', '_']);
        let gap = lower.len() - at - w.len() - rest.len();
        gap <= 2 && rest.starts_with(|c: char| c.is_ascii_digit())
    })
}

#[test]
fn no_code_cites_an_issue_number() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in CODE {
        code_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 100, "found only {} code files", files.len());
    let cites: Vec<String> = files
        .iter()
        .flat_map(|file| {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            let shown = file
                .strip_prefix(root)
                .unwrap_or(file)
                .display()
                .to_string();
            text.lines()
                .enumerate()
                .filter(|(_, line)| cites_an_issue(line))
                .map(|(n, line)| format!("{shown}:{}: {}", n + 1, line.trim()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        cites.is_empty(),
        "say the reason in words:\n{}",
        cites.join("\n")
    );
}

#[test]
fn what_counts_as_citing_an_issue() {
    let cite = |n: &str| format!("{} {n}", ["Iss", "ue"].concat());
    assert!(cites_an_issue(&format!("// {} item 2", cite("43,"))));
    assert!(cites_an_issue(&format!("// ({})", cite("#7"))));
    assert!(cites_an_issue(&format!(
        "fn {}_27_the_guard()",
        ["iss", "ue"].concat()
    )));
    assert!(!cites_an_issue("// a known issue with 2 workarounds"));
    assert!(!cites_an_issue("// issues 3"));
}
