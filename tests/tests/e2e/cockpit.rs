//! The web cockpit in a real browser (chromedriver + headless Chromium).

use std::time::Duration;

use studio_tests::{Studio, browser::Browser};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pairing_through_the_link_ends_paired() {
    let studio = Studio::start();
    let browser = Browser::start().await;
    browser.goto(&studio.pair_url).await;
    let el = browser
        .wait_for_css(r#"[data-state="paired"]"#, Duration::from_secs(15))
        .await;
    assert!(el.text().await.expect("text").contains("Paired"));
    browser
        .screenshot(std::path::Path::new("/tmp/smoke/pair.png"))
        .await;
    browser.close().await;
}
