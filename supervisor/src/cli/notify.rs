//! `studio notify endpoint add|list|delete|test` and `studio notify deliveries`: where
//! the `notify` rules of schedules and tasks send, and what was sent (`/api/notify`,
//! docs/OPERATIONS.md, "Notifications"), with the daemon token.
//!
//! Invariant: a receiver's answer (an attempt's `detail`) and an endpoint's URL reach the
//! terminal only as one line without control characters: they are text from elsewhere.

use std::time::Duration;

use reqwest::Method;
use studio_api::{
    Code, Delivery, DeliveryList, DeliveryStatus, Endpoint, EndpointCreated, EndpointList,
    ErrorBody, NewEndpoint,
};
use studio_contract::home::Home;

use crate::{
    Error,
    cli::{
        DeliveriesArgs, EndpointCommand, FormatArg, NotifyCommand, Remote,
        client::{Client, connect, encode},
        secrets::checked_name,
        table::{Style, Table, Tone, human_ms, now_ms, relative, text},
    },
    output::print_json,
};

const ENDPOINTS: &str = "/api/notify/endpoints";
const DELIVERIES: &str = "/api/notify/deliveries";
/// How long `test --wait` waits for the delivery to be delivered or dead.
const WAIT: Duration = Duration::from_secs(30);
/// How often `test --wait` asks.
const POLL: Duration = Duration::from_millis(500);
/// The most characters of a receiver's answer a table cell shows.
const CELL_CHARS: usize = 60;
/// The most characters of a receiver's answer `test --wait` prints.
const LINE_CHARS: usize = 300;
/// How a receiver checks a delivery, for the notes beside a new signing secret.
const VERIFY: &str = "a receiver checks each delivery's Studio-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.<body>\"> \
                      keyed with this secret as printed (compare in constant time, refuse an old t) and drops a repeated Studio-Delivery id";

pub(crate) async fn run(home: &Home, command: NotifyCommand) -> Result<u8, Error> {
    match command {
        NotifyCommand::Endpoint { command } => match command {
            EndpointCommand::Add {
                name,
                url,
                format,
                remote,
            } => add(home, &name, url, format, &remote).await,
            EndpointCommand::List { remote } => list(home, &remote).await,
            EndpointCommand::Delete { name, remote } => delete(home, &name, &remote).await,
            EndpointCommand::Test { name, wait, remote } => test(home, &name, wait, &remote).await,
        },
        NotifyCommand::Deliveries(args) => deliveries(home, &args).await,
    }
}

async fn add(
    home: &Home,
    name: &str,
    url: String,
    format: FormatArg,
    remote: &Remote,
) -> Result<u8, Error> {
    let request = NewEndpoint {
        name: checked_name("endpoint", name)?.to_owned(),
        url,
        format: format.into(),
    };
    let client = connect(home, remote).await?;
    let created: EndpointCreated = match client.post(ENDPOINTS, &request).await {
        Ok(created) => created,
        // A name or a URL studiod cannot take is the user's input: one line, exit 2.
        Err(Error::Api(f)) if f.body.code == Code::ValidationFailed => {
            return Err(Error::Usage(refusal(&f.body, &request)));
        }
        Err(Error::Api(f)) if f.body.code == Code::NameTaken => {
            return Err(Error::Failed(format!(
                "endpoint {name}: {}",
                f.body.message
            )));
        }
        Err(e) => return Err(e),
    };
    if remote.json {
        print_json(&created)?;
        return Ok(0);
    }
    // Alone on stdout, so `SECRET=$(studio notify endpoint add …)` captures it.
    outln!("{}", created.signing_secret)?;
    for line in secret_notes(&created.endpoint) {
        errln!("{line}");
    }
    Ok(0)
}

/// What stderr says beside a new signing secret.
fn secret_notes(endpoint: &Endpoint) -> Vec<String> {
    vec![
        format!(
            "endpoint {} made ({}, {}); its signing secret, above, is shown this once",
            endpoint.name,
            endpoint.format.as_str(),
            one_line(&endpoint.url, LINE_CHARS)
        ),
        VERIFY.to_owned(),
        format!(
            "`studio notify endpoint test {} --wait` sends it a test now",
            endpoint.name
        ),
    ]
}

/// A `validation_failed` answer as one line naming what was given: `URL "ftp://x": must
/// be http or https`.
fn refusal(body: &ErrorBody, request: &NewEndpoint) -> String {
    let parts: Vec<String> = body
        .errors
        .iter()
        .map(|e| match e.path.as_str() {
            "name" => format!("endpoint name {:?}: {}", request.name, e.reason),
            "url" => format!("URL {:?}: {}", request.url, e.reason),
            "format" => format!("--format: {}", e.reason),
            path => format!("{path}: {}", e.reason),
        })
        .collect();
    if parts.is_empty() {
        body.message.clone()
    } else {
        parts.join("; ")
    }
}

async fn list(home: &Home, remote: &Remote) -> Result<u8, Error> {
    let answer: EndpointList = connect(home, remote).await?.get(ENDPOINTS).await?;
    if remote.json {
        print_json(&answer)?;
    } else if answer.endpoints.is_empty() {
        errln!("no endpoints (`studio notify endpoint add NAME URL` makes one)");
    } else {
        out!(
            "{}",
            endpoint_table(&answer.endpoints).render(Style::detect())
        )?;
    }
    Ok(0)
}

/// One row per endpoint, by name, with what sends to it.
fn endpoint_table(endpoints: &[Endpoint]) -> Table {
    let mut table = Table::new(&["NAME", "FORMAT", "URL", "USED BY"]);
    for e in endpoints {
        let used_by = e.used_by.join(", ");
        let tone = if used_by.is_empty() {
            Tone::Dim
        } else {
            Tone::Plain
        };
        table.row(vec![
            (text(&e.name), Tone::Plain),
            (e.format.as_str().to_owned(), Tone::Plain),
            (text(&one_line(&e.url, usize::MAX)), Tone::Plain),
            (text(&used_by), tone),
        ]);
    }
    table
}

async fn delete(home: &Home, name: &str, remote: &Remote) -> Result<u8, Error> {
    let name = checked_name("endpoint", name)?;
    let client = connect(home, remote).await?;
    let path = format!("{ENDPOINTS}/{}", encode(name));
    let endpoint: Endpoint = match client.call(Method::DELETE, &path).await {
        Ok(endpoint) => endpoint,
        // studiod's message says what to do: no such endpoint, or which rules send to it.
        Err(Error::Api(f))
            if matches!(f.body.code, Code::EndpointNotFound | Code::EndpointInUse) =>
        {
            return Err(Error::Failed(format!(
                "endpoint {name}: {}",
                f.body.message
            )));
        }
        Err(e) => return Err(e),
    };
    if remote.json {
        print_json(&endpoint)?;
    } else {
        outln!("deleted endpoint {}", endpoint.name)?;
    }
    Ok(0)
}

async fn test(home: &Home, name: &str, wait: bool, remote: &Remote) -> Result<u8, Error> {
    let name = checked_name("endpoint", name)?;
    let client = connect(home, remote).await?;
    let path = format!("{ENDPOINTS}/{}/test", encode(name));
    let queued: Delivery = match client.call(Method::POST, &path).await {
        Ok(queued) => queued,
        Err(Error::Api(f)) if f.body.code == Code::EndpointNotFound => {
            return Err(Error::Failed(format!(
                "endpoint {name}: {}",
                f.body.message
            )));
        }
        Err(e) => return Err(e),
    };
    if !wait {
        if remote.json {
            print_json(&queued)?;
        } else {
            outln!("queued test delivery {} to {name}", queued.id)?;
            errln!(
                "`studio notify deliveries --endpoint {name}` shows its attempts (or test with --wait)"
            );
        }
        return Ok(0);
    }
    errln!(
        "queued test delivery {}; waiting up to {} s for {name} to take it",
        queued.id,
        WAIT.as_secs()
    );
    let last = settled(&client, name, queued).await?;
    if remote.json {
        print_json(&last)?;
    } else {
        for line in outcome(&last, now_ms()) {
            outln!("{line}")?;
        }
    }
    Ok(if last.status == DeliveryStatus::Delivered {
        0
    } else {
        1
    })
}

/// The delivery once it is delivered or dead, or as it stands after [`WAIT`].
async fn settled(client: &Client, name: &str, queued: Delivery) -> Result<Delivery, Error> {
    let path = format!("{DELIVERIES}?endpoint={}&limit=50", encode(name));
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut last = queued;
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
        let list: DeliveryList = client.get(&path).await?;
        if let Some(d) = list.deliveries.into_iter().find(|d| d.id == last.id) {
            last = d;
        }
        if last.status != DeliveryStatus::Pending {
            break;
        }
    }
    Ok(last)
}

/// What `test --wait` prints: how it ended (or stands), then the receiver's last answer.
fn outcome(d: &Delivery, now: i64) -> Vec<String> {
    let tries = match d.attempts.len() {
        1 => "1 attempt".to_owned(),
        n => format!("{n} attempts"),
    };
    let mut lines = vec![match d.status {
        DeliveryStatus::Delivered => format!("delivered to {} ({tries})", d.endpoint),
        DeliveryStatus::Dead => format!(
            "dead: {} took it in none of {tries}; no more are made",
            d.endpoint
        ),
        DeliveryStatus::Pending if d.attempts.is_empty() => format!(
            "still pending after {} s: no attempt was made yet",
            WAIT.as_secs()
        ),
        DeliveryStatus::Pending => format!(
            "still pending after {} s and {tries}; the next {}",
            WAIT.as_secs(),
            relative(&d.next_attempt_at, now)
        ),
    }];
    if let Some(answer) = last_answer(d, LINE_CHARS) {
        let took = d
            .attempts
            .last()
            .map_or(0, |a| a.took_ms.max(0).unsigned_abs());
        lines.push(format!("last answer: {answer} (in {})", human_ms(took)));
    }
    lines
}

async fn deliveries(home: &Home, args: &DeliveriesArgs) -> Result<u8, Error> {
    let client = connect(home, &args.remote).await?;
    let list: DeliveryList = match client.get(&deliveries_path(args)).await {
        Ok(list) => list,
        // A filter studiod cannot take is the user's input: one line, exit 2.
        Err(Error::Api(f)) if f.body.code == Code::ValidationFailed => {
            let reasons: Vec<String> = f
                .body
                .errors
                .iter()
                .map(|e| format!("--{}: {}", e.path, e.reason))
                .collect();
            return Err(Error::Usage(if reasons.is_empty() {
                f.body.message.clone()
            } else {
                reasons.join("; ")
            }));
        }
        Err(e) => return Err(e),
    };
    if args.remote.json {
        print_json(&list)?;
    } else if list.deliveries.is_empty() {
        errln!("no deliveries match");
    } else {
        out!(
            "{}",
            delivery_table(&list.deliveries, now_ms()).render(Style::detect())
        )?;
    }
    Ok(0)
}

/// `/api/notify/deliveries` with the command's filters.
fn deliveries_path(args: &DeliveriesArgs) -> String {
    let mut path = format!("{DELIVERIES}?limit={}", args.limit);
    let filters = [
        ("run", args.run.as_deref()),
        ("endpoint", args.endpoint.as_deref()),
        ("status", args.status.map(|s| s.as_str())),
    ];
    for (name, value) in filters {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            path.push_str(&format!("&{name}={}", encode(v)));
        }
    }
    path
}

/// One row per delivery, oldest of the page first, so the newest is by the prompt.
fn delivery_table(deliveries: &[Delivery], now: i64) -> Table {
    let mut table = Table::new(&[
        "WHEN",
        "EVENT",
        "ENDPOINT",
        "STATUS",
        "ATTEMPTS",
        "LAST ANSWER",
        "RUN",
    ]);
    for d in deliveries.iter().rev() {
        let (status, tone) = match d.status {
            DeliveryStatus::Delivered => ("delivered".to_owned(), Tone::Good),
            DeliveryStatus::Dead => ("dead".to_owned(), Tone::Bad),
            // A retry is waiting: say when.
            DeliveryStatus::Pending if !d.attempts.is_empty() && d.next_attempt_at.is_some() => (
                format!("pending (next {})", relative(&d.next_attempt_at, now)),
                Tone::Warn,
            ),
            DeliveryStatus::Pending => ("pending".to_owned(), Tone::Warn),
        };
        table.row(vec![
            (relative(&d.created_at, now), Tone::Plain),
            (text(&d.event), Tone::Plain),
            (text(&d.endpoint), Tone::Plain),
            (status, tone),
            (d.attempts.len().to_string(), Tone::Plain),
            (text(&last_answer(d, CELL_CHARS)), Tone::Dim),
            (text(&d.run_id), Tone::Plain),
        ]);
    }
    table
}

/// The last attempt's answer in one line: the receiver's status and the start of what
/// it said (or why nothing answered), at most `max` characters of the latter.
fn last_answer(d: &Delivery, max: usize) -> Option<String> {
    let a = d.attempts.last()?;
    let detail = a
        .detail
        .as_deref()
        .map(|s| one_line(answer_of(s, a.status), max))
        .filter(|s| !s.is_empty());
    Some(match (a.status, detail) {
        (Some(status), Some(detail)) => format!("{status} {detail}"),
        (Some(status), None) => status.to_string(),
        (None, Some(detail)) => detail,
        (None, None) => "no answer".to_owned(),
    })
}

/// What the receiver said, without the `answered 502: ` that studiod puts before it (the
/// status is shown on its own).
fn answer_of(detail: &str, status: Option<i64>) -> &str {
    status
        .and_then(|s| detail.strip_prefix(&format!("answered {s}")))
        .map_or(detail, |rest| rest.trim_start_matches(':').trim_start())
}

/// `s` as one line a terminal shows as it is: control and direction-changing characters
/// become spaces, runs of spaces one, and past `max` characters it ends in `…`.
fn one_line(s: &str, max: usize) -> String {
    let cleaned: String = s
        .chars()
        .map(|c| {
            let invisible = matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
            if c.is_control() || invisible { ' ' } else { c }
        })
        .collect();
    let words: Vec<&str> = cleaned.split(' ').filter(|w| !w.is_empty()).collect();
    let line = words.join(" ");
    if line.chars().count() <= max {
        return line;
    }
    let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use studio_api::EndpointFormat;

    use super::*;
    use crate::cli::DeliveryStatusArg;

    const NOW: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

    fn deliveries() -> Vec<Delivery> {
        let list: DeliveryList = serde_json::from_value(json!({"deliveries": [
            {"id": "dlv_3", "endpoint": "ops", "event": "test", "run_id": null,
             "schedule_id": null, "task_id": null, "status": "pending",
             "next_attempt_at": "2026-01-01T00:00:00Z", "created_at": "2025-12-31T23:59:58Z",
             "delivered_at": null, "attempts": []},
            {"id": "dlv_2", "endpoint": "slack", "event": "timed_out", "run_id": "0190run2",
             "schedule_id": "sch_1", "task_id": null, "status": "pending",
             "next_attempt_at": "2026-01-01T00:05:00Z", "created_at": "2025-12-31T23:59:00Z",
             "delivered_at": null, "attempts": [
                {"n": 1, "at": "2025-12-31T23:59:01Z", "took_ms": 10000, "status": null,
                 "detail": "timed out after 10 s"}]},
            {"id": "dlv_1", "endpoint": "ops", "event": "failed", "run_id": "0190run1",
             "schedule_id": "sch_1", "task_id": null, "status": "dead",
             "next_attempt_at": null, "created_at": "2025-12-31T21:00:00Z",
             "delivered_at": null, "attempts": [
                {"n": 1, "at": "2025-12-31T21:00:01Z", "took_ms": 12, "status": 500,
                 "detail": "answered 500: oops"},
                {"n": 2, "at": "2025-12-31T23:00:00Z", "took_ms": 35, "status": 502,
                 "detail": "answered 502: <html>\u{1b}[31mbad\u{1b}[0m\r\n\tgateway\u{202e}</html>"}]},
            {"id": "dlv_0", "endpoint": "ops", "event": "succeeded_after_failure",
             "run_id": "0190run0", "schedule_id": "sch_1", "task_id": null,
             "status": "delivered", "next_attempt_at": null,
             "created_at": "2025-12-31T20:00:00Z", "delivered_at": "2025-12-31T20:00:01Z",
             "attempts": [{"n": 1, "at": "2025-12-31T20:00:01Z", "took_ms": 40, "status": 204,
                           "detail": null}]}
        ]}))
        .expect("deliveries");
        list.deliveries
    }

    #[test]
    fn the_deliveries_table_shows_each_last_answer_in_one_safe_line() {
        assert_eq!(
            delivery_table(&deliveries(), NOW).render(Style::plain()),
            "WHEN    EVENT                    ENDPOINT  STATUS                ATTEMPTS  LAST ANSWER                             RUN\n\
             4h ago  succeeded_after_failure  ops       delivered             1         204                                     0190run0\n\
             3h ago  failed                   ops       dead                  2         502 <html> [31mbad [0m gateway </html>  0190run1\n\
             1m ago  timed_out                slack     pending (next in 5m)  1         timed out after 10 s                    0190run2\n\
             2s ago  test                     ops       pending               0         -                                       -\n"
        );
    }

    #[test]
    fn a_receivers_answer_loses_its_control_characters_and_is_cut() {
        assert_eq!(
            one_line("a\u{1b}[2J\nb\u{7}  c\u{202e}d", 80),
            "a [2J b c d"
        );
        assert_eq!(one_line("  ", 80), "");
        assert_eq!(one_line("abcdef", 4), "abc…");
        assert_eq!(one_line("abcd", 4), "abcd");
        let d = &deliveries()[1];
        assert_eq!(
            last_answer(d, CELL_CHARS).as_deref(),
            Some("timed out after 10 s")
        );
        assert_eq!(last_answer(&deliveries()[0], CELL_CHARS), None);
        assert_eq!(
            answer_of("answered 302: redirects are not followed", Some(302)),
            "redirects are not followed"
        );
        assert_eq!(answer_of("answered 500: x", Some(502)), "answered 500: x");
        assert_eq!(answer_of("connection refused", None), "connection refused");
    }

    #[test]
    fn a_waited_test_says_how_it_ended_and_what_the_receiver_said() {
        let all = deliveries();
        assert_eq!(
            outcome(&all[3], NOW),
            ["delivered to ops (1 attempt)", "last answer: 204 (in 40ms)"]
        );
        assert_eq!(
            outcome(&all[2], NOW),
            [
                "dead: ops took it in none of 2 attempts; no more are made",
                "last answer: 502 <html> [31mbad [0m gateway </html> (in 35ms)",
            ]
        );
        assert_eq!(
            outcome(&all[1], NOW),
            [
                "still pending after 30 s and 1 attempt; the next in 5m",
                "last answer: timed out after 10 s (in 10s)",
            ]
        );
        assert_eq!(
            outcome(&all[0], NOW),
            ["still pending after 30 s: no attempt was made yet"]
        );
    }

    fn endpoint(name: &str, format: EndpointFormat, url: &str, used_by: &[&str]) -> Endpoint {
        Endpoint {
            name: name.into(),
            url: url.into(),
            format,
            created_at: "2025-12-31T00:00:00Z".into(),
            created_by: Some("daemon".into()),
            used_by: used_by.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn the_endpoint_table_names_what_sends_to_each() {
        let rendered = endpoint_table(&[
            endpoint(
                "ops",
                EndpointFormat::Json,
                "https://hooks.example/studio",
                &["demo/nightly", "task 0190aa"],
            ),
            endpoint(
                "chat",
                EndpointFormat::Slack,
                "https://hooks.slack.com/x\u{1b}[2J",
                &[],
            ),
        ])
        .render(Style::plain());
        assert_eq!(
            rendered,
            "NAME  FORMAT  URL                            USED BY\n\
             ops   json    https://hooks.example/studio   demo/nightly, task 0190aa\n\
             chat  slack   https://hooks.slack.com/x [2J  -\n"
        );
    }

    #[test]
    fn a_new_secret_comes_with_how_to_verify_it() {
        let notes = secret_notes(&endpoint(
            "ops",
            EndpointFormat::Json,
            "https://h.example/",
            &[],
        ));
        assert_eq!(
            notes[0],
            "endpoint ops made (json, https://h.example/); its signing secret, above, is shown this once"
        );
        assert!(
            notes[1].contains(
                r#"Studio-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">"#
            ) && notes[1].contains("constant time"),
            "{}",
            notes[1]
        );
        assert!(notes[2].contains("studio notify endpoint test ops --wait"));
    }

    #[test]
    fn a_refusal_names_what_was_given() {
        let body: ErrorBody = serde_json::from_value(json!({
            "code": "validation_failed", "message": "the request is invalid",
            "errors": [{"path": "name", "reason": "1 to 64 letters"},
                       {"path": "url", "reason": "points at one of this machine's own Studio listeners"}]
        }))
        .expect("body");
        let request = NewEndpoint {
            name: "ops".into(),
            url: "http://127.0.0.1:8766/".into(),
            format: EndpointFormat::Json,
        };
        assert_eq!(
            refusal(&body, &request),
            r#"endpoint name "ops": 1 to 64 letters; URL "http://127.0.0.1:8766/": points at one of this machine's own Studio listeners"#
        );
        let bare = ErrorBody {
            errors: Vec::new(),
            ..body
        };
        assert_eq!(refusal(&bare, &request), "the request is invalid");
    }

    #[test]
    fn bad_names_are_refused_before_anything_is_sent() {
        assert_eq!(
            checked_name("endpoint", "ops.pager-1").expect("valid"),
            "ops.pager-1"
        );
        for bad in ["", "-x", "a/b", "has space", &"n".repeat(65)] {
            assert_eq!(
                checked_name("endpoint", bad).expect_err(bad).exit_code(),
                2,
                "{bad}"
            );
        }
    }

    #[test]
    fn the_filters_become_the_query() {
        let args = |run: Option<&str>, endpoint: Option<&str>, status| DeliveriesArgs {
            run: run.map(str::to_owned),
            endpoint: endpoint.map(str::to_owned),
            status,
            limit: 20,
            remote: Remote::default(),
        };
        assert_eq!(
            deliveries_path(&args(None, None, None)),
            "/api/notify/deliveries?limit=20"
        );
        assert_eq!(
            deliveries_path(&args(
                Some("0190 run"),
                Some("ops"),
                Some(DeliveryStatusArg::Dead)
            )),
            "/api/notify/deliveries?limit=20&run=0190%20run&endpoint=ops&status=dead"
        );
    }
}
