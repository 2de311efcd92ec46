//! What the advice, the statusline and `ktr status` say, and for which session.

use super::*;
use crate::stop_hook::message;
use crate::support::{Sandbox, example};
use std::fs;

/// The advice says what will happen: with the
/// standing approval ktr will rebuild by itself (nothing to ask for);
/// where the target does not run the session a rebuild could never switch
/// it (nothing offered), and the guard's refusal is one short sentence
/// whose details `ktr status` shows.
#[test]
fn the_advice_says_what_will_happen() {
    let mut s = Session::new("on_auto_compaction = \"rebuild\"");
    s.turn("72", 720_000);
    let line = message(&s.stop("72"));
    assert!(
        line.starts_with(
            "ktr: ≈ 247k tokens until Claude Code compacts (720k of 967k); ktr will rebuild instead (≈ "
        ) && line.ends_with("k)")
            && !line.contains("REBUILD"),
        "{line}"
    );
    // Without the approval: the offer.
    s.sandbox.write_config(&format!(
        "activation = \"pointer\"\nresume_pointer_path = {:?}",
        s.sandbox.root().join("pointer")
    ));
    s.turn("81", 810_000);
    assert!(
        message(&s.stop("81")).ends_with("— say REBUILD to ask for it"),
        "{}",
        message(&s.stop("81"))
    );

    // The target (a pointer) names another session.
    let mut s = Session::targeting_another();
    s.turn("72", 720_000);
    assert_eq!(
        message(&s.stop("72")),
        "ktr: ≈ 247k tokens until Claude Code compacts (720k of 967k); this session is not the one ktr switches (see ktr status)"
    );
    s.turn("FULL", 999_000);
    let out = s.precompact("auto");
    assert!(out.get("decision").is_none(), "{out}");
    assert_eq!(out["systemMessage"], NOT_SWITCHED, "{out}");
    let (v, human) = status(&s);
    let found = &v["not_switched"];
    assert_eq!(found["session_id"], SESSION, "{v:#}");
    let why = found["why"].as_str().unwrap();
    assert!(
        why.contains("names session someone-else, not session"),
        "{v:#}"
    );
    assert!(
        human.contains(&format!("not switched      session {SESSION} (")) && human.contains(why),
        "{human}"
    );
}

/// The statusline names the window's size, and
/// shows the rebuild figure only when a rebuild frees something (right
/// after one, it would not: `ktr 1% · rebuild→2%` said nothing useful).
#[test]
fn the_statusline_names_the_size_and_a_rebuild_only_when_it_frees_something() {
    let mut s = Session::new("");
    s.turn("78", 780_000);
    // (The example conversation's 6 turns before its compaction are only
    // in Claude Code's summary.)
    let full = s.statusline(&["--segment"], Some(780_000), &[]);
    assert!(
        full.starts_with("ktr 78% of 1M · 6 turns only in summary · rebuild→"),
        "{full}"
    );
    // Right after a rebuild: the window holds less than a rebuild would
    // start at (the overhead and the carried conversation). (In this one
    // transcript the fall from 780k is also context dropped without
    // compacting.)
    s.turn("FRESH", 1_000);
    assert_eq!(
        s.statusline(&["--segment"], Some(1_000), &[]),
        "ktr 0% of 1M · 6 turns only in summary · context cleared"
    );
    s.turn("MORE", 20_000);
    assert_eq!(
        s.statusline(&["--segment"], Some(20_000), &[]),
        "ktr 2% of 1M · 6 turns only in summary · context cleared · rebuild→0%"
    );
}

/// After a rollback two transcripts can have the
/// same mtime; the newest-mtime default then picks by name. `ktr dirty`
/// and `ktr status` take the session the Claude Code that runs them
/// serves (its binding, written by `ktr-ack`), else the newest.
#[test]
fn dirty_and_status_default_to_the_session_the_running_claude_serves() {
    let s = Session::new("");
    // SESSION ("1111…") and a later-named one, with the same mtime.
    let other = "99999999-2222-4333-8444-555555555555";
    let other_path = s
        .sandbox
        .add_transcript(other, &fs::read(example()).unwrap());
    let mtime = fs::metadata(&s.transcript).unwrap().modified().unwrap();
    fs::File::options()
        .write(true)
        .open(&other_path)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let chosen = |s: &Session| {
        let out = s.sandbox.run("dirty", None, &[]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let line = out
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("transcript "))
            .unwrap_or_default()
            .to_string();
        let (v, _) = status(s);
        (
            line,
            v["window"]["session_id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    };
    let (dirty, status_session) = chosen(&s);
    assert!(dirty.ends_with(&format!("{other}.jsonl")), "{dirty}");
    assert_eq!(status_session, other);
    // This test process runs `ktr` as Claude Code runs its hooks: bound to
    // SESSION, as ktr-ack records it after a rollback's resume.
    let me = ktr_pipeline::process::ProcessId::of(std::process::id()).unwrap();
    let bound = ktr_pipeline::binding::Binding {
        claude: me,
        session_id: SESSION.into(),
        at: "2026-12-04T23:00:00.000Z".into(),
    };
    let dir = ktr_pipeline::binding::dir(&s.sandbox.state);
    fs::create_dir_all(&dir).unwrap();
    fs::write(
        dir.join(format!("{}.json", me.pid)),
        serde_json::to_vec(&bound).unwrap(),
    )
    .unwrap();
    let (dirty, status_session) = chosen(&s);
    assert!(dirty.ends_with(&format!("{SESSION}.jsonl")), "{dirty}");
    assert_eq!(status_session, SESSION);
}

/// `ktr status` before any operation exists: an object
/// (never `null`) with the session's window, and the readable form says
/// it too.
#[test]
fn status_shows_the_window_before_any_operation() {
    let mut s = Session::new("");
    s.turn("61", 612_000);
    let (v, human) = status(&s);
    assert!(v.is_object(), "{v}");
    assert!(v["id"].is_null(), "{v:#}");
    let w = &v["window"];
    assert_eq!(w["session_id"], SESSION, "{v:#}");
    assert_eq!(w["used_tokens"], 612_000, "{v:#}");
    assert_eq!(w["compaction_point_tokens"], 967_000, "{v:#}");
    assert!(
        human.starts_with("no operations yet")
            && human.contains("window            612k of 1M (session 11111111:"),
        "{human}"
    );
}

/// Where the target does not run the session, a rebuild could never switch
/// it: after a compaction nothing is offered, `ktr recall` is named.
#[test]
fn after_a_compaction_in_a_session_ktr_does_not_switch_recall_is_named() {
    let mut s = Session::with_config(Sandbox::new(), "");
    s.turn("ONE", 100_000);
    s.compacted("Summary.");
    s.turn("AFTER", 30_000);
    let line = message(&s.stop("AFTER"));
    assert!(
        line.contains(" turns from before Claude Code's last compaction are only in its summary now; this session is not the one ktr switches (see ktr status), but `ktr recall` still finds them word for word")
            && !line.contains("REBUILD"),
        "{line}"
    );
    assert_eq!(s.stop("AFTER"), QUIET, "once per boundary");
}
