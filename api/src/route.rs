//! What a route is, for any of our listeners: method, path template, who may call it,
//! what it takes and answers, and which error codes it can give. studiod's inventory
//! ([`crate::routes::ROUTES`]) and studio-app's own are lists of these; each process builds
//! its router from its list, and the OpenAPI documents ([`crate::openapi`]) are written
//! from the same lists.

use std::borrow::Cow;

use studio_contract::{error::Code, role::Role};
use utoipa::{
    ToSchema,
    openapi::{RefOr, schema::Schema},
};

/// The methods our APIs use (`HEAD` is answered wherever `GET` is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Post => "POST",
            Self::Put => "PUT",
            Self::Patch => "PATCH",
            Self::Delete => "DELETE",
        }
    }

    pub fn http(self) -> http::Method {
        match self {
            Self::Get => http::Method::GET,
            Self::Post => http::Method::POST,
            Self::Put => http::Method::PUT,
            Self::Patch => http::Method::PATCH,
            Self::Delete => http::Method::DELETE,
        }
    }

    /// Whether a request with `method` is answered by a route of this method.
    pub fn answers(self, method: &http::Method) -> bool {
        *method == self.http() || (self == Self::Get && *method == http::Method::HEAD)
    }
}

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone who reaches the listener (liveness).
    Open,
    /// A pairing code in the body stands in for a bearer.
    PairingCode,
    /// A bearer: a browser session's admission token or the daemon token.
    Bearer,
    /// The daemon token only, never a browser (the machine's owner at a terminal).
    DaemonToken,
}

/// How studio-app treats a studiod route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViaApp {
    /// Forwarded as is, with the browser's bearer and origin.
    Proxied,
    /// studio-app answers this path itself (and calls studiod behind it its own way).
    AppServes,
    /// Each process has its own (liveness): never forwarded.
    Own,
}

/// A schema by name, with every schema it refers to (for the document's components).
#[derive(Clone, Copy)]
pub struct Typed {
    pub name: fn() -> Cow<'static, str>,
    collect: fn(&mut Vec<(String, RefOr<Schema>)>),
}

impl Typed {
    /// Pushes this schema and every schema it refers to.
    pub fn collect(&self, out: &mut Vec<(String, RefOr<Schema>)>) {
        (self.collect)(out);
    }
}

impl std::fmt::Debug for Typed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&(self.name)())
    }
}

/// The schema of `T`.
pub const fn typed<T: ToSchema>() -> Typed {
    Typed {
        name: T::name,
        collect: collect::<T>,
    }
}

fn collect<T: ToSchema>(out: &mut Vec<(String, RefOr<Schema>)>) {
    out.push((T::name().into_owned(), T::schema()));
    T::schemas(out);
}

/// What a route reads from its body.
#[derive(Debug, Clone, Copy)]
pub enum Takes {
    Nothing,
    /// `application/json` of this schema.
    Json(Typed),
    /// A JSON merge patch (RFC 7396) of this schema, `application/json`.
    MergePatch(Typed),
}

/// What a route answers on success.
#[derive(Debug, Clone, Copy)]
pub enum Gives {
    /// `application/json` of this schema with this status.
    Json(u16, Typed),
    /// `text/plain` bytes.
    Text,
    /// `text/event-stream`, each event's data one of these (its `event:` line names it).
    Events(&'static [(&'static str, Typed)]),
    /// The OpenAPI document itself.
    Document,
}

/// The type of a query parameter.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    String,
    Integer,
    Boolean,
    /// RFC 3339 with an offset.
    Instant,
    /// One of these words.
    OneOf(&'static [&'static str]),
    /// Comma-separated words, each one of these.
    ListOf(&'static [&'static str]),
}

/// One query parameter (every one is optional).
#[derive(Debug, Clone, Copy)]
pub struct Param {
    pub name: &'static str,
    pub kind: Kind,
    pub about: &'static str,
}

/// What a route decides, and so what it needs beyond its bearer and role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decides {
    /// Nothing: the bearer and the role are enough.
    No,
    /// A destructive change: from a browser it also needs that browser's decision token
    /// (`x-studio-decision-token`), resolved with its origin; the daemon token, the
    /// machine owner's, needs none.
    Destructive,
    /// Only a person decides (an approval): a paired browser's decision token, resolved
    /// with its origin, and never the daemon token.
    Human,
}

/// One route of one listener. `O` names the handler that serves it.
#[derive(Debug, Clone, Copy)]
pub struct Route<O: 'static> {
    pub op: O,
    /// The operation id in the document (`list_schedules`).
    pub id: &'static str,
    pub method: Method,
    /// The path, with `{name}` for each path parameter.
    pub path: &'static str,
    pub summary: &'static str,
    pub access: Access,
    /// The least role a browser session needs (docs/DECISIONS.md); the daemon token has
    /// every role.
    pub needs: Role,
    /// Whether the route is a decision (docs/DECISIONS.md), which needs more than the
    /// bearer.
    pub decides: Decides,
    pub via_app: ViaApp,
    pub query: &'static [Param],
    pub takes: Takes,
    pub gives: Gives,
    /// The codes this route's own handler can answer with; the front door's are added by
    /// [`Route::codes`].
    pub errors: &'static [Code],
    /// The length of `path` before its first `{`, found once: requests are matched
    /// against every route, and most differ there.
    pub(crate) literal: usize,
}

impl<O> Route<O> {
    /// A route that takes a bearer, no query and no body, treated `via_app`; the rest is
    /// set with struct update syntax.
    pub const fn new(
        op: O,
        id: &'static str,
        (method, path): (Method, &'static str),
        summary: &'static str,
        gives: Gives,
        via_app: ViaApp,
    ) -> Self {
        Self {
            op,
            id,
            method,
            path,
            summary,
            access: Access::Bearer,
            // Reading is a viewer's; changing anything an operator's.
            needs: match method {
                Method::Get => Role::Viewer,
                Method::Post | Method::Put | Method::Patch | Method::Delete => Role::Operator,
            },
            decides: Decides::No,
            via_app,
            query: &[],
            takes: Takes::Nothing,
            gives,
            errors: &[],
            literal: literal_len(path),
        }
    }

    /// Every error code a caller can get from this route: the handler's, and the front
    /// door's for its access and body.
    pub fn codes(&self) -> Vec<Code> {
        let mut codes = vec![Code::InvalidHost, Code::OriginNotAllowed, Code::Internal];
        match self.access {
            Access::Open => codes.retain(|c| *c == Code::InvalidHost || *c == Code::Internal),
            Access::PairingCode => codes.extend([Code::PairingCodeInvalid, Code::RateLimited]),
            Access::Bearer | Access::DaemonToken => codes.extend([
                Code::Unauthorized,
                Code::Revoked,
                Code::Expired,
                Code::SessionExpired,
                Code::EpochEnded,
            ]),
        }
        if self.access == Access::Bearer && self.needs > Role::Viewer {
            codes.push(Code::Forbidden);
        }
        match self.decides {
            Decides::No => {}
            Decides::Destructive => codes.push(Code::DecisionRequired),
            Decides::Human => codes.push(Code::HumanDecisionRequired),
        }
        if !matches!(self.takes, Takes::Nothing) {
            codes.extend([
                Code::BadRequest,
                Code::PayloadTooLarge,
                Code::UnsupportedMediaType,
            ]);
        }
        // Any write may find the home's disk full.
        if self.method != Method::Get && self.access != Access::Open {
            codes.push(Code::InsufficientStorage);
        }
        codes.extend(self.errors.iter().copied());
        codes.sort_by_key(|c| (c.status().as_u16(), c.as_str()));
        codes.dedup();
        codes
    }

    /// Whether `path` (no query) names this route's template: same segments, a `{…}`
    /// segment matching any one non-empty segment.
    pub fn matches(&self, path: &str) -> bool {
        matches_after(self.path, self.literal, path)
    }
}

/// A path template with its literal prefix measured once, for matching on every request.
#[derive(Debug, Clone, Copy)]
pub struct Template {
    path: &'static str,
    literal: usize,
}

impl Template {
    pub const fn new(path: &'static str) -> Self {
        Self {
            path,
            literal: literal_len(path),
        }
    }

    /// As [`template_matches`].
    pub fn matches(&self, path: &str) -> bool {
        matches_after(self.path, self.literal, path)
    }
}

/// The length of `template` before its first `{` (all of it when it has none).
const fn literal_len(template: &str) -> usize {
    let bytes = template.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'{' {
            return i;
        }
        i += 1;
    }
    bytes.len()
}

/// Whether `path` fits `template` segment by segment.
pub fn template_matches(template: &str, path: &str) -> bool {
    matches_after(template, literal_len(template), path)
}

/// [`template_matches`] with the template's literal prefix already measured: reject on
/// that prefix before splitting anything.
fn matches_after(template: &str, literal: usize, path: &str) -> bool {
    let Some(rest) = path.strip_prefix(&template[..literal]) else {
        return false;
    };
    if literal == template.len() {
        return rest.is_empty();
    }
    let mut want = template[literal..].split('/');
    let mut have = rest.split('/');
    loop {
        match (want.next(), have.next()) {
            (None, None) => return true,
            (Some(w), Some(h)) if w.starts_with('{') && w.ends_with('}') => {
                if h.is_empty() {
                    return false;
                }
            }
            (Some(w), Some(h)) if w == h => {}
            _ => return false,
        }
    }
}

/// The names of a template's path parameters, in order.
pub fn path_params(template: &str) -> impl Iterator<Item = &str> {
    template
        .split('/')
        .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_whole_segments() {
        assert!(template_matches("/api/runs/{id}", "/api/runs/r1"));
        assert!(!template_matches("/api/runs/{id}", "/api/runs/"));
        assert!(!template_matches("/api/runs/{id}", "/api/runs"));
        assert!(!template_matches("/api/runs/{id}", "/api/runs/r1/"));
        assert!(!template_matches("/api/runs", "/api/runs/"));
        assert!(template_matches("/api/runs", "/api/runs"));
        assert!(!template_matches("/api/runs", "/api/runsx"));
        assert!(template_matches(
            "/api/schedules/{id}/runs",
            "/api/schedules/a/runs"
        ));
        assert!(!template_matches(
            "/api/schedules/{id}/runs",
            "/api/schedules//runs"
        ));
        assert!(!template_matches(
            "/api/schedules/{id}/runs",
            "/api/schedules/a/b/runs"
        ));
        assert!(!template_matches(
            "/api/schedules/{id}/runs",
            "/api/schedulesx/a/runs"
        ));
        assert!(!template_matches("/api/runs/{id}", "/api/run"));
        assert_eq!(
            path_params("/api/schedules/{id}/runs").collect::<Vec<_>>(),
            ["id"]
        );
    }
}
