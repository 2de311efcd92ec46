//! Writing to stdout: a closed pipe (`ktr plan | head`) ends quietly.

use std::io::Write;

/// Print text for a person (control characters and bidirectional
/// overrides shown as `?`: a model name or a reason cannot drive the
/// terminal); exit quietly with 0 if stdout is a closed pipe.
pub fn print(text: &str) {
    let mut stdout = std::io::stdout().lock();
    written(
        stdout
            .write_all(ktr_base::text::printable(text).as_bytes())
            .and_then(|()| stdout.flush()),
    );
}

/// Print a value as pretty JSON followed by a newline, written as it is
/// serialized (a capped plan's report lists hundreds of thousands of
/// left-out records: no copy of it all as one string).
pub fn json<T: serde::Serialize>(value: &T) {
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    written(
        serde_json::to_writer_pretty(&mut stdout, value)
            .map_err(std::io::Error::from)
            .and_then(|()| stdout.write_all(b"\n"))
            .and_then(|()| stdout.flush()),
    );
}

/// Exit quietly with 0 if stdout was a closed pipe, with 1 on another error.
fn written(result: std::io::Result<()>) {
    ktr_base::cli::written("ktr", result);
}

/// A byte count in a human unit.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KB", "MB", "GB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}
