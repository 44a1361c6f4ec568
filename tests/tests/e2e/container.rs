//! The container form (deploy/container/, docs/DEPLOY.md "Containers") in a real Docker
//! engine: Studio's image as `scripts/container-images` makes it from this tree's
//! `studio` (the files `deploy/container/rootfs` assembles, with the settings of the
//! Containerfile's last stage) and the compose file unchanged, save the images it names
//! (its PostgreSQL is made from this machine's, as no registry is reached). Runs when
//! `scripts/test` has installed the engine and built the images (it sets
//! `STUDIO_TEST_CONTAINERS`); skipped otherwise.

use std::{
    path::PathBuf,
    process::{Command, Output},
    time::{Duration, Instant},
};

use serde::de::DeserializeOwned;
use studio_api::{AppList, ClusterState, TaskDetail, TaskStatus, WorkerList};
use studio_tests::{admission_cookie, code_from_link, free_port, http};

use studio_api::PairRequest;

/// Studio's image and the PostgreSQL one, as `scripts/container-images` names them.
const IMAGE: &str = "studio-check:latest";
const POSTGRES_IMAGE: &str = "studio-check-postgres:latest";
/// Bound on the cluster coming up, a task finishing or a failover.
const WAIT: Duration = Duration::from_secs(90);

fn enabled() -> bool {
    std::env::var_os("STUDIO_TEST_CONTAINERS").is_some_and(|v| !v.is_empty())
}

fn compose_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/container/compose.yaml")
}

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// One compose project with its own name, volumes and app port; `down -v` and a sweep
/// of everything labelled with its name when dropped, even after a failure.
struct Project {
    name: String,
    port: u16,
    password: String,
}

impl Project {
    fn new() -> Self {
        let port = free_port();
        Self {
            name: format!("studio-check-{}-{port}", std::process::id()),
            port,
            password: studio_contract::secret::hex(&studio_contract::secret::random_bytes::<12>()),
        }
    }

    fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `docker-compose -p NAME -f compose.yaml ARGS` with the project's settings.
    fn compose(&self, args: &[&str]) -> Output {
        let file = compose_file();
        Command::new("docker-compose")
            .args(["-p", &self.name, "-f"])
            .arg(&file)
            .args(args)
            .env("STUDIO_IMAGE", IMAGE)
            .env("POSTGRES_IMAGE", POSTGRES_IMAGE)
            .env("POSTGRES_PASSWORD", &self.password)
            .env("STUDIO_APP_PORT", self.port.to_string())
            .env("STUDIO_PUBLIC_ORIGIN", self.origin())
            .output()
            .expect("docker-compose")
    }

    fn up(&self) {
        let out = self.compose(&["up", "-d", "--no-build"]);
        assert!(out.status.success(), "compose up:\n{}", text(&out));
    }

    /// The container of `service`.
    fn container(&self, service: &str) -> String {
        let out = self.compose(&["ps", "-q", service]);
        let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(
            !id.is_empty(),
            "no container for {service}:\n{}",
            text(&out)
        );
        id
    }

    /// `studio ARGS` in `service`'s running container.
    fn studio(&self, service: &str, args: &[&str]) -> Output {
        let container = self.container(service);
        let mut all = vec!["exec", container.as_str(), "/usr/local/bin/studio"];
        all.extend_from_slice(args);
        run("docker", &all)
    }

    /// `studio ARGS --json` in `service`, as `T`; `None` while it does not answer.
    fn json<T: DeserializeOwned>(&self, service: &str, args: &[&str]) -> Option<T> {
        let mut all = args.to_vec();
        all.push("--json");
        let out = self.studio(service, &all);
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    }

    fn logs(&self) -> String {
        text(&self.compose(&["logs", "--no-color", "--tail", "40"]))
    }

    /// Waits until `check` holds; its value.
    fn until<T>(&self, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(v) = check() {
                return v;
            }
            assert!(Instant::now() < deadline, "{what}:\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        let _ = self.compose(&["down", "-v", "-t", "2"]);
        let label = format!("label=com.docker.compose.project={}", self.name);
        for (list, remove) in [
            (
                vec!["ps", "-aq", "--filter", &label],
                vec!["rm", "-f", "-v"],
            ),
            (
                vec!["volume", "ls", "-q", "--filter", &label],
                vec!["volume", "rm", "-f"],
            ),
            (
                vec!["network", "ls", "-q", "--filter", &label],
                vec!["network", "rm"],
            ),
        ] {
            let out = run("docker", &list);
            for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let mut args = remove.clone();
                args.push(id);
                let _ = run("docker", &args);
            }
        }
    }
}

#[test]
fn the_image_holds_studio_its_libraries_and_no_shell() {
    if !enabled() {
        eprintln!("skipped: scripts/test runs it with a Docker engine");
        return;
    }
    let out = run(
        "docker",
        &[
            "image",
            "inspect",
            IMAGE,
            "--format",
            "{{.Config.User}} {{json .Config.Entrypoint}} {{json .Config.Volumes}}",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        r#"65532:65532 ["/usr/local/bin/studio"] {"/home/studio":{}}"#,
        "{}",
        text(&out)
    );
    let out = run("docker", &["run", "--rm", IMAGE, "--version"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).starts_with("studio "), "{}", text(&out));
    // No shell to exec: a command line means `studio`'s arguments, nothing else.
    let out = run(
        "docker",
        &[
            "run",
            "--rm",
            "--entrypoint",
            "/bin/sh",
            IMAGE,
            "-c",
            "true",
        ],
    );
    assert!(!out.status.success(), "a shell ran: {}", text(&out));

    // Every file: the executable, the loader and libraries, the CA bundle, passwd and
    // group, and what the engine itself adds.
    let created = run("docker", &["create", IMAGE]);
    assert!(created.status.success(), "{}", text(&created));
    let id = String::from_utf8_lossy(&created.stdout).trim().to_owned();
    let listing = Command::new("sh")
        .args(["-c", &format!("docker export {id} | tar -t")])
        .output()
        .expect("docker export");
    let _ = run("docker", &["rm", "-f", "-v", &id]);
    assert!(listing.status.success(), "{}", text(&listing));
    let files: Vec<String> = String::from_utf8_lossy(&listing.stdout)
        .lines()
        .filter(|l| !l.ends_with('/'))
        .map(str::to_owned)
        .collect();
    let expected = |f: &str| {
        matches!(
            f,
            "usr/local/bin/studio"
                | "etc/passwd"
                | "etc/group"
                | "etc/ssl/certs/ca-certificates.crt"
                | ".dockerenv"
                | "etc/hosts"
                | "etc/hostname"
                | "etc/resolv.conf"
                | "etc/mtab"
        ) || f.starts_with("dev/")
            || (f.starts_with("lib") && f.contains(".so"))
    };
    let strays: Vec<&String> = files.iter().filter(|f| !expected(f)).collect();
    assert!(
        strays.is_empty(),
        "unexpected files in the image: {strays:?}"
    );
    assert!(
        files.iter().any(|f| f == "usr/local/bin/studio"),
        "{files:?}"
    );
}

#[test]
fn compose_runs_two_studiod_an_app_and_two_workers_and_survives_a_member() {
    if !enabled() {
        eprintln!("skipped: scripts/test runs it with a Docker engine");
        return;
    }
    let project = Project::new();
    project.up();

    // Two members on the one database, one leading.
    let cluster: ClusterState = project.until("no cluster of two with a leader", || {
        project
            .json::<ClusterState>("studiod-1", &["cluster"])
            .filter(|c| c.members.len() == 2 && c.leader.is_some())
    });
    assert_eq!(cluster.database, "postgres");
    // Each worker enrolled through its member and connected there.
    for (member, worker) in [("studiod-1", "worker-1"), ("studiod-2", "worker-2")] {
        project.until(&format!("{worker} never connected to {member}"), || {
            project
                .json::<WorkerList>(member, &["worker", "list"])
                .filter(|l| l.workers.iter().any(|w| w.name == worker && w.connected))
        });
    }

    // Up again (as after a reboot): every one-shot runs again and changes nothing.
    project.up();
    let workers = project
        .json::<WorkerList>("studiod-1", &["worker", "list"])
        .expect("workers");
    assert_eq!(
        workers.workers.iter().filter(|w| !w.builtin).count(),
        2,
        "a second up enrolled again: {workers:?}"
    );
    let apps = project
        .json::<AppList>("studiod-1", &["app", "list"])
        .expect("apps");
    assert_eq!(apps.apps.len(), 1, "{apps:?}");

    // A browser pairs through the app, which reaches studiod over mutual TLS.
    let out = project.studio("studiod-1", &["pair"]);
    assert!(out.status.success(), "{}", text(&out));
    let shown = text(&out);
    let code = code_from_link(&shown)
        .or_else(|| {
            shown
                .lines()
                .find_map(|l| l.trim().strip_prefix("Pairing code: "))
                .map(str::to_owned)
        })
        .unwrap_or_else(|| panic!("no code in {shown:?}"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let origin = project.origin();
    let cookie = rt.block_on(async {
        let resp = http()
            .post(format!("{origin}/api/studio/pair"))
            .header("origin", &origin)
            .header("user-agent", crate::FIREFOX)
            .json(&PairRequest { code })
            .send()
            .await
            .expect("pair");
        let cookie = admission_cookie(&resp);
        assert_eq!(
            resp.status(),
            200,
            "{}",
            resp.text().await.unwrap_or_default()
        );
        cookie.expect("the admission cookie")
    });
    let identity = |cookie: &str| {
        rt.block_on(async {
            http()
                .get(format!("{origin}/api/identity"))
                .header("cookie", cookie)
                .send()
                .await
                .map(|r| r.status().as_u16())
                .ok()
        })
    };
    assert_eq!(identity(&cookie), Some(200), "{}", project.logs());

    // A task for the workers' label runs on one of them: the cluster's allow-list and
    // each worker's own allow `studio`, the one program the image holds.
    let out = project.studio("studiod-1", &["allow", "add", "/usr/local/bin/studio"]);
    assert!(out.status.success(), "{}", text(&out));
    for worker in ["worker-1", "worker-2"] {
        let out = project.studio(worker, &["worker", "allow", "add", "/usr/local/bin/studio"]);
        assert!(out.status.success(), "{}", text(&out));
    }
    let out = project.studio(
        "studiod-2",
        &[
            "task",
            "submit",
            "--label",
            "pool",
            "--json",
            "--",
            "/usr/local/bin/studio",
            "--version",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let task: studio_api::Task = serde_json::from_slice(&out.stdout).expect("the task");
    let done = project.until("the task never finished", || {
        project
            .json::<TaskDetail>("studiod-1", &["task", "show", &task.id])
            .filter(|d| d.task.status.is_terminal())
    });
    assert_eq!(done.task.status, TaskStatus::Completed, "{done:?}");
    // Its output is kept by the member its worker streamed it to (each worker here is
    // connected to the member it joined).
    let ran_on = done
        .attempts
        .first()
        .and_then(|a| a.core.worker_id.clone())
        .expect("the attempt's worker");
    let holder = ["studiod-1", "studiod-2"]
        .into_iter()
        .find(|member| {
            project
                .json::<WorkerList>(member, &["worker", "list"])
                .is_some_and(|l| l.workers.iter().any(|w| w.id == ran_on && w.connected))
        })
        .expect("the member its worker is connected to");
    let out = project.studio(holder, &["task", "logs", &task.id]);
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("studio "),
        "{}",
        text(&out)
    );
    // The other member says who holds it.
    let other = if holder == "studiod-1" {
        "studiod-2"
    } else {
        "studiod-1"
    };
    let out = project.studio(other, &["task", "logs", &task.id]);
    assert!(
        !out.status.success() && text(&out).contains("output is kept by member"),
        "{}",
        text(&out)
    );

    // The leader dies: the other member leads, and the app admits the same browser
    // through whichever answers.
    let leader = cluster.leader.clone().expect("a leader");
    let by_service = |service: &str| {
        project
            .json::<ClusterState>(service, &["cluster"])
            .map(|c| c.answered_by)
    };
    let (dead, alive) = if by_service("studiod-1").as_deref() == Some(leader.as_str()) {
        ("studiod-1", "studiod-2")
    } else {
        ("studiod-2", "studiod-1")
    };
    let killed = run("docker", &["kill", &project.container(dead)]);
    assert!(killed.status.success(), "{}", text(&killed));
    project.until("the other member never led", || {
        project
            .json::<ClusterState>(alive, &["cluster"])
            .filter(|c| c.leader.as_ref().is_some_and(|l| *l != leader))
    });
    project.until("the app never admitted the browser again", || {
        (identity(&cookie) == Some(200)).then_some(())
    });
}
