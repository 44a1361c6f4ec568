//! A real browser (headless Chromium) opens the pairing link and ends up paired.

use std::{process::Command, time::Duration};

use studio_tests::{
    Studio, TempDir,
    browser::{CHROMIUM_FLAGS, chromium},
};

/// Loads `url` headless, lets its scripts run, and returns the resulting DOM.
fn dump_dom(profile: &TempDir, url: &str) -> String {
    let out = Command::new(chromium())
        .args(CHROMIUM_FLAGS)
        .args(["--virtual-time-budget=15000", "--dump-dom"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn chromium_opens_the_pairing_link_and_is_paired() {
    let studio = Studio::start();
    let profile = TempDir::new("chrome");
    let dom = dump_dom(&profile, &studio.pair_url);
    assert!(dom.contains(r#"data-state="paired""#), "not paired:\n{dom}");
    assert!(
        dom.contains(
            &studio.child("daemon")["epoch"]
                .as_str()
                .expect("epoch")
                .to_owned()
        )
    );

    // The link works once: a second browser gets "not paired", with what to do next.
    let other = TempDir::new("chrome2");
    let dom = dump_dom(&other, &studio.pair_url);
    assert!(
        dom.contains(r#"data-state="unpaired""#)
            || dom.contains(r#"data-state="not_paired""#)
            || dom.contains(r#"data-state="not-paired""#),
        "{dom}"
    );
    assert!(
        dom.contains("studio pair"),
        "the page says how to get a new link:\n{dom}"
    );

    // Without a daemon the page says so.
    signal_stop_daemon(&studio);
    std::thread::sleep(Duration::from_secs(3));
    let third = TempDir::new("chrome3");
    let dom = dump_dom(&third, &studio.app_url("/"));
    studio_tests::signal(studio.child_pid("daemon"), rustix::process::Signal::CONT);
    assert!(dom.contains("unavailable"), "{dom}");
}

fn signal_stop_daemon(studio: &Studio) {
    studio_tests::signal(studio.child_pid("daemon"), rustix::process::Signal::STOP);
}
