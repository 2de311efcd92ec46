//! The key keeper of a tmux in-place switch (SPEC §12), on real tmux: a
//! pane whose program logs every byte it receives (raw tty), a person's
//! client attached to it from a second private server, and `ktr-keep`'s
//! popup holding that client's keyboard while "the switch" runs.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::{TmuxServer, wait_for};
use ktr_pipeline::targets::{Keeper, Target, Tmux};

/// The pane's program and the person's client.
struct Rig {
    _dir: tempfile::TempDir,
    received: PathBuf,
    keep_dir: PathBuf,
    /// The tmux program ktr runs (a wrapper without a locale, or `tmux`).
    program: String,
    pane: TmuxServer,
    person: TmuxServer,
}

impl Rig {
    fn start() -> Rig {
        Rig::start_in(None)
    }

    /// The pane's server, and ktr's tmux commands, in `env` (the whole
    /// environment) when given.
    fn start_in(env: Option<Vec<(String, String)>>) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let received = dir.path().join("received");
        fs::write(&received, b"").unwrap();
        let logger = format!(
            "stty raw -echo; exec cat >> '{}'",
            received.to_string_lossy()
        );
        let program = match &env {
            None => "tmux".to_string(),
            Some(vars) => {
                let wrapper = dir.path().join("tmux-in-env");
                let vars: Vec<String> = vars.iter().map(|(k, v)| format!("'{k}={v}'")).collect();
                fs::write(
                    &wrapper,
                    format!("#!/bin/sh\nexec env -i {} tmux \"$@\"\n", vars.join(" ")),
                )
                .unwrap();
                fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).unwrap();
                wrapper.to_string_lossy().into_owned()
            }
        };
        let pane = TmuxServer::start_on(
            &TmuxServer::unique_socket("ktr-keep"),
            env,
            &["-s", "cc", "-x", "100", "-y", "30", "sh", "-c", &logger],
        );
        let person = pane.person_attached("cc");
        Rig {
            program,
            keep_dir: dir.path().join("keep"),
            _dir: dir,
            received,
            pane,
            person,
        }
    }

    fn target(&self) -> Target {
        Target::Tmux(Tmux {
            program: self.program.clone(),
            socket: Some(self.pane.socket.clone()),
            target: "cc:0.0".into(),
            bindings: None,
        })
    }

    fn keep(&self, max: Duration) -> Keeper {
        let program = Path::new(crate::support::exe("ktr-keep"));
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

    /// What the pane received once it is `want` (or after 10 s): send-keys
    /// returns once tmux has the keys, the pane's program writes them down
    /// a moment later.
    fn settled(&self, want: &[u8]) -> Vec<u8> {
        wait_for(Duration::from_secs(10), || self.received() == want);
        self.received()
    }

    fn screen(&self) -> String {
        self.person.tmux(&["capture-pane", "-p", "-t", "out:0.0"])
    }

    /// Every byte the recorders wrote down.
    fn recorded(&self) -> usize {
        self.recorder_dirs()
            .iter()
            .filter_map(|d| fs::metadata(d.join("keys")).ok())
            .map(|m| m.len() as usize)
            .sum()
    }

    /// The recorders' folders: `<keep>/<attempt>/<client>/`.
    fn recorder_dirs(&self) -> Vec<PathBuf> {
        let listed = |dir: &Path| -> Vec<PathBuf> {
            fs::read_dir(dir).map_or(Vec::new(), |d| {
                d.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.is_dir())
                    .collect()
            })
        };
        listed(&self.keep_dir)
            .iter()
            .flat_map(|attempt| listed(attempt))
            .collect()
    }

    /// The one recorder's folder that holds a `ready` file.
    fn ready_dir(&self) -> PathBuf {
        let ready: Vec<PathBuf> = self
            .recorder_dirs()
            .into_iter()
            .filter(|d| d.join("ready").is_file())
            .collect();
        assert_eq!(ready.len(), 1, "{ready:?}");
        ready[0].clone()
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
    assert_eq!(
        String::from_utf8_lossy(&rig.settled(&want)),
        String::from_utf8_lossy(&want),
        "{said}"
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
        wait_for(Duration::from_secs(10), || rig.received()
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
    let pid = fs::read_to_string(rig.ready_dir().join("ready")).unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", pid.trim()])
        .status()
        .unwrap();
    assert!(killed.success());
    let said = keeper.finish();
    assert_eq!(rig.settled(b"kept"), b"kept", "{said}");
    assert!(said.contains("ktr replayed 4 bytes"), "{said}");
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
    let program = Path::new(crate::support::exe("ktr-keep"));
    let mut keeper = target.keep_keys(program, dir.path(), Duration::from_secs(5));
    assert_eq!(keeper.holding(), 0);
    // The stage's log says why there was no popup.
    assert!(
        keeper
            .missed()
            .iter()
            .any(|m| m.contains("no tmux client shows the pane")),
        "{:?}",
        keeper.missed()
    );
    assert_eq!(keeper.finish(), "");
}

#[test]
fn a_client_that_detaches_keeps_what_it_typed() {
    let rig = Rig::start();
    let mut keeper = rig.keep_typed(Duration::from_secs(30), "bye 日");
    let recorder = rig.ready_dir();
    rig.pane.tmux(&["detach-client", "-s", "cc"]);
    // The popup's tty goes away with the client: the recorder replays.
    assert!(
        wait_for(Duration::from_secs(5), || rig.received()
            == "bye 日".as_bytes()),
        "after the detach the pane has {:?}; the recorder said {:?}",
        String::from_utf8_lossy(&rig.received()),
        fs::read_to_string(recorder.join("error"))
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

/// tmux 3.3a without a UTF-8 locale prints a format's tab as `_`: the
/// keeper must still find the person's client and hold their keys.
#[test]
fn the_keeper_holds_keys_without_a_utf8_locale() {
    let path = std::env::var("PATH").unwrap_or_default();
    let rig = Rig::start_in(Some(vec![
        ("PATH".into(), path),
        (
            "HOME".into(),
            std::env::temp_dir().to_string_lossy().into_owned(),
        ),
    ]));
    let mut keeper = rig.keep(Duration::from_secs(30));
    assert_eq!(keeper.holding(), 1, "no popup: {:?}", keeper.missed());
    rig.type_text("no locale 日");
    assert!(
        wait_for(Duration::from_secs(5), || rig.recorded()
            == "no locale 日".len()),
        "the recorder wrote down {} bytes",
        rig.recorded()
    );
    assert_eq!(rig.received(), b"", "a key got past the popup");
    let said = keeper.finish();
    assert_eq!(
        String::from_utf8_lossy(&rig.settled("no locale 日".as_bytes())),
        "no locale 日",
        "{said}"
    );
}

/// A deferred switch tries the same `keep/<op>-<stage>/` again: what an
/// earlier attempt (or anyone) left there — keys, a `stop`, a `ready` — is
/// never replayed nor taken for this attempt's.
#[test]
fn a_switch_tried_again_replays_only_what_its_own_recorder_read() {
    let rig = Rig::start();
    for stale in [rig.keep_dir.join("0"), rig.keep_dir.join("1").join("0")] {
        fs::create_dir_all(&stale).unwrap();
        fs::write(stale.join("keys"), b"echo PWNED\r").unwrap();
        fs::write(stale.join("replayed"), b"3").unwrap();
        fs::write(stale.join("stop"), b"").unwrap();
        fs::write(stale.join("ready"), b"1").unwrap();
    }
    let mut keeper = rig.keep(Duration::from_secs(30));
    assert_eq!(keeper.holding(), 1, "no popup: {:?}", keeper.missed());
    // The recorder holds the keyboard (a stale `stop` would have ended it).
    thread::sleep(Duration::from_millis(300));
    rig.type_text("abc");
    assert!(wait_for(Duration::from_secs(5), || rig.recorded() == 3 + 11));
    assert_eq!(
        rig.received(),
        b"",
        "the popup was not holding the keyboard"
    );
    let said = keeper.finish();
    assert_eq!(
        String::from_utf8_lossy(&rig.settled(b"abc")),
        "abc",
        "{said}"
    );
    // What was left there before is still there, untouched.
    assert_eq!(
        fs::read(rig.keep_dir.join("1/0/keys")).unwrap(),
        b"echo PWNED\r"
    );
}

/// `ktr-keep` in a folder where a link stands for a file it writes:
/// nothing is written through it, and it says why in one line.
#[test]
fn the_recorder_never_writes_through_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    fs::write(&outside, b"theirs").unwrap();
    let keep = dir.path().join("keep");
    fs::create_dir(&keep).unwrap();
    std::os::unix::fs::symlink(&outside, keep.join("keys")).unwrap();
    std::os::unix::fs::symlink(&outside, keep.join("error")).unwrap();
    let out = std::process::Command::new(crate::support::exe("ktr-keep"))
        .args(["--dir", &keep.to_string_lossy(), "--pane", "%0", "--socket"])
        .arg(dir.path().join("no-server"))
        .args(["--max-seconds", "1"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("not a fresh folder"), "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    assert_eq!(
        fs::read(&outside).unwrap(),
        b"theirs",
        "written through a link"
    );
}

/// A FIFO or a huge file standing for a recorder's files never blocks nor
/// exhausts the switch: it reads nothing and says so.
#[test]
fn a_fifo_or_a_huge_file_among_the_recorders_files_is_refused_without_blocking() {
    use ktr_pipeline::recorder::{self, Files};
    let dir = tempfile::tempdir().unwrap();
    let files = Files {
        dir: dir.path().to_path_buf(),
    };
    for name in ["keys", "ready", "replayed", "error"] {
        crate::support::mkfifo(&dir.path().join(name));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = files.clone();
    thread::spawn(move || {
        let seen = (
            recorder::unreplayed(&reader).is_err(),
            reader.ready_pid(),
            reader.replayed_count(),
            reader.said(),
        );
        let _ = tx.send(seen);
    });
    let seen = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("reading a FIFO blocked");
    assert_eq!(seen, (true, None, 0, None));
    fs::remove_file(files.keys()).unwrap();
    let huge = fs::File::create(files.keys()).unwrap();
    huge.set_len(ktr_base::open::cap::KEYS + 1).unwrap();
    let err = recorder::unreplayed(&files).unwrap_err();
    assert!(err.message.contains("larger than"), "{err}");
}

/// A person typing on while the switch ends: the popup closes only in a
/// pause of their typing, so no key reaches it after its recorder's last
/// read (tmux drops what is in a closing popup's tty). Every key arrives,
/// once, in order, whether it went through the popup or straight to the
/// pane after it closed.
#[test]
fn a_person_typing_through_the_end_of_the_switch_loses_no_key() {
    let rig = Rig::start();
    let mut keeper = rig.keep(Duration::from_secs(30));
    assert_eq!(keeper.holding(), 1, "no popup: {:?}", keeper.missed());
    let typed: String = (0..120)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let typist = {
        let socket = rig.person.socket.clone();
        let typed = typed.clone();
        thread::spawn(move || {
            for c in typed.chars() {
                let sent = std::process::Command::new("tmux")
                    .args(["-L", &socket, "send-keys", "-t", "out:0.0", "-l"])
                    .arg(c.to_string())
                    .status()
                    .unwrap();
                assert!(sent.success());
                thread::sleep(Duration::from_millis(15));
            }
        })
    };
    // The switch ends while they type.
    thread::sleep(Duration::from_millis(400));
    let said = keeper.finish();
    typist.join().unwrap();
    assert!(
        wait_for(Duration::from_secs(10), || rig.received().len()
            >= typed.len()),
        "the pane has {} of {} keys: {:?} ({said})",
        rig.received().len(),
        typed.len(),
        String::from_utf8_lossy(&rig.received())
    );
    assert_eq!(String::from_utf8_lossy(&rig.received()), typed, "{said}");
}
