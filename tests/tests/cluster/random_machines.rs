//! The CEL rules the spec compiler writes into a CRD, judged by the real API server (1.25 and
//! later run them), equal the transition table — for random machines, with no webhook: each
//! machine's rules installed under a kind of its own, a new object given every phase as its
//! first (admitted exactly when it is the initial phase or a successor by an edge the engine
//! takes), then an object walked to each phase and moved to every phase (admitted exactly when
//! it stays or the spec has that edge, manual ones included). A refused write changes nothing
//! stored. The seed is printed; `KUBE_FSM_SEED` replays one.

use std::collections::{BTreeSet, VecDeque};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use kube_fsm_codegen::Checked;
use kube_fsm_testkit::cluster::{self, client, install_crd};
use serde_json::json;

const GROUP: &str = "random.kube-fsm.dev";
const NAMES: [&str; 7] = [
    "Alpha", "Bravo", "Charlie", "Delta", "Echo", "Foxtrot", "Golf",
];

/// A random spec: 3–7 phases in a chain from the initial one to a terminal last one (so every
/// phase is reachable and every other has a way out), plus random edges, some manual.
fn spec(rng: &mut fastrand::Rng) -> String {
    let count = rng.usize(3..=NAMES.len());
    let mut text = String::from("phases:\n");
    for (i, name) in NAMES[..count].iter().enumerate() {
        let role = match i {
            0 => "{ initial: true }",
            _ if i == count - 1 => "{ terminal: true }",
            _ => "{}",
        };
        text.push_str(&format!("  {name}: {role}\n"));
    }
    text.push_str("transitions:\n");
    let mut edges = BTreeSet::new();
    for i in 0..count - 1 {
        edges.insert((i, i + 1));
        text.push_str(&format!(
            "  - {{ from: {}, to: {} }}\n",
            NAMES[i],
            NAMES[i + 1]
        ));
    }
    let phases = &NAMES[..count];
    for (from, from_name) in phases.iter().enumerate() {
        for (to, to_name) in phases.iter().enumerate() {
            if from == to || edges.contains(&(from, to)) || rng.u8(..5) != 0 {
                continue;
            }
            // Out of the terminal phase only people move an object.
            let manual = from == count - 1 || rng.u8(..3) == 0;
            edges.insert((from, to));
            let tail = if manual { ", manual: true" } else { "" };
            text.push_str(&format!(
                "  - {{ from: {from_name}, to: {to_name}{tail} }}\n"
            ));
        }
    }
    text
}

fn names(run: &str, i: usize) -> (String, String) {
    let kind = format!("Rand{run}x{i}");
    let plural = format!("{}s", kind.to_lowercase());
    (kind, plural)
}

/// A CRD carrying `machine`'s rules where the generated CRD carries them.
fn crd(kind: &str, plural: &str, machine: &Checked) -> CustomResourceDefinition {
    let longest = machine.phases.iter().map(String::len).max().unwrap_or(1);
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("{plural}.{GROUP}") },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": { "kind": kind, "plural": plural, "singular": kind.to_lowercase() },
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": { "status": {} },
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-validations": [{ "rule": machine.cel_first_phase_rule }],
                    "properties": {
                        "spec": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                        "status": { "type": "object", "properties": { "phase": {
                            "type": "string",
                            "maxLength": longest,
                            "x-kubernetes-validations": [{ "rule": machine.cel_phase_rule }],
                        } } },
                    },
                } },
            }],
        },
    }))
    .expect("a CRD")
}

/// A shortest path of phases from the initial one to `to`, along any edge.
fn path_to(machine: &Checked, to: &str) -> Vec<String> {
    let mut previous = std::collections::BTreeMap::new();
    let mut queue = VecDeque::from([machine.initial.clone()]);
    while let Some(at) = queue.pop_front() {
        for edge in machine.edges.iter().filter(|e| e.from == at) {
            if edge.to != machine.initial && !previous.contains_key(&edge.to) {
                previous.insert(edge.to.clone(), at.clone());
                queue.push_back(edge.to.clone());
            }
        }
    }
    let mut path = vec![to.to_owned()];
    while let Some(before) = previous.get(path.last().expect("non-empty")) {
        path.push(before.clone());
    }
    path.reverse();
    path
}

async fn set_phase(
    api: &Api<DynamicObject>,
    name: &str,
    phase: &str,
    dry_run: bool,
) -> Result<(), String> {
    let params = PatchParams {
        dry_run,
        ..PatchParams::default()
    };
    let patch = Patch::Merge(json!({ "status": { "phase": phase } }));
    match api.patch_status(name, &params, &patch).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 422 => Err(status.message),
        Err(other) => panic!("neither admitted nor refused: {other}"),
    }
}

/// Every first phase and every move of `machine` on the server; the mismatches with the
/// table, described, and how many writes were judged.
async fn judge(
    client: &Client,
    ns: &str,
    kind: &str,
    plural: &str,
    machine: &Checked,
) -> (Vec<String>, usize) {
    let resource = ApiResource {
        group: GROUP.into(),
        version: "v1".into(),
        api_version: format!("{GROUP}/v1"),
        kind: kind.into(),
        plural: plural.into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    let create = |name: &str| {
        let object = DynamicObject::new(name, &resource).data(json!({ "spec": {} }));
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), &object)
                .await
                .expect("create")
        }
    };
    let edge = |from: &str, to: &str, manual_too: bool| {
        machine
            .edges
            .iter()
            .any(|e| e.from == from && e.to == to && (manual_too || !e.manual))
    };
    let (mut mismatches, mut judged) = (Vec::new(), 0);
    create("fresh").await;
    for first in &machine.phases {
        let allowed = *first == machine.initial || edge(&machine.initial, first, false);
        let verdict = set_phase(&api, "fresh", first, true).await;
        judged += 1;
        if verdict.is_ok() != allowed {
            mismatches.push(format!(
                "{kind}: first phase {first}: server {verdict:?}, table {allowed}"
            ));
        }
    }
    for from in &machine.phases {
        let name = format!("at-{}", from.to_lowercase());
        create(&name).await;
        for step in path_to(machine, from) {
            set_phase(&api, &name, &step, false)
                .await
                .unwrap_or_else(|err| panic!("{kind}: the walk to {from} through {step}: {err}"));
        }
        for to in &machine.phases {
            let allowed = from == to || edge(from, to, true);
            let verdict = set_phase(&api, &name, to, true).await;
            judged += 1;
            if verdict.is_ok() != allowed {
                mismatches.push(format!(
                    "{kind}: {from} -> {to}: server {verdict:?}, table {allowed}"
                ));
            }
        }
        // One refused write for real: nothing stored changes.
        if let Some(illegal) = machine
            .phases
            .iter()
            .find(|to| *to != from && !edge(from, to, true))
        {
            let before = api.get(&name).await.expect("get");
            assert!(
                set_phase(&api, &name, illegal, false).await.is_err(),
                "{kind}: {from} -> {illegal} refused"
            );
            let after = api.get(&name).await.expect("get");
            assert_eq!(
                before.metadata.resource_version, after.metadata.resource_version,
                "{kind}: a refused write changed nothing"
            );
        }
    }
    (mismatches, judged)
}

#[tokio::test]
async fn the_servers_verdicts_on_random_machines_are_their_transition_tables() {
    let Some(client) = client("random_machines").await else {
        return;
    };
    if !cluster::enforces_cel(&client).await {
        cluster::skip(
            "random_machines",
            "on this server: CRD CEL rules run from Kubernetes 1.25 (scripts/test runs it on the current server)",
        );
        return;
    }
    let seed = std::env::var("KUBE_FSM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("random_machines: seed {seed} (KUBE_FSM_SEED={seed} replays it)");
    let mut rng = fastrand::Rng::with_seed(seed);
    let run: String = (0..6).map(|_| rng.lowercase()).collect();
    let ns = cluster::namespace(&client, "fsm-random").await;
    let mut machines = Vec::new();
    for i in 0..6 {
        let text = spec(&mut rng);
        let machine =
            kube_fsm_codegen::check("random.yaml", &text, None).unwrap_or_else(|errors| {
                panic!(
                    "a generated spec is refused:\n{text}\n{}",
                    errors.join("\n")
                )
            });
        let (kind, plural) = names(&run, i);
        install_crd(&client, crd(&kind, &plural, &machine)).await;
        machines.push((kind, plural, machine, text));
    }
    let judged = machines
        .iter()
        .map(|(kind, plural, machine, _)| judge(&client, &ns, kind, plural, machine));
    let results = futures::future::join_all(judged).await;
    let mut total = 0;
    for ((kind, _, machine, text), (mismatches, judged)) in machines.iter().zip(&results) {
        total += judged;
        assert!(
            mismatches.is_empty(),
            "{kind} (seed {seed}):\n{text}\nrule: {}\n{}",
            machine.cel_phase_rule,
            mismatches.join("\n")
        );
    }
    println!(
        "random_machines: {total} writes to {} machines judged as their tables say",
        machines.len()
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (_, plural, _, _) in &machines {
        let _ = crds
            .delete(&format!("{plural}.{GROUP}"), &DeleteParams::default())
            .await;
    }
}
