//! Validation: every problem at once, each naming its field path and the reason.
//!
//! Structure (types, unknown fields) is checked while parsing; meaning (cron that can
//! fire, zone names, intervals, instants, limits, the allow-list, chain depth) here.

use std::collections::BTreeMap;

use jiff::Timestamp;
pub use studio_contract::error::FieldError;
use studio_contract::jobenv;

use crate::{
    duration::parse_interval,
    spec::{Action, FollowUp, ScheduleSpec, Trigger},
    trigger::{Armed, parse_cron},
    zone::{Zone, ZoneSource},
};

/// How deep `on_success` / `on_fail` may nest.
pub const MAX_CHAIN_DEPTH: usize = 10;
/// The longest deadline a job may ask for (7 days).
pub const MAX_DEADLINE_SECS: u64 = 7 * 86_400;

/// What validation needs to know besides the spec.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    /// The zone for cron triggers that name none.
    pub default_zone: &'a Zone,
    /// The command allow-list; `None` skips the check (local validation warns instead).
    pub allowlist: Option<&'a [String]>,
    /// The names of the secrets studiod keeps; `None` skips the check (local validation).
    pub secrets: Option<&'a [String]>,
    /// The names of the notification endpoints; `None` skips the check.
    pub endpoints: Option<&'a [String]>,
    /// When set, an `at` instant must lie after it.
    pub now_ms: Option<i64>,
    /// The API requires a name; declaration files give it by the member key.
    pub require_name: bool,
}

/// A spec that passed, with its armed trigger.
#[derive(Debug, Clone)]
pub struct Validated {
    pub spec: ScheduleSpec,
    pub armed: Armed,
}

/// Parses a JSON schedule spec; a structural error names the field it was found at.
pub fn parse_json(text: &str) -> Result<ScheduleSpec, FieldError> {
    parse_json_as(text)
}

/// Parses JSON into `T` (a schedule or a task spec); a structural error names the field
/// it was found at.
pub fn parse_json_as<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, FieldError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let reason = e.into_inner().to_string();
        // serde_json appends " at line L column C"; the path already says where.
        let reason = reason
            .split(" at line ")
            .next()
            .unwrap_or(&reason)
            .to_owned();
        FieldError::new(if path == "." { String::new() } else { path }, reason)
    })
}

/// Checks everything about a spec that can be known without running it.
pub fn validate(spec: ScheduleSpec, ctx: &Context<'_>) -> Result<Validated, Vec<FieldError>> {
    let mut errors = Vec::new();
    match &spec.name {
        Some(name) => check_name(name, &mut errors),
        None if ctx.require_name => errors.push(FieldError::new("name", "is required")),
        None => {}
    }
    if spec.description.len() > 4_096 {
        errors.push(FieldError::new("description", "is longer than 4096 bytes"));
    }
    let armed = arm(&spec.trigger, ctx, &mut errors);
    check_job(
        &spec.action,
        spec.cwd.as_deref(),
        (&spec.env, &spec.secrets),
        ctx,
        &mut errors,
    );
    check_policies(&spec, &mut errors);
    check_target(&spec, &mut errors);
    crate::notify::check_notify(&spec.notify, ctx, &mut errors);
    check_chain(
        "on_success",
        spec.on_success.as_deref(),
        1,
        ctx,
        &mut errors,
    );
    check_chain("on_fail", spec.on_fail.as_deref(), 1, ctx, &mut errors);
    match armed {
        Some(armed) if errors.is_empty() => Ok(Validated { spec, armed }),
        _ => Err(errors),
    }
}

/// Why `executable` may not run, with the command that allows it.
pub fn not_allowed(executable: &str) -> String {
    format!(
        "{executable:?} is not on the command allow-list; the machine's owner can allow it \
         from a terminal with: studio allow add {}",
        shell_word(executable)
    )
}

/// `word` as one shell word: as it is when that is safe, else single-quoted.
fn shell_word(word: &str) -> String {
    let plain = word
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+' | ':' | '@'));
    if plain && !word.is_empty() {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

fn check_name(name: &str, errors: &mut Vec<FieldError>) {
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if name.is_empty() || name.len() > 128 {
        errors.push(FieldError::new("name", "must be 1 to 128 characters"));
    } else if !ok_chars || name.starts_with('/') || name.ends_with('/') || name.contains("//") {
        errors.push(FieldError::new(
            "name",
            "use letters, digits, '-', '_', '.' and '/' between parts (like nightly/reindex)",
        ));
    }
}

fn arm(trigger: &Trigger, ctx: &Context<'_>, errors: &mut Vec<FieldError>) -> Option<Armed> {
    match trigger {
        Trigger::Cron(c) => {
            let zone = match &c.timezone {
                Some(name) => match Zone::named(name, ZoneSource::Schedule) {
                    Ok(z) => Some(z),
                    Err(e) => {
                        errors.push(FieldError::new("trigger.cron.timezone", e));
                        None
                    }
                },
                None => Some(ctx.default_zone.clone()),
            };
            let cron = match parse_cron(&c.expression) {
                Ok(cron) => Some(cron),
                Err(e) => {
                    errors.push(FieldError::new("trigger.cron.expression", e));
                    None
                }
            };
            let armed = Armed::Cron {
                cron: Box::new(cron?),
                zone: zone?,
            };
            // A valid-looking expression that can never fire is refused, not left unarmed.
            if armed.next_after(ctx.now_ms.unwrap_or(0), 0).is_none() {
                errors.push(FieldError::new(
                    "trigger.cron.expression",
                    format!("{:?} can never fire (no such date)", c.expression),
                ));
                return None;
            }
            Some(armed)
        }
        Trigger::Every(text) => match parse_interval(text) {
            Ok(period_ms) => Some(Armed::Every { period_ms }),
            Err(e) => {
                errors.push(FieldError::new("trigger.every", e));
                None
            }
        },
        Trigger::At(text) => match text.parse::<Timestamp>() {
            Ok(ts) if ctx.now_ms.is_some_and(|now| ts.as_millisecond() <= now) => {
                errors.push(FieldError::new(
                    "trigger.at",
                    format!("{text} is in the past"),
                ));
                None
            }
            Ok(ts) => Some(Armed::At {
                at_ms: ts.as_millisecond(),
            }),
            Err(_) => {
                errors.push(FieldError::new(
                    "trigger.at",
                    "must be an RFC 3339 instant with an offset, like 2026-12-01T09:00:00+01:00",
                ));
                None
            }
        },
    }
}

/// What a job is (a schedule's or a task's): its action, working directory,
/// environment, and the secrets its environment receives (`secrets`: variable → secret).
pub(crate) fn check_job(
    action: &Action,
    cwd: Option<&str>,
    (env, secrets): (&BTreeMap<String, String>, &BTreeMap<String, String>),
    ctx: &Context<'_>,
    errors: &mut Vec<FieldError>,
) {
    check_action("action", action, ctx, errors);
    if let Some(cwd) = cwd
        && (!cwd.starts_with('/') || cwd.contains('\0'))
    {
        errors.push(FieldError::new(
            "cwd",
            "must be an absolute path (declaration files may give one relative to the file)",
        ));
    }
    for (key, value) in env {
        let path = format!("env.{key}");
        check_variable(&path, key, errors);
        if value.contains('\0') {
            errors.push(FieldError::new(&path, "must not contain a NUL byte"));
        }
    }
    if secrets.len() > MAX_SECRETS {
        errors.push(FieldError::new(
            "secrets",
            format!("at most {MAX_SECRETS} secrets"),
        ));
    }
    // One reason a variable: the first that applies.
    for (key, secret) in secrets {
        let path = format!("secrets.{key}");
        if !check_variable(&path, key, errors) {
            continue;
        }
        if env.contains_key(key) {
            errors.push(FieldError::new(
                &path,
                "is also set in env: give the variable once",
            ));
        } else if !is_secret_name(secret) {
            errors.push(FieldError::new(
                &path,
                "a secret's name is 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit",
            ));
        } else if let Some(known) = ctx.secrets
            && !known.iter().any(|k| k == secret)
        {
            errors.push(FieldError::new(
                &path,
                format!(
                    "no secret is named {secret:?} (set one with `studio secret set {secret}`)"
                ),
            ));
        }
    }
}

/// The most secrets one job may receive.
pub const MAX_SECRETS: usize = 64;

/// Whether `name` may name a secret: 1 to 64 of `A-Z a-z 0-9 _ . -`, the first a letter or
/// a digit.
pub fn is_secret_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// An environment variable's name at `path`: letters, digits and `_`, and one a job may
/// be given; `false` when it is not.
fn check_variable(path: &str, key: &str, errors: &mut Vec<FieldError>) -> bool {
    let valid_key = key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid_key {
        errors.push(FieldError::new(
            path,
            "a variable name is letters, digits and _, not starting with a digit",
        ));
    } else if let Some(why) = jobenv::refusal(key) {
        errors.push(FieldError::new(path, why));
    } else {
        return true;
    }
    false
}

/// A job's deadline in seconds: at least one, at most [`MAX_DEADLINE_SECS`].
pub(crate) fn check_deadline(path: &str, deadline: Option<u64>, errors: &mut Vec<FieldError>) {
    match deadline {
        Some(0) => errors.push(FieldError::new(path, "must be at least 1 second")),
        Some(d) if d > MAX_DEADLINE_SECS => errors.push(FieldError::new(
            path,
            format!("must be at most {MAX_DEADLINE_SECS} seconds (7 days)"),
        )),
        _ => {}
    }
}

/// A target: 1 to 32 labels.
fn check_target(spec: &ScheduleSpec, errors: &mut Vec<FieldError>) {
    let Some(target) = &spec.target else {
        return;
    };
    if target.labels.is_empty() || target.labels.len() > crate::task::MAX_LABELS {
        errors.push(FieldError::new(
            "target.labels",
            format!("name 1 to {} labels", crate::task::MAX_LABELS),
        ));
    }
    for (i, label) in target.labels.iter().enumerate() {
        if !crate::task::is_label(label) {
            errors.push(FieldError::new(
                format!("target.labels[{i}]"),
                "a label is 1 to 64 letters, digits, '.', '_' or '-'",
            ));
        }
    }
}

/// An approval policy's wait.
pub(crate) fn check_approval(
    path: &str,
    approval: Option<&crate::spec::ApprovalPolicy>,
    errors: &mut Vec<FieldError>,
) {
    if let Some(a) = approval {
        match parse_interval(&a.expires_after) {
            Err(why) => errors.push(FieldError::new(path, why)),
            Ok(ms) if ms > MAX_APPROVAL_WAIT_MS => {
                errors.push(FieldError::new(path, "must be at most 30d"));
            }
            Ok(_) => {}
        }
    }
}

fn check_action(path: &str, action: &Action, ctx: &Context<'_>, errors: &mut Vec<FieldError>) {
    match action {
        Action::Command { executable, args } => {
            let exe_path = format!("{path}.executable");
            if executable.is_empty() || executable.contains('\0') {
                errors.push(FieldError::new(&exe_path, "must name an executable"));
            } else if executable.contains('/') && !executable.starts_with('/') {
                errors.push(FieldError::new(
                    &exe_path,
                    "must be a name on the command allow-list or an absolute path on it, \
                     never a relative path",
                ));
            } else if let Some(list) = ctx.allowlist
                && !list.iter().any(|e| e == executable)
            {
                errors.push(FieldError::new(&exe_path, not_allowed(executable)));
            }
            for (i, arg) in args.iter().enumerate() {
                if arg.contains('\0') {
                    errors.push(FieldError::new(
                        format!("{path}.args[{i}]"),
                        "must not contain a NUL byte",
                    ));
                }
            }
        }
        Action::Agent { prompt, .. } => {
            if prompt.trim().is_empty() {
                errors.push(FieldError::new(
                    format!("{path}.prompt"),
                    "must not be empty",
                ));
            }
            if prompt.contains('\0') {
                errors.push(FieldError::new(
                    format!("{path}.prompt"),
                    "must not contain a NUL byte",
                ));
            }
        }
    }
}

/// The longest an approval request may wait for a decision.
pub const MAX_APPROVAL_WAIT_MS: i64 = 30 * 86_400_000;

fn check_policies(spec: &ScheduleSpec, errors: &mut Vec<FieldError>) {
    let p = &spec.policies;
    if p.max_runs == Some(0) {
        errors.push(FieldError::new("policies.max_runs", "must be at least 1"));
    }
    check_deadline("policies.deadline", p.deadline, errors);
    if p.budget_usd.is_some_and(|b| !b.is_finite() || b < 0.0) {
        errors.push(FieldError::new(
            "policies.budget_usd",
            "must be a non-negative amount",
        ));
    }
    check_approval(
        "policies.approval.expires_after",
        p.approval.as_ref(),
        errors,
    );
    if let Some(r) = &p.retry {
        crate::task::check_retry("policies.retry", r, errors);
    }
    if let Some(r) = p.rate_limit {
        if r.max_fires == 0 {
            errors.push(FieldError::new(
                "policies.rate_limit.max_fires",
                "must be at least 1",
            ));
        }
        if r.window_seconds == 0 {
            errors.push(FieldError::new(
                "policies.rate_limit.window_seconds",
                "must be at least 1",
            ));
        }
    }
}

fn check_chain(
    path: &str,
    node: Option<&FollowUp>,
    depth: usize,
    ctx: &Context<'_>,
    errors: &mut Vec<FieldError>,
) {
    let Some(node) = node else { return };
    if depth > MAX_CHAIN_DEPTH {
        errors.push(FieldError::new(
            path,
            format!("chains are at most {MAX_CHAIN_DEPTH} deep"),
        ));
        return;
    }
    check_action(&format!("{path}.action"), &node.action, ctx, errors);
    check_chain(
        &format!("{path}.on_success"),
        node.on_success.as_deref(),
        depth + 1,
        ctx,
        errors,
    );
    check_chain(
        &format!("{path}.on_fail"),
        node.on_fail.as_deref(),
        depth + 1,
        ctx,
        errors,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(zone: &Zone) -> Context<'_> {
        Context {
            default_zone: zone,
            allowlist: None,
            secrets: None,
            endpoints: None,
            now_ms: Some(1_795_000_000_000),
            require_name: true,
        }
    }

    fn check(json: &str) -> Result<Validated, Vec<FieldError>> {
        let zone = Zone::utc();
        let spec = parse_json(json).map_err(|e| vec![e])?;
        validate(spec, &ctx(&zone))
    }

    fn paths(json: &str) -> Vec<String> {
        check(json)
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|e| e.path)
            .collect()
    }

    #[test]
    fn a_full_spec_validates_and_round_trips() {
        let json = r#"{"name":"nightly/reindex","description":"d",
            "trigger":{"cron":{"expression":"0 2 * * *","timezone":"Europe/Berlin"}},
            "action":{"kind":"command","executable":"reindex","args":["--full"]},
            "cwd":"/srv","env":{"MODE":"full"},
            "policies":{"missed_fire":"run_once","overlap":"replace","max_runs":5,"deadline":3600,
                        "budget_usd":2.5,"rate_limit":{"max_fires":3,"window_seconds":60}},
            "on_success":{"action":{"kind":"agent","prompt":"summarise"},
                          "on_fail":{"action":{"kind":"command","executable":"notify"}}}}"#;
        let v = check(json).expect("valid");
        assert_eq!(
            v.armed.zone().map(|z| z.name.as_str()),
            Some("Europe/Berlin")
        );
        let back = serde_json::to_string(&v.spec).expect("ser");
        assert_eq!(parse_json(&back).expect("re-parse"), v.spec);
    }

    #[test]
    fn unknown_fields_are_refused_with_their_path() {
        let e = parse_json(r#"{"name":"a","trigger":{"every":"5m"},"action":{"kind":"command","executable":"x","bogus":1}}"#)
            .expect_err("unknown field");
        assert_eq!(e.path, "action");
        assert!(e.reason.contains("bogus"), "{e}");
        let e = parse_json(r#"{"name":"a","trigger":{"every":"5m"},"action":{"kind":"command","executable":"x"},"policies":{"overlap":"sometimes"}}"#)
            .expect_err("bad enum");
        assert_eq!(e.path, "policies.overlap");
        let e = parse_json(r#"{"name":"a","trigger":{"every":"5m","at":"x"},"action":{"kind":"command","executable":"x"}}"#)
            .expect_err("two triggers");
        assert!(e.path.starts_with("trigger"), "{e}");
    }

    #[test]
    fn the_approval_policy_has_defaults_and_a_bounded_wait() {
        let spec = |policy: &str| {
            parse_json(&format!(
                r#"{{"name":"a","trigger":{{"every":"5m"}},"action":{{"kind":"command","executable":"x"}},"policies":{{"approval":{policy}}}}}"#
            ))
        };
        let s = spec("{}").expect("defaults");
        let a = s.policies.approval_required().expect("required by default");
        assert_eq!(
            (a.expires_after.as_str(), a.distinct_from_requester),
            ("1h", false)
        );
        let s = spec(r#"{"required":false}"#).expect("off");
        assert!(s.policies.approval_required().is_none());
        assert!(spec(r#"{"required":true,"who":"me"}"#).is_err(), "closed");
        let p = paths(
            r#"{"name":"a","trigger":{"every":"5m"},"action":{"kind":"command","executable":"x"},
                "policies":{"approval":{"expires_after":"soon"}}}"#,
        );
        assert_eq!(p, ["policies.approval.expires_after"]);
    }

    #[test]
    fn a_target_names_labels_and_takes_follow_ups_and_approvals() {
        let ok = r#"{"name":"a","trigger":{"every":"5m"},"action":{"kind":"command","executable":"x"},
            "target":{"labels":["gpu","linux"]}}"#;
        assert!(paths(ok).is_empty());
        let spec = parse_json(ok).expect("spec");
        assert_eq!(spec.target.expect("target").labels_key(), "gpu,linux");
        let p = paths(
            r#"{"name":"a","trigger":{"every":"5m"},"action":{"kind":"command","executable":"x"},
                "target":{"labels":["a b"]},"policies":{"approval":{}},
                "on_fail":{"action":{"kind":"command","executable":"x"}}}"#,
        );
        assert_eq!(p, ["target.labels[0]"]);
        let p = paths(
            r#"{"name":"a","trigger":{"every":"5m"},"action":{"kind":"command","executable":"x"},
                "target":{"labels":[]}}"#,
        );
        assert_eq!(p, ["target.labels"]);
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let p = paths(
            r#"{"trigger":{"cron":{"expression":"0 0 31 2 *","timezone":"Nowhere/Land"}},
                "action":{"kind":"agent","prompt":" "},"env":{"1X":"a","STUDIO_RUN_ID":"b"},
                "policies":{"max_runs":0,"deadline":0,"budget_usd":-1,"rate_limit":{"max_fires":0,"window_seconds":0},
                            "approval":{"expires_after":"31d"}}}"#,
        );
        for want in [
            "name",
            "trigger.cron.timezone",
            "action.prompt",
            "env.1X",
            "env.STUDIO_RUN_ID",
            "policies.max_runs",
            "policies.deadline",
            "policies.budget_usd",
            "policies.rate_limit.max_fires",
            "policies.rate_limit.window_seconds",
            "policies.approval.expires_after",
        ] {
            assert!(p.contains(&want.to_owned()), "missing {want} in {p:?}");
        }
    }

    #[test]
    fn impossible_cron_and_bad_instants_are_refused() {
        let base = |trigger: &str| {
            format!(
                r#"{{"name":"n","trigger":{trigger},"action":{{"kind":"command","executable":"true"}}}}"#
            )
        };
        let e = check(&base(r#"{"cron":{"expression":"0 0 31 2 *"}}"#)).expect_err("never fires");
        assert!(e[0].reason.contains("never fire"), "{e:?}");
        assert_eq!(
            paths(&base(r#"{"cron":{"expression":"61 * * * *"}}"#)),
            ["trigger.cron.expression"]
        );
        assert_eq!(paths(&base(r#"{"every":"5 minutes"}"#)), ["trigger.every"]);
        assert_eq!(
            paths(&base(r#"{"at":"2030-01-01T09:00:00"}"#)),
            ["trigger.at"],
            "no offset"
        );
        assert_eq!(
            paths(&base(r#"{"at":"2020-01-01T09:00:00Z"}"#)),
            ["trigger.at"],
            "past"
        );
        assert!(check(&base(r#"{"at":"2030-01-01T09:00:00+01:00"}"#)).is_ok());
    }

    #[test]
    fn the_allow_list_and_chain_depth_are_enforced() {
        let zone = Zone::utc();
        let list = vec!["true".to_owned()];
        let c = Context {
            allowlist: Some(&list),
            secrets: None,
            endpoints: None,
            ..ctx(&zone)
        };
        let spec = parse_json(r#"{"name":"n","trigger":{"every":"1m"},"action":{"kind":"command","executable":"rm"}}"#).expect("parse");
        let e = validate(spec, &c).expect_err("not allowed");
        assert_eq!(e[0].path, "action.executable");
        let mut chain = String::from(r#"{"action":{"kind":"command","executable":"true"}}"#);
        for _ in 0..MAX_CHAIN_DEPTH {
            chain = format!(
                r#"{{"action":{{"kind":"command","executable":"true"}},"on_success":{chain}}}"#
            );
        }
        let json = format!(
            r#"{{"name":"n","trigger":{{"every":"1m"}},"action":{{"kind":"command","executable":"true"}},"on_fail":{chain}}}"#
        );
        let e = validate(parse_json(&json).expect("parse"), &c).expect_err("too deep");
        assert!(e[0].reason.contains("deep"), "{e:?}");
    }

    #[test]
    fn names_are_checked() {
        for bad in ["", "/a", "a/", "a//b", "a b", "ä"] {
            let json = format!(
                r#"{{"name":{bad:?},"trigger":{{"every":"1m"}},"action":{{"kind":"command","executable":"true"}}}}"#
            );
            assert_eq!(paths(&json), ["name"], "{bad:?}");
        }
    }

    #[test]
    fn a_schedule_cannot_change_which_code_runs() {
        // The escapes of an allow-list of names: the search path, the loader, a relative
        // working directory with a relative executable.
        let p = paths(
            r#"{"name":"a","trigger":{"every":"5m"},
                "action":{"kind":"command","executable":"./echo"},"cwd":"payload",
                "env":{"PATH":".","LD_PRELOAD":"/tmp/x.so","LD_AUDIT":"/tmp/x.so",
                       "PYTHONPATH":"/tmp","MODE":"ok"},
                "on_fail":{"action":{"kind":"command","executable":"bin/echo"}}}"#,
        );
        assert_eq!(
            p,
            [
                "action.executable",
                "cwd",
                "env.LD_AUDIT",
                "env.LD_PRELOAD",
                "env.PATH",
                "env.PYTHONPATH",
                "on_fail.action.executable",
            ],
        );
    }

    #[test]
    fn the_allow_list_is_exact_and_its_refusal_names_the_command_to_run() {
        let zone = Zone::utc();
        let list = ["echo".to_owned(), "/opt/tools/run".to_owned()];
        let ctx = Context {
            allowlist: Some(&list),
            secrets: None,
            endpoints: None,
            ..ctx(&zone)
        };
        let with = |exe: &str| {
            let json = format!(
                r#"{{"name":"a","trigger":{{"every":"5m"}},"action":{{"kind":"command","executable":{exe:?}}}}}"#
            );
            validate(parse_json(&json).expect("parses"), &ctx)
        };
        assert!(with("echo").is_ok());
        assert!(with("/opt/tools/run").is_ok());
        for refused in ["/bin/echo", "run", "/opt/tools/../tools/run", "my tool"] {
            let errors = with(refused).expect_err(refused);
            assert_eq!(errors[0].path, "action.executable");
            assert!(
                errors[0].reason.contains("studio allow add"),
                "{}",
                errors[0]
            );
        }
        let errors = with("my tool").expect_err("refused");
        assert!(
            errors[0].reason.ends_with("studio allow add 'my tool'"),
            "{}",
            errors[0]
        );
    }
}
