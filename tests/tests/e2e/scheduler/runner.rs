//! The runner through the daemon: big output, deadline, cancel, chains, the agent runner.

use studio_api::{Code, schedule::FollowUp};

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_200_mb_of_stdout_keeps_the_daemon_small() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let daemon = studio.child_pid("daemon");
    let (_, run_id) = api
        .create_and_trigger(&sh("loud", every("1d"), "head -c 200000000 /dev/zero"))
        .await;
    let mut peak_kib = 0;
    let run = until(
        "the 200 MB run to end",
        Duration::from_secs(120),
        async || {
            peak_kib = peak_kib.max(vm_rss_kib(daemon));
            api.try_run(&run_id).await.filter(terminal)
        },
    )
    .await;
    assert_eq!(run.core().status, RunStatus::Completed, "{:?}", short(&run));
    assert_eq!(run.core().exit_code, Some(0));
    assert_eq!(run.core().stdout_bytes, Some(200_000_000));
    eprintln!("daemon peak RSS while a job wrote 200 MB: {peak_kib} KiB");
    assert!(
        peak_kib < 150 * 1024,
        "the daemon's RSS reached {peak_kib} KiB while the job wrote 200 MB"
    );
    let tail = run.run.stdout_tail.as_deref().unwrap_or_default();
    assert!(
        tail.len() <= 64 * 1024,
        "the tail is at most 64 KiB: {}",
        tail.len()
    );
    let (status, size, _) = api.log(&run_id, "stream=stdout&offset=0&limit=16").await;
    assert_eq!(status, 200);
    assert_eq!(
        size,
        Some(64 * 1024 * 1024),
        "the log file stops at the 64 MiB cap"
    );
}

/// The run without its (possibly huge) tails, for messages.
fn short(run: &RunDetail) -> RunDetail {
    let mut run = run.clone();
    for tail in [&mut run.run.stdout_tail, &mut run.run.stderr_tail] {
        *tail = Some("…".into());
    }
    run
}

fn vm_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_deadline_times_out_and_leaves_no_term_ignoring_grandchild() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let pidfile = marker(&studio, "grandchild.pid");
    let script = format!(
        "trap '' TERM; (trap '' TERM; sleep 300) & echo $! > '{}'; sleep 300",
        pidfile.display()
    );
    let spec = with_policies(
        sh("deadline", every("1d"), &script),
        Policies {
            deadline: Some(1),
            ..Policies::default()
        },
    );
    let (_, run_id) = api.create_and_trigger(&spec).await;
    let run = api.finished(&run_id).await;
    assert_eq!(run.core().status, RunStatus::TimedOut, "{run:?}");
    let took = ms_of(&run.core().finished_at) - ms_of(&run.core().dispatched_at);
    assert!(
        (1_000..15_000).contains(&took),
        "deadline 1 s plus a 5 s grace, took {took} ms: {run:?}"
    );
    let grandchild: u32 = std::fs::read_to_string(&pidfile)
        .expect("the job wrote its grandchild's pid")
        .trim()
        .parse()
        .expect("a pid");
    let gone = until(
        "the grandchild to be gone",
        Duration::from_secs(5),
        async || (!alive(grandchild)).then_some(()),
    )
    .await;
    assert_eq!(gone, ());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_cancel_ends_a_running_job_once() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let (_, run_id) = api
        .create_and_trigger(&command("cancel", every("1d"), "sleep", &["300"]))
        .await;
    api.wait_run(&run_id, "the run to be running", running)
        .await;
    let reply = api.act(&format!("/api/runs/{run_id}/cancel")).await;
    let body: Run = reply.expect(200);
    assert_eq!(body.core.id, run_id, "cancel answers the run: {reply}");
    let run = api.finished(&run_id).await;
    assert_eq!(run.core().status, RunStatus::Cancelled, "{run:?}");
    let took = ms_of(&run.core().finished_at) - ms_of(&run.core().dispatched_at);
    assert!(took < 10_000, "sleep dies on TERM at once; took {took} ms");
    let reply = api.act(&format!("/api/runs/{run_id}/cancel")).await;
    assert_eq!(reply.code(), (409, Code::RunNotActive), "{reply}");
}

/// A cancel is in the audit trail: of a queued run with the run's end, of a running one
/// before its process is signalled; each row names the run, its schedule and the status
/// it was cancelled in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_cancels_are_in_the_audit_trail() {
    let studio = start(&[("STUDIO_MAX_CONCURRENT_RUNS", "1")]);
    let api = Api::new(&studio);
    let (schedule, first) = api
        .create_and_trigger(&command("sleeper", every("1d"), "sleep", &["300"]))
        .await;
    let queued = api.trigger(&schedule).await;
    assert_eq!(
        queued.core.status,
        RunStatus::Queued,
        "one slot: {queued:?}"
    );
    api.wait_run(&first, "the run to be running", running).await;
    for run in [&queued.core.id, &first] {
        let reply = api.act(&format!("/api/runs/{run}/cancel")).await;
        assert_eq!(reply.status, 200, "{reply}");
    }
    let trail: studio_api::AuditPage = api
        .get(&format!(
            "/api/audit?schedule={schedule}&kind=run_cancelled"
        ))
        .await
        .expect(200);
    let said: Vec<(Option<&str>, &str)> = trail
        .entries
        .iter()
        .map(|e| {
            (
                e.object.as_deref(),
                e.detail["status"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        said,
        [
            (Some(format!("run:{first}").as_str()), "running"),
            (Some(format!("run:{}", queued.core.id).as_str()), "queued"),
        ]
    );
    for e in &trail.entries {
        assert_eq!(e.principal.as_deref(), Some("daemon"));
        assert_eq!(e.schedule_id.as_deref(), Some(schedule.as_str()));
        assert_eq!(e.detail["schedule"], "sleeper");
    }
    assert_eq!(
        api.finished(&first).await.core().status,
        RunStatus::Cancelled
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_chains_follow_the_parent_and_do_not_count() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let log = marker(&studio, "chain.log");
    let append = |word: &str| {
        Some(Box::new(FollowUp {
            action: run_command(
                "sh",
                &["-c", &format!("echo {word} >> '{}'", log.display())],
            ),
            on_success: None,
            on_fail: None,
        }))
    };
    let two = Policies {
        max_runs: Some(2),
        ..Policies::default()
    };
    let ok = ScheduleSpec {
        target: None,
        on_success: append("ok-success"),
        on_fail: append("ok-fail"),
        ..with_policies(command("chain/ok", every("1d"), "true", &[]), two.clone())
    };
    let bad = ScheduleSpec {
        target: None,
        on_success: append("bad-success"),
        on_fail: append("bad-fail"),
        ..with_policies(sh("chain/bad", every("1d"), "exit 3"), two)
    };
    let ok_id = api.create(&ok).await.id;
    let bad_id = api.create(&bad).await.id;

    for (schedule, want_parent, want_line) in [
        (&ok_id, RunStatus::Completed, "ok-success"),
        (&bad_id, RunStatus::Failed, "bad-fail"),
    ] {
        let parent = api.trigger(schedule).await;
        let parent_id = parent.core.id;
        let parent = api.finished(&parent_id).await;
        assert_eq!(parent.core().status, want_parent, "{parent:?}");
        let child = until("the chain child to end", WAIT, async || {
            api.try_list("/api/runs")
                .await?
                .into_iter()
                .find(|r| r.core.chain_parent_id.as_ref() == Some(&parent_id) && terminal(r))
        })
        .await;
        assert_eq!(child.core().kind, RunKind::Chain, "{child:?}");
        assert_eq!(child.core().chain_depth, 1, "{child:?}");
        assert_eq!(child.core().status, RunStatus::Completed, "{child:?}");
        assert!(
            ms(&child.core().created_at) >= ms_of(&parent.core().finished_at),
            "the child starts after the parent is terminal: {parent:?} {child:?}"
        );
        assert!(
            lines_of(&log).contains(&want_line.to_owned()),
            "{:?}",
            lines_of(&log)
        );

        // Children do not count: a second manual run fits under max_runs 2, a third not.
        let schedule_row = api.schedule(schedule).await;
        assert_eq!(schedule_row.runs_counted, 1, "{schedule_row:?}");
        let second = api.trigger(schedule).await;
        api.finished(second.core().id.as_str()).await;
        let reply = api.act(&format!("/api/schedules/{schedule}/trigger")).await;
        assert_eq!(reply.code(), (409, Code::MaxRunsReached), "{reply}");
    }
    // Let the second parents' children finish, then check nothing ran on the wrong branch.
    until("four chain lines", WAIT, async || {
        (lines_of(&log).len() == 4).then_some(())
    })
    .await;
    let mut lines = lines_of(&log);
    lines.sort();
    assert_eq!(lines, ["bad-fail", "bad-fail", "ok-success", "ok-success"]);
}

/// A fake agent runner in `dir`: reports a spend and echoes its arguments, one a line.
fn fake_agent(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("fake-agent");
    std::fs::write(
        &path,
        "#!/bin/sh\nfor a in \"$@\"; do echo \"arg:$a\"; done\n\
         printf '{\"cost_usd\": 0.5, \"tokens\": 10}' > \"$STUDIO_RESULT_FILE\"\n",
    )
    .expect("write the fake agent");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// Starts Studio whose agent runner is the fake one, kept in the test's home.
fn start_with_fake_agent() -> Studio {
    let home = TempDir::new("home");
    let agent = fake_agent(home.path());
    let agent = agent.to_string_lossy().into_owned();
    Studio::start_in(
        home,
        &[
            ("STUDIO_COMMAND_ALLOWLIST", ALLOW),
            ("STUDIO_SCHEDULER_TZ", "UTC"),
            ("STUDIO_AGENT_COMMAND", agent.as_str()),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_agent_runner_gets_flags_then_the_prompt_and_reports_spend() {
    let studio = start_with_fake_agent();
    let api = Api::new(&studio);
    let spec = ScheduleSpec {
        target: None,
        action: Action::Agent {
            prompt: "--not-a-flag say hi".into(),
            model: Some("m1".into()),
            profile: None,
        },
        ..command("agent/once", every("1d"), "true", &[])
    };
    let (id, run_id) = api.create_and_trigger(&spec).await;
    let run = api.finished(&run_id).await;
    assert_eq!(run.core().status, RunStatus::Completed, "{run:?}");
    assert_eq!(run.core().cost_usd, Some(0.5), "{run:?}");
    assert_eq!(run.core().tokens, Some(10), "{run:?}");
    let args: Vec<&str> = run
        .run
        .stdout_tail
        .as_deref()
        .unwrap_or_default()
        .lines()
        .collect();
    let dashdash = args
        .iter()
        .position(|a| *a == "arg:--")
        .unwrap_or_else(|| panic!("no -- in {args:?}"));
    assert_eq!(
        &args[dashdash..],
        ["arg:--", "arg:--not-a-flag say hi"],
        "the prompt is one argument after --"
    );
    let model = args.iter().position(|a| *a == "arg:--model");
    assert!(
        model.is_some_and(|m| m < dashdash && args[m + 1] == "arg:m1"),
        "--model m1 comes before --: {args:?}"
    );
    let schedule = api.schedule(&id).await;
    assert_eq!(schedule.spend_usd, 0.5, "{schedule:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_budget_exhausted_skips_the_next_fire() {
    let studio = start_with_fake_agent();
    let api = Api::new(&studio);
    let spec = ScheduleSpec {
        target: None,
        action: Action::Agent {
            prompt: "spend".into(),
            model: None,
            profile: None,
        },
        policies: Policies {
            budget_usd: Some(0.4),
            ..Policies::default()
        },
        ..command("agent/budget", every("2s"), "true", &[])
    };
    let id = api.create(&spec).await.id;
    let runs = api
        .wait_runs(&id, "a budget skip after the first run", |runs| {
            runs.iter()
                .any(|r| is(r, RunStatus::Skipped, "budget_exhausted"))
        })
        .await;
    api.disable(&id).await;
    let ran: Vec<&RunListItem> = runs
        .iter()
        .filter(|r| r.core().status != RunStatus::Skipped)
        .collect();
    assert_eq!(ran.len(), 1, "only the first fire ran: {runs:?}");
    assert_eq!(ran[0].core().status, RunStatus::Completed, "{:?}", ran[0]);
    assert_eq!(ran[0].core.cost_usd, Some(0.5));
    let skip = runs
        .iter()
        .find(|r| is(r, RunStatus::Skipped, "budget_exhausted"))
        .expect("a skip");
    assert!(ms_of(&skip.core().scheduled_at) > ms_of(&ran[0].core().scheduled_at));
    // Budget holds for a person asking too.
    let reply = api.act(&format!("/api/schedules/{id}/trigger")).await;
    assert_eq!(reply.code(), (409, Code::BudgetExhausted), "{reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_jobs_know_their_occurrence_and_attempt() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let out = marker(&studio, "occurrence");
    let script = format!(
        "printf '%s|%s|%s\\n' \"$STUDIO_RUN_ID\" \"$STUDIO_SCHEDULED_AT\" \"$STUDIO_ATTEMPT\" >> '{}'",
        out.display()
    );
    let id = api.create(&sh("window", at(&in_secs(2)), &script)).await.id;
    let scheduled = api
        .wait_runs(&id, "the one-shot to end", |runs| runs.iter().any(terminal))
        .await
        .remove(0);
    let manual = api.trigger(&id).await;
    let manual = api.finished(&manual.core.id).await;
    let lines = lines_of(&out);
    let at = scheduled
        .core
        .scheduled_at
        .as_deref()
        .expect("scheduled_at");
    assert!(at.parse::<Timestamp>().is_ok(), "RFC 3339: {at}");
    assert_eq!(
        lines,
        [
            format!("{}|{at}|1", scheduled.core.id),
            format!("{}||1", manual.core().id),
        ],
        "the scheduled run knows its instant; a manual run has none"
    );
}

/// A job runs under its shim (`docs/SHIMS.md`): its leader's parent is the process
/// recorded in `runs/<id>/shim.json`, not studiod, and the run still ends with the job's
/// exit code and its whole log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_runner_job_runs_under_its_shim() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    let daemon = studio.child_pid("daemon");
    let pidfile = marker(&studio, "leader.pid");
    let go = marker(&studio, "go");
    let script = format!(
        "echo $$ > '{}'; i=0; while [ $i -lt 1000 ]; do echo line$i; i=$((i+1)); done; \
         while [ ! -e '{}' ]; do sleep 0.05; done; exit 3",
        pidfile.display(),
        go.display()
    );
    let (_, run_id) = api
        .create_and_trigger(&sh("shimmed", every("1d"), &script))
        .await;
    let leader: u32 = until(
        "the job to record its pid",
        Duration::from_secs(20),
        async || {
            std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|t| t.trim().parse().ok())
        },
    )
    .await;
    let stat = std::fs::read_to_string(format!("/proc/{leader}/stat")).expect("leader stat");
    let ppid: u32 = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok())
        .expect("ppid");
    let shim: studio_runner::ProcessIdentity = serde_json::from_slice(
        &std::fs::read(
            studio
                .home_path()
                .join("runs")
                .join(&run_id)
                .join("shim.json"),
        )
        .expect("shim.json"),
    )
    .expect("shim json");
    assert_eq!(ppid, shim.pid, "the job's parent is its shim: {shim:?}");
    assert_ne!(ppid, daemon, "the job is no child of studiod");
    std::fs::write(&go, b"").expect("go");
    let run = api.finished(&run_id).await;
    assert_eq!(run.core().status, RunStatus::Failed, "{:?}", short(&run));
    assert_eq!(run.core().exit_code, Some(3));
    let expected: String = (0..1000).map(|i| format!("line{i}\n")).collect();
    assert_eq!(run.core().stdout_bytes, Some(expected.len() as i64));
    let (status, size, bytes) = api.log(&run_id, "stream=stdout").await;
    assert_eq!(status, 200);
    assert_eq!(size, Some(expected.len() as u64));
    assert_eq!(String::from_utf8_lossy(&bytes), expected);
}
