//! The cluster as studiod reports it (`GET /api/admin/cluster`, docs/FLEETS.md): the
//! members sharing its database, the leader and its term. `studio cluster` prints it
//! alone (a server whose studiod a service manager runs has no supervisor to ask);
//! `studio status` adds it under the supervisor's table. `studio epoch rotate` ends the
//! epoch on purpose (`POST /api/admin/epoch/rotate`). `studio cluster seed` readies a new
//! member's home with what every member must share, before its studiod first starts.

use std::{fs::OpenOptions, io, path::Path};

use reqwest::Method;
use studio_api::{ClusterMember, ClusterState, EpochRotated};
use studio_contract::home::Home;

use crate::{
    Error,
    cli::{
        Remote,
        client::connect,
        table::{Style, Table, Tone, now_ms, relative},
    },
    output::print_json,
};

const PATH: &str = "/api/admin/cluster";

/// What every member of a cluster shares, under its home: the keys that seal evidence and
/// secrets, and the authority that enrols workers and apps.
const SHARED: [(&str, Kind); 4] = [
    ("run/evidence.key", Kind::Key),
    ("run/secrets.key", Kind::Key),
    ("run/ca/ca.key", Kind::Pem),
    ("run/ca/ca.crt", Kind::Certificate),
];

/// How a shared file is read and written.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// Hex, private (0600 where it is read), written without a newline.
    Key,
    /// A PEM private key: private, written with its final newline.
    Pem,
    /// A PEM certificate: others may read it where it comes from.
    Certificate,
}

impl Kind {
    fn read(self, path: &Path) -> io::Result<String> {
        match self {
            Kind::Key | Kind::Pem => Home::read_secret(path),
            Kind::Certificate => Ok(std::fs::read_to_string(path)?.trim().to_owned()),
        }
    }

    /// The file's text as written (always 0600: only its studiod reads it).
    fn text(self, read: &str) -> String {
        match self {
            Kind::Key => read.to_owned(),
            Kind::Pem | Kind::Certificate => format!("{read}\n"),
        }
    }
}

/// `studio cluster init`: makes [`SHARED`] in `home` where missing (keys as studiod makes
/// them, the authority by [`studio_pki::Authority::load_or_create`]), refusing a running
/// studiod, which may be making them at the same time.
pub(crate) fn init(home: &Home) -> Result<u8, Error> {
    let ca_dir = home.run_dir().join("ca");
    let exists = |path: &Path| {
        path.try_exists()
            .map_err(|e| Error::io(format!("cannot look for {}", path.display()), e))
    };
    let had_ca = exists(&ca_dir.join(studio_pki::CA_CERT_FILE))?;
    let missing =
        !had_ca || !exists(&home.evidence_key_file())? || !exists(&home.secrets_key_file())?;
    // With everything there this only reads (safe beside a running studiod, as a compose
    // file's one-shot at every start); making is not, as studiod may be making them too.
    if missing && daemon_running(home)? {
        return Err(Error::Failed(
            "studiod runs in this home and makes what it lacks itself: run `studio cluster init` before it first starts".into(),
        ));
    }
    home.prepare()
        .map_err(|e| Error::io("cannot prepare the home", e))?;
    let mut made = Vec::new();
    for (path, name) in [
        (home.evidence_key_file(), "evidence.key"),
        (home.secrets_key_file(), "secrets.key"),
    ] {
        let (_, fresh) = Home::key_or_make(&path)
            .map_err(|e| Error::io(format!("cannot make {}", path.display()), e))?;
        if fresh {
            made.push(name);
        }
    }
    studio_pki::Authority::load_or_create(&ca_dir)
        .map_err(|e| Error::Failed(format!("cannot set up the authority in run/ca: {e}")))?;
    if !had_ca {
        made.push("the authority in ca/");
    }
    let what = if made.is_empty() {
        "nothing made, all there already".to_owned()
    } else {
        format!("made {}", made.join(", "))
    };
    outln!("{}: {what}", home.run_dir().display())?;
    Ok(0)
}

/// `studio cluster seed --from DIR`: copies [`SHARED`] from `from` into `home` (0600
/// files in 0700 directories), leaving files already the same and refusing, before any
/// is written, a different one or a running studiod.
pub(crate) fn seed(home: &Home, from: &Path) -> Result<u8, Error> {
    let source = Home::new(from);
    if source.root() == home.root() {
        return Err(Error::Usage("--from names this very home".into()));
    }
    let mut copies = Vec::new();
    for (name, kind) in SHARED {
        let (src, dst) = (source.root().join(name), home.root().join(name));
        // Keys must be private where they are read, as studiod reads them.
        let text = kind.read(&src).map_err(|e| {
            Error::Usage(format!(
                "--from: {}: {e} (a member's home has these once its studiod has started \
                 with a worker or apps listener)",
                src.display()
            ))
        })?;
        match kind.read(&dst) {
            Ok(here) if here == text => {}
            Ok(_) => {
                return Err(Error::Usage(format!(
                    "{} differs from the one in {}: this home has keys of its own already \
                     (seed only a new home)",
                    dst.display(),
                    source.root().display()
                )));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => copies.push((dst, kind.text(&text))),
            Err(e) => return Err(Error::io(format!("cannot read {}", dst.display()), e)),
        }
    }
    // Seeding again is a no-op, safe beside a running studiod (a compose file's one-shot
    // runs at every start); writing is not: it read its keys when it started.
    if !copies.is_empty() && daemon_running(home)? {
        return Err(Error::Failed(
            "studiod runs in this home: seed a home before its studiod first starts".into(),
        ));
    }
    home.prepare()
        .map_err(|e| Error::io("cannot prepare the home", e))?;
    for (dst, text) in &copies {
        if let Some(dir) = dst.parent() {
            make_private_dir(dir)?;
        }
        Home::write_secret(dst, text)
            .map_err(|e| Error::io(format!("cannot write {}", dst.display()), e))?;
    }
    outln!(
        "seeded {} from {}: {} written, {} already the same",
        home.root().display(),
        source.root().display(),
        copies.len(),
        SHARED.len() - copies.len()
    )?;
    Ok(0)
}

/// Creates `dir` 0700, or tightens it to 0700 when it exists.
fn make_private_dir(dir: &Path) -> Result<(), Error> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)))
        .map_err(|e| Error::io(format!("cannot make {}", dir.display()), e))
}

/// Whether a studiod holds this home's `run/daemon.lock` (probing takes and drops it).
fn daemon_running(home: &Home) -> Result<bool, Error> {
    let file = match OpenOptions::new().write(true).open(home.daemon_lock_file()) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io("cannot open run/daemon.lock", e)),
    };
    match file.try_lock() {
        Ok(()) => Ok(false),
        Err(std::fs::TryLockError::WouldBlock) => Ok(true),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io("cannot probe run/daemon.lock", e)),
    }
}

/// `studio cluster`.
pub(crate) async fn show(home: &Home, remote: &Remote) -> Result<u8, Error> {
    let state = fetch(home, remote).await?;
    if remote.json {
        print_json(&state)?;
    } else {
        out!("{}", render(&state, now_ms(), Style::detect()))?;
    }
    Ok(0)
}

/// `studio epoch rotate`.
pub(crate) async fn rotate(home: &Home, remote: &Remote) -> Result<u8, Error> {
    let rotated: EpochRotated = connect(home, remote)
        .await?
        .call(Method::POST, "/api/admin/epoch/rotate")
        .await?;
    if remote.json {
        print_json(&rotated)?;
    } else {
        out!(
            "epoch {} ended; every browser pairs again (`studio pair`) under epoch {}\n",
            rotated.previous,
            rotated.epoch
        )?;
    }
    Ok(0)
}

/// The cluster of the home's studiod.
pub(crate) async fn fetch(home: &Home, remote: &Remote) -> Result<ClusterState, Error> {
    connect(home, remote).await?.get(PATH).await
}

fn tone(state: &str) -> Tone {
    match state {
        "leading" => Tone::Good,
        "silent" => Tone::Bad,
        "stopped" => Tone::Dim,
        _ => Tone::Plain,
    }
}

/// The human form: one line for the term and its leader, then a row per member.
pub(crate) fn render(c: &ClusterState, now_ms: i64, style: Style) -> String {
    let leader = c.leader.as_deref().unwrap_or("none");
    let since = c
        .leader_since
        .as_deref()
        .map(|at| format!(" since {}", relative(at, now_ms)))
        .unwrap_or_default();
    let mut out = format!(
        "cluster on {}: term {}, leader {leader}{since} (failover {} s; answered by {})\n",
        c.database, c.term, c.failover_secs, c.answered_by
    );
    let mut table = Table::new(&["MEMBER", "STATE", "HOST", "PID", "ADDR", "SEEN", "STARTED"]);
    for m in &c.members {
        let ClusterMember {
            id,
            state,
            host,
            pid,
            addr,
            started_at,
            seen_at,
            ..
        } = m;
        table.row(vec![
            (id.clone(), Tone::Plain),
            (state.clone(), tone(state)),
            (host.clone(), Tone::Plain),
            (pid.to_string(), Tone::Plain),
            (addr.clone(), Tone::Plain),
            (relative(seen_at, now_ms), Tone::Plain),
            (relative(started_at, now_ms), Tone::Dim),
        ]);
    }
    out.push_str(&table.render(style));
    out
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::testdir::TestDir;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path)
            .expect("metadata")
            .permissions()
            .mode()
            & 0o777
    }

    /// A member's home as studiod leaves it: both keys and the authority.
    fn member_home(dir: &TestDir) -> Home {
        let home = Home::new(dir.path().join("member"));
        home.prepare().expect("home");
        Home::write_secret(&home.evidence_key_file(), &"a1".repeat(32)).expect("key");
        Home::write_secret(&home.secrets_key_file(), &"b2".repeat(32)).expect("key");
        studio_pki::Authority::load_or_create(&home.run_dir().join("ca")).expect("a CA");
        home
    }

    #[test]
    fn a_new_home_is_seeded_once_and_a_home_with_keys_of_its_own_is_refused() {
        let dir = TestDir::new("cluster-seed");
        let member = member_home(&dir);
        let fresh = Home::new(dir.path().join("fresh"));
        assert_eq!(seed(&fresh, member.root()).expect("seeded"), 0);
        for name in [
            "run/evidence.key",
            "run/secrets.key",
            "run/ca/ca.key",
            "run/ca/ca.crt",
        ] {
            assert_eq!(mode(&fresh.root().join(name)), 0o600, "{name}");
        }
        assert_eq!(mode(&fresh.run_dir().join("ca")), 0o700);
        let theirs =
            studio_pki::Authority::load_or_create(&member.run_dir().join("ca")).expect("theirs");
        let ours = studio_pki::Authority::load_or_create(&fresh.run_dir().join("ca"))
            .expect("the copy loads");
        assert_eq!(ours.fingerprint(), theirs.fingerprint());
        assert_eq!(
            Home::read_secret(&fresh.evidence_key_file()).expect("key"),
            "a1".repeat(32)
        );
        // Again: nothing differs, nothing is written.
        assert_eq!(seed(&fresh, member.root()).expect("again"), 0);

        // A home that made keys of its own is refused, before anything is written.
        let own = Home::new(dir.path().join("own"));
        own.prepare().expect("home");
        Home::write_secret(&own.secrets_key_file(), &"c3".repeat(32)).expect("key");
        let err = seed(&own, member.root()).expect_err("refused");
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("run/secrets.key differs"), "{err}");
        assert!(
            !own.evidence_key_file().exists(),
            "written before the refusal"
        );

        // Nothing to copy from, or from itself: the user's error.
        let empty = dir.path().join("empty");
        let err = seed(&Home::new(dir.path().join("other")), &empty).expect_err("refused");
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().starts_with("--from"), "{err}");
        let err = seed(&fresh, fresh.root()).expect_err("itself");
        assert_eq!(err.exit_code(), 2);

        // Never writing under a running studiod (it read its keys at start)...
        let running = Home::new(dir.path().join("running"));
        running.prepare().expect("home");
        let _lock = hold_daemon_lock(&running);
        let err = seed(&running, member.root()).expect_err("refused");
        assert!(
            err.to_string().contains("studiod runs in this home"),
            "{err}"
        );
        assert!(!running.evidence_key_file().exists());
        // ...but seeding again with nothing to write is fine beside it.
        let _lock = hold_daemon_lock(&fresh);
        assert_eq!(seed(&fresh, member.root()).expect("a no-op"), 0);
    }

    /// Holds `home`'s `run/daemon.lock` as a running studiod does.
    fn hold_daemon_lock(home: &Home) -> std::fs::File {
        let lock = std::fs::File::create(home.daemon_lock_file()).expect("lock file");
        lock.lock().expect("held as studiod holds it");
        lock
    }

    #[test]
    fn init_makes_what_members_share_once_and_keeps_it() {
        let dir = TestDir::new("cluster-init");
        let home = Home::new(dir.path().join("first"));
        // Part of it there already (a key of its own): kept, the rest made.
        home.prepare().expect("home");
        Home::write_secret(&home.secrets_key_file(), &"d4".repeat(32)).expect("key");
        assert_eq!(init(&home).expect("made"), 0);
        assert_eq!(
            Home::read_secret(&home.secrets_key_file()).expect("key"),
            "d4".repeat(32)
        );
        let evidence = Home::read_secret(&home.evidence_key_file()).expect("made");
        assert_eq!(evidence.len(), 64, "{evidence}");
        for name in ["run/evidence.key", "run/ca/ca.key"] {
            assert_eq!(mode(&home.root().join(name)), 0o600, "{name}");
        }
        let ca = studio_pki::Authority::load_or_create(&home.run_dir().join("ca")).expect("CA");

        // Again, even beside a running studiod: nothing changes.
        let _lock = hold_daemon_lock(&home);
        assert_eq!(init(&home).expect("a no-op"), 0);
        assert_eq!(
            Home::read_secret(&home.evidence_key_file()).expect("key"),
            evidence
        );
        let again = studio_pki::Authority::load_or_create(&home.run_dir().join("ca")).expect("CA");
        assert_eq!(again.fingerprint(), ca.fingerprint());
        // A second home seeds from it.
        let second = Home::new(dir.path().join("second"));
        assert_eq!(seed(&second, home.root()).expect("seeded"), 0);

        // Something missing beside a running studiod: refused, nothing made.
        let running = Home::new(dir.path().join("running"));
        running.prepare().expect("home");
        let _lock = hold_daemon_lock(&running);
        let err = init(&running).expect_err("refused");
        assert!(
            err.to_string().contains("studiod runs in this home"),
            "{err}"
        );
        assert!(!running.evidence_key_file().exists());
        assert!(!running.run_dir().join("ca").exists());
    }

    fn member(id: &str, state: &str, seen: &str) -> ClusterMember {
        ClusterMember {
            id: id.into(),
            state: state.into(),
            host: "h1".into(),
            pid: 42,
            addr: "127.0.0.1:8766".into(),
            started_at: "2026-12-03T10:00:00Z".into(),
            seen_at: seen.into(),
            stopped_at: None,
        }
    }

    #[test]
    fn the_table_names_the_term_the_leader_and_each_member() {
        let now = "2026-12-03T10:05:00Z"
            .parse::<jiff::Timestamp>()
            .expect("instant")
            .as_millisecond();
        let state = ClusterState {
            database: "postgres".into(),
            term: 7,
            leader: Some("aa11".into()),
            leader_since: Some("2026-12-03T10:04:00Z".into()),
            answered_by: "bb22".into(),
            failover_secs: 5,
            members: vec![
                member("aa11", "leading", "2026-12-03T10:05:00Z"),
                member("bb22", "following", "2026-12-03T10:04:59Z"),
                member("cc33", "silent", "2026-12-03T10:02:00Z"),
            ],
        };
        let text = render(&state, now, Style::plain());
        assert!(
            text.starts_with(
                "cluster on postgres: term 7, leader aa11 since 1m ago (failover 5 s; answered by bb22)\n"
            ),
            "{text}"
        );
        let rows: Vec<&str> = text.lines().skip(2).collect();
        assert_eq!(rows.len(), 3, "{text}");
        assert!(
            rows[0].starts_with("aa11") && rows[0].contains("leading") && rows[0].contains("now")
        );
        assert!(
            rows[2].contains("silent") && rows[2].contains("3m ago"),
            "{text}"
        );
    }
}
