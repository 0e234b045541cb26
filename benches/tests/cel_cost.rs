//! The cost of the CEL phase rules as a current API server estimates them (figures recorded in
//! BENCHMARKS.md; `--nocapture` prints them), for the 150-phase / 320-edge machine and both
//! example machines: no restatement of the cost model here, the server's own estimate.
//!
//! The API server tells a rule's estimated cost only when it refuses it: "estimated rule cost
//! exceeds budget by factor of F" (F with one decimal, up to 100), where the budget is 10 000 000
//! for a rule's cost times the most values it may run on. So the probe places the machine's
//! transition rule, with its phase schema (enum, `maxLength`), on the values of a map of at
//! most N entries: the server refuses it with F = cost × N / 10 000 000, and the cost is
//! F × 10 000 000 / N — first with an N at which it names F at all, then with N chosen to bring
//! F near 90 (±0.06 %).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;
use kube_fsm_benches::Big;
use kube_fsm_testkit::cluster;
use kube_fsm_testkit::resources::{Database, RiskEngine};
use serde_json::{Value, json};

/// The API server's budget for one rule's estimated cost times its cardinality
/// (`StaticEstimatedCostLimit`).
const BUDGET: f64 = 10_000_000.0;
/// The API server's limit on one rule's estimated cost per call (`PerCallLimit`).
const PER_CALL_LIMIT: f64 = 1_000_000.0;

/// `crd`'s `status.phase` schema (with its transition rule).
fn phase_schema(crd: &CustomResourceDefinition) -> Value {
    let schema = serde_json::to_value(crd.spec.versions[0].schema.as_ref().unwrap()).unwrap();
    schema["openAPIV3Schema"]["properties"]["status"]["properties"]["phase"].clone()
}

/// What the API server says of a probe CRD with `phase` on the values of a map of at most `n`
/// entries.
enum Said {
    /// Accepted: the rule's cost times `n` is within the budget.
    Accepted,
    /// Refused, over the budget by more than 100 times.
    Over100,
    /// Refused, over the budget by this factor.
    Factor(f64),
}

async fn refused_by(api: &Api<CustomResourceDefinition>, phase: &Value, n: u64) -> Said {
    let mut values = phase.clone();
    values.as_object_mut().unwrap().retain(|k, _| {
        ["type", "enum", "maxLength", "x-kubernetes-validations"].contains(&k.as_str())
    });
    let probe: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": { "name": "probes.cost.kube-fsm.dev" },
        "spec": {
            "group": "cost.kube-fsm.dev",
            "names": { "kind": "Probe", "plural": "probes" },
            "scope": "Namespaced",
            "versions": [{ "name": "v1", "served": true, "storage": true, "schema": {
                "openAPIV3Schema": { "type": "object", "properties": { "m": {
                    "type": "object", "maxProperties": n, "additionalProperties": values,
                } } },
            } }],
        },
    }))
    .unwrap();
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match api.create(&params, &probe).await {
        Ok(_) => Said::Accepted,
        Err(kube::Error::Api(status)) => {
            let message = status.message;
            let said = message
                .split("estimated rule cost exceeds budget by factor of ")
                .nth(1)
                .unwrap_or_else(|| panic!("no factor in the refusal: {message}"));
            if said.starts_with("more than") {
                return Said::Over100;
            }
            let factor = said.split('x').next().and_then(|f| f.trim().parse().ok());
            Said::Factor(factor.unwrap_or_else(|| panic!("no factor in the refusal: {message}")))
        }
        Err(err) => panic!("creating the probe CRD: {err}"),
    }
}

/// The API server's estimated cost of the transition rule in `phase`.
async fn estimated_cost(api: &Api<CustomResourceDefinition>, phase: &Value) -> f64 {
    // A cardinality at which the server names a factor: from 1 000 000 (costs 10 to 1 000),
    // a hundred times more or less until it does.
    let mut n: u64 = 1_000_000;
    let coarse = loop {
        match refused_by(api, phase, n).await {
            Said::Factor(factor) => break factor * BUDGET / n as f64,
            Said::Accepted if n < u64::MAX / 100 => n *= 100,
            Said::Over100 if n >= 100 => n /= 100,
            _ => panic!("no cardinality makes the API server name a factor"),
        }
    };
    // F near 90 (the coarse figure may be a few percent off; 100 is the most the server names).
    let n = ((90.0 * BUDGET / coarse).floor() as u64).max(1);
    match refused_by(api, phase, n).await {
        Said::Factor(factor) => factor * BUDGET / n as f64,
        _ => panic!("not refused by a factor near 90 at {n} values"),
    }
}

#[tokio::test]
async fn the_phase_rules_cost_what_the_api_server_estimates_far_under_its_limit() {
    let Some(client) = cluster::current("cel_cost").await else {
        return;
    };
    let api: Api<CustomResourceDefinition> = Api::all(client);
    for (name, crd, at_most) in [
        ("Big (150 phases, 320 edges)", kube_fsm::crd::<Big>(), 0.01),
        ("Database", kube_fsm::crd::<Database>(), 0.001),
        ("RiskEngine", kube_fsm::crd::<RiskEngine>(), 0.001),
    ] {
        let phase = phase_schema(&crd);
        let rule = phase["x-kubernetes-validations"][0]["rule"]
            .as_str()
            .unwrap()
            .to_owned();
        let cost = estimated_cost(&api, &phase).await;
        println!(
            "{name}: the API server estimates the transition rule at {cost:.0} \
             ({:.3}% of the per-call limit), rule {} bytes",
            cost * 100.0 / PER_CALL_LIMIT,
            rule.len()
        );
        assert!(
            cost < at_most * PER_CALL_LIMIT,
            "{name}: {cost} is over {}% of the per-call limit",
            at_most * 100.0
        );
    }
}
