//! Policy layers over the machine's rules: what a platform adds in every namespace, and what a
//! tenant tier adds in the namespaces its label selector picks. Evaluated after the machine's
//! rules, which nobody is exempt from; the operator (by user and field manager) is exempt from
//! the layers (the override tier). Declarative: a [`Policy`] is plain data, built in Rust or
//! read from YAML/JSON.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::{Deserialize, Serialize};

use super::rules::Violation;
use crate::model::machine::MachineData;

/// The policy layers of a webhook: rules evaluated after the machine's, from which the
/// operator is exempt. In YAML (serde), e.g. a file the operator reads at start:
///
/// ```yaml
/// operator:                        # who the operator is: each list given must match
///   users: [system:serviceaccount:databases:operator]
///   fieldManagers: [kube-fsm]
/// platform:                        # every namespace the webhook covers
///   - onlyOperatorEnters: [Failed]
/// tiers:                           # namespaces picked by a label selector
///   - name: restricted
///     namespaceSelector: { matchLabels: { tier: restricted } }
///     rules: [onlyOperatorMovesPhase]
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    /// Who the operator is; exempt from the layers' rules.
    #[serde(default)]
    pub operator: OperatorIdentity,
    /// Rules in every namespace the webhook covers (the platform baseline).
    #[serde(default)]
    pub platform: Vec<Rule>,
    /// Rules in the namespaces each tier's selector picks.
    #[serde(default)]
    pub tiers: Vec<Tier>,
}

/// The operator's identity. A request is the operator's when its user is one of `users` and
/// its field manager one of `field_managers`, each list checked only when not empty. A field
/// manager is the client's word (`kubectl --field-manager`: any client can claim one); the
/// user is authenticated. A policy with rules must name the operator's users, unless
/// `trust_field_managers` says field managers alone will do (development only).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OperatorIdentity {
    /// Authenticated user names, e.g. `system:serviceaccount:NAMESPACE:NAME`.
    #[serde(default)]
    pub users: Vec<String>,
    /// Field managers (`?fieldManager=`) the operator writes with.
    #[serde(default)]
    pub field_managers: Vec<String>,
    /// Accept field managers alone as the operator's identity (any client can claim them, and
    /// so escape the layers): for development clusters where the operator runs as a person.
    #[serde(default)]
    pub trust_field_managers: bool,
}

/// Extra rules in the namespaces a label selector picks (a tenant tier). The webhook
/// configuration gets one webhook per tier, with this selector, so the API server itself
/// decides which namespaces a tier covers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Tier {
    /// A DNS label naming the tier (in the webhook's name and path).
    pub name: String,
    /// The namespaces of the tier.
    pub namespace_selector: LabelSelector,
    /// The tier's rules.
    pub rules: Vec<Rule>,
}

/// One rule of a layer. Every rule exempts the operator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Rule {
    /// Only the operator sets or changes `status.phase`.
    OnlyOperatorMovesPhase,
    /// Only the operator moves an object into these phases.
    OnlyOperatorEnters(Vec<String>),
}

/// Who sent a request, as far as the policy cares.
#[derive(Clone, Copy, Debug, Default)]
pub struct Requester<'a> {
    /// The authenticated user.
    pub user: &'a str,
    /// The field manager the request named, or "".
    pub field_manager: &'a str,
}

/// Why a [`Policy`] cannot be used with a machine.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    /// A rule names a phase the machine does not declare.
    #[error(
        "the policy's rule {rule:?} names {phase:?}, which is not a phase of the {kind} state machine"
    )]
    UnknownPhase {
        /// The rule.
        rule: String,
        /// The phase named.
        phase: String,
        /// The machine's kind.
        kind: &'static str,
    },
    /// Rules exempt the operator, yet no user or field manager says who it is.
    #[error(
        "the policy has rules but names no operator (operator.users or operator.fieldManagers)"
    )]
    NoOperator,
    /// Rules exempt the operator, who is named by field managers only: any client can send
    /// `?fieldManager=` with that name and escape the rules.
    #[error(
        "the policy names the operator by field manager only ({0}), which any client can claim: add operator.users (e.g. system:serviceaccount:NAMESPACE:NAME), or set operator.trustFieldManagers: true on a development cluster"
    )]
    UnauthenticatedOperator(String),
    /// A tier's name is not a DNS label, or two tiers share it.
    #[error("tier name {0:?} must be a unique DNS label (lower-case letters, digits and '-')")]
    TierName(String),
}

impl Policy {
    /// Checks the policy against `machine`: declared phases, an operator when there are rules,
    /// unique DNS-label tier names.
    ///
    /// # Errors
    /// The first problem found.
    pub fn check(&self, machine: &MachineData) -> Result<(), PolicyError> {
        let rules = self
            .platform
            .iter()
            .chain(self.tiers.iter().flat_map(|t| &t.rules));
        let mut any = false;
        for rule in rules {
            any = true;
            if let Rule::OnlyOperatorEnters(phases) = rule
                && let Some(phase) = phases
                    .iter()
                    .find(|p| !machine.phases.iter().any(|d| d.name == p.as_str()))
            {
                return Err(PolicyError::UnknownPhase {
                    rule: format!("{rule:?}"),
                    phase: phase.clone(),
                    kind: machine.kind,
                });
            }
        }
        if any && self.operator.users.is_empty() {
            if self.operator.field_managers.is_empty() {
                return Err(PolicyError::NoOperator);
            }
            if !self.operator.trust_field_managers {
                return Err(PolicyError::UnauthenticatedOperator(
                    self.operator.field_managers.join(", "),
                ));
            }
        }
        for (i, tier) in self.tiers.iter().enumerate() {
            let label = !tier.name.is_empty()
                && tier.name.len() <= 63
                && tier
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !tier.name.starts_with('-')
                && !tier.name.ends_with('-');
            if !label || self.tiers[..i].iter().any(|t| t.name == tier.name) {
                return Err(PolicyError::TierName(tier.name.clone()));
            }
        }
        Ok(())
    }

    /// The tier named `name`.
    pub fn tier(&self, name: &str) -> Option<&Tier> {
        self.tiers.iter().find(|t| t.name == name)
    }

    /// Checks a phase write (`old` → `new`, already allowed by the machine) against the
    /// platform rules, or against one tier's rules when `tier` is given.
    ///
    /// # Errors
    /// The [`Violation`] of the first rule broken.
    pub fn evaluate(
        &self,
        tier: Option<&Tier>,
        requester: Requester<'_>,
        old: Option<&str>,
        new: Option<&str>,
    ) -> Result<(), Violation> {
        if old == new || self.operator.is(requester) {
            return Ok(());
        }
        let rules = tier.map_or(&self.platform, |t| &t.rules);
        // What the rule forbids; the message is built only for a refusal.
        let forbidden = |what: String| {
            let layer = match tier {
                Some(tier) => format!("in namespaces of tier {}", tier.name),
                None => "on this platform".to_owned(),
            };
            Violation::forbidden(format!(
                "{layer}, only the operator ({}) may {what}; {} may not",
                self.operator.describe(),
                requester.describe()
            ))
        };
        for rule in rules {
            match rule {
                Rule::OnlyOperatorMovesPhase => {
                    return Err(forbidden("change status.phase".to_owned()));
                }
                Rule::OnlyOperatorEnters(phases) => {
                    if let Some(new) = new.filter(|n| phases.iter().any(|p| p == n)) {
                        return Err(forbidden(format!("move an object to {new}")));
                    }
                }
            }
        }
        Ok(())
    }
}

impl OperatorIdentity {
    /// Whether `requester` is the operator (never, when neither list is given).
    pub fn is(&self, requester: Requester<'_>) -> bool {
        let named =
            |list: &[String], value: &str| list.is_empty() || list.iter().any(|v| v == value);
        !(self.users.is_empty() && self.field_managers.is_empty())
            && named(&self.users, requester.user)
            && named(&self.field_managers, requester.field_manager)
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.users.is_empty() {
            parts.push(format!("user {}", self.users.join(" or ")));
        }
        if !self.field_managers.is_empty() {
            parts.push(format!(
                "field manager {}",
                self.field_managers.join(" or ")
            ));
        }
        parts.join(", ")
    }
}

impl Requester<'_> {
    fn describe(&self) -> String {
        if self.field_manager.is_empty() {
            format!("user {}", self.user)
        } else {
            format!("user {} (field manager {})", self.user, self.field_manager)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests' policy: its operator is named by field manager only (trusted, as on a
    /// development cluster), so one user can play both parts.
    fn policy() -> Policy {
        serde_json::from_value(serde_json::json!({
            "operator": { "fieldManagers": ["kube-fsm"], "trustFieldManagers": true },
            "platform": [{ "onlyOperatorEnters": ["Failed"] }],
            "tiers": [{
                "name": "restricted",
                "namespaceSelector": { "matchLabels": { "tier": "restricted" } },
                "rules": ["onlyOperatorMovesPhase"],
            }],
        }))
        .unwrap()
    }

    const OPERATOR: Requester<'static> = Requester {
        user: "admin",
        field_manager: "kube-fsm",
    };
    const HUMAN: Requester<'static> = Requester {
        user: "alice",
        field_manager: "kubectl-edit",
    };

    #[test]
    fn the_platform_reserves_a_phase_for_the_operator() {
        let policy = policy();
        let err = policy
            .evaluate(None, HUMAN, Some("Running"), Some("Failed"))
            .unwrap_err();
        assert_eq!(
            err.message,
            "on this platform, only the operator (field manager kube-fsm) may move an object to \
             Failed; user alice (field manager kubectl-edit) may not"
        );
        assert!(
            policy
                .evaluate(None, OPERATOR, Some("Running"), Some("Failed"))
                .is_ok()
        );
        assert!(
            policy
                .evaluate(None, HUMAN, Some("Pending"), Some("Running"))
                .is_ok()
        );
    }

    #[test]
    fn a_restricted_tier_leaves_the_phase_to_the_operator() {
        let policy = policy();
        let tier = policy.tier("restricted");
        assert!(
            policy
                .evaluate(tier, HUMAN, Some("Pending"), Some("Running"))
                .is_err()
        );
        assert!(policy.evaluate(tier, HUMAN, None, Some("Pending")).is_err());
        assert!(
            policy
                .evaluate(tier, HUMAN, Some("Pending"), Some("Pending"))
                .is_ok()
        );
        assert!(
            policy
                .evaluate(tier, OPERATOR, Some("Pending"), Some("Running"))
                .is_ok()
        );
    }

    #[test]
    fn every_list_given_must_match_the_operator() {
        let operator = OperatorIdentity {
            users: vec!["system:serviceaccount:db:operator".into()],
            field_managers: vec!["kube-fsm".into()],
            trust_field_managers: false,
        };
        assert!(!operator.is(OPERATOR), "right field manager, wrong user");
        assert!(operator.is(Requester {
            user: "system:serviceaccount:db:operator",
            field_manager: "kube-fsm",
        }));
        assert!(!OperatorIdentity::default().is(OPERATOR));
    }

    #[test]
    fn policies_are_checked_against_the_machine() {
        let machine = &crate::admission::tests_support::MACHINE;
        assert_eq!(policy().check(machine), Ok(()));
        let mut unknown = policy();
        unknown.platform = vec![Rule::OnlyOperatorEnters(vec!["Paused".into()])];
        assert!(matches!(
            unknown.check(machine),
            Err(PolicyError::UnknownPhase { .. })
        ));
        let mut anonymous = policy();
        anonymous.operator = OperatorIdentity::default();
        assert_eq!(anonymous.check(machine), Err(PolicyError::NoOperator));
        // A field manager is anyone's to claim: not an identity, unless trusted on purpose.
        let mut claimed = policy();
        claimed.operator.trust_field_managers = false;
        let refused = claimed.check(machine).unwrap_err();
        assert!(refused.to_string().contains("operator.users"), "{refused}");
        claimed.operator.users = vec!["system:serviceaccount:db:operator".into()];
        assert_eq!(claimed.check(machine), Ok(()));
        let mut twice = policy();
        twice.tiers.push(twice.tiers[0].clone());
        assert!(matches!(
            twice.check(machine),
            Err(PolicyError::TierName(_))
        ));
        assert_eq!(Policy::default().check(machine), Ok(()));
    }
}
