//! Notifications in real processes (docs/OPERATIONS.md, "Notifications"), received by a
//! real local HTTP server: each delivery is signed with its endpoint's secret; a rule's
//! threshold sends once after N failures in a row and a recovery after them; an outbox
//! row committed just before studiod dies is delivered once after its restart; a receiver
//! that answers 500 is retried on the backoff and then dead-lettered; a redirect is not
//! followed; an endpoint on studiod's own listener is refused.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
};

use http_body_util::BodyExt;
use hyper::{Request, Response, body::Incoming, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use studio_api::{DeliveryList, DeliveryStatus, EndpointCreated};

use super::*;

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Received {
    delivery: String,
    event: String,
    signature: String,
    body: String,
}

/// A local HTTP receiver answering the statuses of `plan` in order, then 200.
struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    async fn start(plan: &[u16]) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        let got = Arc::new(Mutex::new(Vec::new()));
        let plan = Arc::new(Mutex::new(plan.iter().copied().collect::<VecDeque<u16>>()));
        let task = tokio::spawn({
            let got = got.clone();
            async move {
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        return;
                    };
                    let (got, plan) = (got.clone(), plan.clone());
                    tokio::spawn(async move {
                        let service = service_fn(move |req: Request<Incoming>| {
                            let (got, plan) = (got.clone(), plan.clone());
                            async move {
                                let header = |n: &str| {
                                    req.headers()
                                        .get(n)
                                        .and_then(|v| v.to_str().ok())
                                        .unwrap_or("")
                                        .to_owned()
                                };
                                let (delivery, event, signature) = (
                                    header("studio-delivery"),
                                    header("studio-event"),
                                    header("studio-signature"),
                                );
                                let body = req.into_body().collect().await.map_or_else(
                                    |_| String::new(),
                                    |b| String::from_utf8_lossy(&b.to_bytes()).into_owned(),
                                );
                                got.lock().expect("lock").push(Received {
                                    delivery,
                                    event,
                                    signature,
                                    body,
                                });
                                let status = plan.lock().expect("lock").pop_front().unwrap_or(200);
                                let mut answer = Response::new(format!("answered {status}"));
                                *answer.status_mut() =
                                    hyper::StatusCode::from_u16(status).expect("status");
                                if status == 302 {
                                    answer.headers_mut().insert(
                                        "location",
                                        hyper::header::HeaderValue::from_static(
                                            "http://127.0.0.1:9/",
                                        ),
                                    );
                                }
                                Ok::<_, std::convert::Infallible>(answer)
                            }
                        });
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(tcp), service)
                            .await;
                    });
                }
            }
        });
        Self { url, got, task }
    }

    fn got(&self) -> Vec<Received> {
        self.got.lock().expect("lock").clone()
    }
}

/// Checks `r`'s `Studio-Signature` against the endpoint's signing secret.
fn signed_by(r: &Received, secret: &str) -> bool {
    let Some((t, v1)) = r
        .signature
        .strip_prefix("t=")
        .and_then(|rest| rest.split_once(",v1="))
    else {
        return false;
    };
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let message = format!("{t}.{}", r.body);
    let Some(tag) = studio_contract::secret::unhex(v1) else {
        return false;
    };
    ring::hmac::verify(&key, message.as_bytes(), &tag).is_ok()
}

async fn endpoint(api: &Api, name: &str, url: &str) -> EndpointCreated {
    api.post(
        "/api/notify/endpoints",
        &serde_json::json!({ "name": name, "url": url }),
    )
    .await
    .expect(201)
}

async fn deliveries(api: &Api, query: &str) -> DeliveryList {
    api.get(&format!("/api/notify/deliveries?{query}"))
        .await
        .expect(200)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_are_signed_thresholded_and_delivered_once_across_a_crash() {
    // studiod dies right after the first delivery's row is committed, before it is sent.
    let studio = start(&[("STUDIO_TEST_CRASH_AT", "before_delivery")]);
    let api = Api::new(&studio);
    let receiver = Receiver::start(&[]).await;
    let created = endpoint(&api, "ops", &receiver.url).await;
    assert_eq!(created.signing_secret.len(), 64);
    let listed = api.get("/api/notify/endpoints").await;
    assert!(!listed.text.contains(&created.signing_secret), "{listed}");

    let healthy = marker(&studio, "healthy");
    let mut spec = sh(
        "flaky",
        every("1h"),
        &format!("test -e '{}'", healthy.display()),
    );
    spec.notify = serde_json::from_value(serde_json::json!([
        {"on": ["failed", "succeeded_after_failure"], "to": "ops", "after": 2}
    ]))
    .expect("rules");
    let schedule = api.create(&spec).await.id;
    let run_once = async |want: RunStatus| {
        let run = api.trigger(&schedule).await.core.id;
        let done = until("the run to end", WAIT, async || {
            let d = api.try_run(&run).await?;
            d.run.core.status.is_terminal().then_some(d)
        })
        .await;
        assert_eq!(done.run.core.status, want, "{done:?}");
        run
    };
    // One failure: under the threshold, nothing is sent.
    let first = run_once(RunStatus::Failed).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(receiver.got().is_empty(), "{:?}", receiver.got());
    assert!(
        deliveries(&api, &format!("run={first}"))
            .await
            .deliveries
            .is_empty()
    );
    // The second: one row, committed with the failure; studiod dies before sending it and
    // its supervisor starts it again; the restarted one sends it, once.
    let second = run_once(RunStatus::Failed).await;
    let got = until("the delivery after the restart", WAIT, async || {
        let got = receiver.got();
        (!got.is_empty()).then_some(got)
    })
    .await;
    assert!(
        studio
            .home_path()
            .join("run/crashed-before_delivery")
            .exists(),
        "the crash point was reached"
    );
    assert_eq!(got[0].event, "failed");
    assert!(signed_by(&got[0], &created.signing_secret), "{got:?}");
    let body: serde_json::Value = serde_json::from_str(&got[0].body).expect("json");
    assert_eq!(body["run"]["id"], second.as_str());
    assert_eq!(body["failures_in_a_row"], 2);
    assert_eq!(body["schedule"]["name"], "flaky");
    // A third failure: past the threshold, no cooldown: nothing more.
    run_once(RunStatus::Failed).await;
    // Healthy again: the recovery is sent.
    std::fs::write(&healthy, b"").expect("marker");
    run_once(RunStatus::Completed).await;
    let got = until("the recovery", WAIT, async || {
        let got = receiver.got();
        (got.len() >= 2).then_some(got)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got_now = receiver.got();
    assert_eq!(got_now.len(), 2, "exactly two deliveries: {got_now:?}");
    assert_eq!(got[1].event, "succeeded_after_failure");
    assert!(signed_by(&got[1], &created.signing_secret));
    assert_ne!(got[0].delivery, got[1].delivery);
    let listed = deliveries(&api, "endpoint=ops").await.deliveries;
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(
        listed
            .iter()
            .all(|d| d.status == DeliveryStatus::Delivered && d.attempts.len() == 1),
        "{listed:?}"
    );
    // The endpoint is in use by the schedule: kept.
    let refused = api.delete("/api/notify/endpoints/ops").await;
    assert_eq!(refused.status, 409, "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_receiver_is_retried_then_dead_and_nothing_is_redirected_or_sent_home() {
    let studio = start(&[("STUDIO_NOTIFY_BACKOFF_MS", "200,200")]);
    let api = Api::new(&studio);
    let flaky = Receiver::start(&[500, 500]).await;
    let down = Receiver::start(&[500, 500, 500]).await;
    let moved = Receiver::start(&[302, 302, 302]).await;
    endpoint(&api, "flaky", &flaky.url).await;
    endpoint(&api, "down", &down.url).await;
    endpoint(&api, "moved", &moved.url).await;
    for name in ["flaky", "down", "moved"] {
        let queued = api.act(&format!("/api/notify/endpoints/{name}/test")).await;
        assert_eq!(queued.status, 202, "{queued}");
    }
    let settled = async |name: &str| {
        until("the delivery to settle", WAIT, async || {
            let list = deliveries(&api, &format!("endpoint={name}")).await;
            let d = list.deliveries.into_iter().next()?;
            (d.status != DeliveryStatus::Pending).then_some(d)
        })
        .await
    };
    let ok = settled("flaky").await;
    assert_eq!(ok.status, DeliveryStatus::Delivered, "{ok:?}");
    let statuses: Vec<Option<i64>> = ok.attempts.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [Some(500), Some(500), Some(200)], "{ok:?}");
    let dead = settled("down").await;
    assert_eq!(dead.status, DeliveryStatus::Dead, "{dead:?}");
    assert_eq!(dead.attempts.len(), 3, "{dead:?}");
    let moved_d = settled("moved").await;
    assert_eq!(moved_d.status, DeliveryStatus::Dead, "{moved_d:?}");
    assert!(
        moved_d.attempts[0]
            .detail
            .as_deref()
            .is_some_and(|d| d.contains("redirects are not followed")),
        "{moved_d:?}"
    );
    assert_eq!(moved.got().len(), 3, "only the endpoint itself was called");

    // Not to studiod's own listener.
    let home = api
        .post(
            "/api/notify/endpoints",
            &serde_json::json!({"name": "home", "url": studio.daemon_url("/api/schedules")}),
        )
        .await;
    assert_eq!(home.status, 400, "{home}");
    assert!(home.text.contains("own Studio listeners"), "{home}");
}
