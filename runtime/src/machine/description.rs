//! The machine as plain data for tools outside the operator (`kubectl fsm`): the CRD carries it
//! as JSON in its `kube-fsm.dev/machine` annotation, so a tool reads any kube-fsm resource's
//! machine from the cluster without the operator's code. Built from [`MachineData`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::machine::data::{MachineData, PictureData, TriggerData};

/// The CRD annotation holding the machine's [`Description`] as JSON.
pub const MACHINE_ANNOTATION: &str = "kube-fsm.dev/machine";

/// A machine as data: phases, conditions, events, transitions with their triggers, what Ready
/// means, and its diagrams.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Description {
    /// The resource's kind.
    pub kind: String,
    /// The phases, in spec order.
    pub phases: Vec<PhaseDescription>,
    /// The spec's condition types.
    #[serde(default)]
    pub conditions: Vec<Described>,
    /// The children the engine applies (the spec's `children:`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildDescription>,
    /// The events handlers fire.
    #[serde(default)]
    pub events: Vec<String>,
    /// Every legal edge, in spec order.
    #[serde(default)]
    pub transitions: Vec<TransitionDescription>,
    /// What makes an object Ready, if the spec says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<ReadyDescription>,
    /// The finalizer guarding deletion, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalizer: Option<String>,
    /// Phase names of older specs and the declared phase each moves to.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub retired: BTreeMap<String, String>,
    /// The machine as a Mermaid `stateDiagram-v2`.
    #[serde(default)]
    pub mermaid: String,
    /// The machine as a Graphviz digraph.
    #[serde(default)]
    pub dot: String,
    /// The machine drawn as SVG by the macro, or why it is not. Not in the JSON: a
    /// description read from the cluster has none (`Err`), and a tool draws its DOT text.
    #[serde(skip, default = "undrawn")]
    pub picture: Result<PictureData, &'static str>,
}

/// Why a description read from JSON has no picture.
fn undrawn() -> Result<PictureData, &'static str> {
    Err("a description read from JSON carries no picture: draw its DOT text")
}

/// One phase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PhaseDescription {
    /// The phase name.
    pub name: String,
    /// The spec's description, or "".
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// New objects start here.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub initial: bool,
    /// The engine never leaves it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub terminal: bool,
    /// Reconciled at least this often, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue_after_ms: Option<u64>,
    /// How long one handler call may run, in milliseconds (the spec's `handlerTimeout`; when
    /// absent, the operator's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler_timeout_ms: Option<u64>,
    /// Left after this long in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<TimeoutDescription>,
}

/// A phase's timeout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimeoutDescription {
    /// How long, in milliseconds.
    pub after_ms: u64,
    /// The phase it moves to.
    pub to: String,
    /// The reason recorded.
    pub reason: String,
}

/// A name and its description.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Described {
    /// The name.
    pub name: String,
    /// The spec's description, or "".
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
}

/// A child declared in the spec.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildDescription {
    /// Its name in the spec.
    pub name: String,
    /// Its Rust type as the spec writes it (e.g. `Job`).
    #[serde(rename = "type")]
    pub type_path: String,
    /// Its type's `apiVersion` (e.g. `batch/v1`); empty in descriptions written before it
    /// was recorded.
    #[serde(default)]
    pub api_version: String,
    /// Its type's `kind` (e.g. `Job`); empty as `api_version`.
    #[serde(default)]
    pub kind: String,
    /// The condition of its own that makes it ready, when not kstatus's rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_when: Option<String>,
    /// The phases it exists in.
    pub phases: Vec<String>,
    /// The children it waits for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// The conditions derived from it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub derives: Vec<String>,
}

/// One edge and what takes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransitionDescription {
    /// The source phase.
    pub from: String,
    /// The target phase.
    pub to: String,
    /// What takes it.
    pub trigger: TriggerDescription,
}

/// What takes an edge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TriggerDescription {
    /// The phase handler, explicitly.
    Handler,
    /// Only people (`manual: true`).
    Manual,
    /// The handler firing this event.
    On(String),
    /// Automatically, when every condition has the status given.
    When(Vec<RequirementDescription>),
}

/// One requirement of a `when` rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequirementDescription {
    /// The condition type.
    pub condition: String,
    /// The status it must have.
    pub status: bool,
}

/// What makes an object Ready.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadyDescription {
    /// In one of these phases (any non-terminal one when empty).
    #[serde(default)]
    pub phases: Vec<String>,
    /// With each of these conditions True.
    #[serde(default)]
    pub conditions: Vec<String>,
}

/// How a move a person asks for relates to the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Move {
    /// It is already in that phase.
    Stay,
    /// A manual edge: only people take it.
    Manual,
    /// An edge the engine also takes.
    Edge,
}

/// The message of a move that is not an edge, word for word the CRD's CEL rule's and the
/// webhook's.
pub fn no_such_transition(kind: &str, from: &str, to: &str) -> String {
    format!("cannot move from {from} to {to}: the {kind} state machine has no such transition")
}

impl Description {
    /// The description of `machine`.
    pub fn of(machine: &MachineData) -> Self {
        let phase = |i: usize| machine.phases[i].name.to_owned();
        let condition = |i: usize| machine.conditions[i].name.to_owned();
        Description {
            kind: machine.kind.to_owned(),
            phases: machine
                .phases
                .iter()
                .enumerate()
                .map(|(i, p)| PhaseDescription {
                    name: p.name.to_owned(),
                    description: p.description.to_owned(),
                    initial: i == machine.initial,
                    terminal: p.terminal,
                    requeue_after_ms: p.requeue_after_ms,
                    handler_timeout_ms: p.handler_timeout_ms,
                    timeout: p.timeout.as_ref().map(|t| TimeoutDescription {
                        after_ms: t.after_ms,
                        to: phase(t.to),
                        reason: t.reason.to_owned(),
                    }),
                })
                .collect(),
            conditions: machine
                .conditions
                .iter()
                .map(|c| Described {
                    name: c.name.to_owned(),
                    description: c.description.to_owned(),
                })
                .collect(),
            children: (machine.children.iter().enumerate())
                .map(|(i, c)| ChildDescription {
                    name: c.name.to_owned(),
                    type_path: c.type_path.to_owned(),
                    api_version: (c.type_meta)().api_version,
                    kind: (c.type_meta)().kind,
                    ready_when: c.ready.condition().map(str::to_owned),
                    phases: c.phases.iter().map(|&p| phase(p)).collect(),
                    after: (c.after.iter())
                        .map(|&a| machine.children[a].name.to_owned())
                        .collect(),
                    derives: (machine.conditions.iter())
                        .filter(|d| d.from.is_some_and(|f| f.child == i))
                        .map(|d| d.name.to_owned())
                        .collect(),
                })
                .collect(),
            events: machine.events.iter().map(|e| (*e).to_owned()).collect(),
            transitions: machine
                .edges
                .iter()
                .map(|e| TransitionDescription {
                    from: phase(e.from),
                    to: phase(e.to),
                    trigger: match e.trigger {
                        TriggerData::Handler => TriggerDescription::Handler,
                        TriggerData::Manual => TriggerDescription::Manual,
                        TriggerData::Event(ev) => {
                            TriggerDescription::On(machine.events[ev].to_owned())
                        }
                        TriggerData::When(reqs) => TriggerDescription::When(
                            reqs.iter()
                                .map(|r| RequirementDescription {
                                    condition: condition(r.condition),
                                    status: r.status,
                                })
                                .collect(),
                        ),
                    },
                })
                .collect(),
            ready: machine.ready.as_ref().map(|r| ReadyDescription {
                phases: r.phases.iter().map(|&i| phase(i)).collect(),
                conditions: r.conditions.iter().map(|&i| condition(i)).collect(),
            }),
            finalizer: machine.finalizer.map(str::to_owned),
            retired: machine
                .retired
                .iter()
                .map(|r| (r.name.to_owned(), phase(r.to)))
                .collect(),
            mermaid: machine.mermaid.to_owned(),
            dot: machine.dot.to_owned(),
            picture: machine.picture,
        }
    }

    /// The phase named `name`.
    pub fn phase(&self, name: &str) -> Option<&PhaseDescription> {
        self.phases.iter().find(|p| p.name == name)
    }

    /// The edges out of `from`, in spec order.
    pub fn out_of<'a>(&'a self, from: &'a str) -> impl Iterator<Item = &'a TransitionDescription> {
        self.transitions.iter().filter(move |t| t.from == from)
    }

    /// Whether a person may move an object from `from` to `to`, by the machine alone (the
    /// webhook's policy may say more): the same refusal the API server's rules give.
    ///
    /// # Errors
    /// Why the move is refused.
    pub fn check_move(&self, from: Option<&str>, to: &str) -> Result<Move, String> {
        let Some(from) = from else {
            return Err(format!(
                "the object has no phase yet: the {} operator sets the first one",
                self.kind
            ));
        };
        // Staying is no write, even on a value the spec does not declare (as the server).
        if from == to {
            return Ok(Move::Stay);
        }
        if self.phase(to).is_none() {
            let names: Vec<&str> = self.phases.iter().map(|p| p.name.as_str()).collect();
            return Err(format!(
                "unknown phase {to:?}; the phases are: {}",
                names.join(", ")
            ));
        }
        match self
            .transitions
            .iter()
            .find(|t| t.from == from && t.to == to)
        {
            Some(t) if t.trigger == TriggerDescription::Manual => Ok(Move::Manual),
            Some(_) => Ok(Move::Edge),
            None if self.phase(from).is_none() => match self.retired.get(from) {
                Some(mapped) if mapped != to => Err(no_such_transition(&self.kind, from, to)),
                _ => Ok(Move::Edge),
            },
            None => Err(no_such_transition(&self.kind, from, to)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_machines::DatabasePhase;

    #[test]
    fn the_description_round_trips_and_checks_moves_as_the_server_does() {
        let described = Description::of(DatabasePhase::MACHINE);
        let json = serde_json::to_string(&described).unwrap();
        let read = serde_json::from_str::<Description>(&json).unwrap();
        assert!(described.picture.is_ok() && read.picture.is_err());
        assert_eq!(
            read,
            Description {
                picture: read.picture,
                ..described.clone()
            }
        );
        assert!(
            json.contains(r#"{"from":"Failed","to":"Pending","trigger":"manual"}"#),
            "{json}"
        );
        assert!(json.contains(r#""trigger":{"on":"Accept"}"#), "{json}");
        assert_eq!(
            described.check_move(Some("Failed"), "Pending"),
            Ok(Move::Manual)
        );
        assert_eq!(
            described.check_move(Some("Running"), "Degraded"),
            Ok(Move::Edge)
        );
        assert_eq!(
            described.check_move(Some("Running"), "Running"),
            Ok(Move::Stay)
        );
        assert_eq!(
            described.check_move(Some("Failed"), "Running"),
            Err("cannot move from Failed to Running: the Database state machine has no such transition".into())
        );
        assert!(
            described
                .check_move(Some("Failed"), "Runing")
                .unwrap_err()
                .starts_with("unknown phase \"Runing\"")
        );
        assert_eq!(
            described.phases[1]
                .timeout
                .as_ref()
                .map(|t| (t.to.as_str(), t.after_ms)),
            Some(("Failed", 600_000))
        );
    }
}
