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
    /// not, naming it, e.g. `Database: the connection to the API server has been
    /// failing since 2026-12-03T10:00:00Z (connection refused).`
    ///
    /// # Errors
    ///
    /// The sentences, joined by a space, when any machine is down.
    pub fn check(&self) -> Result<(), String> {
        let down: Vec<String> = self
            .parts
            .iter()
            .filter_map(|(name, health)| {
                let sentence = sentence(&health.status())?;
                Some(if name.is_empty() {
                    sentence
                } else {
                    format!("{name}: {sentence}")
                })
            })
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

impl From<Health> for Readiness {
    /// One operator's readiness: its connection, unnamed.
    fn from(health: Health) -> Self {
        Readiness::new(vec![(String::new(), health)])
    }
}

/// What is wrong with `connection`, as a sentence; `None` when it is up.
fn sentence(connection: &Connection) -> Option<String> {
    match connection {
        Connection::Up => None,
        Connection::Down { since, reason } => Some(format!(
            "the connection to the API server has been failing since {since} ({reason})."
        )),
        Connection::NotServed { reason, .. } => Some(format!("{reason}.")),
        Connection::Refused { reason } => Some(format!(
            "the API server refuses a request it needs ({reason})."
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_names_each_machine_that_is_down_in_a_sentence() {
        let (database, riskengine) = (Health::default(), Health::default());
        let readiness = Readiness::new(vec![
            ("Database".to_owned(), database.clone()),
            ("RiskEngine".to_owned(), riskengine.clone()),
        ]);
        assert_eq!(readiness.check(), Ok(()));
        riskengine.lost(&"connection refused");
        let down = readiness.check().expect_err("RiskEngine is down");
        assert!(
            down.starts_with(
                "RiskEngine: the connection to the API server has been failing since "
            ) && down.ends_with("(connection refused)."),
            "{down}"
        );
        assert!(!down.contains("Database"), "{down}");
        let alone = Readiness::from(riskengine);
        assert!(
            alone
                .check()
                .is_err_and(|s| s.starts_with("the connection to the API server has been failing")),
            "one operator's readiness names no machine"
        );
    }
}
