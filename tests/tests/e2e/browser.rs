//! A real browser (headless Chromium) opens the pairing link and ends up paired; the
//! link works once; with the daemon unable to answer, the page says so.

use std::time::Duration;

use studio_tests::{Studio, browser::Browser};

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_opens_the_pairing_link_and_is_paired() {
    let studio = Studio::start();
    let epoch = studio.child("daemon")["epoch"]
        .as_str()
        .expect("epoch")
        .to_owned();
    let browser = Browser::start().await;
    browser.goto(&studio.pair_url).await;
    browser
        .wait_for_attr("state-banner", "data-server-state", &["paired"], WAIT)
        .await;
    assert!(browser.source().await.contains(&epoch));
    browser.close().await;

    // The link works once: a second browser gets "not paired", with what to do next.
    let other = Browser::start().await;
    other.goto(&studio.pair_url).await;
    other
        .wait_for_attr(
            "state-banner",
            "data-state",
            &["unpaired", "not_paired", "not-paired"],
            WAIT,
        )
        .await;
    let dom = other.source().await;
    assert!(
        dom.contains("studio pair"),
        "the page says how to get a new link:\n{dom}"
    );
    other.close().await;

    // Without a daemon the page says so, once the app has noticed it is gone (its
    // verifier's heartbeat; later on a loaded machine).
    let daemon = studio.child_pid("daemon");
    studio_tests::signal(daemon, rustix::process::Signal::STOP);
    std::thread::sleep(Duration::from_secs(3));
    let third = Browser::start().await;
    let deadline = std::time::Instant::now() + WAIT;
    let dom = loop {
        third.goto(&studio.app_url("/")).await;
        let dom = third.source().await;
        if dom.contains("unavailable") || std::time::Instant::now() > deadline {
            break dom;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    studio_tests::signal(daemon, rustix::process::Signal::CONT);
    third.close().await;
    assert!(dom.contains("unavailable"), "{dom}");
}
