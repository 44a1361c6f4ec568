//! The Secrets page rendered with sample data: names, when and by whom, what uses each,
//! everything escaped, and no value anywhere.

use askama::Template;
use studio_api::Secret;
use studio_contract::role::Role;

use super::{SecretRow, SecretsPage, User};
use crate::{
    daemon::PageState,
    pages::{Ctx, Nav},
};

fn paired() -> Ctx {
    let mut ctx = Ctx::new(PageState::Paired, Nav::Secrets);
    ctx.now = "2026-01-01T12:00:00Z".parse().expect("ts");
    ctx.principal = Some("0190aaaa-bbbb-7ccc-8ddd-eeeeffff0001".into());
    ctx.role = Role::Viewer;
    ctx
}

fn secret(name: &str, updated_at: &str, by: Option<&str>, used_by: &[&str]) -> Secret {
    serde_json::from_value(serde_json::json!({
        "name": name, "created_at": "2025-12-01T00:00:00Z", "updated_at": updated_at,
        "updated_by": by, "used_by": used_by,
    }))
    .expect("secret")
}

#[test]
fn each_secret_says_when_by_whom_and_what_names_it() {
    let ctx = paired();
    let secrets = [
        secret(
            "github",
            "2026-01-01T11:00:00Z",
            Some("daemon"),
            &[
                "demo/<release>",
                "task 0190a8d2-7c1e-7000-8000-0000000task1",
            ],
        ),
        secret(
            "slack.hook",
            "2025-12-01T00:00:00Z",
            Some("0190aaaa-bbbb-7ccc-8ddd-eeeeffff0001"),
            &[],
        ),
        secret(
            "pager",
            "2025-12-01T00:00:00Z",
            Some("0190aaaa-bbbb-7ccc-8ddd-eeeeffff0002"),
            &[],
        ),
    ];
    let rows: Vec<SecretRow> = secrets.iter().map(|s| SecretRow::new(s, &ctx)).collect();
    assert_eq!(
        rows[0].users,
        [
            User {
                label: "demo/<release>".into(),
                href: "/schedules?q=demo%2F%3Crelease%3E".into(),
            },
            User {
                label: "task 000task1".into(),
                href: "/tasks/0190a8d2-7c1e-7000-8000-0000000task1".into(),
            },
        ]
    );
    assert!(rows[0].replaced.is_some(), "set again after it was made");
    assert!(rows[1].replaced.is_none(), "never replaced");
    let html = SecretsPage { ctx, secrets: rows }
        .render()
        .expect("renders");
    assert_eq!(html.matches(r#"data-testid="secret-row""#).count(), 3);
    assert!(
        html.contains(r#"data-testid="secret-name">github</code>"#),
        "{html}"
    );
    assert!(html.contains(r#"data-testid="secret-by">the terminal (daemon token)</td>"#));
    assert!(html.contains(r#"data-testid="secret-by">this browser</td>"#));
    assert!(html.contains(r#"data-testid="secret-by">browser ffff0002</td>"#));
    assert!(
        html.contains(r#"<a href="/tasks/0190a8d2-7c1e-7000-8000-0000000task1">task 000task1</a>"#),
        "{html}"
    );
    // A schedule's name is text, escaped.
    assert!(!html.contains("demo/<release>"), "{html}");
    assert!(
        html.contains(">demo/&#60;release&#62;</a>") || html.contains(">demo/&lt;release&gt;</a>"),
        "{html}"
    );
    assert!(html.contains(r#"<span class="muted">nothing</span>"#));
    assert!(
        html.contains(r#"<time datetime="2026-01-01T11:00:00Z""#),
        "{html}"
    );
    assert!(html.contains(r#"data-testid="secrets-howto""#));
    assert!(html.contains(r#"aria-current="page" data-testid="nav-secrets""#));
    // Nothing on the page could be a value, nor offers to change one.
    let (_, main) = html.split_once("<main").expect("a main");
    for control in ["<input", "<textarea", "<button", "<form", "value=\""] {
        assert!(!main.contains(control), "{control}: {main}");
    }
}

#[test]
fn no_secret_says_how_to_set_one() {
    let html = SecretsPage {
        ctx: paired(),
        secrets: Vec::new(),
    }
    .render()
    .expect("renders");
    assert!(html.contains(r#"data-testid="secrets-empty""#), "{html}");
    assert!(!html.contains(r#"data-testid="secrets-table""#));
}
