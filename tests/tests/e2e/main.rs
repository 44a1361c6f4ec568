//! End-to-end tests: the real `studio`, `studiod` and `studio-app` binaries, temporary
//! homes, free ports, real sockets, and a real browser. One test binary, so it links once.

mod apps_cli;
mod attention;
mod browser;
mod cockpit;
mod cockpit_approvals;
mod cockpit_attention;
mod cockpit_form;
mod cockpit_home;
mod cockpit_phone;
mod cockpit_runs;
mod cockpit_tasks;
mod container;
mod contract;
mod declarations;
mod evidence;
mod front_table;
mod frontdoor;
mod lifecycle;
mod pairing;
mod pipes;
mod preview;
mod quickstart;
mod scheduler;
mod service;
mod sessions;
mod verifier;

use studio_api::PairRequest;
use studio_tests::{Studio, admission_cookie, http};

/// Redeems `code` through the app as a browser on the app's origin would.
/// The `User-Agent` [`pair`] sends, as a desktop Firefox would.
pub const FIREFOX: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0";

pub async fn pair(studio: &Studio, code: &str) -> reqwest::Response {
    http()
        .post(studio.app_url("/api/studio/pair"))
        .header("origin", studio.app_origin())
        .header("user-agent", FIREFOX)
        .json(&PairRequest { code: code.into() })
        .send()
        .await
        .expect("pair request")
}

/// A request through the app as a paired browser's page sends it: its cookie, the app's
/// Origin, a JSON body type, and its decision token when given.
pub fn from_browser(
    studio: &Studio,
    method: reqwest::Method,
    path: &str,
    cookie: &str,
    decision: Option<&str>,
) -> reqwest::RequestBuilder {
    let request = http()
        .request(method, studio.app_url(path))
        .header("cookie", cookie)
        .header("origin", studio.app_origin())
        .header("content-type", "application/json");
    match decision {
        Some(d) => request.header("x-studio-decision-token", d),
        None => request,
    }
}

/// Pairs with a fresh code and returns the admission cookie (`name=value`).
pub async fn paired_cookie(studio: &Studio) -> String {
    let resp = pair(studio, &studio.pair_code()).await;
    assert_eq!(resp.status(), 200);
    admission_cookie(&resp).expect("the app sets the admission cookie")
}

/// `GET path` through the app with a cookie.
pub async fn get_with_cookie(studio: &Studio, path: &str, cookie: &str) -> reqwest::Response {
    http()
        .get(studio.app_url(path))
        .header("cookie", cookie)
        .send()
        .await
        .expect("request")
}

/// `GET url` with the daemon token as bearer.
pub async fn get_with_token(studio: &Studio, url: &str) -> reqwest::Response {
    http()
        .get(url)
        .bearer_auth(studio.token())
        .send()
        .await
        .expect("request")
}
