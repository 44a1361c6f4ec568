//! Derivation as a pure function: inputs in, items out, inputs untouched.

use super::*;

const MIN: i64 = 60_000;

fn run(id: &str, schedule: Option<&str>, status: &str, finished: i64) -> RunFact {
    RunFact {
        id: id.into(),
        schedule_id: schedule.map(Into::into),
        schedule_name: None,
        status: status.into(),
        outcome: "exited with code 1".into(),
        error_line: Some("ERROR: no such table".into()),
        reason: Some("exit_nonzero".into()),
        exit_code: Some(1),
        created_at_ms: finished - 1_000,
        finished_at_ms: Some(finished),
    }
}

fn schedule(id: &str, health: &str, last_fired: Option<i64>) -> ScheduleFact {
    ScheduleFact {
        id: id.into(),
        name: format!("job-{id}"),
        health: health.into(),
        last_outcome: Some("failed".into()),
        last_fired_at_ms: last_fired,
    }
}

fn decided(state: State, covers_ms: i64, until_ms: Option<i64>) -> Disposition {
    Disposition {
        state,
        reason: "known".into(),
        until_ms,
        covers_ms,
        revision: 1,
        principal_id: "p1".into(),
        at_ms: covers_ms + 1,
    }
}

fn visible(items: &[Item]) -> Vec<&str> {
    items
        .iter()
        .filter(|i| !i.hidden)
        .map(|i| i.id.as_str())
        .collect()
}

#[test]
fn failed_and_timed_out_runs_and_failing_or_overdue_schedules_are_items() {
    let runs = vec![
        run("r1", Some("s1"), "failed", 10 * MIN),
        run("r2", None, "timed_out", 11 * MIN),
        run("r3", Some("s1"), "completed", 12 * MIN),
        run("r4", Some("s1"), "cancelled", 12 * MIN),
        RunFact {
            reason: Some("never_dispatched".into()),
            ..run("r5", Some("s1"), "failed", 9 * MIN)
        },
    ];
    let schedules = vec![
        schedule("s1", "failing", Some(9 * MIN)),
        schedule("s2", "overdue", Some(2 * MIN)),
        schedule("s3", "healthy", Some(2 * MIN)),
        schedule("s4", "disabled", None),
        schedule("s5", "never-fired", None),
    ];
    let items = derive(&runs, &schedules, &[], &HashMap::new(), 20 * MIN);
    assert_eq!(
        visible(&items),
        vec!["run:r2", "run:r1", "sched:s1", "sched:s2"]
    );

    let r1 = &items[1];
    assert_eq!(r1.kind, Kind::Run);
    assert_eq!(r1.title, "job-s1: run failed");
    assert_eq!(
        r1.detail, "exited with code 1: ERROR: no such table",
        "the outcome in words and the line that says why"
    );
    assert_eq!(r1.since_ms, 10 * MIN);
    assert_eq!(r1.link, "/runs/r1");
    assert_eq!(items[0].title, "run timed out");
    // Grouped by schedule in the cockpit: a run and its schedule's item share one.
    let group = |i: &Item| (i.schedule_id.clone(), i.schedule_name.clone());
    let s1_group = (Some("s1".to_owned()), Some("job-s1".to_owned()));
    assert_eq!(group(r1), s1_group);
    assert_eq!(group(&items[2]), s1_group);

    let s1 = &items[2];
    assert_eq!(s1.kind, Kind::Sched);
    assert_eq!(s1.title, "job-s1 is failing");
    assert_eq!(s1.detail, "last outcome failed");
    assert_eq!((s1.since_ms, s1.evidence_ms), (10 * MIN, 10 * MIN));
    assert_eq!(s1.link, "/schedules/s1");
    let s2 = &items[3];
    assert_eq!(s2.title, "job-s2 is overdue");
    assert_eq!(s2.since_ms, 2 * MIN);
    assert!(items.iter().all(|i| i.disposition.is_none()));
}

#[test]
fn an_acknowledged_schedule_comes_back_after_a_newer_failure() {
    let schedules = vec![schedule("s1", "failing", Some(10 * MIN))];
    let mut runs = vec![run("r1", Some("s1"), "failed", 10 * MIN)];
    for state in [State::Acknowledged, State::Expected, State::Resolved] {
        let decisions = HashMap::from([
            ("sched:s1".to_owned(), decided(state, 10 * MIN, None)),
            ("run:r1".to_owned(), decided(state, 10 * MIN, None)),
        ]);
        let items = derive(&runs, &schedules, &[], &decisions, 30 * MIN);
        assert!(visible(&items).is_empty(), "{state:?} hides both");
        assert!(items.iter().all(|i| i.disposition.is_some()));

        runs.push(run("r2", Some("s1"), "failed", 20 * MIN));
        let items = derive(&runs, &schedules, &[], &decisions, 30 * MIN);
        assert_eq!(
            visible(&items),
            vec!["run:r2", "sched:s1"],
            "{state:?}: the new failure and its schedule; r1 stays decided"
        );
        let s1 = items.iter().find(|i| i.id == "sched:s1").expect("s1");
        assert_eq!(s1.evidence_ms, 20 * MIN);
        assert_eq!(
            s1.disposition.as_ref().map(|d| d.state),
            Some(state),
            "a lapsed disposition is still shown, as not effective"
        );
        runs.pop();
    }
}

#[test]
fn a_snooze_hides_until_its_until_whatever_happens_meanwhile() {
    let schedules = vec![schedule("s1", "failing", Some(10 * MIN))];
    let runs = vec![
        run("r1", Some("s1"), "failed", 10 * MIN),
        run("r2", Some("s1"), "failed", 15 * MIN),
    ];
    let decisions = HashMap::from([(
        "sched:s1".to_owned(),
        decided(State::Snoozed, 10 * MIN, Some(20 * MIN)),
    )]);
    let before = derive(&runs, &schedules, &[], &decisions, 19 * MIN);
    assert_eq!(visible(&before), vec!["run:r2", "run:r1"]);
    assert_eq!(before.iter().filter(|i| i.hidden).count(), 1);
    let at = derive(&runs, &schedules, &[], &decisions, 20 * MIN);
    assert_eq!(visible(&at), vec!["run:r2", "sched:s1", "run:r1"]);
}

#[test]
fn an_overdue_schedule_that_fires_again_is_a_new_episode() {
    let decisions = HashMap::from([(
        "sched:s2".to_owned(),
        decided(State::Resolved, 2 * MIN, None),
    )]);
    let quiet = vec![schedule("s2", "overdue", Some(2 * MIN))];
    assert!(visible(&derive(&[], &quiet, &[], &decisions, 60 * MIN)).is_empty());
    let fired_again = vec![schedule("s2", "overdue", Some(30 * MIN))];
    assert_eq!(
        visible(&derive(&[], &fired_again, &[], &decisions, 200 * MIN)),
        vec!["sched:s2"]
    );
}

#[test]
fn deriving_never_changes_its_inputs() {
    let runs = vec![run("r1", Some("s1"), "failed", 10 * MIN)];
    let schedules = vec![schedule("s1", "failing", Some(10 * MIN))];
    let decisions = HashMap::from([(
        "run:r1".to_owned(),
        decided(State::Acknowledged, 10 * MIN, None),
    )]);
    let (r, s, d) = (runs.clone(), schedules.clone(), decisions.clone());
    let first = derive(&runs, &schedules, &[], &decisions, 30 * MIN);
    let second = derive(&runs, &schedules, &[], &decisions, 30 * MIN);
    assert_eq!(first, second, "same inputs, same queue");
    assert_eq!((runs, schedules, decisions), (r, s, d));
}

#[test]
fn item_ids_name_a_kind_and_a_plausible_id() {
    assert_eq!(
        parse_item_id("run:0193-ab_c.d"),
        Some((Kind::Run, "0193-ab_c.d"))
    );
    assert_eq!(parse_item_id("sched:s1"), Some((Kind::Sched, "s1")));
    for bad in ["run:", "inv:1", "run", "sched:a/b", "run:a b", ":x"] {
        assert_eq!(parse_item_id(bad), None, "{bad}");
    }
    assert_eq!(State::parse("snoozed"), Some(State::Snoozed));
    assert_eq!(State::parse("Snoozed"), None);
}

/// A failed run of a schedule that is healthy again (so not among the schedules read) is
/// named from the run list itself.
#[test]
fn a_run_is_titled_by_its_own_schedule_name() {
    let runs = vec![RunFact {
        schedule_name: Some("nightly".into()),
        ..run("r1", Some("gone-from-the-list"), "failed", 10 * MIN)
    }];
    let items = derive(&runs, &[], &[], &HashMap::new(), 20 * MIN);
    assert_eq!(items[0].title, "nightly: run failed");
}

fn waiting(run_id: &str, requested: i64, expires: i64) -> ApprovalFact {
    ApprovalFact {
        id: format!("a-{run_id}"),
        run_id: run_id.into(),
        schedule_id: Some("s1".into()),
        schedule_name: None,
        what: "deploy --prod".into(),
        requested_at_ms: requested,
        expires_at_ms: expires,
    }
}

/// A run waiting for a person's grant is a run item until its request expires; it links
/// to where it is decided, and a disposition hides it like any item.
#[test]
fn a_run_awaiting_approval_is_an_item_until_its_request_expires() {
    let schedules = vec![schedule("s1", "healthy", Some(MIN))];
    let approvals = vec![waiting("r9", 10 * MIN, 25 * MIN)];
    let items = derive(&[], &schedules, &approvals, &HashMap::new(), 20 * MIN);
    assert_eq!(visible(&items), vec!["run:r9"]);
    let item = &items[0];
    assert_eq!(item.kind, Kind::Run);
    assert_eq!(item.title, "job-s1: run awaits approval");
    assert_eq!(
        item.detail,
        "deploy --prod · decide before 1970-01-01 00:25:00 UTC"
    );
    assert_eq!(item.link, "/approvals#approval-a-r9");
    assert_eq!((item.since_ms, item.evidence_ms), (10 * MIN, 10 * MIN));
    assert!(derive(&[], &schedules, &approvals, &HashMap::new(), 25 * MIN).is_empty());
    let snoozed = HashMap::from([(
        "run:r9".to_owned(),
        decided(State::Snoozed, 10 * MIN, Some(22 * MIN)),
    )]);
    assert!(visible(&derive(&[], &schedules, &approvals, &snoozed, 21 * MIN)).is_empty());
    // Read both as a failed run and as a request (a read in between): one item.
    let runs = vec![run("r9", Some("s1"), "failed", 12 * MIN)];
    let items = derive(&runs, &[], &approvals, &HashMap::new(), 20 * MIN);
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].title, "run failed");
}
