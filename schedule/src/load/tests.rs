use std::path::{Path, PathBuf};

use super::*;

fn opts(zone: &Zone) -> LoadOptions<'_> {
    LoadOptions {
        default_zone: zone,
        allowlist: None,
        now_ms: Some(1_795_000_000_000),
    }
}

fn diags(text: &str, format: Format) -> Vec<String> {
    let zone = Zone::utc();
    let (_, d) = parse_str(text, format, Path::new("jobs/a.yaml"), &opts(&zone));
    d.iter().map(ToString::to_string).collect()
}

#[test]
fn explore() {
    let yaml = "apiVersion: studio/v1\nkind: ScheduleSet\nmetadata: {name: n, project: p}\nschedules:\n  a:\n    trigger: {cron: {expression: \"0 0 31 2 *\", timezone: Mars/X}}\n    action: {kind: command, executable: x, args: [--port, 8080], bogus: 1}\n    policies:\n      max_runs: 0\n      sometimes: 1\n      overlap: never\n    env: {FOO: 1, STUDIO_X: y}\n  b:\n    name: x\n    trigger: {hourly: 1}\n    action: {kind: shell}\n";
    for d in diags(yaml, Format::Yaml) {
        println!("{d}");
    }
    panic!();
}
