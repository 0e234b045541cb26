//! Export of the engine's tracing spans (`reconcile`, with `object`, `state.from`, `state.to`,
//! `reason`) to an OpenTelemetry collector over OTLP/HTTP (protobuf). Feature `otlp`, off by
//! default, so operators that do not export pull in none of it.
//!
//! ```no_run
//! use tracing_subscriber::layer::SubscriberExt;
//! use tracing_subscriber::util::SubscriberInitExt;
//!
//! let otlp = kube_fsm::telemetry::Otlp::new("http://localhost:4318/v1/traces", "database-operator")?;
//! tracing_subscriber::registry()
//!     .with(tracing_subscriber::fmt::layer())
//!     .with(otlp.layer())
//!     .init();
//! // ... run the operator ...
//! otlp.shutdown()?; // flushes what is still buffered
//! # Ok::<(), kube_fsm::telemetry::TelemetryError>(())
//! ```
//!
//! The exporter speaks plain HTTP (a collector beside the operator); spans are sent in batches
//! from a background thread.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::registry::LookupSpan;

/// Why the exporter could not be set up, or could not flush.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The exporter could not be built (e.g. a malformed endpoint).
    #[error("cannot build the OTLP exporter: {0}")]
    Build(#[from] opentelemetry_otlp::ExporterBuildError),
    /// Spans could not be exported or the exporter not shut down.
    #[error("OTLP export failed: {0}")]
    Export(#[from] opentelemetry_sdk::error::OTelSdkError),
}

/// An OTLP/HTTP span exporter and the tracer provider that batches into it.
#[derive(Debug)]
pub struct Otlp {
    provider: SdkTracerProvider,
}

impl Otlp {
    /// Exports to `endpoint` (the full URL, e.g. `http://localhost:4318/v1/traces`) as the
    /// service `service`.
    ///
    /// # Errors
    /// When the exporter cannot be built.
    pub fn new(endpoint: &str, service: &str) -> Result<Self, TelemetryError> {
        let exporter = SpanExporter::builder()
            .with_http()
            .with_endpoint(endpoint)
            .build()?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(
                Resource::builder()
                    .with_service_name(service.to_owned())
                    .build(),
            )
            .build();
        Ok(Otlp { provider })
    }

    /// The `tracing` layer that turns spans into OpenTelemetry spans of this exporter.
    pub fn layer<S>(&self) -> OpenTelemetryLayer<S, SdkTracer>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        tracing_opentelemetry::layer().with_tracer(self.provider.tracer("kube-fsm"))
    }

    /// Sends every finished span now.
    ///
    /// # Errors
    /// When the export fails.
    pub fn flush(&self) -> Result<(), TelemetryError> {
        Ok(self.provider.force_flush()?)
    }

    /// Flushes and stops the exporter.
    ///
    /// # Errors
    /// When the final export fails.
    pub fn shutdown(self) -> Result<(), TelemetryError> {
        Ok(self.provider.shutdown()?)
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::mpsc;
    use std::time::Duration;

    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// A one-request-at-a-time HTTP receiver: forwards (path, body) of each POST.
    fn receiver() -> (String, mpsc::Receiver<(String, Vec<u8>)>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let path = line
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .to_owned();
                let mut length = 0;
                loop {
                    let mut header = String::new();
                    reader.read_line(&mut header).unwrap();
                    if header.trim().is_empty() {
                        break;
                    }
                    if let Some((name, value)) = header.split_once(':')
                        && name.eq_ignore_ascii_case("content-length")
                    {
                        length = value.trim().parse().unwrap();
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    .unwrap();
                let _ = tx.send((path, body));
            }
        });
        (url, rx)
    }

    fn contains(haystack: &[u8], needle: &str) -> bool {
        haystack
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
    }

    #[test]
    fn reconcile_spans_reach_the_collector_with_their_fields() {
        let (url, received) = receiver();
        let otlp = Otlp::new(&url, "kube-fsm-test").unwrap();
        let subscriber = tracing_subscriber::registry().with(otlp.layer());
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(
                "reconcile",
                object = "Database.v1.example.com/db.default",
                state.from = tracing::field::Empty,
                state.to = tracing::field::Empty,
                reason = tracing::field::Empty,
            );
            span.record("state.from", "Provisioning");
            span.record("state.to", "Running");
            span.record("reason", "PhaseChanged");
        });
        otlp.flush().unwrap();
        let (path, body) = received.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(path, "/v1/traces");
        for text in [
            "kube-fsm-test",
            "reconcile",
            "Database.v1.example.com/db.default",
            "state.from",
            "Provisioning",
            "state.to",
            "Running",
            "PhaseChanged",
        ] {
            assert!(contains(&body, text), "{text} not exported");
        }
        otlp.shutdown().unwrap();
    }
}
