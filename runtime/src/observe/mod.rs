//! What the operator reports about itself: Prometheus metrics, OpenTelemetry traces.

pub(crate) mod metrics;
#[cfg(feature = "otlp")]
pub(crate) mod telemetry;
