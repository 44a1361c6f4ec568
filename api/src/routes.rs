//! studiod's route inventory: the one list that builds studiod's router, decides what
//! studio-app forwards, and writes `docs/openapi.json`. Adding a route is adding a line
//! here and a handler for its [`Op`] in studiod (the compiler asks for it).

use studio_contract::{error::Code, health::HEALTHS, role::Role};

use crate::{
    route::{Access, Decides, Gives, Kind, Param, Route, Takes, ViaApp, typed},
    types::*,
};

/// Each operation studiod serves; studiod maps every one to its handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Health,
    Metrics,
    Readiness,
    Backup,
    GetCluster,
    RotateEpoch,
    ListApps,
    CreateAppToken,
    RevokeApp,
    GetRetention,
    SetRetention,
    RunRetention,
    RestoreArchive,
    Identity,
    OpenApi,
    Pair,
    Disconnect,
    ListSessions,
    ChangeSession,
    RevokeSession,
    ListSchedules,
    CreateSchedule,
    PreviewSchedule,
    GetSchedule,
    PatchSchedule,
    DeleteSchedule,
    EnableSchedule,
    DisableSchedule,
    TriggerSchedule,
    ListScheduleRuns,
    ListProjects,
    Summary,
    ListRuns,
    GetRun,
    RunLog,
    CancelRun,
    Events,
    ListAllowlist,
    ChangeAllowlist,
    ListAudit,
    ListApprovals,
    GetApproval,
    GrantApproval,
    DenyApproval,
    ExportEvidence,
    SubmitTask,
    ListTasks,
    GetTask,
    CancelTask,
    RetryTask,
    ListWorkers,
    CreateJoinToken,
    RevokeWorker,
    ListSecrets,
    SetSecret,
    DeleteSecret,
    ListEndpoints,
    CreateEndpoint,
    DeleteEndpoint,
    TestEndpoint,
    ListDeliveries,
    PlanDeclarations,
    ApplyDeclarations,
    ExportDeclarations,
}

const LIMIT: Param = Param {
    name: "limit",
    kind: Kind::Integer,
    about: "page size (clamped to 1..=500)",
};
const CURSOR: Param = Param {
    name: "cursor",
    kind: Kind::String,
    about: "the `next_cursor` of the previous page, with the same filters",
};

const RUN_FILTERS: &[Param] = &[
    Param {
        name: "schedule",
        kind: Kind::String,
        about: "runs of the schedule with this id",
    },
    Param {
        name: "schedule_name",
        kind: Kind::String,
        about: "runs of the schedule with this name",
    },
    Param {
        name: "q",
        kind: Kind::String,
        about: "runs whose schedule name contains this text (any case)",
    },
    Param {
        name: "project",
        kind: Kind::String,
        about: "runs whose schedule name starts with this project and a `/`",
    },
    Param {
        name: "status",
        kind: Kind::ListOf(&RunStatus::WORDS),
        about: "comma-separated statuses",
    },
    Param {
        name: "since",
        kind: Kind::Instant,
        about: "runs created at or after",
    },
    Param {
        name: "until",
        kind: Kind::Instant,
        about: "runs created before",
    },
    LIMIT,
    CURSOR,
];

const SCHEDULE_FILTERS: &[Param] = &[
    Param {
        name: "enabled",
        kind: Kind::Boolean,
        about: "only enabled (or disabled) schedules",
    },
    Param {
        name: "q",
        kind: Kind::String,
        about: "names containing this text",
    },
    Param {
        name: "health",
        kind: Kind::ListOf(HEALTHS),
        about: "comma-separated healths",
    },
    LIMIT,
    CURSOR,
];

const AUDIT_FILTERS: &[Param] = &[
    Param {
        name: "schedule",
        kind: Kind::String,
        about: "rows about the schedule with this id (its runs included)",
    },
    Param {
        name: "object",
        kind: Kind::String,
        about: "rows about this object: `schedule:ID` or `run:ID`",
    },
    Param {
        name: "principal",
        kind: Kind::String,
        about: "rows of this session id (`daemon` for the daemon token)",
    },
    Param {
        name: "kind",
        kind: Kind::ListOf(&AUDIT_KINDS),
        about: "comma-separated kinds",
    },
    Param {
        name: "since",
        kind: Kind::Instant,
        about: "rows at or after",
    },
    LIMIT,
    CURSOR,
];

const APPROVAL_FILTERS: &[Param] = &[
    Param {
        name: "status",
        kind: Kind::ListOf(&APPROVAL_STATUSES),
        about: "comma-separated statuses",
    },
    Param {
        name: "schedule_id",
        kind: Kind::String,
        about: "requests of the schedule with this id",
    },
    Param {
        name: "run_id",
        kind: Kind::String,
        about: "requests of the run with this id",
    },
    LIMIT,
    CURSOR,
];

const EVIDENCE_PARAMS: &[Param] = &[Param {
    name: "since",
    kind: Kind::Instant,
    about: "rows sealed at or after (the bundle then starts from the chain hash of the row before)",
}];

/// What refuses a decision on a request, besides the front door.
const DECISION_ERRORS: &[Code] = &[
    Code::ApprovalNotFound,
    Code::ApprovalNotPending,
    Code::ApprovalExpired,
    Code::ApprovalStale,
    Code::RequesterCannotApprove,
    Code::ValidationFailed,
];

const TASK_FILTERS: &[Param] = &[
    Param {
        name: "status",
        kind: Kind::ListOf(&TASK_STATUSES),
        about: "comma-separated statuses",
    },
    Param {
        name: "label",
        kind: Kind::String,
        about: "tasks that need this label",
    },
    LIMIT,
    CURSOR,
];

const LOG_PARAMS: &[Param] = &[
    Param {
        name: "stream",
        kind: Kind::OneOf(&["stdout", "stderr"]),
        about: "which output (default stdout)",
    },
    Param {
        name: "offset",
        kind: Kind::Integer,
        about: "the first byte to read",
    },
    Param {
        name: "limit",
        kind: Kind::Integer,
        about: "at most this many bytes (default 65536, at most 1 MiB)",
    },
];

const EXPORT_PARAMS: &[Param] = &[Param {
    name: "project",
    kind: Kind::String,
    about: "only this project's schedules",
}];

/// A route with the common defaults: a bearer, forwarded by studio-app, no query, no body.
const fn route(
    op: Op,
    id: &'static str,
    method: crate::route::Method,
    path: &'static str,
    summary: &'static str,
    gives: Gives,
) -> Route<Op> {
    Route::new(op, id, (method, path), summary, gives, ViaApp::Proxied)
}

use crate::route::Method::{Delete, Get, Patch, Post, Put};

const fn ok<T: utoipa::ToSchema>() -> Gives {
    Gives::Json(200, typed::<T>())
}

/// Every route studiod serves.
pub const ROUTES: &[Route<Op>] = &[
    Route {
        access: Access::Open,
        via_app: ViaApp::Own,
        ..route(
            Op::Health,
            "health",
            Get,
            "/health",
            "Liveness",
            ok::<Health>(),
        )
    },
    Route {
        access: Access::DaemonToken,
        via_app: ViaApp::Own,
        errors: &[Code::DaemonTokenRequired],
        ..route(
            Op::Metrics,
            "metrics",
            Get,
            "/metrics",
            "Prometheus text exposition of studiod's metrics (names prefixed `studio_`)",
            Gives::Text,
        )
    },
    Route {
        access: Access::DaemonToken,
        via_app: ViaApp::Own,
        takes: Takes::Json(typed::<BackupRequest>()),
        errors: &[
            Code::DaemonTokenRequired,
            Code::ValidationFailed,
            Code::Conflict,
        ],
        ..route(
            Op::Backup,
            "backup",
            Post,
            "/api/admin/backup",
            "Copy state.db into a directory as one consistent snapshot while studiod runs",
            ok::<BackupFile>(),
        )
    },
    Route {
        needs: Role::Admin,
        ..route(
            Op::GetCluster,
            "get_cluster",
            Get,
            "/api/admin/cluster",
            "The studiod processes sharing this state's database, the one that leads and its term",
            ok::<ClusterState>(),
        )
    },
    Route {
        access: Access::DaemonToken,
        via_app: ViaApp::Own,
        errors: &[Code::DaemonTokenRequired],
        ..route(
            Op::RotateEpoch,
            "rotate_epoch",
            Post,
            "/api/admin/epoch/rotate",
            "End the epoch on purpose and start another: every browser of every member pairs again",
            ok::<EpochRotated>(),
        )
    },
    Route {
        needs: Role::Admin,
        ..route(
            Op::ListApps,
            "list_apps",
            Get,
            "/api/apps",
            "The studio-apps enrolled to reach the apps listener from other hosts, oldest first",
            ok::<AppList>(),
        )
    },
    Route {
        access: Access::DaemonToken,
        via_app: ViaApp::Own,
        takes: Takes::Json(typed::<NewAppToken>()),
        errors: &[
            Code::DaemonTokenRequired,
            Code::ValidationFailed,
            Code::Conflict,
        ],
        ..route(
            Op::CreateAppToken,
            "create_app_token",
            Post,
            "/api/apps/tokens",
            "A one-time token for `studio app join` (201; shown once, kept as a digest)",
            Gives::Json(201, typed::<AppTokenCreated>()),
        )
    },
    Route {
        access: Access::DaemonToken,
        via_app: ViaApp::Own,
        errors: &[Code::DaemonTokenRequired, Code::AppNotFound],
        ..route(
            Op::RevokeApp,
            "revoke_app",
            Delete,
            "/api/apps/{id}",
            "Revoke an app: its certificate is refused from its next request on",
            ok::<EnrolledApp>(),
        )
    },
    Route {
        needs: Role::Admin,
        ..route(
            Op::GetRetention,
            "get_retention",
            Get,
            "/api/admin/retention",
            "The retention policy in force, where it comes from, and the latest passes",
            ok::<RetentionState>(),
        )
    },
    Route {
        needs: Role::Admin,
        decides: Decides::Destructive,
        takes: Takes::Json(typed::<RetentionPolicy>()),
        errors: &[
            Code::ValidationFailed,
            Code::Conflict,
            Code::DaemonTokenRequired,
        ],
        ..route(
            Op::SetRetention,
            "set_retention",
            Put,
            "/api/admin/retention",
            "Set the retention policy (409 while studiod's configuration sets it; only the daemon token from a terminal changes archive_dir)",
            ok::<RetentionState>(),
        )
    },
    Route {
        access: Access::DaemonToken,
        via_app: ViaApp::Own,
        takes: Takes::Json(typed::<RetentionRunRequest>()),
        errors: &[
            Code::DaemonTokenRequired,
            Code::ValidationFailed,
            Code::Busy,
        ],
        ..route(
            Op::RunRetention,
            "run_retention",
            Post,
            "/api/admin/retention/run",
            "Run a retention pass now, archiving each chunk before it is deleted when a directory is given",
            ok::<RetentionPass>(),
        )
    },
    Route {
        access: Access::DaemonToken,
        via_app: ViaApp::Own,
        takes: Takes::Json(typed::<ArchiveRestoreRequest>()),
        errors: &[
            Code::DaemonTokenRequired,
            Code::ValidationFailed,
            Code::Conflict,
            Code::Busy,
        ],
        ..route(
            Op::RestoreArchive,
            "restore_archive",
            Post,
            "/api/admin/archives/restore",
            "Put an archive's rows and log files back, refusing any that is there already",
            ok::<ArchiveRestored>(),
        )
    },
    Route {
        needs: Role::Admin,
        ..route(
            Op::Readiness,
            "readiness",
            Get,
            "/api/admin/readiness",
            "Whether studiod can do its work now: 200 when ready, else 503 with the same body",
            ok::<Readiness>(),
        )
    },
    route(
        Op::Identity,
        "identity",
        Get,
        "/api/identity",
        "Which Studio answers, its version and epoch",
        ok::<Identity>(),
    ),
    route(
        Op::OpenApi,
        "openapi",
        Get,
        "/api/openapi.json",
        "This document",
        Gives::Document,
    ),
    Route {
        access: Access::PairingCode,
        via_app: ViaApp::AppServes,
        takes: Takes::Json(typed::<PairRequest>()),
        ..route(
            Op::Pair,
            "pair",
            Post,
            "/api/studio/pair",
            "Redeem a pairing code for a session's tokens",
            ok::<Paired>(),
        )
    },
    Route {
        // Ending its own session is every browser's.
        needs: Role::Viewer,
        errors: &[Code::BadRequest],
        ..route(
            Op::Disconnect,
            "disconnect",
            Post,
            "/api/studio/disconnect",
            "Revoke the caller's own session",
            ok::<Disconnected>(),
        )
    },
    route(
        Op::ListSessions,
        "list_sessions",
        Get,
        "/api/studio/sessions",
        "Every paired browser of this epoch",
        ok::<Sessions>(),
    ),
    Route {
        needs: Role::Admin,
        decides: Decides::Destructive,
        takes: Takes::Json(typed::<SessionChange>()),
        errors: &[Code::SessionNotFound, Code::ValidationFailed],
        ..route(
            Op::ChangeSession,
            "change_session",
            Patch,
            "/api/studio/sessions/{id}",
            "Change a session's role; its next request is judged by the new one",
            ok::<Session>(),
        )
    },
    Route {
        needs: Role::Admin,
        decides: Decides::Destructive,
        errors: &[Code::SessionNotFound],
        ..route(
            Op::RevokeSession,
            "revoke_session",
            Delete,
            "/api/studio/sessions/{id}",
            "Revoke a session",
            ok::<SessionRevoked>(),
        )
    },
    Route {
        query: SCHEDULE_FILTERS,
        errors: &[Code::BadRequest, Code::InvalidCursor],
        ..route(
            Op::ListSchedules,
            "list_schedules",
            Get,
            "/api/schedules",
            "One page of schedules, by name",
            ok::<SchedulePage>(),
        )
    },
    Route {
        takes: Takes::Json(typed::<studio_schedule::ScheduleSpec>()),
        errors: &[Code::ValidationFailed, Code::NameTaken],
        ..route(
            Op::CreateSchedule,
            "create_schedule",
            Post,
            "/api/schedules",
            "Create a schedule",
            Gives::Json(201, typed::<Schedule>()),
        )
    },
    Route {
        // Computes, changes nothing.
        needs: Role::Viewer,
        takes: Takes::Json(typed::<PreviewRequest>()),
        errors: &[Code::ValidationFailed],
        ..route(
            Op::PreviewSchedule,
            "preview_schedule",
            Post,
            "/api/schedules/preview",
            "The next fires of a trigger",
            ok::<Preview>(),
        )
    },
    Route {
        errors: &[Code::ScheduleNotFound],
        ..route(
            Op::GetSchedule,
            "get_schedule",
            Get,
            "/api/schedules/{id}",
            "One schedule",
            ok::<Schedule>(),
        )
    },
    Route {
        takes: Takes::MergePatch(typed::<studio_schedule::ScheduleSpec>()),
        errors: &[
            Code::ScheduleNotFound,
            Code::ValidationFailed,
            Code::NameTaken,
            Code::Conflict,
        ],
        ..route(
            Op::PatchSchedule,
            "patch_schedule",
            Patch,
            "/api/schedules/{id}",
            "Change a schedule (a JSON merge patch of its spec)",
            ok::<Schedule>(),
        )
    },
    Route {
        needs: Role::Admin,
        decides: Decides::Destructive,
        errors: &[Code::ScheduleNotFound],
        ..route(
            Op::DeleteSchedule,
            "delete_schedule",
            Delete,
            "/api/schedules/{id}",
            "Delete a schedule (its runs stay)",
            ok::<Deleted>(),
        )
    },
    Route {
        errors: &[Code::ScheduleNotFound, Code::Conflict],
        ..route(
            Op::EnableSchedule,
            "enable_schedule",
            Post,
            "/api/schedules/{id}/enable",
            "Enable a schedule",
            ok::<Schedule>(),
        )
    },
    Route {
        errors: &[Code::ScheduleNotFound, Code::Conflict],
        ..route(
            Op::DisableSchedule,
            "disable_schedule",
            Post,
            "/api/schedules/{id}/disable",
            "Disable a schedule",
            ok::<Schedule>(),
        )
    },
    Route {
        errors: &[
            Code::ScheduleNotFound,
            Code::MaxRunsReached,
            Code::BudgetExhausted,
        ],
        ..route(
            Op::TriggerSchedule,
            "trigger_schedule",
            Post,
            "/api/schedules/{id}/trigger",
            "Start a manual run now",
            Gives::Json(202, typed::<Run>()),
        )
    },
    Route {
        query: RUN_FILTERS,
        errors: &[
            Code::ScheduleNotFound,
            Code::BadRequest,
            Code::InvalidCursor,
        ],
        ..route(
            Op::ListScheduleRuns,
            "list_schedule_runs",
            Get,
            "/api/schedules/{id}/runs",
            "One page of a schedule's runs, newest first",
            ok::<RunPage>(),
        )
    },
    route(
        Op::ListProjects,
        "list_projects",
        Get,
        "/api/projects",
        "The projects schedule names name (the part before their first `/`), by name",
        ok::<ProjectList>(),
    ),
    route(
        Op::Summary,
        "summary",
        Get,
        "/api/summary",
        "The overview's numbers",
        ok::<Summary>(),
    ),
    Route {
        query: RUN_FILTERS,
        errors: &[
            Code::ScheduleNotFound,
            Code::BadRequest,
            Code::InvalidCursor,
        ],
        ..route(
            Op::ListRuns,
            "list_runs",
            Get,
            "/api/runs",
            "One page of runs, newest first",
            ok::<RunPage>(),
        )
    },
    Route {
        errors: &[Code::RunNotFound],
        ..route(
            Op::GetRun,
            "get_run",
            Get,
            "/api/runs/{id}",
            "One run with its status changes",
            ok::<RunDetail>(),
        )
    },
    Route {
        query: LOG_PARAMS,
        errors: &[Code::RunNotFound, Code::BadRequest, Code::OutputElsewhere],
        ..route(
            Op::RunLog,
            "run_log",
            Get,
            "/api/runs/{id}/log",
            "A window of a run's output (size in `x-studio-log-size`)",
            Gives::Text,
        )
    },
    Route {
        errors: &[
            Code::RunNotFound,
            Code::RunNotActive,
            Code::DecisionRequired,
            Code::Conflict,
        ],
        ..route(
            Op::CancelRun,
            "cancel_run",
            Post,
            "/api/runs/{id}/cancel",
            "Cancel a queued or running run (from a browser, one another session asked for also needs the decision token; 409 while the studiod that runs it does not answer)",
            ok::<Run>(),
        )
    },
    route(
        Op::Events,
        "events",
        Get,
        "/api/events",
        "Server-sent events from the log (resume with `Last-Event-ID`)",
        Gives::Events(&[
            ("run", typed::<RunEvent>()),
            ("schedule", typed::<ScheduleEvent>()),
            ("approval", typed::<ApprovalEvent>()),
            ("task", typed::<TaskEvent>()),
        ]),
    ),
    route(
        Op::ListAllowlist,
        "list_allowlist",
        Get,
        "/api/admin/allowlist",
        "The command allow-list",
        ok::<AllowList>(),
    ),
    Route {
        needs: Role::Admin,
        access: Access::DaemonToken,
        takes: Takes::Json(typed::<AllowChange>()),
        errors: &[Code::DaemonTokenRequired, Code::ValidationFailed],
        ..route(
            Op::ChangeAllowlist,
            "change_allowlist",
            Post,
            "/api/admin/allowlist",
            "Add and remove allowed executables (the daemon token only)",
            ok::<AllowChanged>(),
        )
    },
    Route {
        query: AUDIT_FILTERS,
        errors: &[Code::BadRequest, Code::InvalidCursor],
        ..route(
            Op::ListAudit,
            "list_audit",
            Get,
            "/api/audit",
            "One page of the audit trail, newest first: who changed what, when, from where",
            ok::<AuditPage>(),
        )
    },
    Route {
        query: APPROVAL_FILTERS,
        errors: &[Code::BadRequest, Code::InvalidCursor],
        ..route(
            Op::ListApprovals,
            "list_approvals",
            Get,
            "/api/approvals",
            "One page of approval requests, newest first",
            ok::<ApprovalPage>(),
        )
    },
    Route {
        errors: &[Code::ApprovalNotFound],
        ..route(
            Op::GetApproval,
            "get_approval",
            Get,
            "/api/approvals/{id}",
            "One approval request: what will run, its hash, who asked, its expiry, its decision and evidence",
            ok::<ApprovalDetail>(),
        )
    },
    Route {
        decides: Decides::Human,
        takes: Takes::Json(typed::<DecisionRequest>()),
        errors: DECISION_ERRORS,
        ..route(
            Op::GrantApproval,
            "grant_approval",
            Post,
            "/api/approvals/{id}/grant",
            "Grant a pending request: its run launches once (its schedule's overlap, max_runs and budget decide now)",
            ok::<Decided>(),
        )
    },
    Route {
        decides: Decides::Human,
        takes: Takes::Json(typed::<DecisionRequest>()),
        errors: DECISION_ERRORS,
        ..route(
            Op::DenyApproval,
            "deny_approval",
            Post,
            "/api/approvals/{id}/deny",
            "Deny a pending request: its run ends `denied`",
            ok::<Decided>(),
        )
    },
    Route {
        query: EVIDENCE_PARAMS,
        errors: &[Code::BadRequest],
        ..route(
            Op::ExportEvidence,
            "export_evidence",
            Get,
            "/api/evidence",
            "The evidence log as a bundle (JSON lines: a signed header, then one sealed row per line), for `studio evidence verify`",
            Gives::Text,
        )
    },
    Route {
        takes: Takes::Json(typed::<crate::schedule::TaskSpec>()),
        errors: &[
            Code::ValidationFailed,
            Code::IdempotencyConflict,
            Code::QueueFull,
        ],
        ..route(
            Op::SubmitTask,
            "submit_task",
            Post,
            "/api/tasks",
            "Submit a task (201; the same idempotency key with the same spec answers the existing task with 200; a full queue for its concurrency key is 429 with Retry-After)",
            Gives::Json(201, typed::<Task>()),
        )
    },
    Route {
        query: TASK_FILTERS,
        errors: &[Code::BadRequest, Code::InvalidCursor],
        ..route(
            Op::ListTasks,
            "list_tasks",
            Get,
            "/api/tasks",
            "One page of tasks, newest first",
            ok::<TaskPage>(),
        )
    },
    Route {
        errors: &[Code::TaskNotFound],
        ..route(
            Op::GetTask,
            "get_task",
            Get,
            "/api/tasks/{id}",
            "One task with its attempts",
            ok::<TaskDetail>(),
        )
    },
    Route {
        errors: &[Code::TaskNotFound, Code::TaskNotActive],
        ..route(
            Op::CancelTask,
            "cancel_task",
            Post,
            "/api/tasks/{id}/cancel",
            "Cancel a task: a queued one at once, a running one through its attempt",
            ok::<Task>(),
        )
    },
    Route {
        errors: &[Code::TaskNotFound, Code::TaskNotFinished],
        ..route(
            Op::RetryTask,
            "retry_task",
            Post,
            "/api/tasks/{id}/retry",
            "Queue an ended task (failed, timed out, cancelled) for another attempt now, or one waiting to retry at once",
            ok::<Task>(),
        )
    },
    Route {
        ..route(
            Op::ListWorkers,
            "list_workers",
            Get,
            "/api/workers",
            "Every worker: studiod's built-in one, then the enrolled ones",
            ok::<WorkerList>(),
        )
    },
    Route {
        needs: Role::Admin,
        decides: Decides::Destructive,
        takes: Takes::Json(typed::<NewJoinToken>()),
        errors: &[Code::ValidationFailed],
        ..route(
            Op::CreateJoinToken,
            "create_join_token",
            Post,
            "/api/workers/tokens",
            "A one-time join token for `studio worker join` (201; shown once, kept as a digest)",
            Gives::Json(201, typed::<JoinTokenCreated>()),
        )
    },
    Route {
        needs: Role::Admin,
        decides: Decides::Destructive,
        errors: &[Code::WorkerNotFound],
        ..route(
            Op::RevokeWorker,
            "revoke_worker",
            Delete,
            "/api/workers/{id}",
            "Revoke a worker: its certificate admits it no more and its running attempts end `worker_lost`",
            ok::<Worker>(),
        )
    },
    Route {
        ..route(
            Op::ListSecrets,
            "list_secrets",
            Get,
            "/api/secrets",
            "Every secret by name, with who set it and what names it (never a value)",
            ok::<SecretList>(),
        )
    },
    Route {
        needs: Role::Admin,
        decides: Decides::Destructive,
        takes: Takes::Json(typed::<SecretValue>()),
        errors: &[Code::ValidationFailed],
        ..route(
            Op::SetSecret,
            "set_secret",
            Put,
            "/api/secrets/{name}",
            "Set a secret's value (201 when new): sealed at rest, given only to the jobs that name it, redacted from their output",
            ok::<Secret>(),
        )
    },
    Route {
        needs: Role::Admin,
        decides: Decides::Destructive,
        errors: &[Code::SecretNotFound, Code::SecretInUse],
        ..route(
            Op::DeleteSecret,
            "delete_secret",
            Delete,
            "/api/secrets/{name}",
            "Delete a secret no schedule or unfinished task names; the secret as it was",
            ok::<Secret>(),
        )
    },
    Route {
        ..route(
            Op::ListEndpoints,
            "list_endpoints",
            Get,
            "/api/notify/endpoints",
            "Every notification endpoint by name, with what sends to it (never its secret)",
            ok::<EndpointList>(),
        )
    },
    Route {
        needs: Role::Admin,
        decides: Decides::Destructive,
        takes: Takes::Json(typed::<NewEndpoint>()),
        errors: &[Code::ValidationFailed, Code::NameTaken],
        ..route(
            Op::CreateEndpoint,
            "create_endpoint",
            Post,
            "/api/notify/endpoints",
            "Make an endpoint (201): its signing secret is in this answer only",
            Gives::Json(201, typed::<EndpointCreated>()),
        )
    },
    Route {
        needs: Role::Admin,
        decides: Decides::Destructive,
        errors: &[Code::EndpointNotFound, Code::EndpointInUse],
        ..route(
            Op::DeleteEndpoint,
            "delete_endpoint",
            Delete,
            "/api/notify/endpoints/{name}",
            "Delete an endpoint no rule sends to; the endpoint as it was",
            ok::<Endpoint>(),
        )
    },
    Route {
        errors: &[Code::EndpointNotFound],
        ..route(
            Op::TestEndpoint,
            "test_endpoint",
            Post,
            "/api/notify/endpoints/{name}/test",
            "Queue a test delivery to an endpoint (202); its attempts show in the deliveries",
            Gives::Json(202, typed::<Delivery>()),
        )
    },
    Route {
        query: &[
            Param {
                name: "run",
                kind: Kind::String,
                about: "only this run's",
            },
            Param {
                name: "endpoint",
                kind: Kind::String,
                about: "only to this endpoint",
            },
            Param {
                name: "status",
                kind: Kind::OneOf(&["pending", "delivered", "dead"]),
                about: "only in this status",
            },
            LIMIT,
        ],
        errors: &[Code::BadRequest, Code::ValidationFailed],
        ..route(
            Op::ListDeliveries,
            "list_deliveries",
            Get,
            "/api/notify/deliveries",
            "Notifications, newest first, each with its attempts and the receiver's last answer",
            ok::<DeliveryList>(),
        )
    },
    Route {
        // A dry run.
        needs: Role::Viewer,
        takes: Takes::Json(typed::<DeclarationRequest>()),
        errors: &[Code::ValidationFailed],
        ..route(
            Op::PlanDeclarations,
            "plan_declarations",
            Post,
            "/api/declarations/plan",
            "What applying these documents would change",
            ok::<Plan>(),
        )
    },
    Route {
        takes: Takes::Json(typed::<DeclarationRequest>()),
        errors: &[
            Code::ValidationFailed,
            Code::PlanHasErrors,
            Code::Conflict,
            Code::DecisionRequired,
        ],
        ..route(
            Op::ApplyDeclarations,
            "apply_declarations",
            Post,
            "/api/declarations/apply",
            "Apply these documents, all or nothing (pruning needs the admin role and, from a browser, the decision token)",
            ok::<Plan>(),
        )
    },
    Route {
        query: EXPORT_PARAMS,
        ..route(
            Op::ExportDeclarations,
            "export_declarations",
            Get,
            "/api/declarations/export",
            "Every schedule as ScheduleSet documents",
            ok::<Export>(),
        )
    },
];

/// The studiod route serving `method path`, if any.
pub fn find(method: &http::Method, path: &str) -> Option<&'static Route<Op>> {
    ROUTES
        .iter()
        .find(|r| r.method.answers(method) && r.matches(path))
}

/// Whether studio-app forwards a request for `path` to studiod: studiod serves the path
/// (with any method: a wrong one gets studiod's own `405`) and it is neither studio-app's
/// own nor each process's own.
pub fn proxied(path: &str) -> bool {
    let mut any = false;
    for r in ROUTES.iter().filter(|r| r.matches(path)) {
        if r.via_app != ViaApp::Proxied {
            return false;
        }
        any = true;
    }
    any
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn ids_and_method_paths_are_unique() {
        let mut ids = HashSet::new();
        let mut pairs = HashSet::new();
        let mut ops = HashSet::new();
        for r in ROUTES {
            assert!(ids.insert(r.id), "{} twice", r.id);
            assert!(
                pairs.insert((r.method, r.path)),
                "{} {} twice",
                r.method.as_str(),
                r.path
            );
            assert!(ops.insert(r.op), "{:?} twice", r.op);
        }
    }

    #[test]
    fn the_app_forwards_what_studiod_serves_and_nothing_else() {
        assert!(proxied("/api/schedules"));
        assert!(proxied("/api/schedules/s1/runs"));
        assert!(proxied("/api/schedules/preview"));
        assert!(proxied("/api/events"));
        assert!(!proxied("/api/studio/pair"), "the app pairs itself");
        assert!(!proxied("/health"));
        assert!(proxied("/api/tasks"));
        assert!(proxied("/api/tasks/t1/cancel"));
        assert!(proxied("/api/approvals"));
        assert!(proxied("/api/approvals/a1/grant"));
        assert!(!proxied("/api/approvals/a1/consume"));
        assert!(!proxied("/api/admin"));
        assert!(!proxied("/api/schedules/"));
        assert!(!proxied("/api/app/session"));
        assert!(find(&http::Method::HEAD, "/api/runs").is_some());
        assert!(find(&http::Method::PUT, "/api/runs").is_none());
    }
}
