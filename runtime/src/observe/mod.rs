//! What the operator reports about itself: Prometheus metrics, OpenTelemetry traces (the
//! alerts and the dashboard over them are written by `crate::generate`).

pub(crate) mod metrics;
#[cfg(feature = "otlp")]
pub(crate) mod telemetry;
