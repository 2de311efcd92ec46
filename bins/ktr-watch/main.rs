//! `ktr-watch` — a stage's watchdog (SPEC §9): started beside each
//! detached stage, it waits until the stage ends and fails the operation
//! at once if the stage left it in flight (killed), so no operation waits
//! for a next hook to end.
//!
//! Usage: `ktr-watch [--config PATH] --operation ID --pid PID` (run by the
//! hooks and stages that start a stage). The logic is
//! [`ktr_pipeline::stages::watchdog`].

fn main() {
    ktr_pipeline::stages::watchdog::main()
}
