//! The real Claude Code CLI in a pseudo-terminal outside tmux, as a person
//! runs it in a plain terminal: `script(1)` holds the pty (the CLI gets it
//! as its controlling terminal and standard input/output), the test types
//! into the pty through `script`'s standard input and reads everything the
//! CLI draws from its standard output. No `TMUX`/`TMUX_PANE` reach it
//! ([`ClaudeEnv::env`] is the whole environment).

use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::claude::ClaudeEnv;

/// The terminal's size.
const COLUMNS: u32 = 220;
const ROWS: u32 = 50;

/// A CLI running in a pseudo-terminal; killed (with its terminal) on drop.
pub struct Terminal {
    child: Child,
    keys: ChildStdin,
    drawn: Arc<Mutex<Vec<u8>>>,
    last_output: Arc<Mutex<Instant>>,
}

impl Terminal {
    /// Start the CLI of `env` with `args` in a new pseudo-terminal.
    pub fn start(env: &ClaudeEnv, args: &[&str]) -> Terminal {
        let quote = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
        let mut line = format!(
            "stty cols {COLUMNS} rows {ROWS}; exec {}",
            quote(&env.bin.to_string_lossy())
        );
        for a in args {
            line.push(' ');
            line.push_str(&quote(a));
        }
        let mut child = Command::new("script")
            .args(["-q", "-f", "-e", "-c", &line, "/dev/null"])
            .env_clear()
            .envs(env.env())
            .env("SHELL", "/bin/sh")
            .current_dir(&env.sandbox.work)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("script(1) starts the CLI in a pseudo-terminal");
        let keys = child.stdin.take().unwrap();
        let mut out = child.stdout.take().unwrap();
        let drawn = Arc::new(Mutex::new(Vec::new()));
        let last_output = Arc::new(Mutex::new(Instant::now()));
        let (d, l) = (Arc::clone(&drawn), Arc::clone(&last_output));
        thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 {
                    break;
                }
                d.lock().unwrap().extend_from_slice(&buf[..n]);
                *l.lock().unwrap() = Instant::now();
            }
        });
        Terminal {
            child,
            keys,
            drawn,
            last_output,
        }
    }

    /// Everything drawn so far as text: escape sequences out (a cursor
    /// move right as a space).
    pub fn text(&self) -> String {
        plain(&self.drawn.lock().unwrap())
    }

    /// How many bytes were drawn so far (to look only at what follows).
    pub fn mark(&self) -> usize {
        self.drawn.lock().unwrap().len()
    }

    /// What was drawn after `mark`, as text.
    pub fn text_since(&self, mark: usize) -> String {
        let drawn = self.drawn.lock().unwrap();
        plain(&drawn[mark.min(drawn.len())..])
    }

    /// Wait until the CLI drew nothing for `quiet` (at most `timeout`).
    pub fn wait_quiet(&self, quiet: Duration, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.last_output.lock().unwrap().elapsed() >= quiet && self.mark() > 0 {
                return;
            }
            thread::sleep(Duration::from_millis(100));
        }
        panic!("the CLI never went quiet; it drew:\n{}", self.tail());
    }

    /// Type `text`, then Enter, as a person does.
    pub fn type_line(&mut self, text: &str) {
        self.type_keys(text);
        thread::sleep(Duration::from_millis(400));
        self.type_keys("\r");
    }

    /// Type `keys` as they are (no Enter).
    pub fn type_keys(&mut self, keys: &str) {
        self.keys.write_all(keys.as_bytes()).unwrap();
        self.keys.flush().unwrap();
    }

    /// The last lines drawn (for a failure's message).
    pub fn tail(&self) -> String {
        let text = self.text();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        // Closing the terminal hangs up the CLI in it.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `bytes` without terminal escape sequences.
fn plain(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            if c != '\r' {
                out.push(c);
            }
            continue;
        }
        match chars.next() {
            Some('[') => {
                let mut last = None;
                for n in chars.by_ref() {
                    if ('\x40'..='\x7e').contains(&n) {
                        last = Some(n);
                        break;
                    }
                }
                if last == Some('C') {
                    out.push(' ');
                }
            }
            Some(']') => {
                while let Some(n) = chars.next() {
                    if n == '\x07' || (n == '\x1b' && chars.next_if_eq(&'\\').is_some()) {
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
}
