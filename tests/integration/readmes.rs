//! README.md and its Chinese copy, README.zh-CN.md, are one document in two
//! languages: the same headings (count and level, in order) and the same
//! tables (rows and columns; the first column and every cell that is only
//! code, word for word). A section or row added to one and not the other,
//! or a key renamed in one, fails here.

use crate::support::repo_file;

/// One Markdown table: its rows (header and separator included), each
/// row's cells trimmed, with `\|` kept inside its cell.
type Table = Vec<Vec<String>>;

/// The lines outside fenced code blocks.
fn prose(doc: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push(line);
        }
    }
    out
}

/// The level (number of `#`) of every heading, in order.
fn heading_levels(doc: &str) -> Vec<usize> {
    prose(doc)
        .into_iter()
        .filter_map(|line| {
            let level = line.bytes().take_while(|&b| b == b'#').count();
            (level > 0 && line[level..].starts_with(' ')).then_some(level)
        })
        .collect()
}

fn cells(row: &str) -> Vec<String> {
    let row = row.trim().trim_start_matches('|').trim_end_matches('|');
    row.replace("\\|", "\u{0}")
        .split('|')
        .map(|c| c.trim().replace('\u{0}', "\\|"))
        .collect()
}

/// Every table, in order.
fn tables(doc: &str) -> Vec<Table> {
    let mut out: Vec<Table> = Vec::new();
    let mut open = false;
    for line in prose(doc) {
        if line.starts_with('|') {
            if !open {
                out.push(Vec::new());
                open = true;
            }
            out.last_mut().unwrap().push(cells(line));
        } else {
            open = false;
        }
    }
    out
}

/// A cell that is nothing but inline code (one or more spans, separated
/// by commas or spaces): the same in both languages.
fn only_code(cell: &str) -> bool {
    let mut rest = cell.trim();
    if !rest.starts_with('`') {
        return false;
    }
    while !rest.is_empty() {
        let Some(body) = rest.strip_prefix('`') else {
            return false;
        };
        let Some(end) = body.find('`') else {
            return false;
        };
        rest = body[end + 1..].trim_start_matches([',', ' ']);
    }
    true
}

/// The inline code spans of a cell, in order.
fn code_spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// What differs between the two documents' structure, one line each.
fn drift(en: &str, zh: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let (he, hz) = (heading_levels(en), heading_levels(zh));
    if he != hz {
        problems.push(format!("headings differ: levels {he:?} vs {hz:?}"));
    }
    let (te, tz) = (tables(en), tables(zh));
    if te.len() != tz.len() {
        problems.push(format!("{} tables vs {}", te.len(), tz.len()));
    }
    for (n, (a, b)) in te.iter().zip(&tz).enumerate() {
        if a.len() != b.len() {
            problems.push(format!("table {n}: {} rows vs {}", a.len(), b.len()));
        }
        // Row 0 is the header (translated), row 1 the separator.
        for (r, (ra, rb)) in a.iter().zip(b).enumerate() {
            if ra.len() != rb.len() {
                problems.push(format!(
                    "table {n} row {r}: {} columns vs {}",
                    ra.len(),
                    rb.len()
                ));
                continue;
            }
            if r < 2 {
                continue;
            }
            if code_spans(&ra[0]) != code_spans(&rb[0]) {
                problems.push(format!("table {n} row {r}: {} vs {}", ra[0], rb[0]));
            }
            for (c, (ca, cb)) in ra.iter().zip(rb).enumerate().skip(1) {
                if only_code(ca) && ca != cb {
                    problems.push(format!("table {n} row {r} column {c}: {ca} vs {cb}"));
                }
            }
        }
    }
    problems
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_file(path)).unwrap()
}

#[test]
fn the_chinese_readme_has_the_english_ones_headings_and_tables() {
    let (en, zh) = (read("README.md"), read("README.zh-CN.md"));
    assert!(heading_levels(&en).len() >= 10, "{:?}", heading_levels(&en));
    assert!(tables(&en).len() >= 5);
    let problems = drift(&en, &zh);
    assert!(
        problems.is_empty(),
        "README.zh-CN.md is out of step with README.md:\n{}",
        problems.join("\n")
    );
}

#[test]
fn a_drifted_copy_is_caught() {
    let (en, zh) = (read("README.md"), read("README.zh-CN.md"));
    // A section only one language has.
    let extra = zh.replacen("\n## 配置\n", "\n## 新的一节\n\n正文。\n\n## 配置\n", 1);
    assert_ne!(extra, zh);
    assert!(!drift(&en, &extra).is_empty());
    // A heading one level off.
    let level = zh.replacen("\n### 插件\n", "\n## 插件\n", 1);
    assert_ne!(level, zh);
    assert!(!drift(&en, &level).is_empty());
    // A config row missing.
    let row = "| `history` | `chain` | `chain` \\| `file` |\n";
    assert!(zh.contains(row));
    assert!(!drift(&en, &zh.replacen(row, "", 1)).is_empty());
    // A key renamed in one copy.
    let renamed = zh.replacen("| `resume_env` |", "| `resume_environment` |", 1);
    assert_ne!(renamed, zh);
    assert!(!drift(&en, &renamed).is_empty());
    // A code-only cell changed (a default).
    let default = zh.replacen(
        "| `activation` | `tmux` |",
        "| `activation` | `pointer` |",
        1,
    );
    assert_ne!(default, zh);
    assert!(!drift(&en, &default).is_empty());
    // A column dropped.
    let column = zh.replacen(
        "| `thread_rebuild_doctor` | — |",
        "| `thread_rebuild_doctor` |",
        1,
    );
    assert_ne!(column, zh);
    assert!(!drift(&en, &column).is_empty());
}
