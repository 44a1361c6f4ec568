//! `render_yaml` is the inverse of loading: any valid set renders to YAML that loads back
//! to an equal set with no diagnostics, and rendering is deterministic.

use std::{collections::BTreeMap, path::Path};

use proptest::{collection, option, prelude::*};
use studio_schedule::{
    Action, ApprovalPolicy, Backoff, CronTrigger, FollowUp, Format, LoadOptions, MissedFire,
    OnDaemonLoss, Overlap, Policies, RateLimit, RetryOn, RetryPolicy, ScheduleSpec, Trigger, Zone,
    declaration::{API_VERSION, KIND, Metadata, ScheduleSet},
    parse_str, render_yaml,
};

const NOW_MS: i64 = 1_795_000_000_000;

fn part() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}"
}

/// Text a user might write: quotes, colons, hashes, YAML words, digits, unicode, escapes.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~]{0,24}",
        Just("yes".to_owned()),
        Just("8080".to_owned()),
        Just("null".to_owned()),
        Just("- x: [y] # z".to_owned()),
        "[a-zé\u{2028}\u{85}\u{7f}\u{FEFF}\t\n\"'\\\\ ]{0,12}",
    ]
}

fn some_text() -> impl Strategy<Value = String> {
    text().prop_filter("non-empty", |s| !s.trim().is_empty())
}

fn trigger() -> impl Strategy<Value = Trigger> {
    let cron = prop_oneof![
        Just("0 2 * * *"),
        Just("*/15 * * * *"),
        Just("30 1 * * MON-FRI"),
        Just("0 0 1 * *")
    ];
    let zone = option::of(prop_oneof![
        Just("Europe/Berlin"),
        Just("UTC"),
        Just("America/New_York")
    ]);
    prop_oneof![
        (cron, zone).prop_map(|(e, z)| Trigger::Cron(CronTrigger {
            expression: e.to_owned(),
            timezone: z.map(str::to_owned)
        })),
        prop_oneof![
            Just("90s"),
            Just("15m"),
            Just("6h"),
            Just("2d"),
            Just("1h30m")
        ]
        .prop_map(|s| Trigger::Every(s.to_owned())),
        prop_oneof![
            Just("2030-01-01T09:00:00+01:00"),
            Just("2031-06-30T23:59:59Z")
        ]
        .prop_map(|s| Trigger::At(s.to_owned())),
    ]
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        // A bare name: validation refuses a relative path.
        (some_text(), collection::vec(text(), 0..4)).prop_map(|(executable, args)| {
            Action::Command {
                executable: executable.replace('/', "_"),
                args,
            }
        }),
        (some_text(), option::of(text()), option::of(text())).prop_map(
            |(prompt, model, profile)| Action::Agent {
                prompt,
                model,
                profile
            }
        ),
    ]
}

fn follow_up() -> impl Strategy<Value = Option<Box<FollowUp>>> {
    let leaf = action().prop_map(|action| FollowUp {
        action,
        on_success: None,
        on_fail: None,
    });
    let chain = leaf.prop_recursive(3, 8, 2, |inner| {
        (action(), option::of(inner.clone()), option::of(inner)).prop_map(|(action, s, f)| {
            FollowUp {
                action,
                on_success: s.map(Box::new),
                on_fail: f.map(Box::new),
            }
        })
    });
    option::of(chain.prop_map(Box::new))
}

fn policies() -> impl Strategy<Value = Policies> {
    (
        prop_oneof![Just(MissedFire::Skip), Just(MissedFire::RunOnce)],
        prop_oneof![
            Just(Overlap::Skip),
            Just(Overlap::Allow),
            Just(Overlap::Replace)
        ],
        option::of(1u64..1_000_000),
        option::of(1u64..=604_800),
        option::of(prop_oneof![Just(0.0), Just(2.5), Just(0.1), 0.0f64..1e6]),
        option::of((1u32..100, 1u64..86_400)),
        prop_oneof![Just(OnDaemonLoss::Continue), Just(OnDaemonLoss::Kill)],
        option::of((
            any::<bool>(),
            prop_oneof![Just("90s"), Just("15m"), Just("1h30m"), Just("2d")],
            any::<bool>(),
        )),
        option::of((
            1u32..10,
            prop_oneof![Just("1s"), Just("5s"), Just("1m")],
            1u32..5,
            collection::vec(0i64..256, 0..3),
        )),
    )
        .prop_map(
            |(
                missed_fire,
                overlap,
                max_runs,
                deadline,
                budget_usd,
                rate,
                on_daemon_loss,
                approval,
                retry,
            )| {
                Policies {
                    missed_fire,
                    overlap,
                    max_runs,
                    deadline,
                    budget_usd,
                    rate_limit: rate.map(|(max_fires, window_seconds)| RateLimit {
                        max_fires,
                        window_seconds,
                    }),
                    on_daemon_loss,
                    approval: approval.map(|(required, expires_after, distinct)| ApprovalPolicy {
                        required,
                        expires_after: expires_after.into(),
                        distinct_from_requester: distinct,
                    }),
                    retry: retry.map(|(max_attempts, initial, factor, exit_codes)| RetryPolicy {
                        max_attempts,
                        backoff: Backoff {
                            initial: initial.into(),
                            max: "5m".into(),
                            factor,
                        },
                        on: vec![RetryOn::Failed, RetryOn::WorkerLost],
                        exit_codes,
                    }),
                }
            },
        )
}

fn spec() -> impl Strategy<Value = ScheduleSpec> {
    (
        (text(), any::<bool>(), trigger(), action()),
        (
            option::of("/[a-z0-9/ ._-]{0,20}"),
            collection::btree_map("[A-Z_][A-Z0-9_]{0,8}", text(), 0..4).prop_map(|env| {
                env.into_iter()
                    .filter(|(k, _)| studio_contract::jobenv::refusal(k).is_none())
                    .collect()
            }),
            policies(),
            follow_up(),
            follow_up(),
        ),
    )
        .prop_map(
            |(
                (description, enabled, trigger, action),
                (cwd, env, policies, on_success, on_fail),
            )| {
                // Secrets named after some of the variables (any names round-trip).
                let env: BTreeMap<String, String> = env;
                let secrets = env
                    .keys()
                    .take(2)
                    .map(|k| (format!("S_{k}"), format!("secret.{}", k.len())))
                    .collect();
                ScheduleSpec {
                    target: None,
                    name: None,
                    description,
                    enabled,
                    trigger,
                    action,
                    cwd,
                    env,
                    secrets,
                    notify: Vec::new(),
                    policies,
                    on_success,
                    on_fail,
                }
            },
        )
}

fn set() -> impl Strategy<Value = ScheduleSet> {
    (part(), part(), collection::btree_map(part(), spec(), 0..4)).prop_map(
        |(name, project, schedules)| ScheduleSet {
            api_version: API_VERSION.to_owned(),
            kind: KIND.to_owned(),
            metadata: Metadata { name, project },
            schedules: schedules.into_iter().collect::<BTreeMap<_, _>>(),
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn rendered_yaml_loads_back_equal(set in set()) {
        let zone = Zone::utc();
        let opts = LoadOptions { default_zone: &zone, allowlist: None, now_ms: Some(NOW_MS) };
        let yaml = render_yaml(&set);
        prop_assert_eq!(&render_yaml(&set), &yaml, "deterministic");
        let (back, diagnostics) = parse_str(&yaml, Format::Yaml, Path::new("/export.yaml"), &opts);
        prop_assert!(diagnostics.is_empty(), "{:?}\n{}", diagnostics, yaml);
        prop_assert_eq!(back.as_ref(), Some(&set), "{}", yaml);
        let json = serde_json::to_string(&set).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let from_json: ScheduleSet = serde_json::from_str(&json).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(from_json, set);
    }
}

#[test]
fn a_small_set_renders_as_expected() {
    let text = "apiVersion: studio/v1\nkind: ScheduleSet\nmetadata: {name: nightly, project: demo}\nschedules:\n  reindex:\n    trigger: {cron: {expression: \"0 2 * * *\"}}\n    action: {kind: command, executable: reindex, args: [--full]}\n    policies: {overlap: allow}\n";
    let zone = Zone::utc();
    let opts = LoadOptions {
        default_zone: &zone,
        allowlist: None,
        now_ms: Some(NOW_MS),
    };
    let (set, d) = parse_str(text, Format::Yaml, Path::new("/a.yaml"), &opts);
    assert!(d.is_empty(), "{d:?}");
    let set = set.expect("loads");
    assert_eq!(
        render_yaml(&set),
        "apiVersion: studio/v1\nkind: ScheduleSet\nmetadata:\n  name: nightly\n  project: demo\nschedules:\n  reindex:\n    action:\n      args:\n        - \"--full\"\n      executable: reindex\n      kind: command\n    policies:\n      overlap: allow\n    trigger:\n      cron:\n        expression: \"0 2 * * *\"\n"
    );
}
