//! Recall gives the right answer where it used to give a wrong one: a
//! record with a lone surrogate is searched like any other, a session
//! whose transcript is a FIFO is named as such (and the FIFO never
//! opened), and a `live:` hit id found before Claude Code deleted the
//! transcript is read from the backup that holds the same bytes.

use std::fs;

use crate::recall::{B, D, hits, lineage, recall};
use crate::support::{Sandbox, mkfifo};

#[test]
fn a_record_with_a_lone_surrogate_is_searched_and_read() {
    let sb = Sandbox::new();
    // As JavaScript writes half an emoji; Claude Code loads this line.
    let line = r#"{"type":"user","message":{"role":"user","content":"lone \ud800 SURR2"},"timestamp":"2026-01-01T00:00:00Z"}"#;
    sb.add_transcript(D, format!("{line}\n").as_bytes());
    let v = recall(&sb, &["SURR2"]);
    assert_eq!(hits(&v).len(), 1, "{v}");
    let hit = &hits(&v)[0];
    assert_eq!(hit["snippet"], "lone \u{fffd} ⟦SURR2⟧", "{hit}");
    assert_eq!(v["complete"], true);
    let out = sb.run("recall", None, &["--get", hit["id"].as_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains("── user\nlone \u{fffd} SURR2"),
        "{}",
        out.stdout
    );
}

#[test]
fn a_current_session_whose_transcript_is_a_fifo_is_named_as_one_and_never_opened() {
    let sb = Sandbox::new();
    let fifo = sb.project.join(format!("{D}.jsonl"));
    mkfifo(&fifo);
    let (out, trace) = sb.ktr_traced(
        "open,openat,openat2",
        "recall",
        &["--json", "--current", D, "anything"],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["lost"][0]["session"], D, "{v}");
    let why = v["lost"][0]["why"].as_str().unwrap();
    assert!(
        why.contains("is a FIFO") && why.contains("reads only regular files"),
        "{why}"
    );
    assert!(
        !trace.lines().any(|l| l.contains(&format!("{D}.jsonl"))),
        "the FIFO was opened:\n{trace}"
    );
}

#[test]
fn a_live_hit_id_from_before_the_cleanup_is_read_from_the_backup() {
    let (sb, _) = lineage();
    let v = recall(&sb, &["output-", "--session", "bbbb"]);
    let id = hits(&v)[0]["id"].as_str().unwrap().to_string();
    assert!(id.starts_with(&format!("live:{B}@")), "{id}");
    let before = sb.run("recall", None, &["--get", &id]);
    assert_eq!(before.code, Some(0), "{}", before.stderr);
    // Claude Code's cleanup deletes B's transcript; ktr's backup holds it.
    fs::remove_file(sb.project.join(format!("{B}.jsonl"))).unwrap();
    let after = sb.run("recall", None, &["--get", &id]);
    assert_eq!(after.code, Some(0), "{}", after.stderr);
    assert_eq!(after.stdout, before.stdout);
    assert!(after.stdout.contains("OUTPUT-b"), "{}", after.stdout);
}
