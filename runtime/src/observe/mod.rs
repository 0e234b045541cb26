//! What the operator reports about itself: Prometheus metrics, OpenTelemetry traces.

pub mod metrics;
#[cfg(feature = "otlp")]
pub mod telemetry;
