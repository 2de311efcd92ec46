//! The key keeper of a tmux in-place switch (SPEC §12), on real tmux: a
//! pane whose program logs every byte it receives (raw tty), a person's
//! client attached to it from a second private server, and `ktr-keep`'s
//! popup holding that client's keyboard while "the switch" runs.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::{TmuxServer, wait_for};
use ktr_pipeline::targets::{Keeper, Target, Tmux};

/// The pane's program and the person's client.
struct Rig {
    _dir: tempfile::TempDir,
    received: PathBuf,
    keep_dir: PathBuf,
    pane: TmuxServer,
    person: TmuxServer,
}

impl Rig {
    fn start() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let received = dir.path().join("received");
        fs::write(&received, b"").unwrap();
        let logger = format!(
            "stty raw -echo; exec cat >> '{}'",
            received.to_string_lossy()
        );
        let pane = TmuxServer::start_on(
            &TmuxServer::unique_socket("ktr-keep"),
            None,
            &["-s", "cc", "-x", "100", "-y", "30", "sh", "-c", &logger],
        );
        let person = TmuxServer::start_on(
            &TmuxServer::unique_socket("ktr-keep-person"),
            None,
            &[
                "-s",
                "out",
                "-x",
                "110",
                "-y",
                "35",
                "--",
                "tmux",
                "-L",
                &pane.socket,
                "attach",
                "-t",
                "cc",
            ],
        );
        assert!(
            wait_for(Duration::from_secs(10), || pane
                .tmux(&["list-clients", "-F", "#{client_name}"])
                .lines()
                .count()
                == 1),
            "the person's client never attached"
        );
        Rig {
            keep_dir: dir.path().join("keep"),
            _dir: dir,
            received,
            pane,
            person,
        }
    }

    fn target(&self) -> Target {
        Target::Tmux(Tmux {
            program: "tmux".into(),
            socket: Some(self.pane.socket.clone()),
            target: "cc:0.0".into(),
            bindings: None,
        })
    }

    fn keep(&self, max: Duration) -> Keeper {
        let program = Path::new(env!("CARGO_BIN_EXE_ktr-keep"));
        self.target().keep_keys(program, &self.keep_dir, max)
    }

    /// A popup on the person's client that finishes by itself after `max`,
    /// and `text` typed into it (recorded, not yet replayed).
    fn keep_typed(&self, max: Duration, text: &str) -> Keeper {
        let keeper = self.keep(max);
        assert_eq!(keeper.holding(), 1, "no popup: {:?}", keeper.missed());
        self.type_text(text);
        assert!(
            wait_for(Duration::from_secs(5), || self.recorded() == text.len()),
            "the recorder wrote down {} of {} bytes",
            self.recorded(),
            text.len()
        );
        keeper
    }

    /// Keys through the client, as a person's keyboard sends them.
    fn type_text(&self, text: &str) {
        for c in text.chars() {
            self.person
                .tmux(&["send-keys", "-t", "out:0.0", "-l", &c.to_string()]);
        }
    }

    fn press(&self, key: &str) {
        self.person.tmux(&["send-keys", "-t", "out:0.0", key]);
    }

    fn received(&self) -> Vec<u8> {
        fs::read(&self.received).unwrap()
    }

    fn screen(&self) -> String {
        self.person.tmux(&["capture-pane", "-p", "-t", "out:0.0"])
    }

    /// Every byte the recorders wrote down.
    fn recorded(&self) -> usize {
        fs::read_dir(&self.keep_dir).map_or(0, |d| {
            d.flatten()
                .filter_map(|e| fs::metadata(e.path().join("keys")).ok())
                .map(|m| m.len() as usize)
                .sum()
        })
    }
}

#[test]
fn keys_typed_through_a_client_during_the_switch_reach_the_pane_whole_and_in_order() {
    let rig = Rig::start();
    rig.type_text("a");
    assert!(wait_for(Duration::from_secs(5), || rig.received() == b"a"));
    let opened = Instant::now();
    let mut keeper = rig.keep(Duration::from_secs(30));
    let took = opened.elapsed();
    assert_eq!(keeper.holding(), 1, "no popup: {:?}", keeper.missed());
    assert!(
        wait_for(Duration::from_secs(5), || rig
            .screen()
            .contains("ktr: switching session")),
        "the person does not see the popup:\n{}",
        rig.screen()
    );
    let typed = "bc 日志 ✓";
    rig.type_text(typed);
    rig.press("Enter");
    rig.press("BSpace");
    rig.type_text("z");
    let expected_len = typed.len() + 3;
    assert!(
        wait_for(Duration::from_secs(5), || rig.recorded() == expected_len),
        "the recorder wrote down {} of {expected_len} bytes",
        rig.recorded()
    );
    assert_eq!(rig.received(), b"a", "a key got past the popup");
    let said = keeper.finish();
    let mut want = b"a".to_vec();
    want.extend_from_slice(typed.as_bytes());
    want.extend_from_slice(b"\r\x7fz");
    assert!(
        wait_for(Duration::from_secs(10), || rig.received() == want),
        "{said}; the pane has {:?}",
        String::from_utf8_lossy(&rig.received())
    );
    assert!(!said.contains('('), "{said}");
    // The popup is gone: the next key goes straight to the pane.
    rig.type_text("q");
    want.push(b'q');
    assert!(
        wait_for(Duration::from_secs(5), || rig.received() == want),
        "after the switch: {:?}",
        String::from_utf8_lossy(&rig.received())
    );
    assert!(!rig.screen().contains("ktr: switching session"));
    assert!(!rig.keep_dir.exists(), "the recorders' files stay behind");
    eprintln!("keep: the popup held the keyboard {took:?} after it was asked for");
}

#[test]
fn a_recorder_past_its_lifetime_replays_and_closes_by_itself_and_only_once() {
    let rig = Rig::start();
    let mut keeper = rig.keep_typed(Duration::from_secs(2), "late 日");
    // Nobody finishes it: the switch was killed.
    assert!(
        wait_for(Duration::from_secs(6), || rig.received()
            == "late 日".as_bytes()),
        "after its lifetime the pane has {:?}",
        String::from_utf8_lossy(&rig.received())
    );
    assert!(wait_for(Duration::from_secs(3), || !rig
        .screen()
        .contains("ktr: switching session")));
    let said = keeper.finish();
    assert!(!said.contains('('), "{said}");
    assert_eq!(rig.received(), "late 日".as_bytes(), "replayed twice");
}

#[test]
fn a_killed_recorder_loses_no_recorded_key() {
    let rig = Rig::start();
    let mut keeper = rig.keep_typed(Duration::from_secs(30), "kept");
    let pid = fs::read_to_string(rig.keep_dir.join("0/ready")).unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", pid.trim()])
        .status()
        .unwrap();
    assert!(killed.success());
    let said = keeper.finish();
    assert!(said.contains("ktr replayed 4 bytes"), "{said}");
    // The replay is in the pane's tty when `finish` returns; the pane's
    // program writes it down when it is next scheduled.
    assert!(
        wait_for(Duration::from_secs(10), || rig.received() == b"kept"),
        "{said}; the pane has {:?}",
        String::from_utf8_lossy(&rig.received())
    );
}

#[test]
fn without_a_client_nothing_is_held() {
    let dir = tempfile::tempdir().unwrap();
    let pane = TmuxServer::start();
    let target = Target::Tmux(Tmux {
        program: "tmux".into(),
        socket: Some(pane.socket.clone()),
        target: "t:0.0".into(),
        bindings: None,
    });
    let program = Path::new(env!("CARGO_BIN_EXE_ktr-keep"));
    let mut keeper = target.keep_keys(program, dir.path(), Duration::from_secs(5));
    assert_eq!(keeper.holding(), 0);
    assert_eq!(keeper.finish(), "");
}

#[test]
fn a_client_that_detaches_keeps_what_it_typed() {
    let rig = Rig::start();
    let mut keeper = rig.keep_typed(Duration::from_secs(30), "bye 日");
    rig.pane.tmux(&["detach-client", "-s", "cc"]);
    // The popup's tty goes away with the client: the recorder replays.
    assert!(
        wait_for(Duration::from_secs(5), || rig.received()
            == "bye 日".as_bytes()),
        "after the detach the pane has {:?}; the recorder said {:?}",
        String::from_utf8_lossy(&rig.received()),
        fs::read_to_string(rig.keep_dir.join("0/error"))
    );
    let said = keeper.finish();
    assert_eq!(rig.received(), "bye 日".as_bytes(), "{said}");
}

#[test]
fn a_popup_that_cannot_open_leaves_the_keyboard_as_it_was() {
    let rig = Rig::start();
    let mut keeper = rig.target().keep_keys(
        Path::new("/nonexistent/ktr-keep"),
        &rig.keep_dir,
        Duration::from_secs(5),
    );
    assert_eq!(keeper.holding(), 0);
    assert!(
        keeper.missed().iter().any(|m| m.contains("did not open")),
        "{:?}",
        keeper.missed()
    );
    rig.type_text("x");
    assert!(wait_for(Duration::from_secs(5), || rig.received() == b"x"));
    assert_eq!(keeper.finish(), "");
}
