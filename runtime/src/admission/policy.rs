//! Policy layers over the machine's rules: what a platform adds in every namespace, and what a
//! tenant tier adds in the namespaces its label selector picks. Evaluated after the machine's
//! rules, which nobody is exempt from; the operator (by user and field manager) is exempt from
//! the layers (the override tier). Declarative: a [`Policy`] is plain data, built in Rust or
//! read from YAML/JSON.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::{Deserialize, Serialize};

use super::rules::{Move, Violation};
use super::steering::{self, Steer};
use crate::machine::data::MachineData;

/// The policy layers of a webhook: rules evaluated after the machine's, from which the
/// operator is exempt. In YAML (serde), e.g. a file the operator reads at start:
///
/// ```yaml
/// operator:                        # who the operator is: each list given must match
///   users: [system:serviceaccount:databases:operator]
///   fieldManagers: [kube-fsm]
/// platform:                        # every namespace the webhook covers
///   - onlyOperatorEnters: [Failed]
///   - manualBy: { groups: [sre] }    # who may take the spec's manual transitions
///   - pauseBy: { groups: [sre] }     # who may pause, resume or skip cleanup
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
    pub platform: Vec<PolicyRule>,
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
    pub rules: Vec<PolicyRule>,
}

/// One rule of a layer. Every rule exempts the operator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum PolicyRule {
    /// Only the operator sets or changes `status.phase`.
    OnlyOperatorMovesPhase,
    /// Only the operator moves an object into these phases.
    OnlyOperatorEnters(Vec<String>),
    /// Only these people take the spec's manual transitions (`manual: true`). The operator
    /// never takes one, whatever the policy says.
    ManualBy(People),
    /// Only these people (and the operator) pause or resume an object, or let a deleted one
    /// go without its cleanup: the annotations `kube-fsm.dev/paused` and
    /// `kube-fsm.dev/skip-cleanup`, set, changed or removed (also on create).
    PauseBy(People),
    /// Only these people (and the operator) ask for a reconcile now: the annotation
    /// `kube-fsm.dev/reconcile-requested-at`.
    RequestReconcileBy(People),
}

/// People, by authenticated user name or group: a request matches when its user is one of
/// `users` or it is in one of `groups`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct People {
    /// User names, e.g. `alice@example.com`.
    #[serde(default)]
    pub users: Vec<String>,
    /// Group names, e.g. `sre`.
    #[serde(default)]
    pub groups: Vec<String>,
}

impl People {
    /// Whether `requester` is one of them.
    pub fn include(&self, requester: Requester<'_>) -> bool {
        self.users.iter().any(|u| u == requester.user)
            || requester.groups.iter().any(|g| self.groups.contains(g))
    }

    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.users.is_empty() {
            parts.push(format!("user {}", self.users.join(" or ")));
        }
        if !self.groups.is_empty() {
            parts.push(format!("group {}", self.groups.join(" or ")));
        }
        parts.join(", ")
    }
}

/// Who sent a request, as far as the policy cares.
#[derive(Clone, Copy, Debug, Default)]
pub struct Requester<'a> {
    /// The authenticated user.
    pub user: &'a str,
    /// The field manager the request named, or "".
    pub field_manager: &'a str,
    /// The authenticated user's groups.
    pub groups: &'a [String],
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
    /// A `manualBy`, `pauseBy` or `requestReconcileBy` rule names no user and no group.
    #[error(
        "the policy's {0} rule names no user and no group: name who may {1} (or drop the rule)"
    )]
    NobodyNamed(&'static str, &'static str),
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
            if let Some((people, name, what)) = rule.people()
                && people.users.is_empty()
                && people.groups.is_empty()
            {
                return Err(PolicyError::NobodyNamed(name, what));
            }
            if let PolicyRule::OnlyOperatorEnters(phases) = rule
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

    /// Checks a phase write (`old` → `new`, already allowed by the machine, a move of kind
    /// `kind`) against the platform rules, or against one tier's rules when `tier` is given.
    /// Whatever the layers say, the operator never takes a manual transition; a person's way
    /// out of an undeclared value is judged by `manualBy` as a manual transition is.
    ///
    /// # Errors
    /// The [`Violation`] of the first rule broken.
    pub fn evaluate(
        &self,
        tier: Option<&Tier>,
        requester: Requester<'_>,
        old: Option<&str>,
        new: Option<&str>,
        kind: Move,
    ) -> Result<(), Violation> {
        if old == new {
            return Ok(());
        }
        if self.operator.is(requester) {
            return match (kind, old, new) {
                (Move::Manual, Some(old), Some(new)) => Err(Violation::forbidden(format!(
                    "{old} -> {new} is a manual transition: only people take it, and {} is the operator",
                    requester.describe()
                ))),
                _ => Ok(()),
            };
        }
        let rules = tier.map_or(&self.platform, |t| &t.rules);
        // Who may do what the rule forbids; the message is built only for a refusal.
        let forbidden = |who: String, what: String| {
            Err(Violation::forbidden(format!(
                "{}, only {who} may {what}; {} may not",
                layer(tier),
                requester.describe()
            )))
        };
        let operator = || format!("the operator ({})", self.operator.describe());
        for rule in rules {
            match rule {
                PolicyRule::OnlyOperatorMovesPhase => {
                    return forbidden(operator(), "change status.phase".to_owned());
                }
                PolicyRule::OnlyOperatorEnters(phases) => {
                    if let Some(new) = new.filter(|n| phases.iter().any(|p| p == n)) {
                        return forbidden(operator(), format!("move an object to {new}"));
                    }
                }
                PolicyRule::ManualBy(people)
                    if kind != Move::Engine && !people.include(requester) =>
                {
                    let (old, new) = (old.unwrap_or("(none)"), new.unwrap_or("(none)"));
                    let what = if kind == Move::Manual {
                        format!("take the manual transition {old} -> {new}")
                    } else {
                        format!(
                            "move an object out of {old}, which the spec does not declare \
                             (as a manual transition)"
                        )
                    };
                    return forbidden(people.describe(), what);
                }
                PolicyRule::ManualBy(_)
                | PolicyRule::PauseBy(_)
                | PolicyRule::RequestReconcileBy(_) => {}
            }
        }
        Ok(())
    }

    /// Checks a write that sets, changes or removes the annotations that steer the engine
    /// (`steered`) against the platform's `pauseBy` and `requestReconcileBy` rules, or one
    /// tier's. The operator is exempt.
    ///
    /// # Errors
    /// The [`Violation`] of the first rule broken, naming the annotation.
    pub(crate) fn steering(
        &self,
        tier: Option<&Tier>,
        requester: Requester<'_>,
        steered: &[steering::Changed],
    ) -> Result<(), Violation> {
        if steered.is_empty() || self.operator.is(requester) {
            return Ok(());
        }
        for rule in tier.map_or(&self.platform, |t| &t.rules) {
            let steer = match rule {
                PolicyRule::PauseBy(_) => Steer::Pause,
                PolicyRule::RequestReconcileBy(_) => Steer::Reconcile,
                _ => continue,
            };
            let (Some(changed), Some((people, _, what))) =
                (steered.iter().find(|c| c.steer == steer), rule.people())
            else {
                continue;
            };
            if !people.include(requester) {
                return Err(Violation::forbidden(format!(
                    "{}, only {} may {what} (annotation {}); {} may not",
                    layer(tier),
                    people.describe(),
                    changed.key,
                    requester.describe()
                ))
                .of(changed.field));
            }
        }
        Ok(())
    }

    /// Whether the layer (`tier`, or the platform's) has rules on the annotations that steer
    /// the engine, so that its webhook must review writes of the resource itself (where
    /// annotations are edited), not only of its status.
    pub fn guards_steering(&self, tier: Option<&Tier>) -> bool {
        tier.map_or(&self.platform, |t| &t.rules).iter().any(|r| {
            matches!(
                r,
                PolicyRule::PauseBy(_) | PolicyRule::RequestReconcileBy(_)
            )
        })
    }
}

impl PolicyRule {
    /// The people a rule names, its YAML name and what it lets them do.
    fn people(&self) -> Option<(&People, &'static str, &'static str)> {
        match self {
            PolicyRule::ManualBy(people) => Some((people, "manualBy", "take manual transitions")),
            PolicyRule::PauseBy(people) => Some((
                people,
                "pauseBy",
                "pause or resume an object, or skip its cleanup",
            )),
            PolicyRule::RequestReconcileBy(people) => {
                Some((people, "requestReconcileBy", "ask for a reconcile now"))
            }
            PolicyRule::OnlyOperatorMovesPhase | PolicyRule::OnlyOperatorEnters(_) => None,
        }
    }
}

/// Where a layer's rules apply, for messages.
fn layer(tier: Option<&Tier>) -> String {
    match tier {
        Some(tier) => format!("in namespaces of tier {}", tier.name),
        None => "on this platform".to_owned(),
    }
}

impl OperatorIdentity {
    /// Whether the policy says who the operator is (a user or a field manager).
    pub fn named(&self) -> bool {
        !(self.users.is_empty() && self.field_managers.is_empty())
    }

    /// Whether `requester` is the operator (never, when neither list is given).
    pub fn is(&self, requester: Requester<'_>) -> bool {
        let named =
            |list: &[String], value: &str| list.is_empty() || list.iter().any(|v| v == value);
        !(self.users.is_empty() && self.field_managers.is_empty())
            && named(&self.users, requester.user)
            && named(&self.field_managers, requester.field_manager)
    }

    pub(crate) fn describe(&self) -> String {
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
    /// `user alice (field manager kubectl-fsm)`, for messages.
    pub(crate) fn describe(&self) -> String {
        if self.field_manager.is_empty() {
            format!("user {}", self.user)
        } else {
            format!("user {} (field manager {})", self.user, self.field_manager)
        }
    }
}

#[cfg(test)]
mod tests;
