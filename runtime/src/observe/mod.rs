//! What the operator reports about itself: Prometheus metrics, OpenTelemetry traces; and what
//! watches it, written from the spec: alerting and recording rules, a Grafana dashboard.

pub(crate) mod alerts;
pub(crate) mod dashboard;
pub(crate) mod metrics;
#[cfg(feature = "otlp")]
pub(crate) mod telemetry;
