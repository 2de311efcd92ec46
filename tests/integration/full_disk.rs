//! A full or limited disk: the operation ends `failed`
//! with one line saying where and how much room the rebuild needs, no
//! partial file is left, the source is untouched, and the failure is
//! recorded even on a full disk. The state dir is a small private tmpfs
//! (`unshare -m`, root), or the file size limit is small (`ulimit -f`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::Sandbox;
use ktr_base::ids::OperationId;

const SESSION: &str = "5e55a9e0-0000-4000-8000-00000000dddd";

/// A transcript of about `size` bytes: turns of plain prose.
fn transcript(size: usize) -> Vec<u8> {
    let mut out = String::new();
    let mut n = 0u32;
    let mut parent = "null".to_string();
    while out.len() < size {
        for kind in ["user", "assistant"] {
            n += 1;
            let uuid = format!("00000000-0000-4000-8000-{n:012}");
            let message = if kind == "user" {
                format!(
                    r#"{{"role":"user","content":"question {n}: {}"}}"#,
                    "words ".repeat(100)
                )
            } else {
                format!(
                    r#"{{"role":"assistant","id":"msg_{n}","model":"m","type":"message","content":[{{"type":"text","text":"answer {n}: {}"}}]}}"#,
                    "prose ".repeat(100)
                )
            };
            out.push_str(&format!(
                r#"{{"type":"{kind}","uuid":"{uuid}","parentUuid":{parent},"isSidechain":false,"sessionId":"{SESSION}","timestamp":"2026-11-01T09:00:00.000Z","cwd":"/w","version":"2.1.328","message":{message}}}"#
            ));
            out.push('\n');
            parent = format!("\"{uuid}\"");
        }
    }
    out.into_bytes()
}

/// What a run left: the operation file(s), the artifacts' listing, the
/// stage's exit code and output.
struct Left {
    code: String,
    stderr: String,
    operations: Vec<serde_json::Value>,
    artifacts: String,
}

impl Left {
    /// The one operation's status and error.
    #[track_caller]
    fn failed_with(&self) -> String {
        assert_eq!(
            self.operations.len(),
            1,
            "one operation recorded: {}",
            self.stderr
        );
        let op = &self.operations[0];
        assert_eq!(op["status"], "failed", "{op}\n{}", self.stderr);
        op["error"].as_str().unwrap_or_default().to_string()
    }

    #[track_caller]
    fn assert_no_partial_files(&self) {
        for partial in [".part", ".tmp", ".room", ".jsonl"] {
            assert!(
                !self.artifacts.contains(partial),
                "no {partial} left in the artifacts:\n{}",
                self.artifacts
            );
        }
    }
}

/// Run `ktr-prepare` in pointer mode with the state dir on a private tmpfs
/// of `size`; with `fill_after_check`, the stage pauses after its space
/// check while the tmpfs is filled, then goes on. Everything to look at
/// is copied out of the tmpfs before the namespace ends.
fn prepare_on_tmpfs(sandbox: &Sandbox, source: &Path, size: &str, fill_after_check: bool) -> Left {
    let out = sandbox.root().join("left");
    fs::create_dir_all(&out).unwrap();
    let pause = sandbox.root().join("pause");
    let script = r#"
set -u
mkdir -p "$STATE" && mount -t tmpfs -o size="$SIZE",mode=0700 tmpfs "$STATE" || exit 90
if [ "$FILL" = 1 ]; then
    export KTR_TEST_PAUSE_AT=prepare:running KTR_TEST_PAUSE_FILE="$PAUSE"
fi
"$PREPARE" --config "$CONFIG" --transcript "$SOURCE" --confirm REBUILD \
    >"$OUT/stdout" 2>"$OUT/stderr" </dev/null &
pid=$!
if [ "$FILL" = 1 ]; then
    i=0
    while [ ! -s "$PAUSE" ] && [ $i -lt 3000 ]; do sleep 0.02; i=$((i + 1)); done
    dd if=/dev/zero of="$STATE/filler" bs=64k 2>/dev/null
    rm -f "$PAUSE"
fi
wait $pid
echo $? >"$OUT/code"
cp "$STATE"/operations/*.json "$OUT/" 2>/dev/null
ls -laR "$STATE/artifacts" >"$OUT/artifacts.txt" 2>&1
exit 0
"#;
    let status = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", script])
        .env_clear()
        .envs(sandbox.hook_base_env())
        .env("SIZE", size)
        .env("STATE", &sandbox.state)
        .env("FILL", if fill_after_check { "1" } else { "0" })
        .env("PAUSE", &pause)
        .env("PREPARE", crate::support::exe("ktr-prepare"))
        .env("CONFIG", &sandbox.config)
        .env("SOURCE", source)
        .env("OUT", &out)
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "the namespace script ran: {status}");
    collect(&out)
}

fn collect(out: &Path) -> Left {
    let read = |name: &str| fs::read_to_string(out.join(name)).unwrap_or_default();
    let operations = fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| serde_json::from_str(&fs::read_to_string(p).unwrap()).unwrap())
        .collect();
    Left {
        code: read("code").trim().to_string(),
        stderr: read("stderr"),
        operations,
        artifacts: read("artifacts.txt"),
    }
}

/// A sandbox in pointer mode with a `size`-byte source; returns it, the
/// source's path and bytes.
fn pointer_sandbox(size: usize) -> (Sandbox, PathBuf, Vec<u8>) {
    let sandbox = Sandbox::new();
    sandbox.write_pointer_config(SESSION, "context_window_tokens = 1000000000");
    let bytes = transcript(size);
    let path = sandbox.add_transcript(SESSION, &bytes);
    (sandbox, path, bytes)
}

#[test]
#[ignore = "needs root (a private tmpfs: unshare -m, mount)"]
fn prepare_refuses_early_when_the_state_dir_has_no_room() {
    let (sandbox, source, bytes) = pointer_sandbox(3 << 20);
    let left = prepare_on_tmpfs(&sandbox, &source, "4m", false);
    assert_eq!(left.code, "1", "{}", left.stderr);
    let error = left.failed_with();
    eprintln!("recorded: {error}");
    assert!(
        error.starts_with(&format!(
            "no space left on {}: the rebuild needs ≈ ",
            sandbox.state.display()
        )) && error.contains(" MB there, ")
            && error.contains(" MB free"),
        "{error}"
    );
    assert_eq!(error.lines().count(), 1);
    left.assert_no_partial_files();
    assert_eq!(fs::read(&source).unwrap(), bytes, "the source is untouched");
}

/// The `tool-results/` kept beside the backup count in the room
/// a rebuild needs — a source that alone fits is refused early when its
/// side files would not.
#[test]
#[ignore = "needs root (a private tmpfs: unshare -m, mount)"]
fn the_room_counts_the_tool_results_kept_beside_the_backup() {
    let (sandbox, source, _) = pointer_sandbox(1 << 20);
    let side = sandbox.project.join(SESSION).join("tool-results");
    fs::create_dir_all(&side).unwrap();
    fs::write(side.join("toolu_big.txt"), vec![b'x'; 8 << 20]).unwrap();
    let left = prepare_on_tmpfs(&sandbox, &source, "8m", false);
    assert_eq!(left.code, "1", "{}", left.stderr);
    let error = left.failed_with();
    let needs: u64 = error
        .split("needs ≈ ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{error}"));
    assert!(
        error.starts_with(&format!("no space left on {}: ", sandbox.state.display())) && needs > 9,
        "the 8 MiB of tool results count: {error}"
    );
    left.assert_no_partial_files();
}

#[test]
#[ignore = "needs root (a private tmpfs: unshare -m, mount)"]
fn a_write_that_finds_the_disk_full_after_the_check_fails_the_operation() {
    let (sandbox, source, bytes) = pointer_sandbox(2 << 20);
    let left = prepare_on_tmpfs(&sandbox, &source, "16m", true);
    assert_eq!(left.code, "1", "{}", left.stderr);
    let error = left.failed_with();
    eprintln!("recorded: {error}");
    assert!(
        error.starts_with(&format!("no space left on {}: ", sandbox.state.display())),
        "{error}"
    );
    left.assert_no_partial_files();
    assert_eq!(fs::read(&source).unwrap(), bytes, "the source is untouched");
}

#[test]
fn the_file_size_limit_is_a_clear_failure_not_a_silent_death() {
    let (sandbox, source, bytes) = pointer_sandbox(2 << 20);
    // 1024 blocks (of 512 bytes for sh): far below the backup's size.
    let out = Command::new("sh")
        .env_clear()
        .envs(sandbox.hook_base_env())
        .args(["-c", r#"ulimit -f 1024 && exec "$0" "$@""#])
        .arg(crate::support::exe("ktr-prepare"))
        .arg("--config")
        .arg(&sandbox.config)
        .arg("--transcript")
        .arg(&source)
        .args(["--confirm", "REBUILD"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(
        out.status.code(),
        Some(1),
        "exited, not killed by SIGXFSZ: {stderr}"
    );
    let store = sandbox.store();
    let ops = store.list().unwrap();
    assert_eq!(ops.len(), 1);
    let error = ops[0].error.clone().unwrap_or_default();
    eprintln!("recorded: {error}");
    assert!(
        error.contains("ulimit -f") && error.contains("File too large"),
        "{error}"
    );
    let artifacts = store
        .artifacts_dir(&OperationId::parse(ops[0].id.as_str()).unwrap())
        .unwrap();
    assert_eq!(
        fs::read_dir(artifacts).unwrap().count(),
        0,
        "no partial file left"
    );
    assert_eq!(fs::read(&source).unwrap(), bytes, "the source is untouched");
}
