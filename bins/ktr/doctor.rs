//! `ktr doctor`: check the installation and explain each item.

use ktr_admin::doctor;
use ktr_base::Error;

use crate::cli::DoctorArgs;
use crate::out;

/// 0 all ok (warnings allowed), 1 a check failed, 2 the config is broken
/// (the checks that do not need it still ran).
pub fn run(args: &DoctorArgs) -> Result<u8, Error> {
    let report = doctor::check(args.common.config.as_deref());
    if args.common.json {
        out::json(&report);
    } else {
        out::print(&human(&report));
    }
    Ok(match (report.config_error, report.ok) {
        (true, _) => 2,
        (false, true) => 0,
        (false, false) => 1,
    })
}

pub fn human(report: &doctor::Report) -> String {
    let mut s = String::new();
    for c in &report.checks {
        let mark = match c.level {
            doctor::Level::Ok => "ok  ",
            doctor::Level::Warn => "warn",
            doctor::Level::Fail => "FAIL",
        };
        s.push_str(&format!("{mark} {:<22}{}\n", c.name, c.detail));
        if let Some(fix) = &c.fix {
            s.push_str(&format!("     {:<22}fix: {fix}\n", ""));
        }
    }
    s.push_str(match (report.config_error, report.ok) {
        (true, _) => {
            "the config does not load: fix it first; only the checks that do not need it ran\n"
        }
        (false, true) => "all checks passed\n",
        (false, false) => "some checks failed\n",
    });
    s
}
