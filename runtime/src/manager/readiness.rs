//! The Manager's readiness: every machine's watches up, and its Leases' requests answered;
//! when not, which machine and why, in a sentence.

use crate::watch::health::{Connection, Health};

/// Whether every machine of a [`crate::Manager`] is connected, for a readiness probe.
#[derive(Clone, Debug)]
pub struct Readiness {
    parts: Vec<(String, Health)>,
}

impl Readiness {
    pub(crate) fn new(parts: Vec<(String, Health)>) -> Self {
        Readiness { parts }
    }

    /// `Ok` when every machine's watches are up; otherwise one sentence per machine that is
    /// not, naming it, e.g. `Database: the API server has been unreachable since
    /// 2026-12-03T10:00:00Z (connection refused).`
    ///
    /// # Errors
    ///
    /// The sentences, joined by a space, when any machine is down.
    pub fn check(&self) -> Result<(), String> {
        let down: Vec<String> = self
            .parts
            .iter()
            .filter_map(|(name, health)| sentence(&health.status()).map(|s| format!("{name}: {s}")))
            .collect();
        if down.is_empty() {
            Ok(())
        } else {
            Err(down.join(" "))
        }
    }

    /// Each machine (and the Leases, with replicas) and its connection.
    pub fn parts(&self) -> impl Iterator<Item = (&str, Connection)> {
        self.parts
            .iter()
            .map(|(name, health)| (name.as_str(), health.status()))
    }
}

/// What is wrong with `connection`, as a sentence; `None` when it is up.
fn sentence(connection: &Connection) -> Option<String> {
    match connection {
        Connection::Up => None,
        Connection::Down { since, reason } => Some(format!(
            "the API server has been unreachable since {since} ({reason})."
        )),
        Connection::Refused { reason } => Some(format!(
            "the API server refuses a request it needs ({reason})."
        )),
    }
}
