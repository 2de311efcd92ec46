//! The advice bands, measured against Claude Code's compaction point and setting.

use super::*;
use crate::stop_hook::message;
use ktr_base::ids::SessionId;
use ktr_pipeline::operation::Status;
use std::fs;
use std::io::Write;
use std::time::Duration;

/// The advice is about the reply that just ended,
/// provably (its prompt's `promptId`), never an earlier one whose text
/// looks the same. Each Stop hook starts before its turn is in the file
/// (as Claude Code 2.1.328 does), every reply says "Noted.", and the usage
/// jumps, into a band and across several at once.
#[test]
fn every_advice_line_names_the_usage_of_the_reply_that_just_ended() {
    let mut s = Session::new("");
    // (usage in thousands of a 1M window, the band line it must bring)
    let turns: [(u64, Option<&str>); 10] = [
        (120, None),
        (400, None),
        (710, Some("(710k of 967k)")),
        (715, None),
        // A fall by more than half with no boundary: said.
        (
            120,
            Some("dropped context without compacting (the window fell from 715k to 120k tokens"),
        ),
        (
            990,
            Some("past the point where Claude Code compacts (990k of 967k)"),
        ),
        (990, None),
        (
            300,
            Some("dropped context without compacting (the window fell from 990k to 300k tokens"),
        ),
        (810, Some("(810k of 967k)")),
        (820, None),
    ];
    for (i, (thousands, expect)) in turns.into_iter().enumerate() {
        let tag = format!("T{i}");
        let lines = s.turn_said(&tag, thousands * 1000, "Noted.");
        let input = serde_json::json!({
            "session_id": SESSION, "transcript_path": s.transcript,
            "hook_event_name": "Stop", "stop_hook_active": false,
            "prompt_id": format!("prompt-{tag}"),
            "last_assistant_message": "Noted.",
        })
        .to_string();
        let out = std::thread::scope(|scope| {
            let hook = scope.spawn(|| s.sandbox.hook(crate::support::exe("ktr-stop"), &input));
            // The turn reaches the file while the hook already runs.
            std::thread::sleep(Duration::from_millis(300));
            fs::OpenOptions::new()
                .append(true)
                .open(&s.transcript)
                .unwrap()
                .write_all(lines.as_bytes())
                .unwrap();
            hook.join().unwrap()
        });
        assert_eq!(out.1, 0);
        match expect {
            Some(text) => {
                let line = message(&out.0);
                assert!(line.contains(text), "turn {i} ({thousands}k): {line}");
            }
            None => assert_eq!(out.0, QUIET, "turn {i} ({thousands}k)"),
        }
    }
}

/// On a 200k window Claude Code compacts at ≈ 167k, so
/// the bands are measured against that point and the last one leaves
/// room for one long reply; a model ktr does not know is taken as 200k,
/// and the line says so.
#[test]
fn the_bands_are_measured_against_the_compaction_point_of_a_200k_window() {
    let mut s = Session::new("");
    // claude-opus-5-5 (the turns' model) has 1M; this session says 200k.
    s.sandbox
        .write_config(&format!("{}\ncontext_window_tokens = 200000", {
            let pointer = s.sandbox.root().join("pointer");
            format!("activation = \"pointer\"\nresume_pointer_path = {pointer:?}")
        }));
    s.turn("A", 100_000);
    assert_eq!(s.stop("A"), QUIET, "60 % of 167k");
    s.turn("B", 120_000);
    let line = message(&s.stop("B"));
    assert!(
        line.starts_with("ktr: ≈ 47k tokens until Claude Code compacts (120k of 167k)"),
        "{line}"
    );
    s.turn("C", 140_000);
    assert!(message(&s.stop("C")).contains("(140k of 167k)"), "80 band");
    // The last band: 88 % of 167k, still 20k before the point.
    s.turn("D", 146_000);
    assert_eq!(s.stop("D"), QUIET, "87 %: still the 80 band");
    s.turn("E", 147_000);
    assert!(message(&s.stop("E")).contains("≈ 20k tokens until Claude Code compacts"));
}

/// The bands, the advice line, the statusline and
/// `ktr status` follow the setting Claude Code uses — the hooks see its
/// environment (`CLAUDE_AUTOCOMPACT_PCT_OVERRIDE`) and its settings
/// (`autoCompactEnabled: false`), and each names it.
#[test]
fn the_advice_and_status_follow_claude_codes_compaction_setting() {
    const PCT: (&str, &str) = ("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE", "60");
    let mut s = Session::new("");
    let stop = |s: &Session, tag: &str, env: &[(&str, &str)]| {
        let input = serde_json::json!({
            "session_id": SESSION, "transcript_path": s.transcript,
            "hook_event_name": "Stop", "stop_hook_active": false,
            "last_assistant_message": format!("REPLY-{tag}"),
        });
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        let (out, code) =
            s.sandbox
                .hook_env(crate::support::exe("ktr-stop"), &input.to_string(), &env);
        assert_eq!(code, 0);
        out
    };
    s.turn("A", 500_000);
    assert_eq!(stop(&s, "A", &[]), QUIET, "52 % of the default 967k");
    // 60 % of (1M − 20k) = 588k: 500k is 85 % of it.
    let line = message(&stop(&s, "A", &[PCT]));
    assert!(
        line.starts_with(
            "ktr: ≈ 88k tokens until Claude Code compacts (500k of 588k, CLAUDE_AUTOCOMPACT_PCT_OVERRIDE=60); "
        ),
        "{line}"
    );
    assert!(
        s.statusline(&[], Some(500_000), &[PCT])
            .contains("ktr 50% of 1M · compacts at 588k"),
        "{}",
        s.statusline(&[], Some(500_000), &[PCT])
    );
    // Auto-compaction off (settings.json): the hard limit, whatever the
    // override says.
    let settings = s.sandbox.home.join(".claude/settings.json");
    fs::create_dir_all(settings.parent().unwrap()).unwrap();
    fs::write(&settings, r#"{"autoCompactEnabled": false}"#).unwrap();
    assert!(
        s.statusline(&[], Some(500_000), &[PCT])
            .contains("ktr 50% of 1M · no auto-compact")
    );
    s.turn("B", 960_000);
    let line = message(&stop(&s, "B", &[PCT]));
    assert!(
        line.starts_with(&format!(
            "ktr: ≈ 17k tokens until the window's hard limit (960k of 977k; auto-compaction is off: autoCompactEnabled false in {}); ",
            settings.display()
        )),
        "{line}"
    );
    // ktr status names the point and its source.
    let op = s
        .sandbox
        .store()
        .request("x", "REBUILD", Some(&SessionId::parse(SESSION).unwrap()))
        .unwrap();
    let transcript = s.transcript.clone();
    s.sandbox.walk(&op.id, &[Status::Scheduled], |op| {
        op.transcript_path = Some(transcript);
    });
    let status = |env: &[(&str, &str)]| {
        let mut cmd = s.sandbox.command(crate::support::exe("ktr"));
        cmd.args(["status", "--json"]).envs(env.iter().copied());
        let out = cmd.stdin(std::process::Stdio::null()).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["window"].clone()
    };
    fs::write(&settings, "{}").unwrap();
    let w = status(&[]);
    assert_eq!(w["compaction_point_tokens"], 967_000, "{w:#}");
    let w = status(&[PCT]);
    assert_eq!(w["compaction_point_tokens"], 588_000, "{w:#}");
    assert!(
        w["compaction_point_source"]
            .as_str()
            .unwrap()
            .starts_with("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE=60"),
        "{w:#}"
    );
    fs::write(&settings, r#"{"autoCompactEnabled": false}"#).unwrap();
    let w = status(&[PCT]);
    assert_eq!(w["compaction_point_tokens"], 977_000, "{w:#}");
    let source = w["compaction_point_source"].as_str().unwrap();
    assert!(
        source.starts_with("autoCompactEnabled false in ")
            && source.contains("no auto-compaction; the window's hard limit"),
        "{w:#}"
    );
}

/// After a compaction Claude Code 2.1.328 reports a
/// zeroed `current_usage` until the next reply (measured with the real
/// CLI: every field 0); the statusline then shows what `ktr dirty` shows,
/// not `ktr 0%`: the transcript's last usage, or after a compaction
/// boundary the estimate (marked `≈`).
#[test]
fn a_zeroed_report_reads_the_transcript_like_dirty() {
    let mut s = Session::new("");
    s.turn("13", 130_000);
    let dirty = |s: &Session| s.json("dirty");
    let v = dirty(&s);
    assert_eq!(v["window"]["used_tokens"], 130_000, "{v}");
    let segment = s.statusline(&["--segment"], Some(0), &[]);
    assert!(segment.starts_with("ktr 13% of 1M · "), "{segment}");
    // A real report is still taken as it is.
    let segment = s.statusline(&["--segment"], Some(250_000), &[]);
    assert!(segment.starts_with("ktr 25% of 1M · "), "{segment}");
    // Claude Code compacts: a boundary and the summary, no reply yet.
    s.compacted(&"the summary of everything so far. ".repeat(6000));
    let v = dirty(&s);
    assert_eq!(v["window"]["used_source"], "estimate", "{v}");
    let percent = v["window"]["used_percent"].as_f64().unwrap();
    let segment = s.statusline(&["--segment"], Some(0), &[]);
    assert!(
        segment.starts_with(&format!("ktr ≈{percent:.0}% of 1M · ")),
        "dirty says {percent} %: {segment}"
    );
    assert!(percent >= 1.0, "{v}");
}
