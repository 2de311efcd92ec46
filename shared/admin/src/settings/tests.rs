//! Unit tests of the settings edits.

use std::path::Path;

use super::hooks::{Misshapen, find_ours, hook_entries, wanted};
use super::json::Json;
use super::shell::{program_of, sh_quote};
use super::statusline::{embed_hint, merge_statusline, unmerge_statusline, wanted_statusline};

#[test]
fn the_statusline_is_set_only_where_none_is_and_removed_only_when_ours() {
    let ours = wanted_statusline(Path::new("/opt/k bin"), Some(Path::new("/c.toml"))).unwrap();
    assert_eq!(
        ours.get("command").and_then(Json::as_str),
        Some("'/opt/k bin/ktr-statusline' --config /c.toml")
    );
    let (set, foreign) = merge_statusline("{}\n", "s", &ours).unwrap();
    assert_eq!(foreign, None);
    assert!(set.contains("ktr-statusline"), "{set}");
    assert_eq!(
        merge_statusline(&set, "s", &ours).unwrap(),
        (set.clone(), None)
    );
    assert_eq!(unmerge_statusline(&set, "s").unwrap(), "{}\n");
    let theirs = "{\"statusLine\": {\"type\": \"command\", \"command\": \"my-line\"}}\n";
    let (kept, foreign) = merge_statusline(theirs, "s", &ours).unwrap();
    assert_eq!(
        (kept.as_str(), foreign.as_deref()),
        (theirs, Some("my-line"))
    );
    assert_eq!(unmerge_statusline(theirs, "s").unwrap(), theirs);
    let hint = embed_hint("my-line", Path::new("/b"), None);
    assert!(hint.contains("/b/ktr-statusline --segment"), "{hint}");
}

#[test]
fn program_of_unquotes_the_first_word() {
    assert_eq!(program_of("/a/ktr-stop --config x"), "/a/ktr-stop");
    assert_eq!(
        program_of("'/my dir/ktr-ack' --config 'c'"),
        "/my dir/ktr-ack"
    );
    assert_eq!(program_of("\"/q\\\"d/ktr-ack\""), "/q\"d/ktr-ack");
    assert_eq!(program_of("/my\\ dir/x y"), "/my dir/x");
}

#[test]
fn sh_quote_round_trips_through_program_of() {
    for p in [
        "/usr/local/bin/ktr-stop",
        "/home/a b/it's/ktr-stop",
        "/x/中文/ktr-ack",
    ] {
        assert_eq!(program_of(&format!("{} --config y", sh_quote(p))), p);
    }
}

#[test]
fn pretty_matches_two_space_json() {
    let text =
        "{\n  \"a\": [],\n  \"b\": {},\n  \"z\": [\n    1,\n    \"中\"\n  ],\n  \"c\": null\n}";
    assert_eq!(Json::parse(text).unwrap().pretty(), text);
}

#[test]
pub(super) fn hook_entries_walk_in_order_and_mark_misshapen_parts() {
    let doc = Json::parse(
        r#"{"hooks": {
            "Stop": [{"hooks": [{"type": "command", "command": "/b/ktr-stop"}]}, {"matcher": "x"}],
            "Odd": "not a list",
            "SessionStart": [{"matcher": "resume", "hooks": [
                {"type": "command", "command": "/other"},
                {"type": "command", "command": "'/b b/ktr-ack' --config c"}]}]
        }}"#,
    )
    .unwrap();
    let Some(Json::Object(events)) = doc.get("hooks") else {
        panic!("no hooks");
    };
    let walked: Vec<_> = hook_entries(events)
        .map(|e| e.map(|e| (e.event, e.matcher, e.hook.get("command").unwrap().clone())))
        .collect();
    assert_eq!(walked.len(), 5);
    assert_eq!(
        walked[0],
        Ok(("Stop", None, Json::String("/b/ktr-stop".into())))
    );
    assert_eq!(walked[1], Err(Misshapen::GroupWithoutHooks));
    assert_eq!(walked[2], Err(Misshapen::EventNotAList));
    assert_eq!(
        walked[3],
        Ok((
            "SessionStart",
            Some("resume"),
            Json::String("/other".into())
        ))
    );
    // The lenient reader skips what is misshapen and finds ours.
    let found = find_ours(&doc.pretty()).unwrap();
    assert_eq!(
        found
            .iter()
            .map(|f| (f.event.as_str(), f.program, f.path.as_str()))
            .collect::<Vec<_>>(),
        [
            ("Stop", "ktr-stop", "/b/ktr-stop"),
            ("SessionStart", "ktr-ack", "/b b/ktr-ack")
        ]
    );
}

#[test]
fn the_fragment_names_all_four_hooks() {
    let w = wanted(Path::new("/opt/k bin"), Some(Path::new("/c.toml"))).unwrap();
    assert_eq!(w.len(), 4);
    assert_eq!(w[3].event, "PreCompact");
    assert_eq!(w[0].event, "Stop");
    assert_eq!(w[0].matcher, None);
    assert_eq!(
        w[0].hook.get("command").unwrap(),
        &Json::String("'/opt/k bin/ktr-stop' --config /c.toml".into())
    );
    assert_eq!(w[0].hook.get("timeout").unwrap(), &Json::Number(10.into()));
    assert_eq!(w[1].event, "UserPromptSubmit");
    assert_eq!(w[1].matcher, None);
    assert_eq!(w[1].program, "ktr-prompt");
    assert_eq!(w[2].event, "SessionStart");
    assert_eq!(w[2].matcher.as_deref(), Some("resume"));
    assert_eq!(w[2].program, "ktr-ack");
}
