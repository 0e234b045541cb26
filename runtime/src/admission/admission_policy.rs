//! The policy layers as ValidatingAdmissionPolicies (`admissionregistration.k8s.io/v1`, GA in
//! Kubernetes 1.30): what the webhook enforces beyond the machine's edges — the operator never
//! takes a manual transition, only it writes the machine's own status fields, who may take the
//! manual transitions (`manualBy`), the phases only the operator enters, who may steer the
//! engine by annotation, and each tenant tier in the namespaces its selector picks — as CEL the
//! API server evaluates itself, with no webhook process to fail, be attacked or be unavailable.
//!
//! The edges themselves are the CRD's own CEL rule ([`crate::crd()`]), which the same server
//! runs at an earlier stage: the policies do not repeat it. One policy and one binding per
//! layer (the platform's, then one per tier, named as the webhook's), refusing with `403
//! Forbidden` and the webhook's sentences. Pure: the objects as JSON, so that the library does
//! not tie its users to a Kubernetes version of `k8s-openapi`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Value, json};

use super::configuration::narrowed;
use super::owned::{ENGINE_CONDITIONS, OWNED_FIELDS};
use super::policy::{People, Policy, PolicyRule, Tier};
use super::review::Validator;
use super::steering::{GUARDED, Steer};
use crate::machine::data::{MachineData, TriggerData};

/// The ValidatingAdmissionPolicies of `validator`'s machine under its policy, for `crd`, each
/// followed by its binding: the platform's layer (when the policy names the operator or has
/// platform rules) and one per tier. `scope` narrows every binding to the namespaces it picks
/// (as a webhook's namespace selector does); a tier's binding picks its own namespaces within
/// it.
///
/// ```no_run
/// # fn demo<K: kube_fsm::StateMachine + kube::Resource<DynamicType = ()>>(
/// #     crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
/// #     policy: kube_fsm::admission::Policy,
/// # ) -> Result<(), kube_fsm::admission::PolicyError> {
/// use kube_fsm::admission::{Validator, validating_admission_policies_for};
///
/// let validator = Validator::new::<K>(policy)?;
/// for object in validating_admission_policies_for(crd, &validator, None) {
///     println!("---\n{}", serde_json::to_string_pretty(&object).unwrap_or_default());
/// }
/// # Ok(())
/// # }
/// ```
pub fn validating_admission_policies_for(
    crd: &CustomResourceDefinition,
    validator: &Validator,
    scope: Option<&LabelSelector>,
) -> Vec<Value> {
    let (machine, policy) = (validator.machine(), validator.policy());
    let resource = format!("{}.{}", crd.spec.names.plural, crd.spec.group);
    let mut objects = Vec::new();
    let platform = validations(machine, policy, None);
    if !platform.is_empty() {
        let name = format!("phase.{resource}");
        objects.push(admission_policy(&name, crd, machine, policy, platform));
        objects.push(binding(&name, scope.cloned()));
    }
    for tier in &policy.tiers {
        let name = format!("tier-{}.{resource}", tier.name);
        let rules = validations(machine, policy, Some(tier));
        objects.push(admission_policy(&name, crd, machine, policy, rules));
        let selector = narrowed(&tier.namespace_selector, scope);
        objects.push(binding(&name, Some(selector)));
    }
    objects
}

fn admission_policy(
    name: &str,
    crd: &CustomResourceDefinition,
    machine: &MachineData,
    policy: &Policy,
    validations: Vec<Value>,
) -> Value {
    let plural = &crd.spec.names.plural;
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": { "name": name },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": [crd.spec.group],
                    "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": [plural, format!("{plural}/status")],
                }],
            },
            "variables": variables(machine, policy),
            "validations": validations,
        },
    })
}

fn binding(name: &str, namespaces: Option<LabelSelector>) -> Value {
    let mut binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": { "name": name },
        "spec": { "policyName": name, "validationActions": ["Deny"] },
    });
    if let Some(selector) = namespaces {
        binding["spec"]["matchResources"] = json!({ "namespaceSelector": selector });
    }
    binding
}

/// A CEL string literal (JSON's quoting is CEL's).
fn lit(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

/// A CEL list of string literals.
fn list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let items: Vec<String> = items.into_iter().map(lit).collect();
    format!("[{}]", items.join(", "))
}

/// Whether `object` (`object` or `oldObject`) has `status.FIELD`.
fn has_status_field(object: &str, field: &str) -> String {
    format!("({object} != null && has({object}.status) && has({object}.status.{field}))")
}

/// Whether the annotation `key` differs between the stored and the written object.
fn annotation_changed(key: &str) -> String {
    let present = |object: &str| {
        format!(
            "({object} != null && has({object}.metadata.annotations) && {k} in {object}.metadata.annotations)",
            k = lit(key)
        )
    };
    let (old, new) = (present("oldObject"), present("object"));
    format!(
        "({old} != {new} || ({old} && oldObject.metadata.annotations[{k}] != object.metadata.annotations[{k}]))",
        k = lit(key)
    )
}

/// The values every validation reads: the phases, the requester, the kind of move.
fn variables(machine: &MachineData, policy: &Policy) -> Value {
    let operator = &policy.operator;
    let is_operator = all_of(&[
        in_list(&operator.users, |users| {
            format!("request.userInfo.username in {users}")
        }),
        in_list(&operator.field_managers, |managers| {
            format!("variables.fieldManager in {managers}")
        }),
    ]);
    let manual: Vec<String> = machine
        .edges
        .iter()
        .filter(|e| matches!(e.trigger, TriggerData::Manual))
        .map(|e| {
            format!(
                "{} -> {}",
                machine.phases[e.from].name, machine.phases[e.to].name
            )
        })
        .collect();
    let known = machine
        .phases
        .iter()
        .map(|p| p.name)
        .chain(machine.retired.iter().map(|r| r.name));
    let mut owned: Vec<String> = OWNED_FIELDS
        .iter()
        .map(|field| {
            let (old, new) = (
                has_status_field("oldObject", field),
                has_status_field("object", field),
            );
            format!(
                "({old} != {new} || ({old} && oldObject.status.{field} != object.status.{field}) ? {} : [])",
                list([format!("status.{field}").as_str()])
            )
        })
        .collect();
    let mut conditions: Vec<&str> = ENGINE_CONDITIONS
        .iter()
        .copied()
        .chain(machine.conditions.iter().map(|c| c.name))
        .collect();
    conditions.sort_unstable();
    conditions.dedup();
    owned.push(format!(
        "{}.filter(t, variables.oldConditions.filter(c, c.type == t) != variables.newConditions.filter(c, c.type == t)).map(t, 'status.conditions[' + t + ']')",
        list(conditions)
    ));
    let conditions_of = |object: &str| {
        format!(
            "{} ? {object}.status.conditions : []",
            has_status_field(object, "conditions")
        )
    };
    let phase_of = |object: &str| {
        format!(
            "{} ? {object}.status.phase : ''",
            has_status_field(object, "phase")
        )
    };
    let variable =
        |name: &str, expression: String| json!({ "name": name, "expression": expression });
    json!([
        variable("oldPhase", phase_of("oldObject")),
        variable("newPhase", phase_of("object")),
        variable("moved", "variables.oldPhase != variables.newPhase".to_owned()),
        variable(
            "fieldManager",
            "has(request.options) && has(request.options.fieldManager) ? request.options.fieldManager : ''"
                .to_owned()
        ),
        variable(
            "requester",
            "'user ' + request.userInfo.username + (variables.fieldManager == '' ? '' : ' (field manager ' + variables.fieldManager + ')')"
                .to_owned()
        ),
        variable("isOperator", is_operator),
        variable(
            "manual",
            if manual.is_empty() {
                "false".to_owned()
            } else {
                format!(
                    "variables.oldPhase + ' -> ' + variables.newPhase in {}",
                    list(manual.iter().map(String::as_str))
                )
            }
        ),
        variable(
            "outOfUndeclared",
            format!(
                "variables.oldPhase != '' && variables.newPhase != '' && !(variables.oldPhase in {})",
                list(known)
            )
        ),
        variable("oldConditions", conditions_of("oldObject")),
        variable("newConditions", conditions_of("object")),
        variable("ownedChanged", owned.join(" + ")),
    ])
}

/// One validation refusing with `403 Forbidden`.
fn validation(expression: String, message: String) -> Value {
    json!({ "expression": expression, "messageExpression": message, "reason": "Forbidden" })
}

/// Where a layer's rules apply, for messages (the webhook's words).
fn layer(tier: Option<&Tier>) -> String {
    match tier {
        Some(tier) => format!("in namespaces of tier {}", tier.name),
        None => "on this platform".to_owned(),
    }
}

/// Whether the requester is one of `people`, as CEL.
fn includes(people: &People) -> String {
    let parts: Vec<String> = [
        in_list(&people.users, |users| {
            format!("request.userInfo.username in {users}")
        }),
        in_list(&people.groups, |groups| {
            format!("request.userInfo.groups.exists(g, g in {groups})")
        }),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        "false".to_owned()
    } else {
        format!("({})", parts.join(" || "))
    }
}

/// `clause(LIST)` of `values` as a CEL list, when there are any.
fn in_list(values: &[String], clause: impl Fn(String) -> String) -> Option<String> {
    (!values.is_empty()).then(|| clause(list(values.iter().map(String::as_str))))
}

/// Every clause given, as CEL (`false` when none is).
fn all_of(clauses: &[Option<String>]) -> String {
    let given: Vec<&str> = clauses.iter().flatten().map(String::as_str).collect();
    if given.is_empty() {
        "false".to_owned()
    } else {
        given.join(" && ")
    }
}

/// The layer's validations, in the webhook's order (the platform's also keeps the operator
/// off manual transitions and people off the machine's own status fields).
fn validations(machine: &MachineData, policy: &Policy, tier: Option<&Tier>) -> Vec<Value> {
    let mut checks = Vec::new();
    let named = policy.operator.named();
    if named {
        checks.push(validation(
            "!(variables.isOperator && variables.manual)".to_owned(),
            "variables.oldPhase + ' -> ' + variables.newPhase + ' is a manual transition: only people take it, and ' + variables.requester + ' is the operator'".to_owned(),
        ));
    }
    if named && tier.is_none() {
        checks.push(validation(
            "variables.isOperator || size(variables.ownedChanged) == 0".to_owned(),
            format!(
                "'only the operator writes ' + variables.ownedChanged.join(', ') + {} + variables.requester + ' may not'",
                lit(&format!(
                    " (the {} state machine's own status; a person writes status.phase alone); ",
                    machine.kind
                ))
            ),
        ));
    }
    let where_ = layer(tier);
    let operator = format!("the operator ({})", policy.operator.describe());
    let refused = |who: &str, what: &str| {
        format!(
            "{} + {what} + '; ' + variables.requester + ' may not'",
            lit(&format!("{where_}, only {who} may "))
        )
    };
    for rule in tier.map_or(&policy.platform, |t| &t.rules) {
        match rule {
            PolicyRule::OnlyOperatorMovesPhase => checks.push(validation(
                "variables.isOperator || !variables.moved".to_owned(),
                refused(&operator, "'change status.phase'"),
            )),
            PolicyRule::OnlyOperatorEnters(phases) => checks.push(validation(
                format!(
                    "variables.isOperator || !variables.moved || !(variables.newPhase in {})",
                    list(phases.iter().map(String::as_str))
                ),
                refused(&operator, "'move an object to ' + variables.newPhase"),
            )),
            PolicyRule::ManualBy(people) => checks.push(validation(
                format!(
                    "variables.isOperator || !variables.moved || !(variables.manual || variables.outOfUndeclared) || {}",
                    includes(people)
                ),
                refused(
                    &people.describe(),
                    "(variables.manual ? 'take the manual transition ' + variables.oldPhase + ' -> ' + variables.newPhase : 'move an object out of ' + variables.oldPhase + ', which the spec does not declare (as a manual transition)')",
                ),
            )),
            PolicyRule::PauseBy(people) | PolicyRule::RequestReconcileBy(people) => {
                let steer = if matches!(rule, PolicyRule::PauseBy(_)) {
                    Steer::Pause
                } else {
                    Steer::Reconcile
                };
                let keys: Vec<&str> = GUARDED
                    .iter()
                    .filter(|(_, s, _)| *s == steer)
                    .map(|(key, ..)| *key)
                    .collect();
                let changed: Vec<String> = keys.iter().map(|k| annotation_changed(k)).collect();
                // The first annotation changed, named as the webhook names it.
                let mut named_key = lit(keys.last().copied().unwrap_or_default());
                for (key, changed) in keys.iter().zip(&changed).rev().skip(1) {
                    named_key = format!("({changed} ? {} : {named_key})", lit(key));
                }
                let what = match steer {
                    Steer::Pause => "pause or resume an object, or skip its cleanup",
                    Steer::Reconcile => "ask for a reconcile now",
                };
                checks.push(validation(
                    format!(
                        "variables.isOperator || {} || !({})",
                        includes(people),
                        changed.join(" || ")
                    ),
                    refused(
                        &people.describe(),
                        &format!("{} + {named_key} + ')'", lit(&format!("{what} (annotation "))),
                    ),
                ));
            }
        }
    }
    checks
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use serde_json::Value;

    use super::validating_admission_policies_for;
    use crate::admission::tests_support::MACHINE;
    use crate::admission::{OperatorIdentity, People, Policy, PolicyRule, Tier, Validator};

    fn crd() -> CustomResourceDefinition {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": { "name": "jobs.example.com" },
            "spec": { "group": "example.com", "scope": "Namespaced",
                "names": { "plural": "jobs", "singular": "job", "kind": "Job" },
                "versions": [] },
        }))
        .expect("a CRD")
    }

    fn selector(key: &str, value: &str) -> LabelSelector {
        LabelSelector {
            match_labels: Some(BTreeMap::from([(key.to_owned(), value.to_owned())])),
            ..LabelSelector::default()
        }
    }

    fn policy() -> Policy {
        Policy {
            operator: OperatorIdentity {
                users: vec!["system:serviceaccount:ops:o\"brien".into()],
                field_managers: Vec::new(),
                trust_field_managers: false,
            },
            platform: vec![PolicyRule::ManualBy(People {
                users: Vec::new(),
                groups: vec!["sre".into()],
            })],
            tiers: vec![Tier {
                name: "restricted".into(),
                namespace_selector: selector("tier", "restricted"),
                rules: vec![PolicyRule::OnlyOperatorMovesPhase],
            }],
        }
    }

    #[test]
    fn no_layer_no_policy() {
        let validator = Validator::for_machine(&MACHINE, Policy::default());
        assert!(validating_admission_policies_for(&crd(), &validator, None).is_empty());
    }

    #[test]
    fn one_policy_and_binding_per_layer_named_as_the_webhooks_within_the_scope() {
        let validator = Validator::for_machine(&MACHINE, policy());
        let scope = selector("team", "a");
        let objects = validating_admission_policies_for(&crd(), &validator, Some(&scope));
        let names: Vec<(&str, &str)> = objects
            .iter()
            .map(|o| {
                let kind = o["kind"].as_str().unwrap_or_default();
                (kind, o["metadata"]["name"].as_str().unwrap_or_default())
            })
            .collect();
        assert_eq!(
            names,
            [
                ("ValidatingAdmissionPolicy", "phase.jobs.example.com"),
                ("ValidatingAdmissionPolicyBinding", "phase.jobs.example.com"),
                (
                    "ValidatingAdmissionPolicy",
                    "tier-restricted.jobs.example.com"
                ),
                (
                    "ValidatingAdmissionPolicyBinding",
                    "tier-restricted.jobs.example.com"
                ),
            ]
        );
        assert_eq!(
            objects[1]["spec"]["matchResources"]["namespaceSelector"]["matchLabels"],
            serde_json::json!({ "team": "a" })
        );
        assert_eq!(
            objects[3]["spec"]["matchResources"]["namespaceSelector"],
            serde_json::json!({
                "matchLabels": { "tier": "restricted" },
                "matchExpressions": [{ "key": "team", "operator": "In", "values": ["a"] }],
            }),
            "a tier's namespaces within the scope"
        );
        let rules = &objects[0]["spec"]["matchConstraints"]["resourceRules"][0];
        assert_eq!(
            rules["resources"],
            serde_json::json!(["jobs", "jobs/status"])
        );
    }

    #[test]
    fn names_are_quoted_as_cel_strings() {
        let validator = Validator::for_machine(&MACHINE, policy());
        let objects = validating_admission_policies_for(&crd(), &validator, None);
        let variables = objects[0]["spec"]["variables"]
            .as_array()
            .expect("variables");
        let operator = variables
            .iter()
            .find(|v| v["name"] == "isOperator")
            .and_then(|v| v["expression"].as_str())
            .expect("isOperator");
        assert_eq!(
            operator,
            r#"request.userInfo.username in ["system:serviceaccount:ops:o\"brien"]"#
        );
        let messages: Vec<&Value> = objects[0]["spec"]["validations"]
            .as_array()
            .expect("validations")
            .iter()
            .map(|v| &v["messageExpression"])
            .collect();
        assert_eq!(
            messages.len(),
            3,
            "manual by the operator, owned fields, manualBy"
        );
    }
}
