//! One machine, several served versions: the CRD of a resource whose every version (each its
//! own `#[derive(CustomResource)]` struct with `#[state_machine]` on the same spec) carries the
//! machine — CEL rules, phase enum and printer columns on every version, one stored.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::crd::merge_crds;

use crate::machine::description::MACHINE_ANNOTATION;

/// Why the versions' CRDs do not make one resource.
#[derive(Debug, thiserror::Error)]
pub enum VersionsError {
    /// kube's merge refused them (no CRD, no version named `storage`, or a group, kind or
    /// scope that differs).
    #[error("the versions do not merge into one CRD: {0}")]
    Merge(#[from] kube::core::crd::MergeError),
    /// Two versions carry different machines: one spec must drive every version.
    #[error(
        "versions {first} and {second} of {kind} carry different machines: declare every version's #[state_machine] from the same spec"
    )]
    Machines {
        /// The resource's kind.
        kind: String,
        /// A version.
        first: String,
        /// A version whose machine differs from `first`'s.
        second: String,
    },
    /// A version was given without the machine (a CRD not made by `kube_fsm::crd`).
    #[error(
        "version {version} of {kind} has no machine: build each version's CRD with kube_fsm::crd::<K>()"
    )]
    NoMachine {
        /// The resource's kind.
        kind: String,
        /// The version without it.
        version: String,
    },
}

/// The CRD of a resource served in every version of `crds` (each `kube_fsm::crd::<K>()` of
/// one version's type), `storage` the version stored: kube's `merge_crds`, after checking that
/// every version carries the same machine.
///
/// # Errors
///
/// The versions' machines differ, one has none, or kube's merge refuses them.
///
/// ```no_run
/// # mod v1alpha1 {
/// # use kube::CustomResource;
/// # use kube_fsm::{MachineStatus, state_machine};
/// # use schemars::JsonSchema;
/// # use serde::{Deserialize, Serialize};
/// # #[state_machine(phases(Pending(initial), Done(terminal)), transitions(Pending -> Done))]
/// # #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
/// # #[kube(group = "example.com", version = "v1alpha1", kind = "Job", namespaced, status = "JobStatus")]
/// # pub struct JobSpec {}
/// # #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
/// # pub struct JobStatus { #[serde(flatten)] pub machine: MachineStatus<JobPhase> }
/// # }
/// # mod v1 {
/// # use kube::CustomResource;
/// # use kube_fsm::{MachineStatus, state_machine};
/// # use schemars::JsonSchema;
/// # use serde::{Deserialize, Serialize};
/// # #[state_machine(phases(Pending(initial), Done(terminal)), transitions(Pending -> Done))]
/// # #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
/// # #[kube(group = "example.com", version = "v1", kind = "Job", namespaced, status = "JobStatus")]
/// # pub struct JobSpec {}
/// # #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
/// # pub struct JobStatus { #[serde(flatten)] pub machine: MachineStatus<JobPhase> }
/// # }
/// let crd = kube_fsm::crd_versions(
///     vec![kube_fsm::crd::<v1alpha1::Job>(), kube_fsm::crd::<v1::Job>()],
///     "v1",
/// )?;
/// assert_eq!(crd.spec.versions.len(), 2);
/// # Ok::<(), kube_fsm::VersionsError>(())
/// ```
pub fn crd_versions(
    crds: Vec<CustomResourceDefinition>,
    storage: &str,
) -> Result<CustomResourceDefinition, VersionsError> {
    let machine = |crd: &CustomResourceDefinition| -> Result<String, VersionsError> {
        crd.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(MACHINE_ANNOTATION))
            .cloned()
            .ok_or_else(|| VersionsError::NoMachine {
                kind: crd.spec.names.kind.clone(),
                version: version(crd),
            })
    };
    if let Some(first) = crds.first() {
        let expected = machine(first)?;
        for other in &crds[1..] {
            if machine(other)? != expected {
                return Err(VersionsError::Machines {
                    kind: first.spec.names.kind.clone(),
                    first: version(first),
                    second: version(other),
                });
            }
        }
    }
    Ok(merge_crds(crds, storage)?)
}

fn version(crd: &CustomResourceDefinition) -> String {
    crd.spec
        .versions
        .first()
        .map(|v| v.name.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::crd::crd;
    use crate::test_machines::Database;

    fn as_version(name: &str) -> CustomResourceDefinition {
        let mut crd = crd::<Database>();
        crd.spec.versions[0].name = name.to_owned();
        crd
    }

    #[test]
    fn every_version_keeps_the_machine_and_one_is_stored() {
        let merged = crd_versions(vec![as_version("v1alpha1"), as_version("v1")], "v1").unwrap();
        let versions: Vec<(&str, bool)> = merged
            .spec
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.storage))
            .collect();
        assert_eq!(versions, [("v1", true), ("v1alpha1", false)]);
        for version in &merged.spec.versions {
            let schema = version
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap();
            let status = &schema.properties.as_ref().unwrap()["status"];
            let phase = &status.properties.as_ref().unwrap()["phase"];
            assert!(phase.enum_.is_some(), "{}: the phase enum", version.name);
            assert!(
                phase
                    .x_kubernetes_validations
                    .as_ref()
                    .is_some_and(|r| !r.is_empty()),
                "{}: the transition rule",
                version.name
            );
            let columns = version.additional_printer_columns.as_ref().unwrap();
            assert!(
                columns.iter().any(|c| c.name == "Phase"),
                "{}",
                version.name
            );
        }
    }

    #[test]
    fn versions_with_different_machines_or_none_are_refused() {
        let mut other = as_version("v1alpha1");
        other
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(MACHINE_ANNOTATION.to_owned(), "{}".to_owned());
        let err = crd_versions(vec![other, as_version("v1")], "v1").unwrap_err();
        assert!(
            err.to_string()
                .contains("v1alpha1 and v1 of Database carry different machines"),
            "{err}"
        );
        let mut bare = as_version("v1alpha1");
        bare.metadata.annotations = None;
        let err = crd_versions(vec![as_version("v1"), bare], "v1").unwrap_err();
        assert!(
            err.to_string()
                .contains("version v1alpha1 of Database has no machine"),
            "{err}"
        );
        let err = crd_versions(vec![as_version("v1")], "v2").unwrap_err();
        assert!(matches!(err, VersionsError::Merge(_)), "{err}");
    }
}
