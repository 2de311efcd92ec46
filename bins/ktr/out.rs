//! Writing to stdout: a closed pipe (`ktr plan | head`) ends quietly.

use std::io::Write;

/// Print text; exit quietly with 0 if stdout is a closed pipe.
pub fn print(text: &str) {
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("ktr: cannot write output: {e}");
        std::process::exit(1);
    }
}

/// Print a value as pretty JSON followed by a newline.
pub fn json<T: serde::Serialize>(value: &T) {
    let text = serde_json::to_string_pretty(value).expect("reports serialize");
    print(&(text + "\n"));
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
