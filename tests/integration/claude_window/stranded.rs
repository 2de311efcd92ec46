//! A session the guard must never strand: in a second window, without the tmux server.

use super::*;
use crate::support::claude::{PANE, Tmux};
use crate::support::fake_api::last_user_text;
use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

/// A stranded session: Claude Code runs in another tmux
/// window than ktr's target (a second `claude`), or ktr's hooks look at a
/// tmux server that is not there. With the standing approval
/// `on_auto_compaction = "rebuild"`, the guard must not block (the
/// rebuild could never switch this session) — Claude Code compacts, the
/// next Stop says why — and it never blocks the next compaction either.
fn stranded(s: &Session, pane: &str, id: &str, why: &str) {
    let say = |line: &str, marker: &str| {
        s.tmux.wait_idle_of(pane, TURN);
        s.tmux.type_line_to(pane, line);
        s.tmux
            .wait_screen_of(pane, marker, TURN, |sc| sc.contains(marker));
        s.tmux.wait_idle_of(pane, TURN);
    };
    let transcript = |id: &str| s.env.transcript(id);
    let boundaries = |id: &str| {
        fs::read_to_string(transcript(id))
            .unwrap_or_default()
            .matches("\"subtype\":\"compact_boundary\"")
            .count()
    };
    say("SAY-ONE hello", "REPLY-ONE");
    for (round, (fill, next)) in [("SAY-FULL", "SAY-AFTER"), ("SAY-REFILL", "SAY-AGAIN")]
        .into_iter()
        .enumerate()
    {
        s.api.set_usage(Some(999_000));
        say(
            &format!("{fill} almost full"),
            &fill.replace("SAY", "REPLY"),
        );
        s.api.set_usage(None);
        say(&format!("{next} next"), &next.replace("SAY", "REPLY"));
        let deadline = Instant::now() + TURN;
        while boundaries(id) < round + 1 {
            assert!(
                Instant::now() < deadline,
                "round {round}: Claude Code did not compact ({why}):\n{}\ntranscript {id} tail: {:?}\nproject folder: {:?}\nrequests: {:?}",
                s.tmux.screen_of(pane),
                record_kinds(&transcript(id)),
                fs::read_dir(&s.env.sandbox.project)
                    .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
                    .unwrap_or_default(),
                s.api
                    .log()
                    .iter()
                    .map(|l| format!(
                        "{} {}",
                        l.path,
                        last_user_text(l.messages())
                            .chars()
                            .take(60)
                            .collect::<String>()
                    ))
                    .collect::<Vec<_>>()
            );
            thread::sleep(Duration::from_millis(200));
        }
        let screen = s.tmux.screen_of(pane);
        assert!(
            !screen.contains("Context limit reached"),
            "round {round}: blocked ({why}):\n{screen}"
        );
        // The reason reaches the person with the next Stop, one short
        // sentence (Claude Code records the Stop hook's line in the
        // transcript); the details are in `ktr status`.
        let reasons = || {
            stop_lines(&transcript(id))
                .into_iter()
                .filter(|l| {
                    l == "ktr: this session is not the one ktr switches (see ktr status); Claude Code compacted it"
                })
                .count()
        };
        assert!(
            crate::support::wait_for(TURN, || reasons() > round),
            "round {round}: no reason among {:#?}",
            stop_lines(&transcript(id))
        );
        let out = s.env.sandbox.run("status", None, &["--json"]);
        let v: serde_json::Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("ktr status --json: {e}\n{}{}", out.stdout, out.stderr));
        let found = &v["not_switched"];
        assert!(
            found["session_id"] == id && found["why"].as_str().unwrap_or("").contains(why),
            "round {round}: ktr status does not name {why:?}: {v:#}"
        );
    }
    assert!(
        s.store.latest().unwrap().is_none(),
        "the guard requested a rebuild it could never switch"
    );
}

/// Item 1 with a second `claude` in another window of the same server.
pub(super) fn stranded_in_a_second_window(bin: &Path) {
    let s = Session::start(bin, "on_auto_compaction = \"rebuild\"");
    let second = uuid::Uuid::new_v4().to_string();
    let work = s.env.sandbox.work.display().to_string();
    let bin = s.env.bin.display().to_string();
    s.tmux.run(&[
        "new-window",
        "-t",
        "cc",
        "-c",
        &work,
        "--",
        &bin,
        "--session-id",
        &second,
    ]);
    stranded(
        &s,
        "cc:1.0",
        &second,
        &format!(
            "runs pid {} (session {}…), not the Claude of session {second}",
            s.tmux.pane_pid(),
            &s.id[..8]
        ),
    );
}

/// Item 1 with ktr's hooks pointed at a tmux server that does not run.
pub(super) fn stranded_without_the_tmux_server(bin: &Path) {
    let missing = Tmux::unique_socket();
    let s = Session::start_with(bin, "on_auto_compaction = \"rebuild\"", &[], Some(&missing));
    // tmux: "error connecting to /tmp/tmux-<uid>/<socket> (No such file or directory)".
    stranded(&s, PANE, &s.id, &format!("{missing} ("));
}
