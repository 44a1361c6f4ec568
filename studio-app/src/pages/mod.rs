//! The cockpit's server-rendered pages: each request resolves its own page state through
//! the verifier (page GETs pass the admission layer unauthenticated), renders an askama
//! template from the daemon API, and says what to do when it cannot.
//!
//! Invariant: a page shows daemon data only in the `paired` state; every other state
//! renders the layout's banner with the next step instead.

mod approvals;
mod assets;
mod audit;
mod commands;
mod forms;
mod notifications;
mod overview;
mod runs;
mod schedules;
mod secrets;
mod tasks;
mod words;

#[cfg(test)]
mod tests;

use askama::Template;
use axum::{
    response::{Html, IntoResponse, Response},
    routing::{MethodRouter, get},
};
use http::{HeaderMap, StatusCode, header};
use jiff::Timestamp;
use studio_contract::role::Role;

use crate::{
    daemon::{Daemon, DaemonError, PageState},
    frontdoor,
    state::AppState,
    verifier::Verdict,
};

use assets::asset;

/// Pages allow same-origin GET forms (filters) but otherwise match the pairing page's CSP.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

/// The page routes (all `GET`), each path with its handler; the app's router adds them
/// and checks their paths against studiod's inventory.
pub(crate) fn routes() -> Vec<(&'static str, MethodRouter<AppState>)> {
    vec![
        ("/", get(overview::overview)),
        ("/attention", get(overview::attention)),
        ("/approvals", get(approvals::page)),
        ("/devices", get(overview::devices)),
        ("/audit", get(audit::page)),
        ("/commands", get(commands::page)),
        ("/secrets", get(secrets::page)),
        ("/schedules", get(schedules::list)),
        ("/schedules/new", get(forms::new)),
        ("/schedules/{id}", get(schedules::detail)),
        ("/schedules/{id}/edit", get(forms::edit)),
        ("/runs", get(runs::list)),
        ("/runs/{id}", get(runs::detail)),
        ("/tasks", get(tasks::list)),
        ("/tasks/{id}", get(tasks::detail)),
        ("/assets/{file}", get(asset)),
    ]
}

/// Which navigation entry is current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Overview,
    Schedules,
    Runs,
    Tasks,
    Attention,
    Approvals,
    Commands,
    Secrets,
    Devices,
    Audit,
}

/// What the layout needs: the page state, the banner's words, the hashed asset URLs.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    pub(crate) state: PageState,
    pub(crate) epoch: Option<String>,
    pub(crate) principal: Option<String>,
    /// The paired browser's role: what the page offers (studiod decides).
    pub(crate) role: Role,
    pub(crate) nav: Nav,
    /// A failure while paired (e.g. "schedule not found"), shown above the content.
    pub(crate) problem: Option<String>,
    pub(crate) now: Timestamp,
}

impl Ctx {
    pub(crate) fn new(state: PageState, nav: Nav) -> Self {
        Self {
            state,
            epoch: None,
            principal: None,
            role: Role::Viewer,
            nav,
            problem: None,
            now: Timestamp::now(),
        }
    }

    pub(crate) fn paired(&self) -> bool {
        self.state == PageState::Paired
    }

    /// Whether this browser may run, cancel and edit (an operator or an admin).
    pub(crate) fn operates(&self) -> bool {
        self.role.covers(Role::Operator)
    }

    /// Whether this browser may delete and revoke others (an admin).
    pub(crate) fn administers(&self) -> bool {
        self.role.covers(Role::Admin)
    }

    pub(crate) fn state_str(&self) -> &'static str {
        self.state.as_str()
    }

    pub(crate) fn state_text(&self) -> &'static str {
        match self.state {
            PageState::Paired => "Paired",
            PageState::NotPaired => "Not paired",
            PageState::EpochEnded => "Epoch ended",
            PageState::Unavailable => "Daemon unavailable",
        }
    }

    /// What to do next, in the state's own words.
    pub(crate) fn advice(&self) -> &'static str {
        match self.state {
            // Hidden while paired; app.js shows it if the pairing ends while the page is open.
            PageState::Paired => "Run `studio pair` to open a new link.",
            PageState::NotPaired => {
                "This browser is not paired. Run `studio pair` to open a new link."
            }
            PageState::EpochEnded => {
                "This browser's pairing ended with its epoch (the daemon restarted, or an operator ran `studio epoch rotate`). Run `studio pair` to open a new link."
            }
            PageState::Unavailable => {
                "The daemon is unavailable. Check `studio status`; this page retries on reload."
            }
        }
    }

    pub(crate) fn css(&self) -> &'static str {
        assets::url("app.css")
    }

    pub(crate) fn pairing_js(&self) -> &'static str {
        assets::url("app.js")
    }

    pub(crate) fn theme_js(&self) -> &'static str {
        assets::url("theme.js")
    }

    pub(crate) fn cockpit_js(&self) -> &'static str {
        assets::url("cockpit.js")
    }

    /// Only the attention page loads it (`attention.html`'s `scripts` block).
    pub(crate) fn attention_js(&self) -> &'static str {
        assets::url("attention.js")
    }

    pub(crate) fn current(&self, nav: Nav) -> &'static str {
        if self.nav == nav { "page" } else { "false" }
    }

    /// Applies a failed call: a state change, or a problem to show while paired.
    pub(crate) fn fail(&mut self, e: &DaemonError) {
        match e.page_state() {
            Some(state) => self.state = state,
            None => {
                self.problem = Some(match e {
                    DaemonError::NotFound => "not found".into(),
                    other => other.to_string(),
                })
            }
        }
    }
}

/// A paired request: its credential and origin for the daemon client.
pub(crate) struct Paired {
    bearer: String,
    origin: String,
}

impl Paired {
    pub(crate) fn daemon<'a>(&'a self, state: &'a AppState) -> Daemon<'a> {
        Daemon::new(&state.proxy, &self.bearer, &self.origin)
    }
}

/// The page's own origin, from the Host the front door already accepted.
fn page_origin(state: &AppState, headers: &HeaderMap) -> String {
    let scheme = if state.secure_cookies {
        "https"
    } else {
        "http"
    };
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(|h| format!("{scheme}://{h}"))
        .unwrap_or_default()
}

/// Authenticates the page through the cookie; `Paired` only when the verifier admits it.
pub(crate) async fn resolve(
    state: &AppState,
    headers: &HeaderMap,
    path: &str,
    nav: Nav,
) -> (Ctx, Option<Paired>) {
    let origin = page_origin(state, headers);
    let bearer = match frontdoor::bearer(headers) {
        Ok(Some((bearer, _))) => bearer,
        Ok(None) | Err(_) => {
            let reachable = state.verifier.reachable().await;
            let s = if reachable {
                PageState::NotPaired
            } else {
                PageState::Unavailable
            };
            return (Ctx::new(s, nav), None);
        }
    };
    match state.verifier.admit(&bearer, &origin, "GET", path).await {
        Ok(Verdict::Admitted(p)) => {
            let mut ctx = Ctx::new(PageState::Paired, nav);
            ctx.epoch = Some(p.epoch.clone());
            ctx.principal = Some(p.id.clone());
            ctx.role = p.role;
            (ctx, Some(Paired { bearer, origin }))
        }
        Ok(Verdict::Refused(e)) => (Ctx::new(PageState::from_code(e.code.as_str()), nav), None),
        Err(e) => {
            tracing::warn!(error = %e, "verifier unavailable");
            (Ctx::new(PageState::Unavailable, nav), None)
        }
    }
}

/// Renders a template as a `no-store` page (pages reflect live state).
pub(crate) fn render<T: Template>(page: &T) -> Response {
    match page.render() {
        Ok(html) => {
            let mut response = Html(html).into_response();
            crate::page::harden(response.headers_mut(), CSP);
            response
        }
        Err(e) => {
            tracing::error!(error = %e, "template failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "page failed to render").into_response()
        }
    }
}
