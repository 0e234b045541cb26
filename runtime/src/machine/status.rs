//! The machine's fields in a resource's status, flattened into the user's status struct.

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::machine::data::Phase;

/// The status fields kube-fsm owns. Put it in your status struct as one flattened field
/// named `machine` (see the crate-level example):
/// `#[serde(flatten)] pub machine: MachineStatus<DatabasePhase>`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[serde(bound(serialize = "P: Phase", deserialize = "P: Phase"))]
#[schemars(bound = "P: JsonSchema")]
pub struct MachineStatus<P> {
    /// The current phase of the state machine.
    // (A value that is not a declared phase still decodes: see `PhaseValue`.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "P")]
    pub phase: Option<PhaseValue<P>>,
    /// Conditions, keyed by type (apimachinery semantics).
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` the status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the object entered its current phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_phase_transition_time: Option<Time>,
    /// The phase `lastPhaseTransitionTime` is the entry time of. When it differs from `phase`
    /// (another writer moved the phase), the controller starts the new phase's clock when it
    /// first sees it, so a timeout never fires on time spent in another phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub entered_phase: Option<PhaseValue<P>>,
    /// Seconds the object spent paused (`kube-fsm.dev/paused`) in its current phase: its
    /// timeout is due that much later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_seconds: Option<i64>,
    /// The last `kube-fsm.dev/reconcile-requested-at` value the controller handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}

impl<P> Default for MachineStatus<P> {
    fn default() -> Self {
        MachineStatus {
            phase: None,
            conditions: Vec::new(),
            observed_generation: None,
            last_phase_transition_time: None,
            entered_phase: None,
            paused_seconds: None,
            last_handled_reconcile_at: None,
        }
    }
}

impl<P: Phase> MachineStatus<P> {
    /// The current phase, if it is set and declared by the spec.
    pub fn phase(&self) -> Option<P> {
        match self.phase {
            Some(PhaseValue::Known(phase)) => Some(phase),
            _ => None,
        }
    }

    /// When the current phase was entered, if the recorded entry time belongs to it. A time
    /// recorded without `enteredPhase` (written before kube-fsm recorded it) is taken as the
    /// current phase's.
    pub fn entered_at(&self) -> Option<k8s_openapi::jiff::Timestamp> {
        let time = self.last_phase_transition_time.as_ref()?;
        match (&self.phase, &self.entered_phase) {
            (Some(phase), Some(entered)) if phase != entered => None,
            _ => Some(time.0),
        }
    }

    /// The condition of the given type, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// A stored `status.phase`: a declared phase, or a string the spec does not know (a hand edit,
/// or a phase of an older spec). Decoding never fails on an unknown name, so one bad object
/// cannot stall a watch stream; the engine treats it as drift.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PhaseValue<P> {
    /// A phase the spec declares.
    Known(P),
    /// Any other string.
    Unknown(String),
}

impl<P: Phase> PhaseValue<P> {
    /// Decodes a phase name.
    pub fn parse(name: &str) -> Self {
        P::MACHINE
            .phases
            .iter()
            .position(|p| p.name == name)
            .and_then(P::from_index)
            .map_or_else(|| PhaseValue::Unknown(name.to_owned()), PhaseValue::Known)
    }

    /// The stored string.
    pub fn as_str(&self) -> &str {
        match self {
            PhaseValue::Known(phase) => phase.name(),
            PhaseValue::Unknown(name) => name,
        }
    }
}

impl<P: Phase> fmt::Display for PhaseValue<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<P: Phase> Serialize for PhaseValue<P> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de, P: Phase> Deserialize<'de> for PhaseValue<P> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = Cow::<'de, str>::deserialize(deserializer)?;
        Ok(Self::parse(&name))
    }
}

impl<P: JsonSchema> JsonSchema for PhaseValue<P> {
    fn schema_name() -> Cow<'static, str> {
        P::schema_name()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        P::json_schema(generator)
    }
    fn inline_schema() -> bool {
        true
    }
}
