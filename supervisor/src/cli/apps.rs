//! `studio app token|list|revoke|join`: studio-apps on other hosts (docs/FLEETS.md,
//! "Split hosts").
//!
//! On studiod's machine, over studiod's `/api/apps` with the daemon token: `token` (a
//! one-time app join token: only the token on stdout), `list` and `revoke`. On the app's
//! host, with that host's Studio home: `join`, which makes a key there, sends a
//! certificate request with the token over a connection that trusts only the authority
//! the token pins (through `studio_worker::channel`, as `studio worker join` does), and
//! keeps what studiod issues in `run/app/`.
//!
//! Invariant: the app's key is written only to `run/app/key.pem` (0600, in a 0700
//! directory); it is never sent, printed or logged.

use std::{fs, io, net::SocketAddr, os::unix::fs::PermissionsExt};

use studio_api::{AppList, AppTokenCreated, Code, EnrolledApp, NewAppToken};
use studio_contract::home::Home;
use studio_proto::v1::{AppJoinReply, AppJoinRequest, enrolment_client::EnrolmentClient};

use crate::{
    Error,
    cli::{
        AppCommand, AppJoinArgs, Remote,
        client::{connect, encode},
        table::{Style, Table, Tone, instant, now_ms, relative, short_ids, text},
    },
    output::print_json,
};

const PATH: &str = "/api/apps";
/// The fewest characters of an id `studio app list` shows.
const SHORT: usize = 8;
/// The name an app joins with when neither `--name` nor the host's name gives one.
const DEFAULT_NAME: &str = "studio-app";

/// Runs `studio app …` (all but `join` talk to the studiod of `home`; `join` enrols the
/// studio-app of `home` with a studiod elsewhere).
pub(crate) async fn run(home: &Home, command: AppCommand) -> Result<u8, Error> {
    match command {
        AppCommand::Token { ttl, out, remote } => {
            create_token(home, NewAppToken { ttl }, out.as_deref(), &remote).await
        }
        AppCommand::List { remote } => list(home, &remote).await,
        AppCommand::Revoke { id, remote } => revoke(home, &id, &remote).await,
        AppCommand::Join(args) => join(home, args).await,
    }
}

async fn create_token(
    home: &Home,
    request: NewAppToken,
    out: Option<&std::path::Path>,
    remote: &Remote,
) -> Result<u8, Error> {
    let client = connect(home, remote).await?;
    let created: AppTokenCreated = match client.post(&format!("{PATH}/tokens"), &request).await {
        Ok(created) => created,
        // A ttl studiod cannot take is the user's input: one line, exit 2.
        Err(Error::Api(f)) if f.body.code == Code::ValidationFailed => {
            let why = f
                .body
                .errors
                .first()
                .map_or(f.body.message.as_str(), |e| &e.reason);
            let ttl = request.ttl.as_deref().unwrap_or("");
            return Err(Error::Usage(format!("--ttl {ttl:?}: {why}")));
        }
        // No apps listener: studiod's message says which variable starts one.
        Err(Error::Api(f)) if f.body.code == Code::Conflict => {
            return Err(Error::Failed(f.body.message));
        }
        Err(e) => return Err(e),
    };
    if remote.json {
        print_json(&created)?;
        return Ok(0);
    }
    crate::cli::hand_over(&created.token, out)?;
    for line in token_notes(&created, now_ms()) {
        errln!("{line}");
    }
    Ok(0)
}

/// What stderr says beside a new token: its expiry, and the command that uses it.
fn token_notes(created: &AppTokenCreated, now: i64) -> Vec<String> {
    let mut lines = vec![
        format!(
            "a one-time app join token; it expires {}",
            instant(&created.expires_at, now)
        ),
        format!(
            "on the app's host: studio app join --server {} --token {}",
            created.server, created.token
        ),
    ];
    match created.server.parse::<SocketAddr>() {
        Ok(at) if at.ip().is_unspecified() => lines.push(format!(
            "(studiod's apps listener is on every address: give --server this machine's name or address, port {})",
            at.port()
        )),
        Ok(at) if at.ip().is_loopback() => lines.push(
            "(studiod's apps listener is on loopback: only an app on this machine reaches it; \
             set STUDIO_APPS_ADDR for others)"
                .to_owned(),
        ),
        _ => {}
    }
    lines
}

async fn list(home: &Home, remote: &Remote) -> Result<u8, Error> {
    let answer: AppList = connect(home, remote).await?.get(PATH).await?;
    if remote.json {
        print_json(&answer)?;
    } else if answer.apps.is_empty() {
        errln!("no app has joined (`studio app token` makes a join token)");
    } else {
        out!("{}", table(&answer.apps, now_ms()).render(Style::detect()))?;
    }
    Ok(0)
}

/// One row per enrolled app, oldest first (as studiod lists them).
fn table(apps: &[EnrolledApp], now: i64) -> Table {
    let mut table = Table::new(&["ID", "NAME", "ENROLLED", "CERTIFICATE EXPIRES", "STATE"]);
    let ids: Vec<&str> = apps.iter().map(|a| a.id.as_str()).collect();
    for (a, id) in apps.iter().zip(short_ids(&ids, SHORT)) {
        let (state, tone) = state(a, now);
        table.row(vec![
            (id, Tone::Plain),
            (text(&a.name), Tone::Plain),
            (relative(&a.enrolled_at, now), Tone::Dim),
            (relative(&a.certificate_expires_at, now), Tone::Plain),
            (state.to_owned(), tone),
        ]);
    }
    table
}

/// Whether an app's certificate still admits it.
fn state(a: &EnrolledApp, now: i64) -> (&'static str, Tone) {
    let expired = a
        .certificate_expires_at
        .parse::<jiff::Timestamp>()
        .is_ok_and(|t| t.as_millisecond() <= now);
    if a.revoked_at.is_some() {
        ("revoked", Tone::Bad)
    } else if expired {
        ("expired", Tone::Bad)
    } else {
        ("active", Tone::Good)
    }
}

async fn revoke(home: &Home, id: &str, remote: &Remote) -> Result<u8, Error> {
    let id = id.trim();
    if id.is_empty() {
        return Err(Error::Usage(
            "give an app's id (`studio app list` shows them)".into(),
        ));
    }
    let client = connect(home, remote).await?;
    let known: AppList = client.get(PATH).await?;
    let target = resolve(&known.apps, id)?;
    let path = format!("{PATH}/{}", encode(&target));
    let app: EnrolledApp = client.call(reqwest::Method::DELETE, &path).await?;
    if remote.json {
        print_json(&app)?;
    } else {
        outln!(
            "{} ({}) is revoked: its certificate admits it no more",
            app.id,
            text(&app.name)
        )?;
    }
    Ok(0)
}

/// The id `given` names: an enrolled app's whole id, or the only one it starts; anything
/// else goes to studiod as it is (which answers `app_not_found`).
fn resolve(apps: &[EnrolledApp], given: &str) -> Result<String, Error> {
    if apps.iter().any(|a| a.id == given) {
        return Ok(given.to_owned());
    }
    let matching: Vec<&str> = apps
        .iter()
        .filter(|a| a.id.starts_with(given))
        .map(|a| a.id.as_str())
        .collect();
    match matching.as_slice() {
        [] => Ok(given.to_owned()),
        [one] => Ok((*one).to_owned()),
        many => Err(Error::Usage(format!(
            "{given:?} starts {} apps' ids ({}): give more of it",
            many.len(),
            many.join(", ")
        ))),
    }
}

/// `studio app join`: enrols the studio-app of `home` with the studiod at `--server`.
async fn join(home: &Home, args: AppJoinArgs) -> Result<u8, Error> {
    if args.unless_enrolled
        && let Some(id) = kept(home)?
    {
        outln!(
            "kept the enrolment as app {id} in {} (its certificate is valid for more than 30 days); the token was not used",
            home.app_tls_dir().display()
        )?;
        return Ok(0);
    }
    let token = studio_pki::JoinToken::parse(&args.token.read()?)
        .map_err(|e| Error::Usage(format!("--token: {e} (`studio app token` makes one)")))?;
    let server = server_addr(&args.server)?;
    // Before the token is spent: a home that cannot keep the certificate fails here.
    prepare(home)?;
    let name = args
        .name
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(host_name);
    let pki = |e: studio_pki::PkiError| Error::Failed(e.to_string());
    let (key_pem, csr_pem) = studio_pki::key_and_csr(&name).map_err(pki)?;
    let tls = studio_pki::joining_client_config(&token.ca_fingerprint).map_err(pki)?;
    let channel = studio_worker::channel(&server, tls, studio_worker::CONNECT)
        .await
        .map_err(|e| Error::Failed(e.to_string()))?;
    let reply = EnrolmentClient::new(channel)
        .join(AppJoinRequest {
            token: token.to_string(),
            csr_pem,
            name,
        })
        .await
        .map_err(|s| refused(&server, &s))?
        .into_inner();
    // The certificate must come from the authority the token pins.
    let ca_der = studio_pki::first_cert_der(&reply.ca_pem).map_err(pki)?;
    if studio_pki::fingerprint_der(&ca_der) != token.ca_fingerprint.to_ascii_lowercase() {
        return Err(Error::Failed(
            "studiod answered with another authority than the token pins".into(),
        ));
    }
    studio_pki::first_cert_der(&reply.cert_pem).map_err(pki)?;
    let earlier = Home::read_secret(&home.app_id_file()).ok();
    keep(home, &reply, &key_pem)?;
    outln!(
        "joined as app {}; start studio-app with --studiod {server}",
        reply.app_id
    )?;
    errln!(
        "its key and certificate are in {} (studio-app finds them with this same home)",
        home.app_tls_dir().display()
    );
    if let Some(old) = earlier.filter(|old| !old.is_empty() && *old != reply.app_id) {
        errln!(
            "this replaces the home's enrolment as app {old} (`studio app revoke {old}` on studiod's machine retires it)"
        );
    }
    Ok(0)
}

/// `--server` as `HOST:PORT` (an IPv6 host in brackets), or one line saying why not.
fn server_addr(given: &str) -> Result<String, Error> {
    let s = given.trim();
    let bad = || {
        Error::Usage(format!(
            "--server {given:?} is not HOST:PORT (the `server` that `studio app token --json` answers)"
        ))
    };
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
        }
    };
    let port_ok = !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok_and(|p| p != 0);
    if host_ok && port_ok {
        Ok(s.to_owned())
    } else {
        Err(bad())
    }
}

/// This host's name, for listings.
fn host_name() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| DEFAULT_NAME.to_owned())
}

/// Creates the home, `run/` and `run/app/`, the last two 0700 even if they existed.
fn prepare(home: &Home) -> Result<(), Error> {
    let dir = home.app_tls_dir();
    let fail = |e: io::Error| Error::io(format!("cannot create {}", dir.display()), e);
    home.prepare().map_err(fail)?;
    fs::DirBuilder::new()
        .recursive(true)
        .create(&dir)
        .map_err(fail)?;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).map_err(fail)
}

/// The home's app id, when it holds an enrolment whose certificate is valid for longer
/// than [`studio_pki::RENEW_WITHIN_MS`] (the id is written last: a home with one has the
/// rest).
fn kept(home: &Home) -> Result<Option<String>, Error> {
    let id = match Home::read_secret(&home.app_id_file()) {
        Ok(id) if !id.is_empty() => id,
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::io(
                format!("cannot read {}", home.app_id_file().display()),
                e,
            ));
        }
    };
    let path = home.app_cert_file();
    let cert = Home::read_secret(&path)
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    let valid = studio_pki::valid_beyond_renewal(&cert)
        .map_err(|e| Error::Failed(format!("{}: {e}", path.display())))?;
    Ok(valid.then_some(id))
}

/// Writes the enrolment into `run/app/`, each file 0600. The id goes last, and an earlier
/// one first: a home with an id holds one whole enrolment.
fn keep(home: &Home, reply: &AppJoinReply, key_pem: &str) -> Result<(), Error> {
    let id_file = home.app_id_file();
    match fs::remove_file(&id_file) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(Error::io(
                format!("cannot replace {}", id_file.display()),
                e,
            ));
        }
    }
    let id = format!("{}\n", reply.app_id);
    let files = [
        (home.app_key_file(), key_pem),
        (home.app_cert_file(), reply.cert_pem.as_str()),
        (home.app_ca_file(), reply.ca_pem.as_str()),
        (id_file, id.as_str()),
    ];
    for (path, text) in files {
        Home::write_secret(&path, text)
            .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
    }
    Ok(())
}

/// One line for a join studiod refused, or that failed on the way.
fn refused(server: &str, status: &tonic::Status) -> Error {
    use tonic::Code as Grpc;
    match status.code() {
        Grpc::PermissionDenied
        | Grpc::InvalidArgument
        | Grpc::Unauthenticated
        | Grpc::FailedPrecondition => {
            Error::Failed(format!("studiod refused the join: {}", status.message()))
        }
        code => Error::Failed(format!(
            "the join through studiod at {server} failed ({}): {}",
            code.description(),
            status.message()
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::testdir::TestDir;

    const NOW: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

    fn apps() -> Vec<EnrolledApp> {
        let list: AppList = serde_json::from_value(json!({"apps": [
            {"id": "0192f3a4-b5c6-7d8e-9f00-111111111111", "name": "edge-1",
             "enrolled_at": "2025-12-31T00:00:00Z", "certificate_expires_at": "2026-12-31T00:00:00Z",
             "certificate_sha256": "ab", "revoked_at": null},
            {"id": "0192f3a4-b5c6-7d8e-9f00-222222222222", "name": "old",
             "enrolled_at": "2025-12-01T00:00:00Z", "certificate_expires_at": "2026-12-01T00:00:00Z",
             "certificate_sha256": "cd", "revoked_at": "2025-12-03T00:00:00Z"},
            {"id": "0192f3b9-0000-7000-8000-333333333333", "name": "lapsed",
             "enrolled_at": "2024-12-30T00:00:00Z", "certificate_expires_at": "2025-12-30T00:00:00Z",
             "certificate_sha256": "ef", "revoked_at": null}
        ]}))
        .expect("apps");
        list.apps
    }

    #[test]
    fn the_list_shows_each_app_by_a_short_unique_id_and_its_state() {
        assert_eq!(
            table(&apps(), NOW).render(Style::plain()),
            "ID                         NAME    ENROLLED  CERTIFICATE EXPIRES  STATE\n\
             0192f3a4-b5c6-7d8e-9f00-1  edge-1  1d ago    in 364d              active\n\
             0192f3a4-b5c6-7d8e-9f00-2  old     31d ago   in 334d              revoked\n\
             0192f3b9                   lapsed  367d ago  2d ago               expired\n"
        );
    }

    #[test]
    fn a_prefix_names_one_app_or_is_refused() {
        let apps = apps();
        assert_eq!(
            resolve(&apps, "0192f3b9").expect("one"),
            "0192f3b9-0000-7000-8000-333333333333"
        );
        assert!(matches!(
            resolve(&apps, "0192f3a4"),
            Err(Error::Usage(m)) if m.contains("2 apps")
        ));
        assert_eq!(resolve(&apps, "nope").expect("as given"), "nope");
    }

    #[test]
    fn a_token_comes_with_its_join_command() {
        let created = AppTokenCreated {
            token: "studio-join.x.y".into(),
            expires_at: "2026-01-01T01:00:00Z".into(),
            server: "127.0.0.1:8768".into(),
        };
        let notes = token_notes(&created, NOW);
        assert_eq!(
            notes[..2],
            [
                "a one-time app join token; it expires 2026-01-01T01:00:00Z (in 1h)",
                "on the app's host: studio app join --server 127.0.0.1:8768 --token studio-join.x.y",
            ]
        );
        assert!(notes[2].contains("STUDIO_APPS_ADDR"), "{notes:?}");
        let anywhere = AppTokenCreated {
            server: "0.0.0.0:9000".into(),
            ..created.clone()
        };
        assert!(token_notes(&anywhere, NOW)[2].contains("port 9000"));
        let named = AppTokenCreated {
            server: "studio.example:8768".into(),
            ..created
        };
        assert_eq!(token_notes(&named, NOW).len(), 2);
    }

    #[test]
    fn the_server_is_host_and_port() {
        for ok in [
            "studio.example:8768",
            "127.0.0.1:1",
            "[::1]:8768",
            " h:65535 ",
        ] {
            assert_eq!(server_addr(ok).expect(ok), ok.trim());
        }
        for bad in [
            "",
            "studio.example",
            "studio.example:",
            ":8768",
            "h:0",
            "h:65536",
            "h:+80",
            "::1:8768",
            "[nope]:1",
            "https://h:8768",
            "h 1:2",
        ] {
            let err = server_addr(bad).expect_err(bad);
            assert!(
                matches!(&err, Error::Usage(m) if m.starts_with("--server") && !m.contains('\n')),
                "{bad:?}: {err:?}"
            );
        }
    }

    /// Bad input is refused before the home is touched or anything is dialled.
    #[tokio::test]
    async fn join_refuses_a_bad_token_or_server_first() {
        let dir = TestDir::new("app-join");
        let home = Home::new(dir.path().join("home"));
        let args = |server: &str, token: &str| AppJoinArgs {
            server: server.into(),
            token: crate::cli::JoinTokenArg {
                token: Some(token.into()),
                token_file: None,
            },
            name: None,
            unless_enrolled: false,
        };
        let good = studio_pki::JoinToken::generate(&"ab".repeat(32))
            .expect("token")
            .to_string();
        let err = join(&home, args("127.0.0.1:1", "swt_nope"))
            .await
            .expect_err("bad token");
        assert!(
            matches!(&err, Error::Usage(m) if m.starts_with("--token")),
            "{err:?}"
        );
        assert_eq!(err.exit_code(), 2);
        let err = join(&home, args("no-port", &good))
            .await
            .expect_err("bad server");
        assert!(
            matches!(&err, Error::Usage(m) if m.starts_with("--server")),
            "{err:?}"
        );
        assert!(!home.root().exists(), "the home was touched");
    }

    #[test]
    fn the_enrolment_is_private_and_its_id_written_last() {
        let dir = TestDir::new("app-keep");
        let home = Home::new(dir.path().join("home"));
        prepare(&home).expect("prepare");
        // A looser directory from before is tightened.
        fs::set_permissions(home.app_tls_dir(), fs::Permissions::from_mode(0o755)).expect("chmod");
        prepare(&home).expect("prepare again");
        let mode =
            |p: &std::path::Path| fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&home.run_dir()), 0o700);
        assert_eq!(mode(&home.app_tls_dir()), 0o700);
        let reply = AppJoinReply {
            app_id: "app-1".into(),
            cert_pem: "CERT\n".into(),
            ca_pem: "CA\n".into(),
            not_after_ms: 0,
        };
        keep(&home, &reply, "KEY\n").expect("keep");
        for file in [
            home.app_key_file(),
            home.app_cert_file(),
            home.app_ca_file(),
            home.app_id_file(),
        ] {
            assert_eq!(mode(&file), 0o600, "{}", file.display());
        }
        assert_eq!(Home::read_secret(&home.app_id_file()).expect("id"), "app-1");
        assert_eq!(
            fs::read_to_string(home.app_key_file()).expect("key"),
            "KEY\n"
        );
        let names: Vec<String> = fs::read_dir(home.app_tls_dir())
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(names.is_empty(), "temporary files left: {names:?}");
    }

    /// `--unless-enrolled` keeps an enrolment with more than 30 days left, spending no
    /// token (none is even read); one closer to its end is renewed.
    #[tokio::test]
    async fn an_enrolment_with_time_left_is_kept() {
        let dir = TestDir::new("app-kept");
        let home = Home::new(dir.path().join("home"));
        let ca = studio_pki::Authority::load_or_create(&dir.path().join("ca")).expect("CA");
        let enrol = |days: u64| {
            let (key, csr) = studio_pki::key_and_csr("app").expect("key");
            let cert = ca
                .sign_app_csr(
                    &csr,
                    "app-1",
                    std::time::Duration::from_secs(days * 24 * 60 * 60),
                )
                .expect("signed");
            let reply = AppJoinReply {
                app_id: "app-1".into(),
                cert_pem: cert.cert_pem,
                ca_pem: ca.cert_pem().to_owned(),
                not_after_ms: cert.not_after_ms,
            };
            prepare(&home).expect("prepare");
            keep(&home, &reply, &key).expect("keep");
        };
        assert_eq!(kept(&home).expect("read"), None);
        // No token at all, and no studiod: a kept enrolment needs neither.
        let args = AppJoinArgs {
            server: "127.0.0.1:1".into(),
            token: crate::cli::JoinTokenArg {
                token: None,
                token_file: Some(dir.path().join("no-such-token")),
            },
            name: None,
            unless_enrolled: true,
        };
        enrol(300);
        assert_eq!(kept(&home).expect("read").as_deref(), Some("app-1"));
        assert_eq!(join(&home, args).await.expect("kept"), 0);
        enrol(10);
        assert_eq!(kept(&home).expect("read"), None);
    }

    #[test]
    fn a_refusal_is_studiods_message_on_one_line() {
        let denied =
            tonic::Status::permission_denied("the join token is unknown, already used or expired");
        let err = refused("h:1", &denied);
        assert_eq!(
            err.to_string(),
            "studiod refused the join: the join token is unknown, already used or expired"
        );
        assert_eq!(err.exit_code(), 1);
        let lost = refused("h:1", &tonic::Status::unavailable("connection reset"));
        assert!(lost.to_string().contains("studiod at h:1"), "{lost}");
    }
}
