//! The plugin's metrics, for Prometheus: claims prepared and unprepared by
//! result, how long each took, and the devices published, kept in a
//! registry of the `prometheus` crate and served in Prometheus' text
//! exposition format (0.0.4) at `/metrics` on the `--metrics-port` TCP port.

use std::time::Duration;

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};

/// The buckets of the call latencies, in seconds: a prepare that finds its
/// groups on vfio-pci takes milliseconds, one that binds waits up to the
/// bind timeout (10 s by default), the kubelet gives a call 45 s.
const LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 45.0,
];

/// The metrics of one plugin.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    calls: IntCounterVec,
    latency: HistogramVec,
    published: IntGauge,
    publications: IntCounterVec,
}

/// A call of the kubelet on one claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// NodePrepareResources.
    Prepare,
    /// NodeUnprepareResources.
    Unprepare,
}

impl Call {
    fn label(self) -> &'static str {
        match self {
            Call::Prepare => "prepare",
            Call::Unprepare => "unprepare",
        }
    }
}

fn result(ok: bool) -> &'static str {
    if ok {
        "success"
    } else {
        "failure"
    }
}

impl Metrics {
    /// The metrics, all at zero, named `<prefix>_...`.
    pub fn new(prefix: &str) -> Self {
        let registry = Registry::new();
        let calls = IntCounterVec::new(
            Opts::new(
                format!("{prefix}_claim_calls_total"),
                "Claims the kubelet asked to prepare or unprepare, by call and result.",
            ),
            &["call", "result"],
        )
        .expect("a valid counter");
        let latency = HistogramVec::new(
            HistogramOpts::new(
                format!("{prefix}_claim_call_duration_seconds"),
                "How long preparing or unpreparing one claim took, by call and result.",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["call", "result"],
        )
        .expect("a valid histogram");
        let published = IntGauge::new(
            format!("{prefix}_published_devices"),
            "Devices in the node's ResourceSlices as last published.",
        )
        .expect("a valid gauge");
        let publications = IntCounterVec::new(
            Opts::new(
                format!("{prefix}_publications_total"),
                "Publications of the node's ResourceSlices, by result.",
            ),
            &["result"],
        )
        .expect("a valid counter");
        for c in [
            Box::new(calls.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(latency.clone()),
            Box::new(published.clone()),
            Box::new(publications.clone()),
        ] {
            registry.register(c).expect("names registered once");
        }
        // Every series there from the start: a rate over a counter that
        // appears only at its first failure misses that failure.
        for call in [Call::Prepare, Call::Unprepare] {
            for ok in [true, false] {
                calls.with_label_values(&[call.label(), result(ok)]);
            }
        }
        for ok in [true, false] {
            publications.with_label_values(&[result(ok)]);
        }
        Self {
            registry,
            calls,
            latency,
            published,
            publications,
        }
    }

    /// One claim's call, its result and how long it took.
    pub fn claim_call(&self, call: Call, ok: bool, took: Duration) {
        let labels = [call.label(), result(ok)];
        self.calls.with_label_values(&labels).inc();
        self.latency
            .with_label_values(&labels)
            .observe(took.as_secs_f64());
    }

    /// A publication of `devices` devices, or a failed one (None).
    pub fn publication(&self, devices: Option<usize>) {
        self.publications
            .with_label_values(&[result(devices.is_some())])
            .inc();
        if let Some(n) = devices {
            self.published.set(n as i64);
        }
    }

    /// The scrape: every metric in the text exposition format.
    pub fn encode(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("the text encoder writes to memory");
        String::from_utf8(out).expect("the text format is UTF-8")
    }
}

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves `metrics` at `GET /metrics` on `listener` until `stop` is set.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: std::sync::Arc<Metrics>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let m = metrics.clone();
            async move {
                (
                    [(axum::http::header::CONTENT_TYPE, CONTENT_TYPE)],
                    m.encode(),
                )
            }
        }),
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text format's lines for what was counted, in the exposition
    /// format's shape (HELP, TYPE, then the samples; a histogram's
    /// cumulative buckets, `+Inf` equal to its count).
    #[test]
    fn the_scrape_holds_each_call_and_publication() {
        let m = Metrics::new("vp2p_dra");
        m.claim_call(Call::Prepare, true, Duration::from_millis(30));
        m.claim_call(Call::Prepare, false, Duration::from_secs(3));
        m.publication(Some(3));
        let text = m.encode();
        for line in [
            "# TYPE vp2p_dra_claim_calls_total counter",
            "vp2p_dra_claim_calls_total{call=\"prepare\",result=\"success\"} 1",
            "vp2p_dra_claim_calls_total{call=\"prepare\",result=\"failure\"} 1",
            "vp2p_dra_claim_calls_total{call=\"unprepare\",result=\"success\"} 0",
            "# TYPE vp2p_dra_claim_call_duration_seconds histogram",
            "vp2p_dra_claim_call_duration_seconds_bucket{call=\"prepare\",result=\"success\",le=\"0.025\"} 0",
            "vp2p_dra_claim_call_duration_seconds_bucket{call=\"prepare\",result=\"success\",le=\"0.05\"} 1",
            "vp2p_dra_claim_call_duration_seconds_bucket{call=\"prepare\",result=\"failure\",le=\"2.5\"} 0",
            "vp2p_dra_claim_call_duration_seconds_bucket{call=\"prepare\",result=\"failure\",le=\"5\"} 1",
            "vp2p_dra_claim_call_duration_seconds_bucket{call=\"prepare\",result=\"failure\",le=\"+Inf\"} 1",
            "vp2p_dra_published_devices 3",
            "vp2p_dra_publications_total{result=\"success\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
    }
}
