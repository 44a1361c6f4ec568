//! Readiness and metrics in real processes (docs/OPERATIONS.md, "Health and metrics"):
//! `/metrics` answers the daemon token only, in a format a Prometheus parser reads, with
//! the fires, run ends, API and verifier latencies of what just happened; readiness says
//! ready with its figures.

use studio_api::Readiness;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_and_count_what_happened_and_readiness_says_ready() {
    let studio = start(&[]);
    let api = Api::new(&studio);
    // A clock fire, a run that ends, and a request through the app (the verifier admits it).
    let spec = command("metered", every("1s"), "true", &[]);
    let schedule = api.create(&spec).await;
    until("a fire to end", WAIT, async || {
        let runs = api.runs(&schedule.id).await;
        runs.iter()
            .any(|r| r.core.status == RunStatus::Completed)
            .then_some(())
    })
    .await;
    api.disable(&schedule.id).await;
    let through_app = studio_tests::http()
        .get(studio.app_url("/api/summary"))
        .bearer_auth(studio.token())
        .send()
        .await
        .expect("the app");
    assert!(through_app.status().is_success(), "{through_app:?}");

    let resp = studio_tests::http()
        .get(studio.daemon_url("/metrics"))
        .bearer_auth(studio.token())
        .send()
        .await
        .expect("metrics");
    assert_eq!(resp.status(), 200);
    let kind = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    let text = resp.text().await.expect("text");
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("a Prometheus parser reads it");
    let value = |name: &str, label: Option<(&str, &str)>| -> f64 {
        scrape
            .samples
            .iter()
            .filter(|s| s.metric == name)
            .filter(|s| label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                prometheus_parse::Value::Histogram(ref h) => h.last().map_or(0.0, |b| b.count),
                prometheus_parse::Value::Summary(_) => 0.0,
            })
            .sum()
    };
    assert!(value("studio_fires_total", None) >= 1.0, "{text}");
    assert!(
        value("studio_runs_ended_total", Some(("status", "completed"))) >= 1.0,
        "{text}"
    );
    for histogram in [
        "studio_fire_lateness_seconds_count",
        "studio_store_write_duration_seconds_count",
        "studio_verifier_duration_seconds_count",
    ] {
        let n: f64 = scrape
            .samples
            .iter()
            .filter(|s| s.metric == histogram.trim_end_matches("_count"))
            .map(|s| match &s.value {
                prometheus_parse::Value::Histogram(h) => h.last().map_or(0.0, |b| b.count),
                _ => 0.0,
            })
            .sum();
        assert!(n >= 1.0, "{histogram}: {text}");
    }
    let created = scrape.samples.iter().any(|s| {
        s.metric == "studio_http_request_duration_seconds"
            && s.labels.get("operation") == Some("create_schedule")
    });
    assert!(created, "{text}");
    assert!(
        scrape
            .samples
            .iter()
            .any(|s| s.metric == "studio_queue_depth"),
        "{text}"
    );

    // Only the daemon token reads it: a browser session is refused.
    let code = studio.pair_code();
    let paired = crate::pair(&studio, &code).await;
    let cookie = studio_tests::admission_cookie(&paired).expect("cookie");
    let refused = crate::from_browser(&studio, Method::GET, "/metrics", &cookie, None)
        .send()
        .await
        .expect("metrics from a browser");
    assert_ne!(refused.status(), 200);

    let ready: Readiness = api.get("/api/admin/readiness").await.expect(200);
    assert!(ready.ready, "{ready:?}");
    assert!(
        ready.store_writable && ready.problems.is_empty(),
        "{ready:?}"
    );
    assert!(ready.disk_free_bytes > 0);
    assert_eq!(ready.queued_tasks, 0);
}
