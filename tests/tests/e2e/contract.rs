//! Bad input generated from `docs/openapi.json`, against a running studiod and through
//! studio-app: for every documented operation, requests with unknown ids, bodies that break
//! their schema field by field (wrong types, missing and extra fields, huge strings and
//! numbers, nulls), bodies that are not JSON or not UTF-8, wrong media types, and query
//! parameters of the wrong type. Each answer must be below 500, and a refusal must be the
//! contract's error body with a code the document lists for that status; nothing stored
//! may change.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

// The documents are walked as JSON, and the bodies broken from them are JSON no type
// admits: generated bad input is untyped on purpose.
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use studio_api::{AllowList, Code, ErrorBody, RunPage, SchedulePage, Sessions, app::AttentionList};
use studio_tests::{
    Studio,
    api::{command_spec, every},
};

use crate::paired_cookie;

const DOCUMENT: &str = include_str!("../../../docs/openapi.json");
const APP_DOCUMENT: &str = include_str!("../../../docs/openapi-app.json");

/// One request: method, target, content type and raw body.
struct Case {
    method: String,
    target: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    why: String,
}

/// The listener, with what admits a request there.
struct Listener {
    addr: SocketAddr,
    auth: Vec<(String, String)>,
}

fn send(to: &Listener, case: &Case) -> (u16, Vec<u8>) {
    let mut stream = TcpStream::connect(to.addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
        case.method,
        case.target,
        to.addr,
        case.body.len()
    );
    for (k, v) in &to.auth {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(t) = case.content_type {
        head.push_str(&format!("Content-Type: {t}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).expect("head");
    let _ = stream.write_all(&case.body); // a refusal may close before the whole body
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(response.len(), |i| i + 4);
    let status = String::from_utf8_lossy(&response[..split])
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response[split..].to_vec();
    (status, dechunk(&body))
}

/// The payload of a chunked body (answers of unknown length come chunked).
fn dechunk(body: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(body);
    let mut lines = text.split("\r\n");
    let mut out = String::new();
    let Some(first) = lines.next() else {
        return body.to_vec();
    };
    if usize::from_str_radix(first.trim(), 16).is_err() || body.first() == Some(&b'{') {
        return body.to_vec();
    }
    let mut size = usize::from_str_radix(first.trim(), 16).unwrap_or(0);
    while size > 0 {
        out.push_str(lines.next().unwrap_or(""));
        size = lines
            .next()
            .and_then(|l| usize::from_str_radix(l.trim(), 16).ok())
            .unwrap_or(0);
    }
    out.into_bytes()
}

/// `#/components/schemas/X` resolved.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => r
            .strip_prefix("#/components/schemas/")
            .and_then(|name| doc.pointer(&format!("/components/schemas/{name}")))
            .map_or(schema, |s| resolve(doc, s)),
        None => schema,
    }
}

/// A small instance of `schema` (required fields only), which may or may not pass
/// validation: it is the seed every mutation starts from.
fn instance(doc: &Value, schema: &Value, depth: usize) -> Value {
    let schema = resolve(doc, schema);
    if depth > 6 {
        return Value::Null;
    }
    if let Some(first) = schema
        .get("oneOf")
        .or_else(|| schema.get("allOf"))
        .and_then(Value::as_array)
        .and_then(|v| v.first())
    {
        return instance(doc, first, depth + 1);
    }
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|v| v.first())
    {
        return first.clone();
    }
    let ty = match schema.get("type") {
        Some(Value::Array(types)) => types.first().and_then(Value::as_str).unwrap_or("null"),
        Some(Value::String(t)) => t.as_str(),
        _ => "object",
    };
    match ty {
        "string" => json!("x"),
        "integer" => json!(1),
        "number" => json!(1.5),
        "boolean" => json!(true),
        "array" => json!([]),
        "null" => Value::Null,
        _ => {
            let mut object = Map::new();
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (name, prop) in props {
                    if required.contains(&name.as_str()) {
                        object.insert(name.clone(), instance(doc, prop, depth + 1));
                    }
                }
            }
            Value::Object(object)
        }
    }
}

/// Every field of `seed` broken in each way, plus the whole body's own breakages.
fn bodies(seed: &Value) -> Vec<(String, Vec<u8>, Option<&'static str>)> {
    let json = Some("application/json");
    let mut out = vec![
        ("not JSON".into(), b"{not json".to_vec(), json),
        (
            "not UTF-8".into(),
            b"{\"code\": \"\xff\xfe\"}".to_vec(),
            json,
        ),
        ("empty".into(), Vec::new(), json),
        ("an array".into(), b"[]".to_vec(), json),
        ("nested deep".into(), "[".repeat(5000).into_bytes(), json),
        (
            "text/plain".into(),
            seed.to_string().into_bytes(),
            Some("text/plain"),
        ),
        ("no media type".into(), seed.to_string().into_bytes(), None),
        (
            "over the body limit".into(),
            vec![b' '; 2 * 1024 * 1024],
            json,
        ),
    ];
    let mut extra = seed.clone();
    if let Some(o) = extra.as_object_mut() {
        o.insert("zz_unknown".into(), json!(1));
    }
    out.push((
        "an unknown field".into(),
        extra.to_string().into_bytes(),
        json,
    ));
    let Some(fields) = seed.as_object() else {
        return out;
    };
    for (name, value) in fields {
        let replacements = [
            ("missing", None),
            ("null", Some(Value::Null)),
            ("a number", Some(json!(123))),
            ("a string", Some(json!("x"))),
            ("an object", Some(json!({}))),
            ("a list", Some(json!([1, "x", null]))),
            ("huge", Some(json!("x".repeat(200_000)))),
            ("a huge number", Some(json!(1e308))),
            ("past i64", Some(json!(u64::MAX))),
            ("negative", Some(json!(i64::MIN))),
            ("control characters", Some(json!("a\u{0}b\u{1b}[31m"))),
        ];
        for (how, replacement) in replacements {
            if replacement.as_ref() == Some(value) {
                continue;
            }
            let mut body = seed.clone();
            if let Some(o) = body.as_object_mut() {
                match replacement {
                    Some(v) => o.insert(name.clone(), v),
                    None => o.remove(name),
                };
            }
            out.push((format!("{name} {how}"), body.to_string().into_bytes(), json));
        }
    }
    out
}

/// Every bad request the document implies.
fn cases(doc: &Value) -> Vec<(String, String, Case)> {
    let mut out = Vec::new();
    let paths = doc["paths"].as_object().expect("paths");
    for (template, item) in paths {
        for (method, op) in item.as_object().expect("operations") {
            let id = op["operationId"].as_str().unwrap_or("?").to_owned();
            let ids = [
                "no-such-id",
                "..",
                "%2e%2e",
                "%00",
                "%F0%9F%92%A5",
                &"9".repeat(5000),
            ];
            let targets: Vec<String> = if template.contains('{') {
                ids.iter().map(|i| template.replace("{id}", i)).collect()
            } else {
                vec![template.clone()]
            };
            let seed = op
                .pointer("/requestBody/content/application~1json/schema")
                .map(|s| instance(doc, s, 0));
            // A body for unsafe methods (the seed, or `{}`), none for GET.
            let plain = |target: String, why: String| {
                let body = seed
                    .as_ref()
                    .map_or_else(|| b"{}".to_vec(), |s| s.to_string().into_bytes());
                let unsafe_method = method != "get";
                Case {
                    method: method.to_uppercase(),
                    content_type: unsafe_method.then_some("application/json"),
                    body: if unsafe_method { body } else { Vec::new() },
                    target,
                    why,
                }
            };
            let mut push = |case: Case| out.push((id.clone(), method.clone(), case));
            for target in &targets {
                push(plain(target.clone(), target.clone()));
            }
            let target = &targets[0];
            for (why, body, content_type) in seed.as_ref().map(bodies).unwrap_or_default() {
                push(Case {
                    method: method.to_uppercase(),
                    target: target.clone(),
                    content_type,
                    body,
                    why,
                });
            }
            for param in op["parameters"].as_array().into_iter().flatten() {
                if param["in"] != "query" {
                    continue;
                }
                let name = param["name"].as_str().unwrap_or("x");
                for value in [
                    "abc",
                    "-1",
                    "99999999999999999999999",
                    "%ff%fe",
                    "2026-13-45T99:99:99Z",
                    &"z".repeat(10_000),
                ] {
                    push(plain(
                        format!("{target}?{name}={value}"),
                        format!("{name}={}", &value[..value.len().min(24)]),
                    ));
                }
            }
        }
    }
    out
}

/// What is wrong with an answer, by the document: a 5xx (or none), or a refusal that is
/// not the error body with a code listed for its status.
fn judge(doc: &Value, method: &str, case: &Case, status: u16, body: &[u8]) -> Option<String> {
    if status == 0 || status >= 500 {
        return Some(format!("answered {status}"));
    }
    if status < 400 {
        return None;
    }
    let path = case.target.split('?').next().unwrap_or("");
    let template = doc["paths"]
        .as_object()
        .and_then(|p| {
            p.iter().find(|(t, item)| {
                item.get(method).is_some() && studio_api::route::template_matches(t, path)
            })
        })
        .map_or(path.to_owned(), |(t, _)| t.clone());
    match serde_json::from_slice::<ErrorBody>(body) {
        Err(e) => Some(format!(
            "{status} with a body that is not the contract's: {e}"
        )),
        Ok(e) => {
            let codes = listed(doc, &template, method, status);
            // A path no route serves (an id that changes the path) is the fallback's.
            let fallback = matches!(e.code, Code::NotFound | Code::MethodNotAllowed);
            (!codes.iter().any(|c| c == e.code.as_str()) && !fallback).then(|| {
                format!(
                    "{status} {} is not a code the document lists ({codes:?})",
                    e.code
                )
            })
        }
    }
}

/// The app's operations' cases (its ids are item ids: `run:<id>`).
fn cases_of_app(doc: &Value) -> Vec<(String, String, Case)> {
    let mut all = cases(doc);
    for (_, _, case) in &mut all {
        case.target = case.target.replace("no-such-id", "run:no-such-id");
    }
    all
}

/// The codes the document lists for `status` on this operation.
fn listed(doc: &Value, path: &str, method: &str, status: u16) -> Vec<String> {
    let response = doc
        .pointer(&format!(
            "/paths/{}/{method}/responses/{status}",
            path.replace('~', "~0").replace('/', "~1")
        ))
        .cloned()
        .unwrap_or(Value::Null);
    let mut codes = Vec::new();
    collect_enums(&response, &mut codes);
    codes
}

fn collect_enums(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            if let (Some(Value::Array(words)), Some(_)) = (o.get("enum"), o.get("type")) {
                out.extend(words.iter().filter_map(Value::as_str).map(str::to_owned));
            }
            o.values().for_each(|x| collect_enums(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| collect_enums(x, out)),
        _ => {}
    }
}

/// `GET path`, which must answer 200 with a `T`.
fn read<T: DeserializeOwned>(to: &Listener, path: &str) -> T {
    let case = Case {
        method: "GET".into(),
        target: path.into(),
        content_type: None,
        body: Vec::new(),
        why: String::new(),
    };
    let (status, body) = send(to, &case);
    assert_eq!(status, 200, "{path}");
    serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{path}: {e}: {}", String::from_utf8_lossy(&body)))
}

/// What is stored, as the API shows it.
#[derive(Debug, PartialEq)]
struct Stored {
    schedules: SchedulePage,
    runs: RunPage,
    allowlist: AllowList,
    sessions: Sessions,
}

/// What is stored now (the answers' own clocks left out).
fn stored(to: &Listener) -> Stored {
    let mut sessions: Sessions = read(to, "/api/studio/sessions");
    for s in &mut sessions.sessions {
        s.last_seen_at.clear();
    }
    Stored {
        schedules: read(to, "/api/schedules?limit=500"),
        runs: read(to, "/api/runs?limit=500"),
        allowlist: read(to, "/api/admin/allowlist"),
        sessions,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_generated_from_the_document_is_refused_by_the_contract() {
    let studio = Studio::start_with(&[("STUDIO_COMMAND_ALLOWLIST", "true")]);
    let cookie = paired_cookie(&studio).await;
    let doc: Value = serde_json::from_str(DOCUMENT).expect("docs/openapi.json");
    let direct = Listener {
        addr: studio.daemon_addr,
        auth: vec![("Authorization".into(), format!("Bearer {}", studio.token()))],
    };
    let through_app = Listener {
        addr: studio.app_addr,
        auth: vec![
            ("Cookie".into(), cookie),
            ("Origin".into(), studio.app_origin()),
        ],
    };
    // Something stored for the refusals to leave alone.
    let seed = Case {
        method: "POST".into(),
        target: "/api/schedules".into(),
        content_type: Some("application/json"),
        body: serde_json::to_vec(&command_spec("kept", every("1h"), "true", &[])).expect("a spec"),
        why: String::new(),
    };
    let (status, body) = send(&direct, &seed);
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    let cases = cases(&doc);
    assert!(cases.len() > 300, "only {} cases", cases.len());
    let before = stored(&direct);
    let mut failures = Vec::new();
    let mut checked = 0;
    for listener in [&direct, &through_app] {
        for (id, method, case) in &cases {
            // Pairing spends codes, the stream never ends, and disconnecting or rotating
            // the epoch ends the pairing the rest depend on: each has tests of its own.
            if ["pair", "events", "disconnect", "rotate_epoch"].contains(&id.as_str()) {
                continue;
            }
            let (status, body) = tokio::task::block_in_place(|| send(listener, case));
            checked += 1;
            let path = case.target.split('?').next().unwrap_or("");
            let template = doc["paths"]
                .as_object()
                .and_then(|p| {
                    p.iter().find(|(t, item)| {
                        item.get(method.as_str()).is_some()
                            && studio_api::route::template_matches(t, path)
                    })
                })
                .map_or(path.to_owned(), |(t, _)| t.clone());
            let problem = if status == 0 || status >= 500 {
                Some(format!("answered {status}"))
            } else if status >= 400 {
                match serde_json::from_slice::<ErrorBody>(&body) {
                    Err(e) => Some(format!(
                        "{status} with a body that is not the contract's: {e}"
                    )),
                    Ok(e) => {
                        let codes = listed(&doc, &template, method, status);
                        let generic = matches!(e.code, Code::NotFound | Code::MethodNotAllowed);
                        (!codes.contains(&e.code.as_str().to_owned()) && !generic).then(|| {
                            format!(
                                "{status} {} is not a code the document lists ({codes:?})",
                                e.code
                            )
                        })
                    }
                }
            } else {
                None
            };
            if let Some(problem) = problem {
                failures.push(format!(
                    "{} {} [{}] via {}: {problem}",
                    case.method,
                    &case.target[..case.target.len().min(80)],
                    case.why,
                    listener.addr
                ));
            }
        }
    }
    // studio-app's own routes, from its own document.
    let app_doc: Value = serde_json::from_str(APP_DOCUMENT).expect("docs/openapi-app.json");
    let attention = |to: &Listener| read::<AttentionList>(to, "/api/app/attention?all=true");
    let app_before = attention(&through_app);
    for (id, method, case) in &cases_of_app(&app_doc) {
        if id == "app_pair" {
            continue;
        }
        let (status, body) = tokio::task::block_in_place(|| send(&through_app, case));
        checked += 1;
        if let Some(problem) = judge(&app_doc, method, case, status, &body) {
            failures.push(format!(
                "{} {} [{}] (app): {problem}",
                case.method, case.target, case.why
            ));
        }
    }
    assert!(
        attention(&through_app) == app_before,
        "a refused request changed the app's dispositions"
    );
    let after = stored(&direct);
    assert!(
        failures.is_empty(),
        "{} of {checked} answers break the contract:\n{}\napp warnings:\n{}",
        failures.len(),
        failures.join("\n"),
        warnings(&studio.log("app"))
    );
    assert!(
        before == after,
        "a refused request changed what is stored: {before:?} {after:?}"
    );
}

/// The warnings and errors in a process's log, to explain a failed answer.
fn warnings(log: &str) -> String {
    log.lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect::<Vec<_>>()
        .join("\n")
}
