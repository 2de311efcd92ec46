//! The advice after every reply, read from what the Stop hooks said.

use super::stranded::{stranded_in_a_second_window, stranded_without_the_tmux_server};
use super::*;
use crate::support::claude_bin;
use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

/// Items 2 and 3: `turns` turns in a row, each answered with the same
/// short reply and reporting a random usage (up, down, the same), on the
/// window `args` selects (`point`: where Claude Code compacts it). Every
/// advice line must name the usage of the reply that just ended, against
/// the compaction point, and come exactly when that reply entered a
/// higher band than the last one shown.
fn advice_follows_every_reply(bin: &Path, args: &[&str], point: u64, turns: usize) {
    let s = Session::start_with(bin, "advise_at_percent = 70", args, None);
    s.say("SAY-ONE hello", "REPLY-ONE");
    let seed = std::env::var("KTR_WINDOW_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| uuid::Uuid::new_v4().as_u128() as u64);
    let mut rng = seed;
    let mut next = || {
        // xorshift64*: reproducible from the printed seed.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let bands = window_bands(point);
    let mut shown = 0u8;
    let mut expected = Vec::new();
    let mut used = Vec::new();
    let mut last = 0u64;
    for n in 0..turns {
        // Mostly inside the advice bands, sometimes far below, sometimes
        // the same reading again; never past the compaction point.
        let u = match next() % 8 {
            0 => point * (10 + next() % 50) / 100,
            1 if last > 0 => last,
            _ => point * (690 + next() % 305) / 1000,
        };
        last = u;
        used.push(u);
        let percent = 100.0 * u as f64 / point as f64;
        let level = bands
            .iter()
            .copied()
            .filter(|b| f64::from(*b) <= percent)
            .max()
            .unwrap_or(0);
        if level > shown {
            expected.push((n, short(u)));
            shown = level;
        } else {
            shown = level.min(shown);
        }
        s.api.set_usage(Some(u));
        s.tmux.wait_idle(TURN);
        s.tmux.type_line(&format!("TURN-{n:02} go"));
        s.api
            .wait_turn(&format!("TURN-{n:02}"), TURN)
            .unwrap_or_else(|| panic!("turn {n} never reached the model (seed {seed})"));
        s.tmux.wait_idle(TURN);
    }
    // Claude Code records each Stop hook's line in the transcript.
    let deadline = Instant::now() + TURN;
    let seen = loop {
        let seen = advice_lines(&s.transcript());
        if seen.len() >= expected.len() || Instant::now() >= deadline {
            break seen;
        }
        thread::sleep(Duration::from_millis(200));
    };
    let got: Vec<(usize, String)> = seen
        .iter()
        .map(|(n, line)| {
            // The band text: the distance to, and the usage against, the
            // point where Claude Code compacts (not the window's size).
            let u = used[*n];
            let band = format!(
                "ktr: ≈ {} tokens until Claude Code compacts ({} of {})",
                short(point - u),
                short(u),
                short(point)
            );
            assert!(
                line.starts_with(&band),
                "seed {seed}: {line:?} is not {band:?}"
            );
            let named = line
                .split(" tokens until Claude Code compacts (")
                .nth(1)
                .or_else(|| line.split("compacts (").nth(1))
                .and_then(|r| r.split(" of ").next())
                .unwrap_or_default()
                .to_string();
            (*n, named)
        })
        .collect();
    eprintln!(
        "claude_window: {turns} turns on the {} window (seed {seed}): usage {:?}; advice {got:?}",
        short(point + 33_000),
        used.iter().map(|u| short(*u)).collect::<Vec<_>>()
    );
    assert!(
        !expected.is_empty(),
        "seed {seed}: no reading entered a band, the check proves nothing"
    );
    assert_eq!(
        got, expected,
        "seed {seed}: advice (turn, usage named) differs from the replies that just ended; lines: {seen:#?}"
    );
}

/// The advice bands on a window whose compaction point is `point`
/// (docs/SPEC.md: 70, 80, then 90 or lower where 90 % would leave less
/// than 20k before the point).
fn window_bands(point: u64) -> [u8; 3] {
    let last = (100 * (point - 20_000) / point).min(90) as u8;
    [70, 80.min(last), last]
}

/// Each `ktr:` line a Stop hook showed, with the `TURN-nn` it followed.
fn advice_lines(transcript: &Path) -> Vec<(usize, String)> {
    let text = fs::read_to_string(transcript).unwrap_or_default();
    let mut turn = None;
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["type"] == "user"
            && let Some(t) = v["message"]["content"].as_str()
            && let Some(n) = t.strip_prefix("TURN-")
        {
            turn = n.get(..2).and_then(|n| n.parse::<usize>().ok());
        }
        let a = &v["attachment"];
        if a["type"] == "hook_system_message"
            && let Some(c) = a["content"].as_str()
            && c.contains("until Claude Code compacts") | c.contains("where Claude Code compacts")
            && let Some(n) = turn
        {
            out.push((n, c.to_string()));
        }
    }
    out
}

#[test]
#[ignore = "needs the real Claude Code CLI (KTR_CLAUDE_BIN)"]
fn the_guard_and_the_advice_through_the_interactive_cli() {
    let bin = claude_bin();
    let scenarios: [fn(&Path); 4] = [
        stranded_in_a_second_window,
        stranded_without_the_tmux_server,
        // 1M window (the offline default model): compacts at 967k.
        |bin| advice_follows_every_reply(bin, &[], 967_000, 20),
        // 200k window: compacts at 167k.
        |bin| advice_follows_every_reply(bin, &["--model", "claude-sonnet-4-6"], 167_000, 8),
    ];
    side_by_side(&bin, &scenarios);
}
