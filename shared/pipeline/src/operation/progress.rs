//! How far a long step has come: `artifacts/<id>/progress.json`,
//! written about once a second by a watcher thread while the step runs and
//! removed when it ends. `ktr status`, the MCP status tool and the
//! statusline read it; a stage killed mid-step leaves a stale file that
//! nothing shows once the operation is terminal.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Stage, Store};
use ktr_base::fsutil::{Existing, write_atomic};
use ktr_base::ids::OperationId;
use ktr_base::open::{Links, cap, read_capped};
use ktr_base::time::Timestamp;
use ktr_engine::meter::Meter;

/// How often the watcher writes the file.
const EVERY: Duration = Duration::from_secs(1);

/// One step of one stage and how much of it is done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub stage: Stage,
    /// `planning` (prepare's scan of the frozen backup), `verifying`
    /// (verify's rebuild of it).
    pub step: String,
    pub done_bytes: u64,
    pub total_bytes: u64,
    pub started_at: Timestamp,
    pub updated_at: Timestamp,
}

impl Progress {
    /// Done, in percent (0–100).
    pub fn percent(&self) -> u64 {
        (self.done_bytes.min(self.total_bytes) * 100)
            .checked_div(self.total_bytes)
            .unwrap_or(100)
    }

    /// Time left at the rate so far (`None` before anything was read).
    pub fn eta(&self) -> Option<Duration> {
        let spent = self
            .updated_at
            .time()
            .duration_since(self.started_at.time())
            .ok()?;
        if self.done_bytes == 0 {
            return None;
        }
        let left = self.total_bytes.saturating_sub(self.done_bytes);
        #[allow(clippy::cast_precision_loss)]
        Some(spent.mul_f64(left as f64 / self.done_bytes as f64))
    }

    /// `planning 340 of 680 MB (50 %), ≈ 12 s left`.
    pub fn line(&self) -> String {
        #[allow(clippy::cast_precision_loss)]
        let mb = |b: u64| b as f64 / 1e6;
        let mut line = format!(
            "{} {:.0} of {:.0} MB ({} %)",
            self.step,
            mb(self.done_bytes),
            mb(self.total_bytes),
            self.percent()
        );
        if let Some(eta) = self.eta() {
            line += &format!(", ≈ {} s left", eta.as_secs().max(1));
        }
        line
    }
}

impl Store {
    /// `artifacts/<id>/progress.json` (not created).
    pub fn progress_path(&self, id: &OperationId) -> PathBuf {
        self.dir().join("artifacts").join(id).join("progress.json")
    }

    /// The progress of operation `id`'s running step, if one is written.
    /// Best effort: unreadable or damaged is the same as none.
    pub fn progress(&self, id: &OperationId) -> Option<Progress> {
        let path = self.progress_path(id);
        let bytes = read_capped(&path, cap::CACHE, Links::Refuse).ok()??;
        serde_json::from_slice(&bytes).ok()
    }
}

/// Run `work` while a watcher thread writes `step`'s progress (`meter` of
/// `total_bytes`) for operation `id` every second; the file is removed when
/// `work` ends. Writing is best effort: a step never fails because its
/// progress could not be shown.
pub fn watching<R>(
    store: &Store,
    id: &OperationId,
    stage: Stage,
    step: &str,
    total_bytes: u64,
    meter: &Meter,
    work: impl FnOnce() -> R,
) -> R {
    let path = store.progress_path(id);
    let started_at = Timestamp::now();
    let write = &|done_bytes: u64| {
        let progress = Progress {
            stage,
            step: step.to_string(),
            done_bytes,
            total_bytes,
            started_at: started_at.clone(),
            updated_at: Timestamp::now(),
        };
        if let Ok(json) = serde_json::to_vec(&progress) {
            let _ = write_atomic(&path, &json, 0o600, Existing::Replace);
        }
    };
    // The first write before the work starts: the file is there as soon
    // as the step is.
    write(meter.read());
    let (stop, stopped) = mpsc::channel::<()>();
    let result = std::thread::scope(|s| {
        s.spawn(move || {
            let mut next = Instant::now();
            loop {
                next += EVERY;
                match stopped.recv_timeout(next.saturating_duration_since(Instant::now())) {
                    Err(mpsc::RecvTimeoutError::Timeout) => write(meter.read()),
                    _ => return,
                }
            }
        });
        let result = work();
        drop(stop);
        result
    });
    let _ = std::fs::remove_file(&path);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn at(secs: u64) -> Timestamp {
        Timestamp::at(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs))
    }

    #[test]
    fn the_line_says_how_much_and_how_long() {
        let p = Progress {
            stage: Stage::Prepare,
            step: "planning".into(),
            done_bytes: 340_000_000,
            total_bytes: 680_000_000,
            started_at: at(0),
            updated_at: at(12),
        };
        assert_eq!(p.percent(), 50);
        assert_eq!(p.eta(), Some(Duration::from_secs(12)));
        assert_eq!(p.line(), "planning 340 of 680 MB (50 %), ≈ 12 s left");
        let nothing_yet = Progress { done_bytes: 0, ..p };
        assert_eq!(nothing_yet.line(), "planning 0 of 680 MB (0 %)");
    }

    #[test]
    fn the_file_is_there_while_the_step_runs_and_gone_after() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let id = &OperationId::parse("0123abcd-0000-4000-8000-000000000001").unwrap();
        store.artifacts_dir(id).unwrap();
        let meter = Meter::default();
        let (go, wait) = mpsc::channel::<()>();
        let (seen_tx, seen) = mpsc::channel::<Progress>();
        let (store, meter) = (&store, &meter);
        std::thread::scope(|s| {
            s.spawn(move || {
                watching(store, id, Stage::Prepare, "planning", 1000, meter, || {
                    meter.add(250);
                    wait.recv().unwrap();
                });
            });
            // The watcher writes at once and then every second: wait for 250.
            let deadline = Instant::now() + Duration::from_secs(10);
            let progress = loop {
                if let Some(p) = store.progress(id).filter(|p| p.done_bytes == 250) {
                    break p;
                }
                assert!(Instant::now() < deadline, "no progress written");
                std::thread::sleep(Duration::from_millis(20));
            };
            seen_tx.send(progress).unwrap();
            go.send(()).unwrap();
        });
        let progress = seen.recv().unwrap();
        assert_eq!(
            (progress.step.as_str(), progress.percent()),
            ("planning", 25)
        );
        assert!(store.progress(id).is_none(), "removed when the step ended");
    }
}
