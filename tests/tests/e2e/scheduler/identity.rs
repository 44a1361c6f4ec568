//! Cluster-wide identity (docs/FLEETS.md, step 6): two studiod on one PostgreSQL database,
//! each with a studio-app of its own. A browser paired through one member's app is
//! admitted by the other's; a revocation through either member is refused at both apps
//! within a second; restarting a member logs nobody out; `studio epoch rotate` logs
//! everybody out, and a code minted through one member then pairs through the other.
//! Runs in the PostgreSQL pass of `scripts/test`.

use studio_api::{Code, EpochRotated, PairRequest, SessionRevoked, Sessions};
use studio_tests::{
    admission_cookie,
    cluster::{App, Member, TOKEN},
    code_from_link, free_port, http, studio_cmd,
};

use super::*;

/// A revocation or rotation must reach every app within this.
const PROPAGATION: Duration = Duration::from_secs(1);

/// A fresh pairing code from `member`'s studiod (`studio pair`: no supervisor runs, so
/// studiod itself answers with a bare code).
pub(super) fn code_from(member: &Member) -> String {
    let home = member.home().to_string_lossy().into_owned();
    let out = studio_cmd(&["pair"], &[("STUDIO_HOME", &home)], None)
        .output()
        .expect("studio pair");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    code_from_link(&text)
        .or_else(|| {
            text.trim()
                .strip_prefix("Pairing code: ")
                .map(str::to_owned)
        })
        .unwrap_or_else(|| panic!("no code in {text:?}"))
}

/// Redeems `code` through `app` as a browser on its origin; the admission cookie.
pub(super) async fn pair_through(app: &App, code: &str) -> String {
    let resp = http()
        .post(app.url("/api/studio/pair"))
        .header("origin", app.origin())
        .header("user-agent", crate::FIREFOX)
        .json(&PairRequest { code: code.into() })
        .send()
        .await
        .expect("pair request");
    let cookie = admission_cookie(&resp);
    let reply = Reply::of(resp).await;
    assert_eq!(reply.status, 200, "{reply}\n{}", app.log());
    cookie.expect("the app sets the admission cookie")
}

/// `GET /api/identity` through `app` with `cookie`: its status and, when refused, the
/// code; `None` while the app or its studiod cannot answer at all.
pub(super) async fn identity(app: &App, cookie: &str) -> Option<(u16, Option<Code>)> {
    let resp = http()
        .get(app.url("/api/identity"))
        .header("cookie", cookie)
        .send()
        .await
        .ok()?;
    let reply = Reply::of(resp).await;
    let code = (reply.status >= 400).then(|| reply.error().code);
    Some((reply.status, code))
}

/// Waits until every app in `apps` refuses `cookie` with 401 `code`; how long that took.
async fn refused_everywhere(apps: &[App], cookie: &str, code: Code) -> Duration {
    let started = Instant::now();
    for app in apps {
        loop {
            if identity(app, cookie).await == Some((401, Some(code))) {
                break;
            }
            assert!(
                started.elapsed() < WAIT,
                "{code} never refused at {}:\n{}",
                app.origin(),
                app.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    started.elapsed()
}

pub(super) fn admitted(at: Option<(u16, Option<Code>)>) -> bool {
    at == Some((200, None))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pairing_holds_across_the_cluster_until_revoked_or_rotated() {
    if !studio_tests::postgres::enabled() {
        eprintln!("skipped: runs in the PostgreSQL pass of scripts/test");
        return;
    }
    let keeper = TempDir::new("identity-db");
    let url = studio_tests::postgres::database_for(keeper.path()).expect("a database");
    // Each member allows both apps' origins, as members behind one load balancer all
    // allow its public origin.
    let ports = [free_port(), free_port()];
    let origins = ports.map(|p| format!("http://127.0.0.1:{p}")).join(",");
    let env = [("STUDIO_ALLOWED_ORIGINS", origins.as_str())];
    let first = Member::first(&url, &env);
    let second = Member::joining(&first, &env);
    let mut members = [first, second];
    let mut apps = vec![
        App::of(&members[0], ports[0]),
        App::of(&members[1], ports[1]),
    ];

    // Browser one pairs through the first member, browser two through the second; each
    // is admitted by both apps (the other's by its row in the shared database).
    let one = pair_through(&apps[0], &code_from(&members[0])).await;
    let two = pair_through(&apps[1], &code_from(&members[1])).await;
    for app in &apps {
        for cookie in [&one, &two] {
            // Twice: the second answer may come from the app's cache.
            for _ in 0..2 {
                assert!(admitted(identity(app, cookie).await), "{}", app.log());
            }
        }
    }

    // A code is spent once, whichever member's app redeems it.
    let code = code_from(&members[0]);
    pair_through(&apps[1], &code).await;
    let again = http()
        .post(apps[0].url("/api/studio/pair"))
        .header("origin", apps[0].origin())
        .json(&PairRequest { code })
        .send()
        .await
        .expect("pair request");
    assert_eq!(
        Reply::of(again).await.status,
        401,
        "a spent code paired again"
    );

    // Browser one is revoked through the second member: both apps refuse it.
    let api = Api::at(members[1].base(), TOKEN.to_owned());
    let sessions: Sessions = api
        .send(Method::GET, "/api/studio/sessions", None)
        .await
        .expect(200);
    let origin = apps[0].origin();
    let listed: Vec<_> = sessions
        .sessions
        .iter()
        .filter(|s| s.origin == origin)
        .collect();
    assert_eq!(listed.len(), 1, "{sessions:?}");
    let path = format!("/api/studio/sessions/{}", listed[0].id);
    api.send(Method::DELETE, &path, None)
        .await
        .expect::<SessionRevoked>(200);
    let took = refused_everywhere(&apps, &one, Code::Revoked).await;
    eprintln!("a revocation reached both apps in {took:?}");
    assert!(took < PROPAGATION, "a revocation took {took:?}");
    for app in &apps {
        assert!(admitted(identity(app, &two).await), "{}", app.log());
    }

    // Restarting the first member logs nobody out: its app answers again (503 meanwhile,
    // never a refusal) and admits browser two, as the second's app did all along.
    members[0].stop();
    members[0].restart();
    let deadline = Instant::now() + WAIT;
    loop {
        let at = identity(&apps[0], &two).await;
        if admitted(at) {
            break;
        }
        assert!(
            !matches!(at, Some((401 | 403, _))),
            "a restart refused a paired browser: {at:?}\n{}",
            apps[0].log()
        );
        assert!(Instant::now() < deadline, "{at:?}\n{}", apps[0].log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(admitted(identity(&apps[1], &two).await));

    // A rotation through the CLI logs everybody out at every app.
    let home = members[1].home().to_string_lossy().into_owned();
    let base = members[1].base();
    let out = studio_cmd(
        &["epoch", "rotate", "--json"],
        &[
            ("STUDIO_HOME", &home),
            ("STUDIO_DAEMON_URL", &base),
            ("STUDIO_TOKEN", TOKEN),
        ],
        None,
    )
    .output()
    .expect("studio epoch rotate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rotated: EpochRotated = serde_json::from_slice(&out.stdout).expect("its JSON");
    assert_ne!(rotated.previous, rotated.epoch);
    let took = refused_everywhere(&apps, &two, Code::EpochEnded).await;
    eprintln!("a rotation reached both apps in {took:?}");
    assert!(took < PROPAGATION, "a rotation took {took:?}");

    // Pairing again works across members under the new epoch.
    let three = pair_through(&apps[1], &code_from(&members[0])).await;
    for app in &apps {
        assert!(admitted(identity(app, &three).await), "{}", app.log());
    }
    // The apps die before their members (each holds a connection to its verifier).
    apps.clear();
}
