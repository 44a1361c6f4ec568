//! A real browser for end-to-end tests: Debian's `chromedriver` on a free port driving
//! headless Chromium through WebDriver (`fantoccini`), with a fresh profile (or one the
//! test owns and reuses across browsers) and a fixed 1280×900 window. Every wait polls
//! against a deadline; nothing sleeps a fixed time.
//!
//! Invariant: the chromedriver and every Chromium process it started are killed by
//! process group when the [`Browser`] is dropped, even when a test panics.

use std::{
    net::{SocketAddr, TcpStream},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use fantoccini::{Client, ClientBuilder, Locator, elements::Element};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

use crate::{TempDir, alive, free_port, signal, wait_for};

/// How long a WebDriver command's page load may take before it fails.
const PAGE_LOAD: Duration = Duration::from_secs(30);
/// Between two looks at the page while waiting for something to appear.
const POLL: Duration = Duration::from_millis(100);
/// The viewport every test and screenshot sees.
pub const WINDOW: (u32, u32) = (1280, 900);

/// The flags this machine's Chromium needs: headless, no sandbox (root), and nothing that
/// reaches for the network on its own (the network is closed; those lookups only fail).
pub const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
];

/// Chromium from `STUDIO_CHROMIUM` or the usual places; `scripts/test` installs it.
pub fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("STUDIO_CHROMIUM") {
        return p.into();
    }
    [
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        "/usr/bin/google-chrome",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
    .expect("Chromium is needed for browser tests: run scripts/test, or apt-get install chromium")
}

/// ChromeDriver from `STUDIO_CHROMEDRIVER` or `/usr/bin/chromedriver`.
pub fn chromedriver() -> PathBuf {
    if let Some(p) = std::env::var_os("STUDIO_CHROMEDRIVER") {
        return p.into();
    }
    let path = PathBuf::from("/usr/bin/chromedriver");
    assert!(
        path.exists(),
        "ChromeDriver is needed for browser tests: run scripts/test, or apt-get install chromium-driver"
    );
    path
}

/// `[data-testid="…"]`, the selector every helper uses.
pub fn testid_selector(testid: &str) -> String {
    format!(r#"[data-testid="{testid}"]"#)
}

/// A headless Chromium session; dropping it kills the driver and the browser.
pub struct Browser {
    client: Client,
    driver: Child,
    /// The chromedriver log (and the profile, unless the test owns one); removed after
    /// the processes die.
    dir: TempDir,
    /// The profile folder Chromium runs on.
    profile: PathBuf,
}

impl Browser {
    /// Starts `chromedriver` on a free port, waits until it listens, and opens a session
    /// with a fresh profile and a 1280×900 window.
    pub async fn start() -> Self {
        Self::launch(None).await
    }

    /// Like [`Browser::start`], on a profile folder the test owns: a browser started
    /// later on the same folder finds what this one saved (cookies, storage), as a person
    /// reopening their browser would. End this one with [`Browser::quit`] first.
    pub async fn start_with_profile(profile: &Path) -> Self {
        Self::launch(Some(profile)).await
    }

    async fn launch(profile: Option<&Path>) -> Self {
        let dir = TempDir::new("wd");
        let profile = profile.map_or_else(|| dir.path().join("profile"), Path::to_path_buf);
        std::fs::create_dir_all(&profile).expect("create the browser profile folder");
        let port = free_port();
        let out = std::fs::File::create(dir.path().join("chromedriver.out"))
            .expect("create the chromedriver output file");
        let driver = Command::new(chromedriver())
            .arg(format!("--port={port}"))
            .arg(format!(
                "--log-path={}",
                dir.path().join("chromedriver.log").display()
            ))
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("clone the output file handle"))
            .stderr(out)
            // Its own process group, so that the browser it starts dies with it on drop.
            .process_group(0)
            .spawn()
            .expect("spawn chromedriver");
        // From here on, a panic drops `guard` and kills the group.
        let mut guard = DriverGuard(Some(driver), dir.path().to_path_buf());
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let listening = wait_for(Duration::from_secs(20), || {
            TcpStream::connect_timeout(&addr, Duration::from_millis(200))
                .ok()
                .map(|_| ())
        });
        if listening.is_none() {
            let log =
                std::fs::read_to_string(dir.path().join("chromedriver.log")).unwrap_or_default();
            panic!("chromedriver did not listen on {addr} within 20 s; log:\n{log}");
        }

        let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|s| (*s).to_owned()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        args.push(format!("--window-size={},{}", WINDOW.0, WINDOW.1));
        let caps = json!({
            "browserName": "chrome",
            "pageLoadStrategy": "normal",
            // A confirm() stays open until a test answers it (see `accept_dialog`).
            "unhandledPromptBehavior": "ignore",
            "timeouts": { "implicit": 0, "pageLoad": PAGE_LOAD.as_millis() as u64, "script": 10_000 },
            "goog:chromeOptions": {
                "binary": chromium().display().to_string(),
                "args": args,
            },
        });
        let Value::Object(caps) = caps else {
            unreachable!("a JSON object literal")
        };
        // Chromium has exited during its own start-up now and then on a loaded machine,
        // before it logged anything: that browser is started once more (what it left is
        // printed), and a second failure fails the test.
        let mut attempts = 0;
        let client = loop {
            attempts += 1;
            let connected = tokio::time::timeout(
                Duration::from_secs(60),
                ClientBuilder::new(HttpConnector::new())
                    .capabilities(caps.clone())
                    .connect(&format!("http://{addr}")),
            )
            .await;
            let e = match connected {
                Ok(Ok(c)) => break c,
                Ok(Err(e)) => e,
                Err(_) => panic!("no WebDriver session within 60 s"),
            };
            let read = |path: PathBuf| std::fs::read_to_string(path).unwrap_or_default();
            let tail = |text: String| {
                let from = text.floor_char_boundary(text.len().saturating_sub(8000));
                text[from..].to_owned()
            };
            // Why a browser exited at once: Chromium logs to the profile (the driver
            // starts it with `--enable-logging`), and may say more on its stderr.
            let why = format!(
                "no WebDriver session: {e}; chromedriver log:\n{}\nChromium's log (the end):\n{}\nthe driver's output (the end):\n{}",
                read(dir.path().join("chromedriver.log")),
                tail(read(profile.join("chrome_debug.log"))),
                tail(read(dir.path().join("chromedriver.out"))),
            );
            if attempts == 1 && e.to_string().contains("Chrome instance exited") {
                eprintln!("Chromium exited while starting; starting it once more. {why}");
                continue;
            }
            panic!("{why}");
        };
        client
            .set_window_size(WINDOW.0, WINDOW.1)
            .await
            .expect("set the window size");
        // The window includes the browser's own frame; grow it by that much so that the
        // page (and every screenshot) is exactly 1280×900.
        let inner = client
            .execute("return [window.innerWidth, window.innerHeight]", vec![])
            .await
            .ok()
            .and_then(|v| Some((v[0].as_u64()? as u32, v[1].as_u64()? as u32)));
        if let Some((w, h)) = inner
            && (w, h) != WINDOW
        {
            let _ = client
                .set_window_size(
                    WINDOW.0 + WINDOW.0.saturating_sub(w),
                    WINDOW.1 + WINDOW.1.saturating_sub(h),
                )
                .await;
        }
        Self {
            client,
            driver: guard.0.take().expect("the guard still holds the driver"),
            dir,
            profile,
        }
    }

    /// Resizes the window so that the page's viewport is `width`×`height` CSS pixels (a
    /// phone's, say), and returns the inner size the page then reports.
    pub async fn set_viewport(&self, width: u32, height: u32) -> (u32, u32) {
        let inner = || async {
            let v = self
                .execute("return [window.innerWidth, window.innerHeight]", vec![])
                .await;
            (
                v[0].as_u64().unwrap_or_default() as u32,
                v[1].as_u64().unwrap_or_default() as u32,
            )
        };
        self.client
            .set_window_size(width, height)
            .await
            .expect("set the window size");
        // As at start: the window includes the browser's frame, so grow it by that much.
        let (w, h) = inner().await;
        if (w, h) != (width, height) {
            self.client
                .set_window_size(
                    width + width.saturating_sub(w),
                    height + height.saturating_sub(h),
                )
                .await
                .expect("set the window size");
        }
        inner().await
    }

    /// The underlying WebDriver client, for anything the helpers do not cover.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Navigates to `url` and waits for the document to load.
    pub async fn goto(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("goto {url}: {e}"));
    }

    /// Reloads the current page. A reload that the page's own navigation aborted (a live
    /// update, a redirect: Chromium answers "aborted by navigation") is made once more.
    pub async fn refresh(&self) {
        if let Err(first) = self.client.refresh().await {
            self.client
                .refresh()
                .await
                .unwrap_or_else(|e| panic!("reload the page: {first}; again: {e}"));
        }
    }

    pub async fn current_url(&self) -> String {
        self.client
            .current_url()
            .await
            .map(|u| u.to_string())
            .unwrap_or_default()
    }

    /// The current DOM, serialised.
    pub async fn source(&self) -> String {
        self.client.source().await.unwrap_or_default()
    }

    /// The element with `data-testid="<testid>"`, if there is one now.
    pub async fn try_find(&self, testid: &str) -> Option<Element> {
        self.try_find_css(&testid_selector(testid)).await
    }

    /// The first element matching a CSS selector, if there is one now.
    pub async fn try_find_css(&self, css: &str) -> Option<Element> {
        self.client.find(Locator::Css(css)).await.ok()
    }

    /// Every element matching a CSS selector now.
    pub async fn find_all_css(&self, css: &str) -> Vec<Element> {
        self.client
            .find_all(Locator::Css(css))
            .await
            .unwrap_or_default()
    }

    /// Every element with `data-testid="<testid>"` now.
    pub async fn find_all(&self, testid: &str) -> Vec<Element> {
        self.find_all_css(&testid_selector(testid)).await
    }

    /// The element with `data-testid="<testid>"`, which must be there now.
    pub async fn find(&self, testid: &str) -> Element {
        match self.try_find(testid).await {
            Some(e) => e,
            None => self.fail(&format!("no [data-testid={testid:?}]")).await,
        }
    }

    /// Waits up to `timeout` for an element with `data-testid="<testid>"`.
    pub async fn wait_for_testid(&self, testid: &str, timeout: Duration) -> Element {
        self.wait_for_css(&testid_selector(testid), timeout).await
    }

    /// Waits up to `timeout` for an element matching a CSS selector.
    pub async fn wait_for_css(&self, css: &str, timeout: Duration) -> Element {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.try_find_css(css).await {
                return e;
            }
            if Instant::now() >= deadline {
                self.fail(&format!("no {css} within {timeout:?}")).await;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits up to `timeout` until no element has `data-testid="<testid>"`.
    pub async fn wait_gone(&self, testid: &str, timeout: Duration) {
        self.wait_until(
            timeout,
            &format!("[data-testid={testid:?}] to go"),
            || async { self.try_find(testid).await.is_none() },
        )
        .await;
    }

    /// The visible text of the element with `data-testid="<testid>"`, if there is one.
    pub async fn text_of(&self, testid: &str) -> Option<String> {
        self.try_find(testid).await?.text().await.ok()
    }

    /// Waits up to `timeout` until the element with `data-testid="<testid>"` shows text
    /// containing `needle`; returns all of its text.
    pub async fn wait_for_text(&self, testid: &str, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        let mut last = None;
        loop {
            if let Some(text) = self.text_of(testid).await {
                if text.contains(needle) {
                    return text;
                }
                last = Some(text);
            }
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "[data-testid={testid:?}] did not show {needle:?} within {timeout:?}; \
                     last text: {last:?}"
                ))
                .await;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// An attribute of the element with `data-testid="<testid>"`, if both exist.
    pub async fn attr(&self, testid: &str, name: &str) -> Option<String> {
        self.try_find(testid).await?.attr(name).await.ok().flatten()
    }

    /// Waits up to `timeout` until an attribute of the element with
    /// `data-testid="<testid>"` equals one of `values`; returns the value seen.
    pub async fn wait_for_attr(
        &self,
        testid: &str,
        name: &str,
        values: &[&str],
        timeout: Duration,
    ) -> String {
        let deadline = Instant::now() + timeout;
        let mut last = None;
        loop {
            if let Some(v) = self.attr(testid, name).await {
                if values.contains(&v.as_str()) {
                    return v;
                }
                last = Some(v);
            }
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "[data-testid={testid:?}] {name} was not one of {values:?} within \
                     {timeout:?}; last: {last:?}"
                ))
                .await;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Polls `check` until it is true, failing with `what` after `timeout`.
    pub async fn wait_until<F, Fut>(&self, timeout: Duration, what: &str, mut check: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + timeout;
        loop {
            if check().await {
                return;
            }
            if Instant::now() >= deadline {
                self.fail(&format!("waited {timeout:?} for {what}")).await;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Clicks the element with `data-testid="<testid>"` (waiting up to 10 s for it).
    pub async fn click(&self, testid: &str) {
        let e = self.wait_for_testid(testid, Duration::from_secs(10)).await;
        if let Err(err) = e.click().await {
            self.fail(&format!("click [data-testid={testid:?}]: {err}"))
                .await;
        }
    }

    /// Replaces the value of the field with `data-testid="<testid>"` (waiting up to
    /// 10 s for it): a text input or textarea is cleared and typed into; a `<select>`
    /// gets the option with that value.
    pub async fn fill(&self, testid: &str, value: &str) {
        let e = self.wait_for_testid(testid, Duration::from_secs(10)).await;
        let tag = e.tag_name().await.unwrap_or_default().to_ascii_lowercase();
        let done = if tag == "select" {
            e.select_by_value(value).await
        } else {
            match e.clear().await {
                Ok(()) => e.send_keys(value).await,
                Err(err) => Err(err),
            }
        };
        if let Err(err) = done {
            self.fail(&format!("fill [data-testid={testid:?}]: {err}"))
                .await;
        }
    }

    /// Waits up to `timeout` for a dialog (`confirm`, `alert`), accepts it and returns
    /// its text.
    pub async fn accept_dialog(&self, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(text) = self.client.get_alert_text().await
                && self.client.accept_alert().await.is_ok()
            {
                return text;
            }
            if Instant::now() >= deadline {
                panic!("no dialog to accept within {timeout:?}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Runs a script in the page and returns its value.
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> Value {
        self.client
            .execute(script, args)
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}"))
    }

    /// As [`Browser::execute`], `None` when the script could not run (say, the page was
    /// between two documents): for checks polled across a navigation.
    pub async fn try_execute(&self, script: &str) -> Option<Value> {
        self.client.execute(script, vec![]).await.ok()
    }

    /// Saves a PNG of the viewport to `path`, creating its folder.
    pub async fn screenshot(&self, path: &Path) {
        let png = self.client.screenshot().await.expect("take a screenshot");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("create the screenshot folder");
        }
        std::fs::write(path, png)
            .unwrap_or_else(|e| panic!("write screenshot {}: {e}", path.display()));
    }

    /// Ends the WebDriver session politely (the drop kills whatever is left anyway).
    pub async fn close(self) {
        let _ = tokio::time::timeout(Duration::from_secs(10), self.client.clone().close()).await;
    }

    /// Quits as a person closing the browser would, and returns once no Chromium process
    /// runs on the profile any more. On a profile it did not create, chromedriver shuts
    /// Chromium down cleanly (instead of killing it), so the profile on disk holds what a
    /// closed browser keeps: persistent cookies, not session ones.
    pub async fn quit(self) {
        let ended =
            tokio::time::timeout(Duration::from_secs(30), self.client.clone().close()).await;
        assert!(
            matches!(ended, Ok(Ok(()))),
            "the WebDriver session did not end: {ended:?}"
        );
        let gone = wait_for(Duration::from_secs(20), || {
            processes_using(&self.profile).is_empty().then_some(())
        });
        assert!(
            gone.is_some(),
            "Chromium still runs on {} 20 s after quitting",
            self.profile.display()
        );
    }

    /// Panics with `why`, the page's address and the start of its DOM.
    async fn fail(&self, why: &str) -> ! {
        let url = self.current_url().await;
        let dom = self.source().await;
        let cut = dom
            .char_indices()
            .nth(6000)
            .map(|(i, _)| i)
            .unwrap_or(dom.len());
        panic!("{why}\nat {url}\n{}", &dom[..cut]);
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        kill_group(&mut self.driver);
        kill_using(self.dir.path());
        kill_using(&self.profile);
    }
}

/// Kills a started chromedriver's group if `Browser::start` does not get to hand it over.
struct DriverGuard(Option<Child>, PathBuf);

impl Drop for DriverGuard {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            kill_group(child);
            kill_using(&self.1);
        }
    }
}

/// SIGKILL to the process group led by `child` (the driver and the browser it started),
/// then reaps the driver.
fn kill_group(child: &mut Child) {
    let pid = child.id();
    if let Some(pgid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
    }
    signal(pid, rustix::process::Signal::KILL);
    let _ = child.wait();
}

/// SIGKILL to every process whose command line names `dir` (Chromium helpers that left
/// the driver's process group, such as the crash handler, still name the profile).
fn kill_using(dir: &Path) {
    for pid in processes_using(dir) {
        signal(pid, rustix::process::Signal::KILL);
    }
}

/// The live processes, other than this one, whose command line names `dir`.
fn processes_using(dir: &Path) -> Vec<u32> {
    let needle = dir.to_string_lossy().into_owned();
    if needle.is_empty() {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != std::process::id() && alive(*pid))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| names(&String::from_utf8_lossy(&c), &needle))
        })
        .collect()
}

/// Whether a command line (arguments separated by NUL) names the path `needle` itself or
/// something inside it, and not merely a longer name that starts the same (`…-1` in
/// `…-12`).
fn names(cmdline: &str, needle: &str) -> bool {
    cmdline.match_indices(needle).any(|(at, _)| {
        matches!(
            cmdline[at + needle.len()..].chars().next(),
            None | Some('\0' | '/')
        )
    })
}

/// Where screenshots go: `STUDIO_SCREENSHOTS` (relative to the workspace root) when set,
/// else a temporary folder, so ordinary test runs never change the tree.
pub fn screenshot_dir() -> (PathBuf, Option<TempDir>) {
    match std::env::var_os("STUDIO_SCREENSHOTS") {
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            let dir = if dir.is_absolute() {
                dir
            } else {
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .parent()
                    .expect("tests/ lives in the workspace")
                    .join(dir)
            };
            (dir, None)
        }
        _ => {
            let tmp = TempDir::new("shots");
            (tmp.path().to_path_buf(), Some(tmp))
        }
    }
}
