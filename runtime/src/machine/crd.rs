//! The CRD helper: the CRD `#[derive(CustomResource)]` generates, plus what the spec says about
//! the machine, so the API server itself keeps `status.phase` on the spec's edges and
//! `kubectl get` shows the machine.
//!
//! [`crd`] adds to the derived CRD (which already has the phase enum and the list-map markers
//! on `status.conditions`):
//! - on `status.phase`: the CEL transition rule (stay, move along a declared edge, or leave a
//!   value the spec does not declare), with a message naming both phases and reason
//!   `FieldValueForbidden`, and a `maxLength` that bounds the rules' estimated cost;
//! - on the object: the first phase written is the initial phase or one of its direct
//!   successors (a rule on the root, which exists on both sides of every update, so it holds
//!   whether or not the old object had a status, without `optionalOldSelf`);
//! - on the root: the phase, once set, is never removed (neither alone nor with the whole
//!   status);
//! - printer columns Phase, Ready (the `Ready` condition, when the spec has `ready:` or
//!   declares `Ready`) and Age, unless the resource declares columns of those names itself;
//! - the annotation `kube-fsm.dev/machine`: the machine as JSON ([`Description`]), for tools
//!   such as `kubectl fsm` that know no operator's code.
//!
//! API servers before 1.25 do not know `x-kubernetes-validations` and drop the rules; the
//! engine checks every write against the spec either way.
//!
//! ```no_run
//! # use kube::CustomResource;
//! # use kube_fsm::{MachineStatus, state_machine};
//! # use schemars::JsonSchema;
//! # use serde::{Deserialize, Serialize};
//! # #[state_machine(phases(Pending(initial), Done(terminal)), transitions(Pending -> Done))]
//! # #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
//! # #[kube(group = "example.com", version = "v1", kind = "Job", namespaced, status = "JobStatus")]
//! # pub struct JobSpec {}
//! # #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
//! # pub struct JobStatus { #[serde(flatten)] pub machine: MachineStatus<JobPhase> }
//! // What a `crdgen` binary prints (`kubectl apply -f -` takes JSON as well as YAML):
//! let crd = kube_fsm::crd::<Job>();
//! println!("{}", serde_json::to_string_pretty(&crd).unwrap());
//! ```

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, JSONSchemaProps, ValidationRule,
};
use kube::CustomResourceExt;

use crate::machine::data::{MachineData, TriggerData};
use crate::machine::description::{Description, MACHINE_ANNOTATION};
use crate::machine::state_machine::StateMachine;

/// The `reason` of the phase rules' failures.
pub const FORBIDDEN: &str = "FieldValueForbidden";
/// The `reason` of the rule that the phase, once set, stays.
pub(crate) const REQUIRED: &str = "FieldValueRequired";
/// The message of the rule that the phase, once set, stays.
pub(crate) const PHASE_REMOVED: &str = "status.phase cannot be removed once set";

/// The derived CRD of `K` with the machine's CEL rules and printer columns added.
pub fn crd<K: CustomResourceExt + StateMachine>() -> CustomResourceDefinition {
    let machine = K::machine();
    let mut crd = K::crd();
    for version in &mut crd.spec.versions {
        if let Some(root) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            add_status_rules(root, machine);
        }
        let columns = version
            .additional_printer_columns
            .get_or_insert_with(Vec::new);
        add_columns(columns, machine);
    }
    if let Ok(described) = serde_json::to_string(&Description::of(machine)) {
        crd.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(MACHINE_ANNOTATION.to_owned(), described);
    }
    crd
}

fn property<'a>(schema: &'a mut JSONSchemaProps, name: &str) -> Option<&'a mut JSONSchemaProps> {
    schema.properties.as_mut()?.get_mut(name)
}

fn add_status_rules(root: &mut JSONSchemaProps, machine: &MachineData) {
    root.x_kubernetes_validations
        .get_or_insert_with(Vec::new)
        .push(ValidationRule {
            rule: machine.cel_first_phase_rule.to_owned(),
            message_expression: Some(format!(
                "'the first phase must be {}, not ' + self.status.phase",
                first_phases(machine)
            )),
            field_path: Some(".status.phase".to_owned()),
            reason: Some(FORBIDDEN.to_owned()),
            ..ValidationRule::default()
        });
    // On the root too: a rule on `status` does not run when the whole status is removed.
    root.x_kubernetes_validations
        .get_or_insert_with(Vec::new)
        .push(ValidationRule {
            rule: "!has(oldSelf.status) || !has(oldSelf.status.phase) || \
                   (has(self.status) && has(self.status.phase))"
                .to_owned(),
            message: Some(PHASE_REMOVED.to_owned()),
            field_path: Some(".status.phase".to_owned()),
            reason: Some(REQUIRED.to_owned()),
            ..ValidationRule::default()
        });
    let Some(status) = property(root, "status") else {
        return;
    };
    let Some(phase) = property(status, "phase") else {
        return;
    };
    let longest = machine
        .phases
        .iter()
        .map(|p| p.name.len())
        .max()
        .unwrap_or(0);
    phase.max_length = Some(i64::try_from(longest).unwrap_or(i64::MAX));
    phase
        .x_kubernetes_validations
        .get_or_insert_with(Vec::new)
        .push(ValidationRule {
            rule: machine.cel_phase_rule.to_owned(),
            message_expression: Some(format!(
                "'cannot move from ' + oldSelf + ' to ' + self + ': the {} state machine has no such transition'",
                machine.kind
            )),
            reason: Some(FORBIDDEN.to_owned()),
            ..ValidationRule::default()
        });
}

/// `Pending or one of its successors (Provisioning, Failed)`: what the first phase written may
/// be (a successor by an edge the engine takes: never one reached only by a manual edge), as
/// the CEL rule's message and the admission webhook's say it.
pub(crate) fn first_phases(machine: &MachineData) -> String {
    let initial = machine.phases[machine.initial].name;
    let successors: Vec<&str> = machine
        .edges
        .iter()
        .filter(|e| e.from == machine.initial && e.to != machine.initial)
        .filter(|e| !matches!(e.trigger, TriggerData::Manual))
        .map(|e| machine.phases[e.to].name)
        .fold(Vec::new(), |mut names, name| {
            if !names.contains(&name) {
                names.push(name);
            }
            names
        });
    if successors.is_empty() {
        initial.to_owned()
    } else {
        format!(
            "{initial} or one of its successors ({})",
            successors.join(", ")
        )
    }
}

/// Phase and Ready first, the resource's own columns, then Age (kubectl shows Age only when a
/// CRD that declares columns lists it).
fn add_columns(columns: &mut Vec<CustomResourceColumnDefinition>, machine: &MachineData) {
    let mut ours = vec![column(
        "Phase",
        "string",
        ".status.phase",
        "The machine's current phase.",
    )];
    // The engine's `Ready` (from `ready:`), or the handlers' own.
    if machine.ready.is_some() || machine.conditions.iter().any(|c| c.name == "Ready") {
        ours.push(column(
            "Ready",
            "string",
            ".status.conditions[?(@.type==\"Ready\")].status",
            "The status of the Ready condition.",
        ));
    }
    let has = |columns: &[CustomResourceColumnDefinition], name: &str| {
        columns.iter().any(|c| c.name.eq_ignore_ascii_case(name))
    };
    ours.retain(|c| !has(columns, &c.name));
    let add_age = !has(columns, "Age");
    columns.splice(0..0, ours);
    if add_age {
        columns.push(column(
            "Age",
            "date",
            ".metadata.creationTimestamp",
            "Time since the object was created.",
        ));
    }
}

fn column(
    name: &str,
    type_: &str,
    json_path: &str,
    description: &str,
) -> CustomResourceColumnDefinition {
    CustomResourceColumnDefinition {
        name: name.to_owned(),
        type_: type_.to_owned(),
        json_path: json_path.to_owned(),
        description: Some(description.to_owned()),
        ..CustomResourceColumnDefinition::default()
    }
}

/// Why [`validate_update`] refused a write.
#[cfg(feature = "cel")]
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// The objects could not be encoded as JSON.
    #[error("cannot encode the object: {0}")]
    Encode(#[from] serde_json::Error),
    /// One or more CEL rules failed.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Rejected(kube::core::cel::ValidationErrors),
}

/// Checks an update of `old` to `new` against the CRD's CEL rules client-side, as an API
/// server of 1.25 or later would (kube's `cel` feature; no cluster needed).
///
/// # Errors
/// [`CrdError::Rejected`] with every rule that failed and its message.
#[cfg(feature = "cel")]
pub fn validate_update<K>(new: &K, old: &K) -> Result<(), CrdError>
where
    K: CustomResourceExt + StateMachine + serde::Serialize,
{
    let crd = crd::<K>();
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref());
    let schema = serde_json::to_value(schema)?;
    let (new, old) = (serde_json::to_value(new)?, serde_json::to_value(old)?);
    kube::core::cel::Validator::new()
        .validate(&schema, &new, Some(&old))
        .map_err(CrdError::Rejected)
}
