//! studiod's metrics (docs/OPERATIONS.md, "Health and metrics"), kept by
//! `prometheus-client` and served as Prometheus text at `GET /metrics` (daemon token).
//! Counters count since this studiod started, as Prometheus expects; what the store
//! holds (queue depth) and who is connected are read when scraped.

use std::time::Duration;

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

/// A run's end, by status.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Ended {
    pub status: String,
}

/// One HTTP answer: the operation (its id in the OpenAPI document), the method and the
/// status class (`2xx`…).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Answered {
    pub operation: String,
    pub method: String,
    pub class: String,
}

/// One verifier call and whether it answered (a verdict, refusals included) or failed.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Verified {
    pub call: String,
    pub outcome: String,
}

/// A notification attempt's outcome (`delivered`, `retried`, `dead`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Notified {
    pub outcome: String,
}

/// What is queued, by kind (`runs`, `tasks`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Queued {
    pub kind: String,
}

/// Every metric, registered once.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    pub fires: Counter,
    pub fire_lateness: Histogram,
    pub runs: Family<Ended, Counter>,
    pub retries: Counter,
    pub http: Family<Answered, Histogram>,
    pub verifier: Family<Verified, Histogram>,
    pub queue_depth: Family<Queued, Gauge>,
    pub workers_connected: Gauge,
    pub notifications: Family<Notified, Counter>,
}

/// Seconds from 100 µs to about 100 s, each bucket twice the last.
fn latency() -> Histogram {
    Histogram::new(exponential_buckets(0.000_1, 2.0, 21))
}

impl Metrics {
    /// The metrics, with `store_writes` the store's own write-time histogram.
    pub(crate) fn new(store_writes: Histogram) -> Self {
        let mut registry = Registry::with_prefix("studio");
        let fires = Counter::default();
        registry.register("fires", "Occurrences fired by the clock", fires.clone());
        // From 1 ms to about an hour late.
        let fire_lateness = Histogram::new(exponential_buckets(0.001, 2.0, 23));
        registry.register(
            "fire_lateness_seconds",
            "How late each fire was, after its due instant",
            fire_lateness.clone(),
        );
        let runs = Family::<Ended, Counter>::default();
        registry.register("runs_ended", "Runs that ended, by status", runs.clone());
        let retries = Counter::default();
        registry.register(
            "retries",
            "Retry attempts of schedules' occurrences made",
            retries.clone(),
        );
        let http =
            Family::<Answered, Histogram>::new_with_constructor(latency as fn() -> Histogram);
        registry.register(
            "http_request_duration_seconds",
            "Time to answer an API request, by operation",
            http.clone(),
        );
        let verifier =
            Family::<Verified, Histogram>::new_with_constructor(latency as fn() -> Histogram);
        registry.register(
            "verifier_duration_seconds",
            "Time to answer a verifier call",
            verifier.clone(),
        );
        registry.register(
            "store_write_duration_seconds",
            "Time of a write transaction of the scheduler (fire, transition, submission)",
            store_writes.clone(),
        );
        let queue_depth = Family::<Queued, Gauge>::default();
        registry.register(
            "queue_depth",
            "Runs and tasks waiting to start",
            queue_depth.clone(),
        );
        let workers_connected = Gauge::default();
        registry.register(
            "workers_connected",
            "Remote workers with an open assignment stream",
            workers_connected.clone(),
        );
        let notifications = Family::<Notified, Counter>::default();
        registry.register(
            "notification_attempts",
            "Notification delivery attempts, by outcome",
            notifications.clone(),
        );
        Self {
            registry,
            notifications,
            fires,
            fire_lateness,
            runs,
            retries,
            http,
            verifier,
            queue_depth,
            workers_connected,
        }
    }

    /// The Prometheus text exposition of every metric.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }

    /// Records an API answer.
    pub(crate) fn answered(&self, operation: &str, method: &str, status: u16, took: Duration) {
        let labels = Answered {
            operation: operation.to_owned(),
            method: method.to_owned(),
            class: format!("{}xx", status / 100),
        };
        self.http.get_or_create(&labels).observe(took.as_secs_f64());
    }

    /// Counts a notification attempt.
    pub(crate) fn notified(&self, outcome: &str) {
        let labels = Notified {
            outcome: outcome.to_owned(),
        };
        self.notifications.get_or_create(&labels).inc();
    }

    /// Records a verifier call.
    pub(crate) fn verified(&self, call: &str, answered: bool, took: Duration) {
        let labels = Verified {
            call: call.to_owned(),
            outcome: if answered { "answered" } else { "failed" }.to_owned(),
        };
        self.verifier
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }
}

/// The histogram of the store's write transactions.
pub(crate) fn store_write_histogram() -> Histogram {
    latency()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_exposed_with_the_studio_prefix() {
        let writes = store_write_histogram();
        let m = Metrics::new(writes.clone());
        m.fires.inc();
        m.fire_lateness.observe(0.25);
        m.runs
            .get_or_create(&Ended {
                status: "completed".into(),
            })
            .inc();
        m.answered("list_runs", "GET", 200, Duration::from_millis(2));
        m.verified("admit", true, Duration::from_micros(300));
        writes.observe(0.001);
        let text = m.render();
        for want in [
            "studio_fires_total 1",
            "studio_fire_lateness_seconds_count 1",
            "studio_runs_ended_total{status=\"completed\"} 1",
            "studio_http_request_duration_seconds_count{operation=\"list_runs\",method=\"GET\",class=\"2xx\"} 1",
            "studio_verifier_duration_seconds_count{call=\"admit\",outcome=\"answered\"} 1",
            "studio_store_write_duration_seconds_count 1",
            "# TYPE studio_retries counter",
            "# TYPE studio_workers_connected gauge",
        ] {
            assert!(text.contains(want), "no {want:?} in\n{text}");
        }
    }
}
