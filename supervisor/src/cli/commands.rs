//! The user commands that talk to a running supervisor over `run/supervisor.sock`
//! (`status`, `restart`, `stop`, `pair`) and `logs`, which reads the files directly.

use std::{
    fs::{File, OpenOptions},
    future::Future,
    io::{self, Write},
    time::Duration,
};

use studio_contract::{home::Home, role::Role};

use crate::{
    Error,
    cli::{
        Remote, cluster,
        table::{Style, now_ms},
    },
    control::{ChildName, ChildStatus, Reply, Request, Status, ask, unexpected},
    logs::Follower,
    pairing::{self, print_link, supervisor_link},
};

/// How long `studio status` waits for studiod's account of the cluster.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(3);
/// How long `studio stop` waits for the supervisor to finish its ordered stop.
const STOP_TIMEOUT: Duration = Duration::from_secs(120);

pub(crate) async fn status(home: &Home, json: bool) -> Result<(), Error> {
    let reply = ask(home, &Request::Status).await?;
    let Reply::Status(status) = &reply else {
        return Err(unexpected(&reply));
    };
    let cluster = tokio::time::timeout(CLUSTER_TIMEOUT, cluster::fetch(home, &Remote::default()))
        .await
        .unwrap_or_else(|_| Err(Error::Failed("studiod did not answer within 3 s".into())));
    if json {
        let mut value = serde_json::to_value(&reply).map_err(|e| Error::Failed(e.to_string()))?;
        if let (Some(object), Ok(c)) = (value.as_object_mut(), &cluster) {
            let c = serde_json::to_value(c).map_err(|e| Error::Failed(e.to_string()))?;
            object.insert("cluster".into(), c);
        }
        outln!(
            "{}",
            serde_json::to_string_pretty(&value).map_err(|e| Error::Failed(e.to_string()))?
        )?;
    } else {
        out!("{}", table(status))?;
        match &cluster {
            Ok(c) => out!("\n{}", cluster::render(c, now_ms(), Style::detect()))?,
            Err(e) => outln!("\ncluster: unknown ({e})")?,
        }
    }
    Ok(())
}

/// The human form of `status`.
fn table(s: &Status) -> String {
    let mut out = format!(
        "supervisor pid {} since {}, home {}\napp url {}\n\n",
        s.supervisor.pid, s.supervisor.started_at, s.supervisor.home, s.app_url
    );
    out.push_str(&format!(
        "{:<7} {:<9} {:>8} {:>8}  {:<24}  {}\n",
        "CHILD", "STATE", "PID", "RESTARTS", "STARTED", "EPOCH"
    ));
    let dash = || String::from("-");
    for (name, c) in [("daemon", &s.children.daemon), ("app", &s.children.app)] {
        let ChildStatus {
            pid,
            state,
            restarts,
            started_at,
            epoch,
            ..
        } = c;
        out.push_str(&format!(
            "{:<7} {:<9} {:>8} {:>8}  {:<24}  {}\n",
            name,
            state.as_str(),
            pid.map_or_else(dash, |p| p.to_string()),
            restarts,
            started_at.clone().unwrap_or_else(dash),
            epoch.clone().unwrap_or_else(dash),
        ));
    }
    for (name, c) in [("daemon", &s.children.daemon), ("app", &s.children.app)] {
        if let Some(why) = &c.last_exit {
            out.push_str(&format!("{name}: last exit: {why}\n"));
        }
    }
    out
}

pub(crate) async fn restart(home: &Home, child: ChildName) -> Result<(), Error> {
    match ask(home, &Request::Restart { child }).await? {
        Reply::Ok(_) => {
            outln!("restarting {}", child.as_str())?;
            Ok(())
        }
        other => Err(unexpected(&other)),
    }
}

/// Asks for the ordered stop and returns once the supervisor released the home's lock,
/// which it does only after both children are gone.
pub(crate) async fn stop(home: &Home) -> Result<(), Error> {
    match ask(home, &Request::Stop).await? {
        Reply::Ok(_) => {}
        other => return Err(unexpected(&other)),
    }
    let deadline = tokio::time::Instant::now() + STOP_TIMEOUT;
    while lock_held(home)? {
        if tokio::time::Instant::now() > deadline {
            return Err(Error::Failed(format!(
                "studio in {} did not stop within {} s",
                home.root().display(),
                STOP_TIMEOUT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    outln!("studio stopped")?;
    Ok(())
}

/// Whether a supervisor holds `run/studio.lock` (probing takes and drops it at once).
fn lock_held(home: &Home) -> Result<bool, Error> {
    let file = match OpenOptions::new().write(true).open(home.lock_file()) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io("cannot open run/studio.lock", e)),
    };
    match file.try_lock() {
        Ok(()) => Ok(false),
        Err(std::fs::TryLockError::WouldBlock) => Ok(true),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io("cannot probe run/studio.lock", e)),
    }
}

/// A fresh pairing link from the supervisor; in daemon-only mode, a bare code from studiod.
pub(crate) async fn pair(home: &Home, open: bool, role: Role) -> Result<(), Error> {
    match supervisor_link(home, Some(role)).await {
        Ok(url) => print_link(&url, open).await,
        Err(Error::NotRunning(root)) => {
            match pairing::daemon_code(home.daemon_socket(), Some(role)).await {
                Ok(code) => {
                    outln!("Pairing code: {}", code.code)?;
                    Ok(())
                }
                Err(e) if e.is_absent() => Err(Error::NotRunning(root)),
                Err(e) => Err(Error::Failed(e.to_string())),
            }
        }
        Err(e) => Err(e),
    }
}

/// Prints `logs/<child>.log`; with `follow`, keeps printing until `stop` resolves.
pub(crate) async fn logs(
    home: &Home,
    child: ChildName,
    follow: bool,
    stop: impl Future<Output = ()>,
) -> Result<(), Error> {
    let path = home.log_file(child.as_str());
    let mut out = io::stdout().lock();
    // A reader that went away (`| head`) ends the command quietly; see `output`.
    let failed = |context: String| {
        move |e: io::Error| match e.kind() {
            io::ErrorKind::BrokenPipe => Error::Output(e),
            _ => Error::io(context, e),
        }
    };
    if !follow {
        let mut file = File::open(&path)
            .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
        io::copy(&mut file, &mut out).map_err(failed("cannot print the log".into()))?;
        return out.flush().map_err(Error::Output);
    }
    let mut follower = Follower::new(&path);
    tokio::pin!(stop);
    loop {
        follower
            .poll(&mut out)
            .and_then(|()| out.flush())
            .map_err(failed(format!("cannot follow {}", path.display())))?;
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(250)) => {}
            () = &mut stop => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{Children, State, SupervisorInfo};

    #[test]
    fn the_table_shows_each_child() {
        let s = Status {
            supervisor: SupervisorInfo {
                pid: 10,
                home: "/h".into(),
                started_at: "t0".into(),
            },
            app_url: "http://127.0.0.1:8765".into(),
            app_origin: "http://127.0.0.1:8765".into(),
            children: Children {
                daemon: ChildStatus {
                    pid: Some(11),
                    state: State::Running,
                    restarts: 2,
                    started_at: Some("t1".into()),
                    epoch: Some("abcd".into()),
                    addr: None,
                    last_exit: None,
                },
                app: ChildStatus {
                    state: State::Failed,
                    last_exit: Some("exited (exit status 1)".into()),
                    ..ChildStatus::stopped()
                },
            },
        };
        let t = table(&s);
        assert!(t.contains("daemon  running         11        2  t1"), "{t}");
        assert!(t.contains("abcd"), "{t}");
        assert!(t.contains("app     failed           -        0  -"), "{t}");
        assert!(t.contains("app: last exit: exited (exit status 1)"), "{t}");
    }

    #[tokio::test]
    async fn commands_without_a_supervisor_say_so() {
        let dir = crate::testdir::TestDir::new("cmd");
        let home = Home::new(dir.path());
        home.prepare().expect("prepare");
        for result in [
            status(&home, false).await,
            restart(&home, ChildName::App).await,
            stop(&home).await,
            pair(&home, false, Role::Admin).await,
        ] {
            let err = result.expect_err("nothing runs");
            assert!(matches!(err, Error::NotRunning(_)), "{err}");
            assert_eq!(
                err.to_string(),
                format!(
                    "studio is not running in {} (start it with `studio up`)",
                    dir.path().display()
                )
            );
            assert_eq!(err.exit_code(), 1);
        }
        assert!(!lock_held(&home).expect("probe"));
    }
}
