//! Schedules as code (docs/DECLARATIONS.md): `studio schedule validate` (local only),
//! `plan`, `apply` and `export` against studiod's `/api/declarations/*`.
//!
//! Invariant: `validate` reads only the files it is given and the two environment
//! variables below; it resolves no home and contacts no daemon.

use std::{
    collections::BTreeMap,
    io::{self, BufRead, IsTerminal, Write},
    path::{Path, PathBuf},
};

use serde_json::Value;
use studio_api::{ChangeKind, Code, DeclarationRequest, ErrorBody, Export, Plan, SourcedDocument};
use studio_contract::home::Home;
use studio_schedule::{
    Zone,
    declaration::valid_part,
    load::{Diagnostic, LoadOptions, Loaded, load_all, render_yaml},
};

use crate::{
    Error,
    cli::{
        PlanArgs, Remote,
        client::{connect, encode},
        table::{Style, Tone},
    },
    output::print_json,
};

/// Reads and checks the files; diagnostics (warnings too) go to stderr, one per line.
/// `None` when any is an error.
fn load(files: &[PathBuf]) -> Result<Option<Vec<Loaded>>, Error> {
    let configured = crate::config::scheduler_zone();
    let zone = Zone::default_for(configured.as_deref()).map_err(Error::Usage)?;
    // The allow-list is studiod's (`studio allow list`); `plan` checks against it.
    let opts = LoadOptions {
        default_zone: &zone,
        allowlist: None,
        now_ms: Some(crate::cli::table::now_ms()),
    };
    let (loaded, diagnostics) = load_all(files, &opts);
    let mut err = io::stderr().lock();
    for d in &diagnostics {
        let _ = writeln!(err, "{d}");
    }
    Ok((!diagnostics.iter().any(Diagnostic::is_error)).then_some(loaded))
}

/// `studio schedule validate`: exit 2 on any error, else 0.
pub(crate) fn validate(files: &[PathBuf]) -> Result<u8, Error> {
    Ok(match load(files)? {
        Some(_) => 0,
        None => 2,
    })
}

/// The request body of plan and apply (apply adds the plan's revisions).
fn body(loaded: &[Loaded], prune: bool, adopt: bool) -> Result<DeclarationRequest, Error> {
    let documents = loaded
        .iter()
        .map(|l| {
            let document = serde_json::to_value(&l.set)
                .map_err(|e| Error::Failed(format!("{}: cannot encode: {e}", l.file.display())))?;
            Ok(SourcedDocument {
                source: l.file.display().to_string(),
                document,
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(DeclarationRequest {
        documents,
        prune,
        adopt,
        expected: BTreeMap::new(),
    })
}

/// What a plan amounts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    NothingToDo,
    Changes,
    Errors,
}

impl Verdict {
    fn of(plan: &Plan) -> Self {
        let changes = &plan.changes;
        if changes.iter().any(|c| c.action == ChangeKind::Error) {
            Verdict::Errors
        } else if changes.iter().any(|c| c.action != ChangeKind::Unchanged) {
            Verdict::Changes
        } else {
            Verdict::NothingToDo
        }
    }

    fn exit_code(self) -> u8 {
        match self {
            Verdict::NothingToDo => 0,
            Verdict::Changes => 1,
            Verdict::Errors => 2,
        }
    }
}

/// A field value in a diff line: strings bare, the rest as JSON, absent as `(unset)`.
/// A field holds whatever JSON its path does, so it stays a `Value`.
fn shown(v: &Value) -> String {
    match v {
        Value::Null => "(unset)".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The human plan: one line per member, field lines under updates, then a summary.
fn render_plan(plan: &Plan, style: Style) -> String {
    let mut out = String::new();
    for c in &plan.changes {
        let name = c.name.as_deref().unwrap_or("?");
        let action = c.action.as_str();
        let (mark, tone) = mark(c.action);
        let mut line = format!("{mark} {action} {name}");
        if c.action == ChangeKind::Error {
            let path = c.path.as_deref().filter(|p| !p.is_empty());
            let reason = c.reason.as_deref().unwrap_or("invalid");
            match path {
                Some(p) => line.push_str(&format!(": {p}: {reason}")),
                None => line.push_str(&format!(": {reason}")),
            }
        }
        out.push_str(&style.paint(&line, tone));
        out.push('\n');
        for f in c.fields.iter().flatten() {
            out.push_str(&format!(
                "    {}: {} → {}\n",
                f.path,
                shown(&f.from),
                shown(&f.to)
            ));
        }
    }
    out.push_str(&summary(plan));
    out.push('\n');
    out
}

/// The sign a plan line starts with, and its colour.
fn mark(action: ChangeKind) -> (&'static str, Tone) {
    match action {
        ChangeKind::Create => ("+", Tone::Good),
        ChangeKind::Update => ("~", Tone::Warn),
        ChangeKind::Adopt => ("*", Tone::Warn),
        ChangeKind::Unchanged => ("=", Tone::Dim),
        ChangeKind::Disable => ("-", Tone::Bad),
        ChangeKind::Delete => ("x", Tone::Bad),
        ChangeKind::Error => ("!", Tone::Bad),
    }
}

/// `plan: 1 to create, 2 to update, 3 unchanged` or `nothing to do (3 unchanged)`.
fn summary(plan: &Plan) -> String {
    tally(
        plan,
        [
            "to create",
            "to update",
            "to adopt",
            "to disable",
            "to delete",
            "in error",
        ],
    )
    .map_or_else(
        |unchanged| format!("nothing to do ({unchanged} unchanged)"),
        |parts| format!("plan: {parts}"),
    )
}

/// `applied: 1 created, 2 updated, 3 unchanged` for an executed plan.
fn applied(plan: &Plan) -> String {
    tally(
        plan,
        [
            "created", "updated", "adopted", "disabled", "deleted", "in error",
        ],
    )
    .map_or_else(
        |unchanged| format!("applied: nothing changed ({unchanged} unchanged)"),
        |parts| format!("applied: {parts}"),
    )
}

/// The non-zero counts of create, update, adopt, disable, delete and error, worded by
/// `words`, then the unchanged count; `Err(unchanged)` when nothing changes. A kind the
/// summary leaves out is counted from the changes.
fn tally(plan: &Plan, words: [&str; 6]) -> Result<String, u64> {
    let count = |kind: ChangeKind| -> u64 {
        plan.summary
            .get(&kind)
            .copied()
            .unwrap_or_else(|| plan.changes.iter().filter(|c| c.action == kind).count() as u64)
    };
    let parts: Vec<String> = [
        ChangeKind::Create,
        ChangeKind::Update,
        ChangeKind::Adopt,
        ChangeKind::Disable,
        ChangeKind::Delete,
        ChangeKind::Error,
    ]
    .into_iter()
    .zip(words)
    .filter_map(|(kind, what)| {
        let n = count(kind);
        (n > 0).then(|| format!("{n} {what}"))
    })
    .collect();
    let unchanged = count(ChangeKind::Unchanged);
    if parts.is_empty() {
        Err(unchanged)
    } else {
        Ok(format!("{}, {unchanged} unchanged", parts.join(", ")))
    }
}

/// `studio schedule plan`: exit 0 nothing to do, 1 changes, 2 errors.
pub(crate) async fn plan(home: &Home, args: PlanArgs) -> Result<u8, Error> {
    let Some(loaded) = load(&args.files)? else {
        return Ok(2);
    };
    let client = connect(home, &args.remote).await?;
    let plan: Plan = client
        .post(
            "/api/declarations/plan",
            &body(&loaded, args.prune, args.adopt)?,
        )
        .await?;
    if args.remote.json {
        print_json(&plan)?;
    } else {
        out!("{}", render_plan(&plan, Style::detect()))?;
    }
    Ok(Verdict::of(&plan).exit_code())
}

/// `studio schedule apply`: plan, show, confirm, apply with the plan's revisions.
pub(crate) async fn apply(home: &Home, args: PlanArgs, yes: bool) -> Result<u8, Error> {
    let Some(loaded) = load(&args.files)? else {
        return Ok(2);
    };
    let client = connect(home, &args.remote).await?;
    let mut request = body(&loaded, args.prune, args.adopt)?;
    let plan: Plan = client.post("/api/declarations/plan", &request).await?;
    let style = Style::detect();
    // With --json, stdout carries only the final JSON answer; the plan goes to stderr.
    if args.remote.json {
        err!("{}", render_plan(&plan, Style::plain()));
    } else {
        out!("{}", render_plan(&plan, style))?;
    }
    match Verdict::of(&plan) {
        Verdict::Errors => {
            errln!("the plan has errors: nothing applied");
            return Ok(2);
        }
        Verdict::NothingToDo => {
            if args.remote.json {
                print_json(&plan)?;
            }
            return Ok(0);
        }
        Verdict::Changes => {}
    }
    if !yes && !confirm()? {
        errln!("nothing applied");
        return Ok(1);
    }
    request.expected = expected(&plan);
    let applied: Plan = match client.post("/api/declarations/apply", &request).await {
        Ok(applied) => applied,
        Err(Error::Api(f)) if f.body.code == Code::Conflict => {
            return Err(conflict(&f.body));
        }
        Err(Error::Api(f)) if f.body.code == Code::PlanHasErrors => {
            err!("{}", render_plan(&refused(&f.body), Style::plain()));
            errln!("plan_has_errors: {}: nothing applied", f.body.message);
            return Ok(2);
        }
        Err(e) => return Err(e),
    };
    if args.remote.json {
        print_json(&applied)?;
    } else {
        outln!("{}", self::applied(&applied))?;
    }
    Ok(0)
}

/// A `conflict` answer to an apply: the schedule that moved, and what to do.
fn conflict(body: &ErrorBody) -> Error {
    let name = body.name.as_deref().unwrap_or_default();
    let who = if name.is_empty() || body.message.contains(name) {
        String::new()
    } else {
        format!("{name}: ")
    };
    Error::Failed(format!(
        "conflict: {who}{}; re-run `studio schedule plan` and apply again",
        body.message
    ))
}

/// The plan a `plan_has_errors` answer carries; an empty one when it carries none.
fn refused(body: &ErrorBody) -> Plan {
    body.plan
        .clone()
        .and_then(|plan| serde_json::from_value(plan).ok())
        .unwrap_or_else(|| Plan {
            changes: Vec::new(),
            summary: BTreeMap::new(),
        })
}

/// `{name: revision}` of every row the apply will write: it refuses if any moved meanwhile.
fn expected(plan: &Plan) -> BTreeMap<String, i64> {
    plan.changes
        .iter()
        .filter(|c| {
            matches!(
                c.action,
                ChangeKind::Update | ChangeKind::Adopt | ChangeKind::Disable | ChangeKind::Delete
            )
        })
        .filter_map(|c| Some((c.name.clone()?, c.revision?)))
        .collect()
}

/// Asks on the terminal; without one, refuses (a script must say `--yes`).
fn confirm() -> Result<bool, Error> {
    if !io::stdin().is_terminal() {
        return Err(Error::Usage(
            "refusing to apply without confirmation: stdin is not a terminal (pass --yes)".into(),
        ));
    }
    err!("apply these changes? [y/N] ");
    let _ = io::stderr().flush();
    let mut answer = String::new();
    io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Error::io("cannot read the answer", e))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
}

/// `studio schedule export`: one YAML document per project (`--json`: the API's answer);
/// BLOCKED lines on stderr.
pub(crate) async fn export(
    home: &Home,
    project: Option<String>,
    out: Option<PathBuf>,
    remote: Remote,
) -> Result<u8, Error> {
    let client = connect(home, &remote).await?;
    let path = match &project {
        Some(p) => format!("/api/declarations/export?project={}", encode(p)),
        None => "/api/declarations/export".to_owned(),
    };
    let answer: Export = client.get(&path).await?;
    if remote.json {
        print_json(&answer)?;
        return Ok(0);
    }
    for b in &answer.blocked {
        errln!("BLOCKED {}: {}", b.name, b.reason);
    }
    let mut first = true;
    for d in &answer.documents {
        let yaml = render_yaml(&d.document);
        match &out {
            Some(dir) => write_doc(dir, &d.project, &yaml)?,
            None => {
                if !first {
                    outln!("---")?;
                }
                out!("{yaml}")?;
            }
        }
        first = false;
    }
    Ok(0)
}

/// Writes `<dir>/<project>.yaml`; the project must be a plain name, never a path.
fn write_doc(dir: &Path, project: &str, yaml: &str) -> Result<(), Error> {
    if !valid_part(project) {
        return Err(Error::Failed(format!(
            "studiod exported a project named {project:?}, which is not a valid file name"
        )));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    let path = dir.join(format!("{project}.yaml"));
    std::fs::write(&path, yaml)
        .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
    errln!("wrote {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn plan_of(v: Value) -> Plan {
        serde_json::from_value(v).expect("a plan")
    }

    fn plan() -> Plan {
        plan_of(json!({"changes": [
            {"name": "demo/reindex", "action": "create", "owner": "demo/nightly-jobs", "source": "a.yaml"},
            {"name": "demo/report", "action": "update", "revision": 7, "source": "a.yaml",
             "fields": [{"path": "trigger.cron.expression", "from": "0 1 * * *", "to": "0 2 * * *"},
                        {"path": "cwd", "from": null, "to": "/srv"}]},
            {"name": "demo/old", "action": "disable", "source": "a.yaml"},
            {"name": "demo/gone", "action": "delete", "source": "a.yaml"},
            {"name": "demo/manual", "action": "error", "reason": "created by hand", "source": "a.yaml"},
            {"name": "demo/same", "action": "unchanged", "source": "a.yaml"}],
         "summary": {"create": 1, "update": 1, "disable": 1, "delete": 1, "unchanged": 1, "error": 1}}))
    }

    #[test]
    fn the_plan_reads_one_line_per_member() {
        assert_eq!(
            render_plan(&plan(), Style::plain()),
            "+ create demo/reindex\n\
             ~ update demo/report\n\
             \x20   trigger.cron.expression: 0 1 * * * → 0 2 * * *\n\
             \x20   cwd: (unset) → /srv\n\
             - disable demo/old\n\
             x delete demo/gone\n\
             ! error demo/manual: created by hand\n\
             = unchanged demo/same\n\
             plan: 1 to create, 1 to update, 1 to disable, 1 to delete, 1 in error, 1 unchanged\n"
        );
        assert_eq!(Verdict::of(&plan()).exit_code(), 2);
        assert_eq!(
            expected(&plan()),
            BTreeMap::from([("demo/report".to_owned(), 7)])
        );
    }

    #[test]
    fn adoption_is_shown_counted_and_guarded() {
        let plan = plan_of(json!({"changes": [
            {"name": "demo/legacy", "action": "adopt", "revision": 4, "fields": [], "source": "a.yaml"},
            {"name": "demo/old", "action": "disable", "revision": 3, "source": "a.yaml"},
            {"name": "demo/same", "action": "unchanged", "revision": 1, "source": "a.yaml"}],
            "summary": {"create": 0, "update": 0, "adopt": 1, "unchanged": 1, "disable": 1, "delete": 0, "error": 0}}));
        let text = render_plan(&plan, Style::plain());
        assert!(text.contains("* adopt demo/legacy"), "{text}");
        assert!(
            text.contains("plan: 1 to adopt, 1 to disable, 1 unchanged"),
            "{text}"
        );
        assert_eq!(
            expected(&plan),
            BTreeMap::from([("demo/legacy".to_owned(), 4), ("demo/old".to_owned(), 3)])
        );
        assert_eq!(Verdict::of(&plan), Verdict::Changes);
    }

    #[test]
    fn verdicts() {
        // A summary that leaves a kind out: the changes are counted instead.
        let same = plan_of(json!({"changes": [
            {"name": "a/b", "action": "unchanged", "source": "a.yaml"}], "summary": {}}));
        assert_eq!(Verdict::of(&same), Verdict::NothingToDo);
        assert_eq!(summary(&same), "nothing to do (1 unchanged)");
        let one = plan_of(json!({"changes": [
            {"name": "a/b", "action": "disable", "source": "a.yaml"}], "summary": {}}));
        assert_eq!(Verdict::of(&one).exit_code(), 1);
    }

    #[test]
    fn a_refused_apply_shows_its_plan_and_a_conflict_its_schedule() {
        let body = |v: Value| -> ErrorBody { serde_json::from_value(v).expect("an error body") };
        let refused_plan = body(json!({"code": "plan_has_errors", "message": "m",
            "plan": {"changes": [{"name": "a/b", "action": "error", "reason": "bad",
                                  "source": "a.yaml"}], "summary": {}}}));
        assert_eq!(
            render_plan(&refused(&refused_plan), Style::plain()),
            "! error a/b: bad\nplan: 1 in error, 0 unchanged\n"
        );
        let bare = body(json!({"code": "plan_has_errors", "message": "m"}));
        assert_eq!(
            render_plan(&refused(&bare), Style::plain()),
            "nothing to do (0 unchanged)\n"
        );
        let moved = body(json!({"code": "conflict", "message": "it moved", "name": "a/b"}));
        assert_eq!(
            conflict(&moved).to_string(),
            "conflict: a/b: it moved; re-run `studio schedule plan` and apply again"
        );
    }

    /// `--json` prints typed plans and exports exactly as the JSON they were read from.
    #[test]
    fn json_output_is_the_answer_as_sent() {
        let export = json!({"documents": [{"project": "demo", "owner": "demo/jobs", "adopt": false,
            "document": {"apiVersion": "studio/v1", "kind": "ScheduleSet",
                "metadata": {"name": "jobs", "project": "demo"},
                "schedules": {"report": {"trigger": {"every": "15m"},
                    "action": {"kind": "agent", "prompt": "sum up"},
                    "policies": {"missed_fire": "skip", "overlap": "allow", "budget_usd": 0.1}}}}}],
            "blocked": [{"name": "x", "reason": "no owner"}]});
        let typed: Export = serde_json::from_value(export.clone()).expect("an export");
        assert_eq!(serde_json::to_value(&typed).expect("json"), export);
        let plan = json!({"changes": [
            {"name": "demo/report", "action": "update", "owner": "demo/jobs", "source": "a.yaml",
             "revision": 7, "fields": [{"path": "policies.deadline", "from": null, "to": 60}]},
            {"name": null, "action": "error", "owner": null, "source": "b.yaml",
             "path": "schedules", "reason": "not a map"}],
            "summary": {"create": 0, "update": 1, "adopt": 0, "unchanged": 0, "disable": 0,
                        "delete": 0, "error": 1}});
        let typed: Plan = serde_json::from_value(plan.clone()).expect("a plan");
        assert_eq!(serde_json::to_value(&typed).expect("json"), plan);
    }

    #[test]
    fn export_refuses_a_project_that_is_a_path() {
        let dir = crate::testdir::TestDir::new("exp");
        let err = write_doc(dir.path(), "../evil", "x").expect_err("refused");
        assert!(err.to_string().contains("not a valid file name"), "{err}");
        write_doc(&dir.path().join("out"), "demo", "a: 1\n").expect("written");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("out/demo.yaml")).expect("read"),
            "a: 1\n"
        );
    }
}
