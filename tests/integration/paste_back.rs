//! The blocked prompt pasted back into a tmux pane (SPEC §10), on real
//! tmux: a pane whose program has bracketed paste on, draws an input box
//! as Claude Code does and logs every byte it receives. What comes back is
//! the person's text as one bracketed paste: an end-of-paste (`ESC[201~`)
//! and a CR inside the kept text never end the paste early nor press Enter.

use std::fs;
use std::time::Duration;

use crate::support::{TmuxServer, wait_for};
use ktr_base::ids::SessionId;
use ktr_pipeline::operation::{PromptBack, Store};
use ktr_pipeline::prompt_back;
use ktr_pipeline::targets::{Target, Tmux};

/// Raw tty, bracketed paste on, an empty input box; after each read the
/// box shows how many bytes came (a draft), and the bytes go to argv[1].
const PANE: &str = r#"
import os, sys, tty
tty.setraw(0)
border = "\u2500" * 60
def draw(n):
    line = f"got {n} bytes" if n else ""
    sys.stdout.write("\x1b[2J\x1b[H" + border + "\r\n\u276f\u00a0" + line + "\r\n" + border + "\r\n")
    sys.stdout.flush()
sys.stdout.write("\x1b[?2004h")
draw(0)
n = 0
with open(sys.argv[1], "ab", buffering=0) as log:
    while True:
        got = os.read(0, 4096)
        if not got:
            break
        log.write(got)
        n += len(got)
        draw(n)
"#;

#[test]
fn a_kept_end_of_paste_and_cr_never_submit_the_prompt_put_back() {
    let dir = tempfile::tempdir().unwrap();
    let received = dir.path().join("received");
    fs::write(&received, b"").unwrap();
    let script = dir.path().join("pane.py");
    fs::write(&script, PANE).unwrap();
    let pane = TmuxServer::start_on(
        &TmuxServer::unique_socket("ktr-paste"),
        None,
        &[
            "-s",
            "cc",
            "-x",
            "100",
            "-y",
            "20",
            "python3",
            &script.to_string_lossy(),
            &received.to_string_lossy(),
        ],
    );
    assert!(
        wait_for(Duration::from_secs(10), || pane
            .tmux(&["capture-pane", "-p", "-t", "cc:0.0"])
            .contains('\u{276f}')),
        "the pane never drew its input box"
    );
    let state = dir.path().join("state");
    fs::create_dir(&state).unwrap();
    let store = Store::open(&state).unwrap();
    let session = SessionId::parse("0b0e8a52-6c47-4c3a-9f3e-1d2a3b4c5d6e").unwrap();
    let mut op = store.request("paste back", "REBUILD", None).unwrap();
    let text = "keep this \x1b[201~\rrm -rf x\x1b\x07\nsecond line\u{9b}2J";
    prompt_back::keep(&state, &session, Some("p1"), text).unwrap();
    prompt_back::block(&state, &session, Some("p1"), &op.id)
        .unwrap()
        .unwrap();
    op.prompt_back = Some(PromptBack {
        prompt_id: "p1".into(),
        chars: text.chars().count(),
        images: 0,
        carried: false,
    });
    let target = Target::Tmux(Tmux {
        program: "tmux".into(),
        socket: Some(pane.socket.clone()),
        target: "cc:0.0".into(),
        bindings: None,
    });
    let said = prompt_back::put_back(&state, &op, &session, &target).unwrap();
    assert!(said.contains("is back in the input line"), "{said}");
    let bytes = fs::read(&received).unwrap();
    let got = String::from_utf8_lossy(&bytes);
    // One bracketed paste, the person's text in it (tmux types a newline
    // as CR inside a paste), nothing after its end.
    assert_eq!(
        got, "\x1b[200~keep this [201~\rrm -rf x\rsecond line2J\x1b[201~",
        "what the pane received"
    );
}
