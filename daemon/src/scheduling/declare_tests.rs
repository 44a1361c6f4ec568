//! Planning rules, one action kind at a time, and their execution against a real store:
//! unchanged writes nothing, a stale row rolls the whole plan back.

use serde_json::{Value, json};
use studio_schedule::Zone;

use super::*;
use crate::{
    scheduling::store::{PlanError, SchedStore},
    testing::TempDir,
};

const NOW: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

fn allow() -> Vec<String> {
    vec!["reindex".into(), "report".into()]
}

fn document(project: &str, name: &str, schedules: Value) -> SourcedDocument {
    SourcedDocument {
        source: format!("{name}.yaml"),
        document: json!({
            "apiVersion": "studio/v1",
            "kind": "ScheduleSet",
            "metadata": {"name": name, "project": project},
            "schedules": schedules,
        }),
    }
}

fn request(documents: Vec<SourcedDocument>) -> Request {
    Request {
        documents,
        prune: false,
        adopt: false,
        expected: BTreeMap::new(),
    }
}

fn cron(expression: &str) -> Value {
    json!({"trigger": {"cron": {"expression": expression}}, "action": {"kind": "command", "executable": "reindex"}})
}

fn planned(rows: &[ScheduleRow], req: &Request, now: i64) -> Plan {
    let zone = Zone::utc();
    let allowlist = allow();
    plan(
        rows,
        req,
        Env {
            default_zone: &zone,
            allowlist: &allowlist,
            secrets: None,
            endpoints: None,
            now_ms: now,
        },
    )
}

/// `(name, action)` of every change.
fn actions(plan: &Plan) -> Vec<(String, &'static str)> {
    plan.changes
        .iter()
        .map(|c| (c.name.clone().unwrap_or_default(), c.action.kind().as_str()))
        .collect()
}

fn errors(plan: &Plan) -> Vec<(String, String)> {
    plan.changes
        .iter()
        .filter_map(|c| match &c.action {
            Action::Error { path, reason } => Some((path.clone(), reason.clone())),
            _ => None,
        })
        .collect()
}

/// A hand-made schedule, as `POST /api/schedules` would store it.
fn hand_made(name: &str) -> ScheduleRow {
    let mut spec = serde_json::from_value::<ScheduleSpec>(cron("0 2 * * *")).expect("spec");
    spec.name = Some(name.into());
    let zone = Zone::utc();
    let allowlist = allow();
    let ctx = Context {
        default_zone: &zone,
        allowlist: Some(&allowlist),
        secrets: None,
        endpoints: None,
        now_ms: Some(NOW),
        require_name: true,
    };
    new_row(
        &validate(spec, &ctx).expect("valid"),
        format!("id-{name}"),
        NOW,
    )
}

async fn store(dir: &TempDir) -> SchedStore {
    let store = crate::testing::open_store(dir).await;
    SchedStore::with_test_key(&store)
}

async fn apply(s: &SchedStore, req: &Request, now: i64) -> Plan {
    let rows = s.all_schedules().await.expect("rows");
    let plan = planned(&rows, req, now);
    assert!(!plan.has_errors(), "{:?}", plan.view());
    s.apply_plan(&plan.writes(), now, None)
        .await
        .expect("apply");
    plan
}

#[tokio::test]
async fn create_then_reapply_writes_nothing() {
    let dir = TempDir::new("decl-same");
    let s = store(&dir).await;
    let req = request(vec![document(
        "demo",
        "nightly",
        json!({"reindex": cron("0 2 * * *"), "report": {"trigger": {"every": "1h"},
               "action": {"kind": "command", "executable": "report"}, "enabled": false}}),
    )]);
    let first = apply(&s, &req, NOW).await;
    assert_eq!(
        actions(&first),
        [
            ("demo/reindex".into(), "create"),
            ("demo/report".into(), "create")
        ]
    );
    assert_eq!(first.view().summary[&ChangeKind::Create], 2);
    assert_eq!(
        first.view().changes[0].owner.as_deref(),
        Some("demo/nightly")
    );
    let before = s.all_schedules().await.expect("rows");
    assert_eq!(before[0].managed_by.as_deref(), Some("declaration"));
    assert_eq!(before[0].owner_key.as_deref(), Some("demo/nightly"));
    assert_eq!(before[0].source.as_deref(), Some("nightly.yaml"));
    assert!(before[0].next_fire_at_ms.is_some() && before[1].next_fire_at_ms.is_none());
    let seq = s.latest_event_seq().await.expect("seq");

    let again = apply(&s, &req, NOW + 60_000).await;
    assert_eq!(
        actions(&again),
        [
            ("demo/reindex".into(), "unchanged"),
            ("demo/report".into(), "unchanged")
        ]
    );
    assert_eq!(again.view().changes[0].revision, Some(1));
    assert_eq!(
        s.all_schedules().await.expect("rows"),
        before,
        "no revision, no updated_at"
    );
    assert_eq!(s.latest_event_seq().await.expect("seq"), seq, "no event");
}

#[tokio::test]
async fn update_lists_fields_and_rearms() {
    let dir = TempDir::new("decl-upd");
    let s = store(&dir).await;
    apply(
        &s,
        &request(vec![document(
            "demo",
            "nightly",
            json!({"reindex": cron("0 1 * * *")}),
        )]),
        NOW,
    )
    .await;
    let mut changed = cron("0 2 * * *");
    changed["policies"] = json!({"deadline": 3600});
    let req = request(vec![document(
        "demo",
        "nightly",
        json!({"reindex": changed}),
    )]);
    let plan = apply(&s, &req, NOW + 1_000).await;
    let change = &plan.view().changes[0];
    assert_eq!(change.action, ChangeKind::Update);
    assert_eq!(change.revision, Some(1));
    assert_eq!(
        change.fields.as_deref(),
        Some(
            &[
                field("policies.deadline", json!(null), json!(3600)),
                field(
                    "trigger.cron.expression",
                    json!("0 1 * * *"),
                    json!("0 2 * * *")
                ),
            ][..]
        )
    );
    let row = &s.all_schedules().await.expect("rows")[0];
    assert_eq!(row.revision, 2);
    assert_eq!(
        row.next_fire_at_ms,
        Some(NOW + 2 * 3_600_000),
        "02:00 the same day"
    );
    assert_eq!(row.updated_at_ms, NOW + 1_000);
}

#[tokio::test]
async fn the_approval_policy_is_declared_like_any_policy() {
    let dir = TempDir::new("decl-approval");
    let s = store(&dir).await;
    let mut gated = cron("0 1 * * *");
    gated["policies"] = json!({"approval": {"expires_after": "15m"}});
    let req =
        |member: &Value| request(vec![document("demo", "nightly", json!({"deploy": member}))]);
    apply(&s, &req(&gated), NOW).await;
    let row = &s.all_schedules().await.expect("rows")[0];
    let spec: studio_schedule::ScheduleSpec = serde_json::from_str(&row.spec).expect("spec");
    let policy = spec
        .policies
        .approval_required()
        .expect("stored with its defaults");
    assert_eq!(
        (
            policy.expires_after.as_str(),
            policy.distinct_from_requester
        ),
        ("15m", false)
    );
    gated["policies"]["approval"]["distinct_from_requester"] = json!(true);
    let plan = apply(&s, &req(&gated), NOW + 1_000).await;
    assert_eq!(
        plan.view().changes[0].fields.as_deref(),
        Some(
            &[field(
                "policies.approval.distinct_from_requester",
                json!(false),
                json!(true)
            )][..]
        )
    );
    let again = apply(&s, &req(&gated), NOW + 2_000).await;
    assert_eq!(actions(&again), [("demo/deploy".into(), "unchanged")]);
}

#[tokio::test]
async fn absent_members_disable_or_prune() {
    let dir = TempDir::new("decl-gone");
    let s = store(&dir).await;
    let both = json!({"a": cron("0 1 * * *"), "b": cron("0 2 * * *")});
    apply(&s, &request(vec![document("demo", "n", both)]), NOW).await;
    let only_a = request(vec![document("demo", "n", json!({"a": cron("0 1 * * *")}))]);
    let plan = apply(&s, &only_a, NOW).await;
    assert_eq!(
        actions(&plan),
        [("demo/a".into(), "unchanged"), ("demo/b".into(), "disable")]
    );
    let b = s.all_schedules().await.expect("rows").remove(1);
    assert!(!b.enabled && b.next_fire_at_ms.is_none());
    assert_eq!(b.revision, 2);
    // Already disabled and still absent: nothing to do, unless pruning.
    let still = planned(std::slice::from_ref(&b), &only_a, NOW);
    assert_eq!(actions(&still)[1], ("demo/b".into(), "unchanged"));
    let mut prune = only_a.clone();
    prune.prune = true;
    let plan = apply(&s, &prune, NOW).await;
    assert_eq!(actions(&plan)[1], ("demo/b".into(), "delete"));
    assert_eq!(s.all_schedules().await.expect("rows").len(), 1);
    // Declared again: it comes back as a new schedule.
    let back = planned(
        &[b],
        &request(vec![document("demo", "n", json!({"b": cron("0 2 * * *")}))]),
        NOW,
    );
    let change = &back.view().changes[0];
    assert_eq!(change.action, ChangeKind::Update);
    assert_eq!(
        change.fields.as_deref(),
        Some(&[field("enabled", json!(false), json!(true))][..])
    );
}

#[test]
fn ownership_is_respected_and_adopt_is_explicit() {
    let manual = hand_made("demo/manual");
    let mut theirs = hand_made("demo/theirs");
    theirs.managed_by = Some("declaration".into());
    theirs.owner_key = Some("demo/other".into());
    let rows = [manual, theirs];
    let members = json!({"manual": cron("0 2 * * *"), "theirs": cron("0 2 * * *")});
    let mut req = request(vec![document("demo", "nightly", members)]);
    let plan = planned(&rows, &req, NOW);
    assert_eq!(
        errors(&plan),
        [
            (
                "schedules.manual".into(),
                "created by hand; not owned by demo/nightly (apply with adopt to take it over)"
                    .into()
            ),
            (
                "schedules.theirs".into(),
                "owned by demo/other; not by demo/nightly".into()
            ),
        ]
    );
    req.adopt = true;
    let plan = planned(&rows, &req, NOW);
    assert_eq!(
        actions(&plan),
        [
            ("demo/manual".into(), "adopt"),
            ("demo/theirs".into(), "error")
        ]
    );
    let Action::Adopt {
        row,
        fields,
        current,
    } = &plan.changes[0].action
    else {
        panic!("adopt");
    };
    assert!(fields.is_empty(), "same spec: ownership only");
    assert_eq!(row.owner_key.as_deref(), Some("demo/nightly"));
    assert_eq!(
        (row.next_fire_at_ms, row.anchor_ms),
        (current.next_fire_at_ms, current.anchor_ms)
    );
}

#[test]
fn duplicates_across_documents_are_errors() {
    let req = request(vec![
        document("demo", "one", json!({"x": cron("0 1 * * *")})),
        document("demo", "two", json!({"x": cron("0 2 * * *")})),
        document("demo", "one", json!({})),
    ]);
    let plan = planned(&[], &req, NOW);
    assert_eq!(
        errors(&plan),
        [
            (
                "schedules.x".into(),
                "demo/x is also declared by one.yaml".into()
            ),
            (
                "metadata.name".into(),
                "the owner key demo/one is also declared by one.yaml".into()
            ),
        ]
    );
}

#[test]
fn invalid_members_name_their_path() {
    let mut named = cron("0 2 * * *");
    named["name"] = json!("demo/x");
    let mut unknown = cron("0 2 * * *");
    unknown["trigger"]["cron"]["bogus"] = json!(1);
    let mut forbidden = cron("0 2 * * *");
    forbidden["action"]["executable"] = json!("rm");
    let members = json!({
        "bad-cron": cron("61 * * * *"), "named": named, "unknown": unknown,
        "forbidden": forbidden, ".hidden": cron("0 2 * * *"), "fine": cron("0 2 * * *"),
    });
    let plan = planned(&[], &request(vec![document("demo", "n", members)]), NOW);
    let paths: Vec<String> = errors(&plan).into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        paths,
        [
            "schedules..hidden",
            "schedules.bad-cron.trigger.cron.expression",
            "schedules.forbidden.action.executable",
            "schedules.named.name",
            "schedules.unknown.trigger.cron.bogus",
        ]
    );
    assert!(plan.has_errors());
    assert_eq!(plan.view().summary[&ChangeKind::Create], 1);

    let mut wrong = document("demo", "n", json!({}));
    wrong.document["apiVersion"] = json!("studio/v2");
    wrong.document["extra"] = json!(true);
    let plan = planned(&[], &request(vec![wrong]), NOW);
    assert_eq!(errors(&plan)[0].0, "extra");
    let mut wrong = document("demo", "n", json!({}));
    wrong.document["kind"] = json!("Other");
    assert_eq!(
        errors(&planned(&[], &request(vec![wrong]), NOW))[0].0,
        "kind"
    );
}

#[tokio::test]
async fn a_row_moved_since_the_plan_rolls_everything_back() {
    let dir = TempDir::new("decl-cas");
    let s = store(&dir).await;
    apply(
        &s,
        &request(vec![document("demo", "n", json!({"a": cron("0 1 * * *")}))]),
        NOW,
    )
    .await;
    let req = request(vec![document(
        "demo",
        "n",
        json!({"a": cron("0 3 * * *"), "b": cron("0 2 * * *")}),
    )]);
    let rows = s.all_schedules().await.expect("rows");
    let plan = planned(&rows, &req, NOW);
    // Someone edits `a` between the plan and its execution.
    let mut edited = rows[0].clone();
    edited.revision = 2;
    s.update_schedule(&edited, 1, None)
        .await
        .expect("edit")
        .expect("cas");
    let seq = s.latest_event_seq().await.expect("seq");
    match s.apply_plan(&plan.writes(), NOW, None).await {
        Err(PlanError::Conflict(name)) => assert_eq!(name, "demo/a"),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(
        s.all_schedules().await.expect("rows").len(),
        1,
        "b was not created"
    );
    assert_eq!(s.latest_event_seq().await.expect("seq"), seq);
    assert_eq!(
        stale_expected(
            &s.all_schedules().await.expect("rows"),
            &BTreeMap::from([("demo/a".into(), 1)])
        ),
        Some((
            "demo/a".into(),
            "demo/a is at revision 2 now, not 1; nothing was written, plan again".into()
        ))
    );
}

#[test]
fn a_past_at_already_stored_stays_valid() {
    let at = json!({"trigger": {"at": "2026-01-01T01:00:00Z"}, "action": {"kind": "command", "executable": "report"}});
    let req = request(vec![document("demo", "n", json!({"once": at}))]);
    let plan = planned(&[], &req, NOW);
    let Action::Create(row) = &plan.changes[0].action else {
        panic!("create");
    };
    // Two hours later the instant has passed; re-applying the same member is a no-op.
    let later = planned(std::slice::from_ref(row), &req, NOW + 7_200_000);
    assert_eq!(actions(&later), [("demo/once".into(), "unchanged")]);
    let fresh = planned(&[], &req, NOW + 7_200_000);
    assert_eq!(errors(&fresh)[0].0, "schedules.once.trigger.at");
}

mod round_trip {
    //! Export, then re-apply, is a no-op — as a property over generated documents, and
    //! through the YAML the CLI writes and reads.

    use proptest::prelude::*;

    use super::*;
    use crate::scheduling::export::export;

    fn trigger() -> impl Strategy<Value = Value> {
        prop_oneof![
            (
                prop::sample::select(vec![
                    "0 2 * * *",
                    "*/15 * * * *",
                    "30 1 * * MON-FRI",
                    "0 0 L * *",
                    "0 12 * * FRI#2",
                    "@daily",
                    "*/10 * * * * *",
                ]),
                prop::option::of(prop::sample::select(vec![
                    "Europe/Berlin",
                    "America/New_York",
                    "UTC",
                ])),
            )
                .prop_map(|(e, tz)| match tz {
                    Some(tz) => json!({"cron": {"expression": e, "timezone": tz}}),
                    None => json!({"cron": {"expression": e}}),
                }),
            prop::sample::select(vec!["90s", "15m", "6h", "2d", "1h30m"])
                .prop_map(|e| json!({"every": e})),
            (1i64..400)
                .prop_map(|d| json!({"at": studio_contract::time::rfc3339(NOW + d * 86_400_000)})),
        ]
    }

    fn action() -> impl Strategy<Value = Value> {
        prop_oneof![
            (
                prop::sample::select(vec!["reindex", "report"]),
                prop::collection::vec("[a-z0-9=-]{1,8}", 0..3),
            )
                .prop_map(|(e, args)| json!({"kind": "command", "executable": e, "args": args})),
            (
                "[a-z ]{1,20}",
                prop::option::of(prop::sample::select(vec!["small", "large"]))
            )
                .prop_map(
                    |(p, m)| json!({"kind": "agent", "prompt": format!("do {p}"), "model": m})
                ),
        ]
    }

    fn policies() -> impl Strategy<Value = Value> {
        (
            prop::sample::select(vec!["skip", "run_once"]),
            prop::sample::select(vec!["skip", "allow", "replace"]),
            prop::option::of(1u64..100),
            prop::option::of(1u64..86_400),
            prop::option::of(prop::sample::select(vec![0.5, 2.25, 10.0, 0.1])),
        )
            .prop_map(|(m, o, runs, deadline, budget)| {
                json!({"missed_fire": m, "overlap": o, "max_runs": runs, "deadline": deadline, "budget_usd": budget})
            })
    }

    fn member() -> impl Strategy<Value = Value> {
        (
            trigger(),
            action(),
            policies(),
            any::<bool>(),
            // Only names a schedule may set: a generated `LD_` or `PATH` is refused, not exported.
            prop::collection::btree_map(
                "[A-Z][A-Z0-9_]{0,6}".prop_filter("a settable name", |n| {
                    studio_contract::jobenv::refusal(n).is_none()
                }),
                "[a-z0-9 ]{0,8}",
                0..3,
            ),
            prop::option::of(action()),
            prop::option::of("[a-z ]{1,16}"),
        )
            .prop_map(|(t, a, p, enabled, env, follow, description)| {
                let mut m = json!({"trigger": t, "action": a, "policies": p, "enabled": enabled, "env": env, "cwd": "/srv/jobs"});
                if let Some(f) = follow {
                    m["on_fail"] = json!({"action": f});
                }
                if let Some(d) = description {
                    m["description"] = json!(d);
                }
                strip_nulls(&mut m);
                m
            })
    }

    /// Absent is how a document says "not set".
    fn strip_nulls(v: &mut Value) {
        if let Value::Object(map) = v {
            map.retain(|_, x| !x.is_null());
            map.values_mut().for_each(strip_nulls);
        }
    }

    fn unchanged_only(plan: &Plan) -> bool {
        plan.changes
            .iter()
            .all(|c| c.action.kind().as_str() == "unchanged")
            && plan
                .writes()
                .iter()
                .all(|w| matches!(w, crate::scheduling::store::PlanWrite::Check { .. }))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

        #[test]
        fn an_export_reapplies_as_a_no_op(
            members in prop::collection::btree_map("[a-z][a-z0-9-]{0,8}", member(), 1..5)
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async {
                let dir = TempDir::new("decl-prop");
                let s = store(&dir).await;
                let members = Value::Object(members.into_iter().collect());
                apply(&s, &request(vec![document("demo", "generated", members)]), NOW).await;

                let rows = s.all_schedules().await.expect("rows");
                let exported = export(&rows, None);
                assert!(exported.blocked.is_empty(), "{:?}", exported.blocked);
                let docs: Vec<SourcedDocument> = exported
                    .documents
                    .iter()
                    .map(|d| SourcedDocument {
                        source: "export.json".into(),
                        document: serde_json::to_value(&d.document).expect("json"),
                    })
                    .collect();
                let again = planned(&rows, &request(docs), NOW + 60_000);
                assert!(unchanged_only(&again), "{:?}", again.view());
                // Applied for real, it leaves every row exactly as it was.
                s.apply_plan(&again.writes(), NOW + 60_000, None).await.expect("re-apply");
                assert_eq!(s.all_schedules().await.expect("rows"), rows, "re-applying an export wrote");

                // The same through the YAML `studio schedule export` writes and `apply` reads.
                let zone = Zone::utc();
                let opts = studio_schedule::load::LoadOptions { default_zone: &zone, allowlist: None, now_ms: Some(NOW) };
                let docs: Vec<SourcedDocument> = exported
                    .documents
                    .iter()
                    .map(|d| {
                        let yaml = studio_schedule::load::render_yaml(&d.document);
                        let (set, diagnostics) = studio_schedule::load::parse_str(
                            &yaml,
                            studio_schedule::load::Format::Yaml,
                            std::path::Path::new("/exports/demo.yaml"),
                            &opts,
                        );
                        assert!(diagnostics.is_empty(), "{diagnostics:?}\n{yaml}");
                        SourcedDocument {
                            source: "demo.yaml".into(),
                            document: serde_json::to_value(set.expect("parses back")).expect("json"),
                        }
                    })
                    .collect();
                let via_yaml = planned(&rows, &request(docs), NOW + 60_000);
                assert!(unchanged_only(&via_yaml), "{:?}", via_yaml.view());
            });
        }
    }
}

fn field(path: &str, from: serde_json::Value, to: serde_json::Value) -> studio_api::FieldChange {
    studio_api::FieldChange {
        path: path.into(),
        from,
        to,
    }
}
