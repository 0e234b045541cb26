//! One `AdmissionReview` in, one out: the machine's rules, the machine's own status fields
//! (only the operator writes them, when the policy names it: see `owned`), then the policy's
//! layer, on the phase before and after the write and on the annotations that steer the
//! engine (`steering`). Pure: the server does the I/O.

use std::collections::BTreeMap;

use kube::Resource;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::response::{StatusCause, StatusDetails, StatusSummary};
use kube::core::{DynamicObject, Status};
use serde_json::Value;

use super::policy::{Policy, PolicyError, Requester, Tier};
use super::rules::{self, NOT_SUPPORTED, PHASE_FIELD, Violation};
use super::{owned, steering};
use crate::machine::data::{MachineData, Phase};
use crate::machine::state_machine::StateMachine;

/// Decides admission reviews for one machine under one [`Policy`].
#[derive(Clone, Debug)]
pub struct Validator {
    machine: &'static MachineData,
    group: String,
    policy: Policy,
}

impl Validator {
    /// The validator of `K`'s machine under `policy`.
    ///
    /// # Errors
    /// When the policy does not fit the machine ([`Policy::check`]).
    pub fn new<K>(policy: Policy) -> Result<Self, PolicyError>
    where
        K: StateMachine + Resource<DynamicType = ()>,
    {
        let machine = <K::Phase as Phase>::MACHINE;
        policy.check(machine)?;
        let group = K::group(&()).into_owned();
        Ok(Self {
            machine,
            group,
            policy,
        })
    }

    /// The kind of the machine it reviews (a webhook reviewing several kinds routes by its
    /// group and kind).
    pub fn kind(&self) -> &'static str {
        self.machine.kind
    }

    /// The machine it reviews.
    pub(crate) fn machine(&self) -> &'static MachineData {
        self.machine
    }

    /// The API group of the kind it reviews.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// Whether it reviews objects of `group` and `kind` (a review's `request.kind`).
    pub fn reviews(&self, group: &str, kind: &str) -> bool {
        self.group == group && self.machine.kind == kind
    }

    /// The policy applied.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Answers `review` for the platform layer (`tier: None`) or for one tier. A review
    /// without a request is refused (`InvalidRequest`).
    pub fn review(
        &self,
        tier: Option<&Tier>,
        review: AdmissionReview<DynamicObject>,
    ) -> AdmissionReview<DynamicObject> {
        let request: AdmissionRequest<DynamicObject> = match review.try_into() {
            Ok(request) => request,
            Err(err) => return AdmissionResponse::invalid(err).into_review(),
        };
        let response = AdmissionResponse::from(&request);
        match self.decide(tier, &request) {
            Ok(()) => response.into_review(),
            Err(violation) => deny(response, &request, violation).into_review(),
        }
    }

    /// The decision on one request: creates and updates are checked (of the object or of its
    /// status subresource); deletes and connects pass. The machine's rules apply to everyone;
    /// a tier's request is checked against that tier's rules only (the platform webhook
    /// checks the rest).
    ///
    /// # Errors
    /// The [`Violation`] the request would commit.
    pub fn decide(
        &self,
        tier: Option<&Tier>,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<(), Violation> {
        if !matches!(request.operation, Operation::Create | Operation::Update) {
            return Ok(());
        }
        let new = phase_of(request.object.as_ref())?;
        // A stored value that is not a string (only a schema without the phase's type lets one
        // in) counts as none: the write must then be a first phase.
        let old = phase_of(request.old_object.as_ref()).unwrap_or(None);
        if tier.is_none() {
            rules::check(self.machine, old, new)?;
        }
        let requester = Requester {
            user: request.user_info.username.as_deref().unwrap_or(""),
            groups: request.user_info.groups.as_deref().unwrap_or_default(),
            field_manager: request
                .options
                .as_ref()
                .and_then(|o| o.0.get("fieldManager"))
                .and_then(Value::as_str)
                .unwrap_or(""),
        };
        if tier.is_none() && self.policy.operator.named() && !self.policy.operator.is(requester) {
            let changed = owned::changed(
                self.machine,
                status_of(request.old_object.as_ref()),
                status_of(request.object.as_ref()),
            );
            if !changed.is_empty() {
                return Err(Violation::forbidden(format!(
                    "only the operator writes {} (the {} state machine's own status; a person \
                     writes status.phase alone); {} may not",
                    changed.join(", "),
                    self.machine.kind,
                    requester.describe()
                ))
                .of("status"));
            }
        }
        let kind = rules::classify(self.machine, old, new);
        self.policy.evaluate(tier, requester, old, new, kind)?;
        let steered = steering::changed(
            annotations_of(request.old_object.as_ref()),
            annotations_of(request.object.as_ref()),
        );
        self.policy.steering(tier, requester, &steered)
    }
}

/// The annotations of an object, if it has any.
fn annotations_of(object: Option<&DynamicObject>) -> Option<&BTreeMap<String, String>> {
    object.and_then(|o| o.metadata.annotations.as_ref())
}

/// The `status` of an object, if it has one.
fn status_of(object: Option<&DynamicObject>) -> Option<&Value> {
    object.and_then(|o| o.data.get("status"))
}

/// `status.phase` of an object: absent, or a string (anything else is refused).
fn phase_of(object: Option<&DynamicObject>) -> Result<Option<&str>, Violation> {
    let Some(phase) = object
        .and_then(|o| o.data.get("status"))
        .and_then(|s| s.get("phase"))
    else {
        return Ok(None);
    };
    match phase {
        Value::Null => Ok(None),
        Value::String(phase) => Ok(Some(phase)),
        other => Err(Violation {
            reason: NOT_SUPPORTED,
            message: format!("status.phase must be a string, not {other}"),
            field: PHASE_FIELD,
        }),
    }
}

/// A `422 Invalid` answer with one cause naming `status.phase`, shaped as the API server's
/// own validation errors (the API server passes it to the client, prefixing the message with
/// the webhook's name).
fn deny(
    mut response: AdmissionResponse,
    request: &AdmissionRequest<DynamicObject>,
    violation: Violation,
) -> AdmissionResponse {
    response.allowed = false;
    response.result = Status {
        status: Some(StatusSummary::Failure),
        code: 422,
        message: violation.message.clone(),
        reason: "Invalid".to_owned(),
        details: Some(StatusDetails {
            name: request.name.clone(),
            group: request.kind.group.clone(),
            kind: request.kind.kind.clone(),
            causes: vec![StatusCause {
                reason: violation.reason.to_owned(),
                message: violation.message,
                field: violation.field.to_owned(),
            }],
            uid: String::new(),
            retry_after_seconds: 0,
        }),
        ..Status::default()
    };
    response
}

#[cfg(test)]
impl Validator {
    /// A validator of `machine` (for the module's tests, which have no `StateMachine` type).
    pub(crate) fn for_machine(machine: &'static MachineData, policy: Policy) -> Self {
        policy.check(machine).unwrap();
        // The group of the test reviews (`admission::tests_support`).
        let group = "example.com".to_owned();
        Validator {
            machine,
            group,
            policy,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::policy::{OperatorIdentity, PolicyRule};
    use crate::admission::tests_support::{MACHINE, status_update};

    fn validator(policy: Policy) -> Validator {
        Validator::for_machine(&MACHINE, policy)
    }

    /// A status-subresource update of a Job from `old` to `new` by `alice` with `manager`.
    fn review(
        old: Option<&str>,
        new: Option<&str>,
        manager: &str,
    ) -> AdmissionReview<DynamicObject> {
        serde_json::from_value(status_update(old, new, manager)).unwrap()
    }

    #[test]
    fn a_refusal_is_422_invalid_with_one_cause_on_the_phase() {
        let answer = validator(Policy::default())
            .review(None, review(Some("Pending"), Some("Done"), "kubectl"));
        let response = answer.response.unwrap();
        assert!(!response.allowed);
        assert_eq!(response.uid, "42");
        let status = response.result;
        assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
        let details = status.details.unwrap();
        assert_eq!(
            (details.name.as_str(), details.kind.as_str()),
            ("job", "Job")
        );
        assert_eq!(details.causes.len(), 1);
        assert_eq!(details.causes[0].field, "status.phase");
        assert_eq!(details.causes[0].reason, "FieldValueForbidden");
        assert_eq!(
            status.message,
            "cannot move from Pending to Done: the Job state machine has no such transition"
        );
    }

    #[test]
    fn legal_moves_pass_and_the_field_manager_is_read_from_the_options() {
        let policy = Policy {
            operator: OperatorIdentity {
                users: Vec::new(),
                field_managers: vec!["kube-fsm".into()],
                trust_field_managers: true,
            },
            platform: vec![PolicyRule::OnlyOperatorEnters(vec!["Failed".into()])],
            tiers: Vec::new(),
        };
        let validator = validator(policy);
        let allowed = |old, new, manager| {
            validator
                .review(None, review(old, new, manager))
                .response
                .unwrap()
                .allowed
        };
        assert!(allowed(Some("Pending"), Some("Running"), "kubectl"));
        assert!(!allowed(Some("Pending"), Some("Failed"), "kubectl"));
        assert!(allowed(Some("Pending"), Some("Failed"), "kube-fsm"));
        assert!(
            !allowed(Some("Running"), Some("Failed"), "kube-fsm"),
            "no edge, even for the operator"
        );
    }

    #[test]
    fn only_the_operator_writes_the_machines_own_status_fields_when_the_policy_names_it() {
        let named = Policy {
            operator: OperatorIdentity {
                users: Vec::new(),
                field_managers: vec!["kube-fsm".into()],
                trust_field_managers: true,
            },
            ..Policy::default()
        };
        let paused_forever = |manager: &str| {
            let mut review = status_update(Some("Running"), Some("Running"), manager);
            review["request"]["object"]["status"]["pausedSeconds"] = 3_000_000_000u64.into();
            serde_json::from_value::<AdmissionReview<DynamicObject>>(review).unwrap()
        };
        let answer = |validator: &Validator, manager: &str| {
            validator
                .review(None, paused_forever(manager))
                .response
                .unwrap()
        };
        let refused = answer(&validator(named.clone()), "kubectl");
        assert!(!refused.allowed);
        assert_eq!(
            refused.result.message,
            "only the operator writes status.pausedSeconds (the Job state machine's own status; \
             a person writes status.phase alone); user alice (field manager kubectl) may not"
        );
        assert!(answer(&validator(named), "kube-fsm").allowed);
        // Without a named operator nobody can be told from it: the engine's own checks hold
        // (a paused time beyond the time in the phase does not count).
        assert!(answer(&validator(Policy::default()), "kubectl").allowed);
    }

    #[test]
    fn a_review_without_a_request_is_invalid_and_deletes_pass() {
        let validator = validator(Policy::default());
        let mut empty = review(None, None, "");
        empty.request = None;
        assert!(!validator.review(None, empty).response.unwrap().allowed);
        let mut delete = review(Some("Running"), None, "");
        if let Some(request) = delete.request.as_mut() {
            request.operation = Operation::Delete;
        }
        assert!(validator.review(None, delete).response.unwrap().allowed);
    }
}
