//! A Prometheus registry holding kube-fsm's metrics, as an operator process has one, and what
//! tests read from it.

use kube_fsm::metrics::Metrics;
use prometheus_client::registry::Registry;

/// The metrics to give to operators (`.metrics(recorded.metrics())`), registered once.
#[derive(Debug)]
pub struct Recorded {
    registry: Registry,
    metrics: Metrics,
}

impl Default for Recorded {
    fn default() -> Self {
        let mut registry = Registry::default();
        let metrics = Metrics::default();
        metrics.register(&mut registry);
        Recorded { registry, metrics }
    }
}

impl Recorded {
    /// The metrics, for `Operator::metrics`.
    #[must_use]
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The text exposition, as `/metrics` serves it.
    ///
    /// # Panics
    /// When the registry cannot be encoded.
    #[must_use]
    pub fn text(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).expect("encode");
        text
    }

    /// The sum of the samples of `metric` whose labels include every `name = value` pair of
    /// `labels` (`&[]`: all of them).
    #[must_use]
    pub fn sum(&self, metric: &str, labels: &[(&str, &str)]) -> f64 {
        crate::prometheus::sum(&self.text(), metric, labels)
    }
}
