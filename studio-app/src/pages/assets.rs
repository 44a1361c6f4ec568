//! Embedded static assets under content-hashed URLs (`/assets/app.<hash>.css`): a changed
//! file gets a new URL, so the old one may be cached for a year as immutable.

use std::sync::LazyLock;

use axum::{
    extract::Path,
    response::{IntoResponse, Response},
};
use http::{HeaderValue, StatusCode, header};

struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
    url: String,
}

const FILES: &[(&str, &str, &str)] = &[
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("../../assets/app.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/app.js"),
    ),
    (
        "cockpit.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/cockpit.js"),
    ),
    (
        "theme.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/theme.js"),
    ),
    (
        "attention.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/attention.js"),
    ),
];

/// FNV-1a: not for security, only to make a URL change when the content does.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `app.css` → `/assets/app.0123456789ab.css`.
pub(crate) fn hashed(name: &str, body: &str) -> String {
    let hash = format!("{:016x}", fnv1a(body.as_bytes()));
    let (stem, ext) = name.rsplit_once('.').unwrap_or((name, ""));
    format!("/assets/{stem}.{}.{ext}", &hash[..12])
}

static ASSETS: LazyLock<Vec<Asset>> = LazyLock::new(|| {
    FILES
        .iter()
        .map(|(name, content_type, body)| Asset {
            name,
            content_type,
            body,
            url: hashed(name, body),
        })
        .collect()
});

/// The hashed URL of an embedded asset ("" for an unknown name, caught by the tests).
pub(crate) fn url(name: &str) -> &'static str {
    ASSETS
        .iter()
        .find(|a| a.name == name)
        .map_or("", |a| a.url.as_str())
}

fn serve(asset: &Asset, cache: &'static str) -> Response {
    let mut response = asset.body.into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// `GET /assets/{file}`: only the current hashed name answers; anything else is a 404,
/// so a stale URL never gets new content cached under it.
pub(crate) async fn asset(Path(file): Path<String>) -> Response {
    let path = format!("/assets/{file}");
    match ASSETS.iter().find(|a| a.url == path) {
        Some(a) => serve(a, "public, max-age=31536000, immutable"),
        None => (StatusCode::NOT_FOUND, "not found").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_carry_the_content_hash() {
        let a = hashed("app.css", "body{}");
        let b = hashed("app.css", "body{ }");
        assert!(a.starts_with("/assets/app.") && a.ends_with(".css"), "{a}");
        assert_ne!(a, b);
        assert_eq!(a, hashed("app.css", "body{}"));
        for (name, _, _) in FILES {
            assert!(url(name).starts_with("/assets/"), "{name}");
        }
        assert_eq!(url("nope.js"), "");
    }

    #[tokio::test]
    async fn hashed_urls_are_immutable_and_stale_ones_missing() {
        let u = url("cockpit.js");
        let file = u.trim_start_matches("/assets/").to_owned();
        let r = asset(Path(file)).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert!(
            r.headers()[header::CACHE_CONTROL]
                .to_str()
                .is_ok_and(|v| v.contains("immutable"))
        );
        let r = asset(Path("cockpit.000000000000.js".into())).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
    }

    #[test]
    fn only_the_attention_page_loads_its_script() {
        use askama::Template;

        use super::super::{Ctx, Nav, overview};
        use crate::daemon::PageState;

        let script = url("attention.js");
        let tag = format!(r#"<script src="{script}" type="module"></script>"#);
        let attention = overview::AttentionPage {
            ctx: Ctx::new(PageState::Paired, Nav::Attention),
        }
        .render()
        .expect("renders");
        assert!(attention.contains(&tag), "{attention}");
        assert!(attention.contains(url("cockpit.js")));
        // Every control the script wires is there, labelled.
        for id in [
            "attention-bar",
            "attention-hidden-count",
            "attention-status",
        ] {
            assert!(attention.contains(&format!(r#"id="{id}""#)), "{id}");
        }
        assert!(attention.contains(r#"<label for="attention-show-hidden">"#));
        let devices = overview::DevicesPage {
            ctx: Ctx::new(PageState::Paired, Nav::Devices),
            devices: Vec::new(),
        }
        .render()
        .expect("renders");
        assert!(devices.contains(url("cockpit.js")));
        assert!(!devices.contains(script), "{devices}");
    }
}
