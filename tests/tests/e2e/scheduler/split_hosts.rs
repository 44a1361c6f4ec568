//! Split hosts (docs/FLEETS.md, step 7): a studio-app with a home of its own, enrolled
//! with `studio app join`, reaching studiod only through its apps listener over mutual
//! TLS (`--studiod`). It pairs and admits browsers through the verifier there, proxies
//! the API with the browser's Origin vouched for by its certificate, fails over between
//! members, and fails closed: revoked, or with no studiod answering, it admits nobody.

use studio_api::{AppTokenCreated, AuditPage, Code, SchedulePage};
use studio_tests::{
    cluster::{App, Member, TOKEN},
    free_port, http, studio_cmd,
};

use super::{
    identity::{admitted, code_from, identity, pair_through},
    *,
};

/// `studio app join` in `home` (the app's host) with `created`'s token, handed over in
/// a file (a command line is every local user's to read).
fn join(home: &TempDir, created: &AppTokenCreated) -> std::process::Output {
    let file = home.path().join("app.token");
    std::fs::write(&file, format!("{}\n", created.token)).expect("the token file");
    let home = home.path().to_string_lossy().into_owned();
    let file = file.to_string_lossy().into_owned();
    studio_cmd(
        &[
            "app",
            "join",
            "--server",
            &created.server,
            "--token-file",
            &file,
        ],
        &[("STUDIO_HOME", &home)],
        None,
    )
    .output()
    .expect("studio app join")
}

/// Waits until `app` admits `cookie` again, refusing it meanwhile only as
/// `daemon_unavailable` (never as unpaired); how long that took.
async fn fails_over(app: &App, cookie: &str) -> Duration {
    let started = Instant::now();
    loop {
        let at = identity(app, cookie).await;
        if admitted(at) {
            return started.elapsed();
        }
        assert!(
            at == Some((503, Some(Code::DaemonUnavailable))),
            "a failover refused a paired browser: {at:?}\n{}",
            app.log()
        );
        assert!(started.elapsed() < WAIT, "no failover:\n{}", app.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `app` refuses `cookie` as `daemon_unavailable` (503), and checks it keeps
/// doing so for a while: failing closed, not once.
async fn fails_closed(app: &App, cookie: &str) {
    let deadline = Instant::now() + WAIT;
    while identity(app, cookie).await != Some((503, Some(Code::DaemonUnavailable))) {
        assert!(Instant::now() < deadline, "still admitting:\n{}", app.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            identity(app, cookie).await,
            Some((503, Some(Code::DaemonUnavailable))),
            "{}",
            app.log()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_on_another_host_verifies_and_proxies_over_mutual_tls() {
    let port = free_port();
    let origin = format!("http://127.0.0.1:{port}");
    let studio = Studio::start_with(&[
        ("STUDIO_APPS_ADDR", "127.0.0.1:0"),
        ("STUDIO_ALLOWED_ORIGINS", &origin),
        ("STUDIO_COMMAND_ALLOWLIST", ALLOW),
    ]);
    let out = studio.cli(&["app", "token", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: AppTokenCreated = serde_json::from_slice(&out.stdout).expect("its JSON");

    // Without an enrolment the app does not start: one line, exit 64.
    let stranger = TempDir::new("app-host-stranger");
    let refused = std::process::Command::new(&studio_tests::bins().app)
        .arg("--home")
        .arg(stranger.path())
        .args(["--addr", "127.0.0.1:0", "--studiod", &created.server])
        .output()
        .expect("studio-app");
    assert_eq!(refused.status.code(), Some(64));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("studio app join"), "{said}");

    let host = TempDir::new("app-host");
    let joined = join(&host, &created);
    assert!(
        joined.status.success(),
        "{}",
        String::from_utf8_lossy(&joined.stderr)
    );
    // A dead address first: the app goes on to the one that answers.
    let dead = format!("127.0.0.1:{}", free_port());
    let app = App::remote(host.path(), &format!("{dead},{}", created.server), port);

    let cookie = pair_through(&app, &studio.pair_code()).await;
    assert!(admitted(identity(&app, &cookie).await), "{}", app.log());

    // The API through the app's proxy, over the apps listener: a change carries the
    // browser's Origin, as the app's certificate vouches for it.
    let spec = command("over-tls", every("1h"), "true", &[]);
    let made = http()
        .post(app.url("/api/schedules"))
        .header("cookie", &cookie)
        .header("origin", app.origin())
        .json(&spec)
        .send()
        .await
        .expect("create");
    assert_eq!(made.status(), 201, "{}", app.log());
    let api = Api::new(&studio);
    let listed: SchedulePage = http()
        .get(app.url("/api/schedules"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("a page");
    assert!(listed.schedules.iter().any(|s| s.name == "over-tls"));
    let audit: AuditPage = api
        .get("/api/audit?kind=schedule_created")
        .await
        .expect(200);
    assert_eq!(
        audit.entries[0].origin.as_deref(),
        Some(app.origin()),
        "{audit:?}"
    );

    // Revoked: the app admits nobody from then on (its verdict cache included).
    let id = std::fs::read_to_string(host.path().join("run/app/id")).expect("run/app/id");
    let out = studio.cli(&["app", "revoke", id.trim()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fails_closed(&app, &cookie).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_fails_over_between_members_and_fails_closed_when_none_answers() {
    if !studio_tests::postgres::enabled() {
        eprintln!("skipped: runs in the PostgreSQL pass of scripts/test");
        return;
    }
    let keeper = TempDir::new("split-db");
    let url = studio_tests::postgres::database_for(keeper.path()).expect("a database");
    let port = free_port();
    let origin = format!("http://127.0.0.1:{port}");
    let listeners = [free_port(), free_port()].map(|p| format!("127.0.0.1:{p}"));
    let env = |at: usize| {
        [
            ("STUDIO_APPS_ADDR", listeners[at].as_str()),
            ("STUDIO_ALLOWED_ORIGINS", origin.as_str()),
        ]
    };
    let first = Member::first(&url, &env(0));
    let second = Member::joining(&first, &env(1));
    let mut members = [first, second];

    // Enrolled through the first member: the second admits it as well (one database,
    // one authority).
    let created: AppTokenCreated = Api::at(members[0].base(), TOKEN.to_owned())
        .send(Method::POST, "/api/apps/tokens", Some("{}".into()))
        .await
        .expect(201);
    let host = TempDir::new("app-host");
    let joined = join(&host, &created);
    assert!(
        joined.status.success(),
        "{}",
        String::from_utf8_lossy(&joined.stderr)
    );
    let app = App::remote(host.path(), &listeners.join(","), port);
    let cookie = pair_through(&app, &code_from(&members[0])).await;
    assert!(admitted(identity(&app, &cookie).await), "{}", app.log());

    // The member it uses freezes (its connections stay open and answer nothing, as when
    // it is cut off): the app goes on through the other, never refusing meanwhile.
    signal(members[0].pid(), Signal::STOP);
    let took = fails_over(&app, &cookie).await;
    eprintln!("failover from a frozen member: {took:?}");
    // Back, then dead: the app stays with the member it moved to.
    signal(members[0].pid(), Signal::CONT);
    members[0].kill();
    assert!(admitted(identity(&app, &cookie).await), "{}", app.log());
    // That one dies too: nobody answers, so nobody is admitted, cache or not.
    members[1].kill();
    fails_closed(&app, &cookie).await;
    // The first comes back: admitted through it (its address refused meanwhile).
    members[0].restart();
    let took = fails_over(&app, &cookie).await;
    eprintln!("back through a restarted member: {took:?}");
    members[0].kill();

    drop(app);
}
