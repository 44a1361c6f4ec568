//! The loader on documents in text: every problem reported at the key or value it is about, and a good document with none.

use std::path::{Path, PathBuf};

use super::*;

const NOW_MS: i64 = 1_795_000_000_000;

fn opts(zone: &Zone) -> LoadOptions<'_> {
    LoadOptions {
        default_zone: zone,
        allowlist: None,
        now_ms: Some(NOW_MS),
    }
}

/// The diagnostics of a text as their printed lines.
fn lines(text: &str, format: Format) -> Vec<String> {
    let zone = Zone::utc();
    let (set, d) = parse_str(text, format, Path::new("jobs/a.yaml"), &opts(&zone));
    assert_eq!(set.is_some(), !d.iter().any(Diagnostic::is_error), "{d:?}");
    d.iter().map(ToString::to_string).collect()
}

fn doc(members: &str) -> String {
    format!(
        "apiVersion: studio/v1\nkind: ScheduleSet\nmetadata: {{name: nightly, project: demo}}\nschedules:\n{members}"
    )
}

const GOOD: &str =
    "  reindex:\n    trigger: {every: 1h}\n    action: {kind: command, executable: reindex}\n";

#[test]
fn a_good_document_loads_with_no_diagnostics() {
    let zone = Zone::utc();
    let text = doc(
        "  reindex:\n    trigger: {cron: {expression: \"0 2 * * *\", timezone: Europe/Berlin}}\n    action: {kind: command, executable: reindex, args: [--port, 8080]}\n    env: {PORT: 8080}\n    policies: {missed_fire: run_once, overlap: skip, deadline: 3600}\n",
    );
    let (set, d) = parse_str(&text, Format::Yaml, Path::new("a.yaml"), &opts(&zone));
    assert!(d.is_empty(), "{d:?}");
    let set = set.expect("loads");
    assert_eq!(set.owner_key(), "demo/nightly");
    let spec = &set.schedules["reindex"];
    assert_eq!(
        spec.env["PORT"], "8080",
        "a plain number is text where text is wanted"
    );
    assert_eq!(
        spec.action,
        crate::Action::Command {
            executable: "reindex".into(),
            args: vec!["--port".into(), "8080".into()]
        }
    );
}

#[test]
fn unknown_key_inside_policies_is_at_the_key() {
    let text = doc(&format!(
        "{GOOD}    policies:\n      deadline: 60\n      sometimes: 1\n"
    ));
    assert_eq!(
        lines(&text, Format::Yaml),
        [
            "jobs/a.yaml:10:7: schedules.reindex.policies.sometimes: unknown field `sometimes`, expected one of `missed_fire`, `overlap`, `max_runs`, `deadline`, `budget_usd`, `rate_limit`, `on_daemon_loss`, `approval`, `retry`"
        ]
    );
}

#[test]
fn a_bad_cron_expression_is_at_the_expression() {
    let text = doc(
        "  r:\n    trigger:\n      cron:\n        expression: \"61 * * * *\"\n    action: {kind: command, executable: x}\n",
    );
    let d = lines(&text, Format::Yaml);
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(
        d[0].starts_with("jobs/a.yaml:8:21: schedules.r.trigger.cron.expression: "),
        "{d:?}"
    );
}

#[test]
fn an_impossible_cron_is_at_the_expression() {
    let text = doc(
        "  r:\n    trigger: {cron: {expression: 0 0 31 2 *}}\n    action: {kind: command, executable: x}\n",
    );
    assert_eq!(
        lines(&text, Format::Yaml),
        [
            "jobs/a.yaml:6:34: schedules.r.trigger.cron.expression: \"0 0 31 2 *\" can never fire (no such date)"
        ]
    );
}

#[test]
fn an_unknown_time_zone_is_at_the_zone() {
    let text = doc(
        "  r:\n    trigger: {cron: {expression: \"0 2 * * *\", timezone: Mars/Olympus}}\n    action: {kind: command, executable: x}\n",
    );
    let d = lines(&text, Format::Yaml);
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(
        d[0].starts_with("jobs/a.yaml:6:57: schedules.r.trigger.cron.timezone: unknown time zone"),
        "{d:?}"
    );
}

#[test]
fn a_member_may_not_set_name() {
    let text = doc(&format!("{GOOD}    name: other/name\n"));
    assert_eq!(
        lines(&text, Format::Yaml),
        [
            "jobs/a.yaml:8:5: schedules.reindex.name: a member may not set name: its stored name is <project>/<member key>"
        ]
    );
}

#[test]
fn a_wrong_api_version_is_at_its_value() {
    let text = doc(GOOD).replace("studio/v1", "studio/v2");
    assert_eq!(
        lines(&text, Format::Yaml),
        ["jobs/a.yaml:1:13: apiVersion: must be studio/v1, not \"studio/v2\""]
    );
}

#[test]
fn a_duplicate_key_is_at_the_second_key() {
    let text = doc(&format!("{GOOD}    trigger: {{every: 2h}}\n"));
    assert_eq!(
        lines(&text, Format::Yaml),
        ["jobs/a.yaml:8:5: duplicate key \"trigger\" (first at line 6, column 5)"]
    );
}

#[test]
fn every_problem_in_a_file_is_reported() {
    let text = doc(
        "  a:\n    trigger: {every: 5 minutes}\n    action: {kind: agent, prompt: go, bogus: 1}\n  b:\n    trigger: {hourly: 1}\n    action: {kind: shell}\n    policies: {max_runs: 0}\n  Bad/Name:\n    trigger: {at: \"2020-01-01T00:00:00Z\"}\n    action: {kind: command, executable: x}\n    env: {STUDIO_RUN_ID: x}\n",
    );
    let d = lines(&text, Format::Yaml);
    let want = [
        "jobs/a.yaml:6:22: schedules.a.trigger.every: ",
        "jobs/a.yaml:7:39: schedules.a.action.bogus: unknown field `bogus`",
        "jobs/a.yaml:9:15: schedules.b.trigger.hourly: unknown variant `hourly`",
        "jobs/a.yaml:10:20: schedules.b.action.kind: unknown variant `shell`",
        "jobs/a.yaml:11:26: schedules.b.policies.max_runs: must be at least 1",
        "jobs/a.yaml:12:3: schedules.Bad/Name: member name: ",
        "jobs/a.yaml:13:19: warning: schedules.Bad/Name.trigger.at: 2020-01-01T00:00:00Z is in the past",
        "jobs/a.yaml:15:26: schedules.Bad/Name.env.STUDIO_RUN_ID: ",
    ];
    assert_eq!(d.len(), want.len(), "{d:#?}");
    for (got, want) in d.iter().zip(want) {
        assert!(
            got.starts_with(want),
            "{got:?} does not start with {want:?}"
        );
    }
}

#[test]
fn missing_fields_and_header_problems_point_at_the_enclosing_mapping() {
    let text = "kind: Thing\nmetadata: {name: .x, project: demo}\nextra: 1\nschedules:\n  r:\n    trigger: {every: 1h}\n";
    assert_eq!(
        lines(text, Format::Yaml),
        [
            "jobs/a.yaml:1:1: apiVersion: is required (studio/v1)",
            "jobs/a.yaml:1:7: kind: must be ScheduleSet, not \"Thing\"",
            "jobs/a.yaml:2:18: metadata.name: use letters, digits, '-', '_' and '.' (1 to 64 characters, not starting with '.')",
            "jobs/a.yaml:3:1: extra: unknown field `extra`, expected one of `apiVersion`, `kind`, `metadata`, `schedules`",
            "jobs/a.yaml:6:5: schedules.r: missing field `action`",
        ]
    );
}

#[test]
fn merge_keys_tags_and_second_documents_are_refused() {
    let text = doc(
        "  base: &b\n    trigger: {every: 1h}\n    action: {kind: command, executable: x}\n  copy:\n    <<: *b\n",
    );
    let d = lines(&text, Format::Yaml);
    assert!(
        d.iter()
            .any(|l| l.starts_with("jobs/a.yaml:9:5: merge keys (<<) are not supported")),
        "{d:?}"
    );
    let aliased = doc(
        "  base: &b\n    trigger: {every: 1h}\n    action: {kind: command, executable: x}\n  copy: *b\n",
    );
    assert_eq!(
        lines(&aliased, Format::Yaml),
        Vec::<String>::new(),
        "a plain alias is a copy"
    );
    let tagged = doc(GOOD).replace("every: 1h", "every: !custom 1h");
    let d = lines(&tagged, Format::Yaml);
    assert!(
        d[0].starts_with("jobs/a.yaml:6:22: tag !custom is not supported"),
        "{d:?}"
    );
    let two = format!("{}---\n{}", doc(GOOD), doc(GOOD));
    assert_eq!(
        lines(&two, Format::Yaml),
        ["jobs/a.yaml:8:1: a file holds one document; start another file"]
    );
    assert_eq!(
        lines("", Format::Yaml),
        ["jobs/a.yaml:1:1: the file is empty"]
    );
    let broken = lines("a: [1, 2\n", Format::Yaml);
    assert_eq!(broken.len(), 1, "{broken:?}");
}

#[test]
fn json_errors_have_positions() {
    let text = r#"{
  "apiVersion": "studio/v1",
  "kind": "ScheduleSet",
  "metadata": {"name": "n", "project": "p"},
  "schedules": {
    "r": {"trigger": {"every": "1h"},
          "action": {"kind": "command", "executable": "x"},
          "policies": {"deadline": 0}}
  }
}"#;
    assert_eq!(
        lines(text, Format::Json),
        ["jobs/a.yaml:8:36: schedules.r.policies.deadline: must be at least 1 second"]
    );
    let syntax = lines(
        "{\"apiVersion\": \"studio/v1\",\n  \"kind\" \"ScheduleSet\"}",
        Format::Json,
    );
    assert_eq!(syntax, ["jobs/a.yaml:2:10: expected `:`"]);
    let typed = lines(&text.replace("\"1h\"", "90"), Format::Json);
    assert_eq!(typed.len(), 2, "{typed:?}");
    assert!(
        typed[0].starts_with("jobs/a.yaml:6:32: schedules.r.trigger.every: invalid type"),
        "{typed:?}"
    );
}

#[test]
fn toml_errors_have_positions() {
    let text = "apiVersion = \"studio/v1\"\nkind = \"ScheduleSet\"\n[metadata]\nname = \"n\"\nproject = \"p\"\n[schedules.r]\ntrigger = { at = 2030-01-01T09:00:00+01:00 }\naction = { kind = \"command\", executable = \"x\" }\n[schedules.r.policies]\nmax_runs = 0\n";
    assert_eq!(
        lines(text, Format::Toml),
        ["jobs/a.yaml:10:12: schedules.r.policies.max_runs: must be at least 1"]
    );
    let syntax = lines("apiVersion = \n", Format::Toml);
    assert_eq!(syntax.len(), 1, "{syntax:?}");
    assert!(syntax[0].starts_with("jobs/a.yaml:1:"), "{syntax:?}");
}

#[test]
fn an_executable_off_the_allow_list_is_a_warning_at_its_value() {
    let zone = Zone::utc();
    let list = vec!["reindex".to_owned()];
    let o = LoadOptions {
        allowlist: Some(&list),
        ..opts(&zone)
    };
    let text = doc(&format!(
        "{GOOD}    on_fail:\n      action: {{kind: command, executable: notify}}\n"
    ));
    let (set, d) = parse_str(&text, Format::Yaml, Path::new("a.yaml"), &o);
    assert!(set.is_some(), "a warning does not stop loading");
    let d: Vec<String> = d.iter().map(ToString::to_string).collect();
    assert_eq!(
        d,
        [
            "a.yaml:9:43: warning: schedules.reindex.on_fail.action.executable: \"notify\" is not on the command allow-list; the machine's owner can allow it from a terminal with: studio allow add notify"
        ]
    );
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("studio-load-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn a_relative_cwd_resolves_against_the_document_directory() {
    let dir = temp_dir("cwd");
    std::fs::create_dir_all(dir.join("jobs")).expect("jobs");
    let file = dir.join("jobs/a.yml");
    let text = doc(
        "  r:\n    trigger: {every: 1h}\n    action: {kind: command, executable: x}\n    cwd: ./work/../out\n  s:\n    trigger: {every: 1h}\n    action: {kind: command, executable: x}\n    cwd: /srv\n",
    );
    std::fs::write(&file, text).expect("write");
    let zone = Zone::utc();
    let (loaded, d) = load_file(&file, &opts(&zone));
    assert!(d.is_empty(), "{d:?}");
    let set = loaded.expect("loads").set;
    let base = std::fs::canonicalize(dir.join("jobs")).expect("canonical");
    assert_eq!(
        set.schedules["r"].cwd.as_deref(),
        base.join("out").to_str(),
        "the directory is canonical and the relative part normalised"
    );
    assert_eq!(set.schedules["s"].cwd.as_deref(), Some("/srv"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn duplicate_names_across_files_are_reported() {
    let dir = temp_dir("dup");
    let a = dir.join("a.yaml");
    let b = dir.join("b.json");
    std::fs::write(&a, doc(GOOD)).expect("write a");
    std::fs::write(
        &b,
        r#"{"apiVersion": "studio/v1", "kind": "ScheduleSet",
 "metadata": {"name": "nightly", "project": "demo"},
 "schedules": {"reindex": {"trigger": {"every": "1h"}, "action": {"kind": "command", "executable": "x"}}}}"#,
    )
    .expect("write b");
    let other = dir.join("c.txt");
    let zone = Zone::utc();
    let (loaded, d) = load_all(
        &[a.clone(), b.clone(), a.clone(), other.clone()],
        &opts(&zone),
    );
    assert_eq!(loaded.len(), 1, "only the first document loads");
    assert_eq!(loaded[0].file, a);
    let a_at = |l: u32, c: u32| format!("{}:{l}:{c}", a.display());
    let d: Vec<String> = d.iter().map(ToString::to_string).collect();
    assert_eq!(
        d,
        [
            format!(
                "{}:2:23: metadata.name: document demo/nightly is also declared at {}",
                b.display(),
                a_at(3, 18)
            ),
            format!(
                "{}:3:16: schedules.reindex: schedule demo/reindex is also declared at {}",
                b.display(),
                a_at(5, 3)
            ),
            format!(
                "{}:1:1: unknown file type: use .yaml, .yml, .json or .toml",
                other.display()
            ),
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn display_omits_an_empty_path() {
    let d = Diagnostic {
        file: "f.yaml".into(),
        line: 3,
        column: 4,
        path: String::new(),
        message: "m".into(),
        severity: Severity::Warning,
    };
    assert_eq!(d.to_string(), "f.yaml:3:4: warning: m");
    assert_eq!(Format::from_path(Path::new("x.YML")), Some(Format::Yaml));
    assert_eq!(Format::from_path(Path::new("x")), None);
}
