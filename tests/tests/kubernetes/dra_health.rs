//! The driver's health service as the kubelet's `grpc` probes ask it
//! (`grpc.health.v1.Health/Check`, asked here with tonic-health's client of
//! that protocol): `liveness` SERVING while both plugin sockets answer and
//! NOT_SERVING once one is gone; `readiness` NOT_SERVING until the kubelet
//! registers the plugin (here in `--claims-dir` mode, where nothing is
//! published), SERVING after, and NOT_SERVING again when a registration is
//! refused; the empty service name is both.

use std::time::{Duration, Instant};

use p2p_tests::dra_kubelet::register;
use p2p_tests::dra_node::*;
use p2p_tests::kubelet::vfio_tree;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

async fn status(port: u16, service: &str) -> Option<ServingStatus> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .ok()?
        .connect()
        .await
        .ok()?;
    let mut c = HealthClient::new(channel);
    let r = c
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .ok()?;
    ServingStatus::try_from(r.into_inner().status).ok()
}

/// Waits (up to 15 s, the service asks every 2 s) for `service` to be `want`.
async fn until(port: u16, service: &str, want: ServingStatus) {
    let start = Instant::now();
    loop {
        let now = status(port, service).await;
        if now == Some(want) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "{service:?} is {now:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn probes_say_the_sockets_answer_and_the_kubelet_registered_the_plugin() {
    use ServingStatus::{NotServing, Serving};
    let d = Dirs::new();
    let tree = vfio_tree(&d.root);
    let port = p2p_tests::free_port();
    let _p = start(&d, &tree, &["--healthcheck-port", &port.to_string()]);
    rt().block_on(async {
        until(port, "liveness", Serving).await;
        assert_eq!(status(port, "readiness").await, Some(NotServing));
        assert_eq!(status(port, "").await, Some(NotServing));
        register(&d.reg_socket(), None).await;
        until(port, "readiness", Serving).await;
        until(port, "", Serving).await;
        register(&d.reg_socket(), Some("version skew")).await;
        until(port, "readiness", NotServing).await;
        register(&d.reg_socket(), None).await;
        until(port, "readiness", Serving).await;
        // The DRA socket gone: the kubelet could no longer reach the driver.
        std::fs::remove_file(d.dra_socket()).unwrap();
        until(port, "liveness", NotServing).await;
        until(port, "", NotServing).await;
    });
}
