//! The health watch of a process target (SPEC §12): one process keeps
//! running the new session, and Claude Code's own receipt says it loaded it.

use std::thread;
use std::time::{Duration, Instant, SystemTime};

use crate::process;
use ktr_base::error::{Error, Result};
use ktr_base::ids::SessionId;

/// How often health is sampled.
const HEALTH_POLL: Duration = Duration::from_millis(50);

/// Claude Code's own proof that it loaded the session: `received()` gives
/// the time `ktr-ack` recorded the `SessionStart` (resume) receipt, once it
/// did; the process must then stay alive for `min_life` from that time.
pub struct Receipt<'a> {
    pub received: &'a mut dyn FnMut() -> Result<Option<SystemTime>>,
    pub min_life: Duration,
}

/// Sample `pid_of` until `wait` ends. Healthy: one process kept running
/// `session_id` the whole time (replaced or gone → error). With a
/// `receipt`, healthy as soon as the receipt is in and the process stayed
/// alive `min_life` after it (counted from the receipt's own time, never
/// from before the process was first seen, up to the last sample that saw
/// it alive); no receipt by the end of `wait` is an error.
pub(super) fn watch_until(
    session_id: &SessionId,
    wait: Duration,
    pid_of: impl Fn() -> Result<u32>,
    receipt: Option<Receipt<'_>>,
) -> Result<String> {
    let observe = || pid_of().and_then(|pid| runs_session(pid, session_id).map(|()| pid));
    watch(session_id, wait, observe, receipt, &RealClock)
}

/// Time as the watch sees it: the machine's, or a test's (which moves only
/// when the watch sleeps, so a test states exact times).
pub(super) trait Clock {
    fn now(&self) -> Instant;
    fn wall(&self) -> SystemTime;
    fn sleep(&self, d: Duration);
}

/// The machine's clock.
pub(super) struct RealClock;

impl Clock for RealClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }
    fn sleep(&self, d: Duration) {
        thread::sleep(d);
    }
}

/// [`watch_until`] with the sample (`observe`: the pid running the session,
/// or why not) and the clock given.
fn watch(
    session_id: &SessionId,
    wait: Duration,
    observe: impl Fn() -> Result<u32>,
    mut receipt: Option<Receipt<'_>>,
    clock: &dyn Clock,
) -> Result<String> {
    let deadline = clock.now() + wait;
    let mut healthy_pid: Option<(u32, Instant)> = None;
    let mut received_at: Option<Instant> = None;
    loop {
        let looked = clock.now();
        match (observe(), healthy_pid.map(|(pid, _)| pid)) {
            (Ok(pid), None) => healthy_pid = Some((pid, looked)),
            (Ok(pid), Some(first)) if pid != first => {
                return Err(Error::refused(format!(
                    "process {first} running {session_id} was replaced by {pid} during the health check"
                )));
            }
            (Err(e), Some(first)) => {
                return Err(Error::refused(format!(
                    "process {first} running {session_id} did not stay healthy: {}",
                    e.message
                )));
            }
            (Err(e), None) if clock.now() >= deadline => {
                return Err(Error::refused(format!(
                    "{session_id} never became healthy within {:.1} s: {}",
                    wait.as_secs_f64(),
                    e.message
                )));
            }
            (Ok(_), Some(_)) | (Err(_), None) => {}
        }
        if let (Some((pid, seen)), Some(r)) = (healthy_pid, receipt.as_mut()) {
            if received_at.is_none() {
                received_at = (r.received)()?.map(|at| {
                    let ago = clock.wall().duration_since(at).unwrap_or_default();
                    clock.now().checked_sub(ago).unwrap_or(seen).max(seen)
                });
            }
            if received_at.is_some_and(|at| looked.saturating_duration_since(at) >= r.min_life) {
                return Ok(pid.to_string());
            }
        }
        if clock.now() >= deadline {
            return match (healthy_pid.map(|(pid, _)| pid), &receipt, received_at) {
                (Some(pid), None, _) => Ok(pid.to_string()),
                (Some(_), Some(_), None) => Err(Error::refused(format!(
                    "Claude Code did not report SessionStart (resume) for {session_id} within {:.1} s although ktr-ack is installed",
                    wait.as_secs_f64()
                ))),
                _ => Err(Error::refused(format!(
                    "{session_id} did not live healthcheck_min_seconds after its receipt within {:.1} s (healthcheck_seconds)",
                    wait.as_secs_f64()
                ))),
            };
        }
        // Wake up when the minimum life is over rather than up to a poll later.
        let life_over = match (received_at, &receipt) {
            (Some(at), Some(r)) => (at + r.min_life).saturating_duration_since(clock.now()),
            _ => HEALTH_POLL,
        };
        clock.sleep(
            HEALTH_POLL
                .min(life_over)
                .min(deadline.saturating_duration_since(clock.now()))
                .max(Duration::from_millis(1)),
        );
    }
}

/// `pid` is alive and it (or a descendant, for wrapper scripts) has the
/// session id on its command line.
pub(super) fn runs_session(pid: u32, session_id: &SessionId) -> Result<()> {
    if !process::pid_alive(pid) {
        return Err(Error::refused(format!("process {pid} is not running")));
    }
    let found = process::with_descendants(pid)
        .into_iter()
        .filter_map(process::cmdline)
        .any(|argv| argv.iter().any(|a| a.contains(session_id.as_str())));
    if found {
        Ok(())
    } else {
        let shown = process::cmdline(pid).unwrap_or_default().join(" ");
        Err(Error::refused(format!(
            "process {pid} ({}) does not run session {session_id}",
            shown.chars().take(120).collect::<String>()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    const SESSION: &str = "5e55e55e-0000-4000-8000-000000000001";

    fn session() -> SessionId {
        SessionId::parse(SESSION).unwrap()
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// A clock that moves only when the watch sleeps: every time below is
    /// exact, whatever the machine's load.
    struct TestClock {
        start: Instant,
        wall: SystemTime,
        elapsed: Cell<Duration>,
    }

    impl TestClock {
        fn new() -> TestClock {
            TestClock {
                start: Instant::now(),
                wall: SystemTime::now(),
                elapsed: Cell::new(Duration::ZERO),
            }
        }
        /// Seconds since the watch began.
        fn at(&self) -> f64 {
            self.elapsed.get().as_secs_f64()
        }
    }

    impl Clock for TestClock {
        fn now(&self) -> Instant {
            self.start + self.elapsed.get()
        }
        fn wall(&self) -> SystemTime {
            self.wall + self.elapsed.get()
        }
        fn sleep(&self, d: Duration) {
            self.elapsed.set(self.elapsed.get() + d);
        }
    }

    /// A Claude Code (pid 42) that runs the session until `dies` seconds in
    /// (always when None) and whose receipt, recorded `recorded` seconds in
    /// (negative: before the watch), is found from `noticed` seconds on
    /// (never when None); watched for `wait` seconds with a minimum life of
    /// `min_life`. The result and when the watch ended.
    struct Case {
        wait: f64,
        min_life: f64,
        recorded: f64,
        noticed: Option<f64>,
        dies: Option<f64>,
    }

    impl Case {
        fn watch(&self) -> (Result<String>, f64) {
            let clock = TestClock::new();
            let observe = || match self.dies {
                Some(d) if clock.at() >= d => {
                    Err(Error::refused("process 42 is not running".to_string()))
                }
                _ => Ok(42),
            };
            let recorded = if self.recorded < 0.0 {
                clock.wall - secs(-self.recorded)
            } else {
                clock.wall + secs(self.recorded)
            };
            let mut received = || Ok(self.noticed.filter(|n| clock.at() >= *n).map(|_| recorded));
            let receipt = Receipt {
                received: &mut received,
                min_life: secs(self.min_life),
            };
            let result = watch(&session(), secs(self.wait), observe, Some(receipt), &clock);
            (result, clock.at())
        }
    }

    /// `took` is `want`, to the millisecond (the clock's steps are exact
    /// Durations; f64 seconds only print them).
    fn at(took: f64, want: f64) {
        assert!((took - want).abs() < 0.001, "took {took} s, not {want} s");
    }

    #[test]
    fn a_receipt_and_the_minimum_life_end_the_health_check_early() {
        let case = Case {
            wait: 5.0,
            min_life: 0.3,
            recorded: 0.2,
            noticed: Some(0.2),
            dies: None,
        };
        let (result, took) = case.watch();
        assert_eq!(result.unwrap(), "42");
        at(took, 0.5);
    }

    #[test]
    fn the_minimum_life_counts_from_the_receipts_own_time_but_not_before_the_process_was_seen() {
        // Recorded at 0.1 s, noticed at 0.6 s: healthy at 0.7 s, not 1.2 s.
        let case = Case {
            wait: 5.0,
            min_life: 0.6,
            recorded: 0.1,
            noticed: Some(0.6),
            dies: None,
        };
        let (result, took) = case.watch();
        assert_eq!(result.unwrap(), "42");
        at(took, 0.7);
        // A receipt time before the process was first seen counts from
        // then: the whole minimum life is watched.
        let case = Case {
            wait: 5.0,
            min_life: 0.4,
            recorded: -10.0,
            noticed: Some(0.0),
            dies: None,
        };
        let (result, took) = case.watch();
        assert_eq!(result.unwrap(), "42");
        at(took, 0.4);
    }

    #[test]
    fn a_claude_that_exits_before_its_receipt_is_unhealthy() {
        // It dies at 0.2 s; the receipt would come at 0.6 s.
        let case = Case {
            wait: 3.0,
            min_life: 0.1,
            recorded: 0.6,
            noticed: Some(0.6),
            dies: Some(0.2),
        };
        let (result, took) = case.watch();
        let err = result.unwrap_err();
        assert!(err.message.contains("did not stay healthy"), "{err}");
        at(took, 0.2);
    }

    #[test]
    fn a_claude_that_exits_within_the_minimum_life_after_its_receipt_is_unhealthy() {
        let case = Case {
            wait: 3.0,
            min_life: 1.0,
            recorded: 0.0,
            noticed: Some(0.0),
            dies: Some(0.4),
        };
        let (result, took) = case.watch();
        let err = result.unwrap_err();
        assert!(err.message.contains("did not stay healthy"), "{err}");
        at(took, 0.4);
    }

    #[test]
    fn no_receipt_within_the_window_is_unhealthy_even_when_alive() {
        let case = Case {
            wait: 0.5,
            min_life: 0.1,
            recorded: 0.0,
            noticed: None,
            dies: None,
        };
        let (result, took) = case.watch();
        let err = result.unwrap_err();
        assert!(err.message.contains("did not report SessionStart"), "{err}");
        at(took, 0.5);
    }

    #[test]
    fn a_receipt_without_the_minimum_life_inside_the_window_is_unhealthy() {
        let case = Case {
            wait: 0.6,
            min_life: 1.0,
            recorded: 0.3,
            noticed: Some(0.3),
            dies: None,
        };
        let (result, took) = case.watch();
        let err = result.unwrap_err();
        assert!(
            err.message.contains("did not live healthcheck_min_seconds"),
            "{err}"
        );
        at(took, 0.6);
    }

    /// A process with `SESSION` on its command line that lives `seconds`
    /// (reaped by a thread as soon as it exits); returns its pid.
    fn claude_for(seconds: f64) -> u32 {
        let mut child = std::process::Command::new("sh")
            .args(["-c", &format!("sleep {seconds}; :"), SESSION])
            .spawn()
            .unwrap();
        let pid = child.id();
        thread::spawn(move || child.wait());
        pid
    }

    /// The machine's clock and a real process: without a receipt the whole
    /// window is watched, and the process found running the session by its
    /// command line is healthy; one that is gone is not.
    #[test]
    fn a_real_process_is_watched_for_the_whole_window_without_a_receipt() {
        let pid = claude_for(30.0);
        let started = Instant::now();
        let result = watch_until(&session(), secs(0.6), || Ok(pid), None);
        assert!(started.elapsed() >= secs(0.6));
        let id = rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).unwrap();
        let _ = rustix::process::kill_process(id, rustix::process::Signal::TERM);
        assert_eq!(result.unwrap(), pid.to_string());
        let ended = Instant::now();
        while process::pid_alive(pid) {
            assert!(
                ended.elapsed() < secs(30.0),
                "the test's process did not end"
            );
            thread::sleep(Duration::from_millis(25));
        }
        let err = watch_until(&session(), secs(0.2), || Ok(pid), None).unwrap_err();
        assert!(err.message.contains("never became healthy"), "{err}");
    }
}
