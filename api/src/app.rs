//! studio-app's own API (`/api/app/…` and the app's pairing): its bodies and its route
//! inventory, written to `docs/openapi-app.json` and served at `GET /api/app/openapi.json`.
//! Every other `/api` path the app answers is studiod's, forwarded ([`crate::routes`]).

use serde::{Deserialize, Serialize};
use studio_contract::error::Code;
use utoipa::ToSchema;

use crate::{
    PairRequest,
    route::{Access, Gives, Kind, Method, Param, Route, Takes, ViaApp, typed},
};

/// `GET /health` of studio-app: it is up, and whether studiod answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AppHealth {
    /// Always `ok`.
    pub status: String,
    /// `ok` or `unavailable`.
    pub daemon: String,
}

/// `GET /api/app/session`: what the page should show (always `200`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AppSession {
    pub paired: bool,
    /// `ok` or `unavailable`.
    pub daemon: String,
    pub epoch: Option<String>,
    pub principal: Option<String>,
    /// Why not paired: a stable error code.
    pub reason: Option<Code>,
}

/// `POST /api/studio/pair` through the app: the admission token went into an `HttpOnly`
/// cookie; the page keeps the decision token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BrowserPaired {
    pub paired: bool,
    pub decision_token: String,
    pub epoch: String,
    pub principal: String,
    #[schema(format = DateTime)]
    pub decision_expires_at: String,
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
}

/// An operator's decision about an attention item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Acknowledged,
    Resolved,
    Expected,
    Snoozed,
}

/// What an item stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    Run,
    Sched,
}

/// The disposition an item carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DispositionView {
    pub state: Decision,
    pub reason: String,
    pub revision: i64,
    #[schema(format = DateTime)]
    pub until: Option<String>,
    #[schema(format = DateTime)]
    pub at: String,
    /// The principal who decided.
    pub by: String,
    /// The newest evidence the decision covered.
    #[schema(format = DateTime)]
    pub covers: String,
    /// Whether it hides the item now.
    pub effective: bool,
}

/// One item of the attention queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AttentionItem {
    /// `run:<id>` or `sched:<id>`.
    pub id: String,
    pub kind: ItemKind,
    pub title: String,
    pub detail: String,
    #[schema(format = DateTime)]
    pub since: String,
    /// The cockpit page it is about.
    pub link: String,
    pub disposition: Option<DispositionView>,
    pub hidden: bool,
    /// The stored disposition's revision (pass back when setting it again).
    pub revision: Option<i64>,
    /// The schedule it is about (a run's schedule), by which the cockpit groups items;
    /// none for a run whose schedule is gone and unnamed.
    #[serde(default)]
    pub schedule: Option<ItemSchedule>,
}

/// The schedule an attention item is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ItemSchedule {
    /// Its id, when known (a deleted schedule's runs keep only the name).
    pub id: Option<String>,
    /// Its name (the name the run ran under, for a run).
    pub name: Option<String>,
}

/// `GET /api/app/attention`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AttentionList {
    pub items: Vec<AttentionItem>,
    /// How many items a disposition hides (listed with `all=true`).
    pub hidden: usize,
}

/// `PUT /api/app/attention/{id}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DispositionPut {
    /// Required; checked with the other fields so that every problem is reported at once.
    #[schema(value_type = Option<Decision>)]
    pub state: Option<String>,
    /// Why (required, at most 2,000 characters).
    pub reason: Option<String>,
    /// For a snooze: until when, RFC 3339 with an offset.
    #[schema(format = DateTime)]
    pub until: Option<String>,
    /// The revision last seen; after a deletion, at least the tombstone's.
    pub revision: Option<i64>,
}

/// A stored disposition, as set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DispositionRecord {
    pub id: String,
    /// `null` once deleted (a tombstone).
    pub state: Option<Decision>,
    pub reason: String,
    #[schema(format = DateTime)]
    pub until: Option<String>,
    #[schema(format = DateTime)]
    pub covers: String,
    pub revision: i64,
    pub by: String,
    #[schema(format = DateTime)]
    pub at: String,
}

/// `DELETE /api/app/attention/{id}` (the body is optional).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DispositionClear {
    pub reason: Option<String>,
}

/// The answer to a clear.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DispositionCleared {
    pub deleted: bool,
    pub id: String,
    pub revision: i64,
}

/// One change in an item's ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LedgerEntryView {
    /// `put` or `delete`.
    pub op: String,
    pub state: Option<Decision>,
    pub reason: String,
    #[schema(format = DateTime)]
    pub until: Option<String>,
    #[schema(format = DateTime)]
    pub covers: Option<String>,
    pub revision: i64,
    pub by: String,
    #[schema(format = DateTime)]
    pub at: String,
}

/// `GET /api/app/attention/{id}/history`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct History {
    pub id: String,
    pub history: Vec<LedgerEntryView>,
}

/// Each operation studio-app serves under `/api` itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AppOp {
    Health,
    Session,
    OpenApi,
    Pair,
    Attention,
    SetDisposition,
    ClearDisposition,
    History,
    Backup,
}

const fn route(
    op: AppOp,
    id: &'static str,
    method: Method,
    path: &'static str,
    summary: &'static str,
    gives: Gives,
) -> Route<AppOp> {
    Route::new(op, id, (method, path), summary, gives, ViaApp::AppServes)
}

/// Every route studio-app answers itself under `/api` (and its liveness).
pub const APP_ROUTES: &[Route<AppOp>] = &[
    Route {
        access: Access::Open,
        via_app: ViaApp::Own,
        ..route(
            AppOp::Health,
            "app_health",
            Method::Get,
            "/health",
            "Liveness, and whether studiod answers",
            Gives::Json(200, typed::<AppHealth>()),
        )
    },
    Route {
        access: Access::Open,
        ..route(
            AppOp::Session,
            "app_session",
            Method::Get,
            "/api/app/session",
            "Whether this browser is paired and studiod is there (always 200)",
            Gives::Json(200, typed::<AppSession>()),
        )
    },
    route(
        AppOp::OpenApi,
        "app_openapi",
        Method::Get,
        "/api/app/openapi.json",
        "This document",
        Gives::Document,
    ),
    Route {
        access: Access::PairingCode,
        takes: Takes::Json(typed::<PairRequest>()),
        errors: &[Code::DaemonUnavailable],
        ..route(
            AppOp::Pair,
            "app_pair",
            Method::Post,
            "/api/studio/pair",
            "Redeem a pairing code: the admission token is set as an HttpOnly cookie",
            Gives::Json(200, typed::<BrowserPaired>()),
        )
    },
    Route {
        query: &[Param {
            name: "all",
            kind: Kind::Boolean,
            about: "also the items a disposition hides",
        }],
        errors: &[Code::BadRequest, Code::DaemonUnavailable],
        ..route(
            AppOp::Attention,
            "attention",
            Method::Get,
            "/api/app/attention",
            "What needs a human: failing runs and unhealthy schedules",
            Gives::Json(200, typed::<AttentionList>()),
        )
    },
    Route {
        takes: Takes::Json(typed::<DispositionPut>()),
        errors: &[Code::NotFound, Code::ValidationFailed, Code::Conflict],
        ..route(
            AppOp::SetDisposition,
            "set_disposition",
            Method::Put,
            "/api/app/attention/{id}",
            "Acknowledge, resolve, expect or snooze an item",
            Gives::Json(200, typed::<DispositionRecord>()),
        )
    },
    Route {
        takes: Takes::Json(typed::<DispositionClear>()),
        errors: &[Code::NotFound, Code::ValidationFailed],
        ..route(
            AppOp::ClearDisposition,
            "clear_disposition",
            Method::Delete,
            "/api/app/attention/{id}",
            "Undo an item's disposition",
            Gives::Json(200, typed::<DispositionCleared>()),
        )
    },
    Route {
        errors: &[Code::NotFound],
        ..route(
            AppOp::History,
            "attention_history",
            Method::Get,
            "/api/app/attention/{id}/history",
            "Every change to an item's disposition",
            Gives::Json(200, typed::<History>()),
        )
    },
    Route {
        access: Access::DaemonToken,
        takes: Takes::Json(typed::<crate::BackupRequest>()),
        errors: &[
            Code::DaemonTokenRequired,
            Code::ValidationFailed,
            Code::Conflict,
            Code::DaemonUnavailable,
        ],
        ..route(
            AppOp::Backup,
            "app_backup",
            Method::Post,
            "/api/app/backup",
            "Copy app.db into a directory as one consistent snapshot while the app runs",
            Gives::Json(200, typed::<crate::BackupFile>()),
        )
    },
];

/// studio-app's document: `GET /api/app/openapi.json` and `docs/openapi-app.json`.
pub fn app_document() -> utoipa::openapi::OpenApi {
    crate::openapi::document(
        "studio-app",
        "Studio's cockpit: the app's own routes (every other `/api` path is studiod's, \
         forwarded; see studiod's document)",
        APP_ROUTES,
    )
}

/// The first app route that would shadow a studiod route studio-app should forward, if any:
/// the app answering a path studiod serves is only right where the inventory says so.
pub fn shadowed(app_paths: &[&str]) -> Option<String> {
    app_paths.iter().find_map(|path| {
        crate::routes::ROUTES
            .iter()
            .find(|r| {
                r.via_app == ViaApp::Proxied
                    && (crate::route::template_matches(r.path, path)
                        || crate::route::template_matches(path, r.path))
            })
            .map(|r| format!("{path} shadows studiod's {} {}", r.method.as_str(), r.path))
    })
}
