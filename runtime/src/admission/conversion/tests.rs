//! The conversions of `Ticket` between `v1alpha1` and `v1`.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::Converter;

mod v1alpha1 {
    use super::*;

    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[kube(
        group = "example.com",
        version = "v1alpha1",
        kind = "Ticket",
        namespaced
    )]
    pub struct TicketSpec {
        pub title: String,
        pub assignee: Option<String>,
    }
}

mod v1 {
    use super::*;

    #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    #[kube(group = "example.com", version = "v1", kind = "Ticket", namespaced)]
    pub struct TicketSpec {
        pub summary: String,
        pub owner: Owner,
        /// Only this version has it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub priority: Option<u8>,
    }

    #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
    pub struct Owner {
        pub name: Option<String>,
    }
}

impl From<v1alpha1::TicketSpec> for v1::TicketSpec {
    fn from(old: v1alpha1::TicketSpec) -> Self {
        v1::TicketSpec {
            summary: old.title,
            owner: v1::Owner { name: old.assignee },
            priority: None,
        }
    }
}

impl From<v1::TicketSpec> for v1alpha1::TicketSpec {
    fn from(new: v1::TicketSpec) -> Self {
        v1alpha1::TicketSpec {
            title: new.summary,
            assignee: new.owner.name,
        }
    }
}

/// `Ticket`'s conversions: `v1alpha1` (`title`, `assignee`) through `v1` (`summary`,
/// `owner.name`).
pub(in crate::admission) fn converter() -> Converter {
    Converter::hub::<v1::Ticket>()
        .spoke::<v1alpha1::Ticket>()
        .build()
}

fn review(desired: &str, objects: Vec<Value>) -> Value {
    let review = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": { "uid": "u-1", "desiredAPIVersion": desired, "objects": objects },
    });
    let answered = converter().review(serde_json::from_value(review).unwrap());
    serde_json::to_value(answered).unwrap()
}

fn stored(api: &str, spec: Value) -> Value {
    json!({
        "apiVersion": api,
        "kind": "Ticket",
        "metadata": { "name": "t", "namespace": "ns", "resourceVersion": "7" },
        "spec": spec,
        "status": { "phase": "Working", "conditions": [{ "type": "Ready", "status": "True" }] },
    })
}

#[test]
fn specs_convert_both_ways_through_the_hub_and_the_rest_passes_through() {
    let old = stored(
        "example.com/v1alpha1",
        json!({ "title": "t", "assignee": "ana" }),
    );
    let answer = review("example.com/v1", vec![old.clone()]);
    let response = &answer["response"];
    assert_eq!(response["uid"], "u-1");
    assert_eq!(response["result"]["status"], "Success", "{answer}");
    let new = &response["convertedObjects"][0];
    assert_eq!(new["apiVersion"], "example.com/v1");
    assert_eq!(
        new["spec"],
        json!({ "summary": "t", "owner": { "name": "ana" } })
    );
    assert_eq!(new["status"], old["status"], "the status is untouched");
    assert_eq!(new["metadata"], old["metadata"]);

    let back = review("example.com/v1alpha1", vec![new.clone()]);
    assert_eq!(
        back["response"]["convertedObjects"][0], old,
        "a round trip is the identity"
    );
}

#[test]
fn a_spec_that_does_not_read_fails_the_review_naming_object_and_versions() {
    let bad = stored("example.com/v1alpha1", json!({ "title": 5 }));
    let answer = review("example.com/v1", vec![bad]);
    let result = &answer["response"]["result"];
    assert_eq!(result["status"], "Failure", "{answer}");
    let message = result["message"].as_str().unwrap();
    assert!(
        message.starts_with("cannot convert Ticket ns/t from v1alpha1 to v1: its spec does not read as version v1alpha1"),
        "{message}"
    );
    let unknown = stored("example.com/v2", json!({}));
    let answer = review("example.com/v1", vec![unknown]);
    let message = answer["response"]["result"]["message"].as_str().unwrap();
    assert!(
        message.contains("no conversion for version v2 of Ticket (converted: v1, v1alpha1)"),
        "{message}"
    );
}

#[test]
fn an_object_read_through_an_older_version_that_does_not_convert_comes_marked_not_failed() {
    // Stored (in the hub) with a field this operator's types do not know.
    let mut bad = stored(
        "example.com/v1",
        json!({ "summary": "s", "owner": {}, "rollout": "canary" }),
    );
    bad["metadata"]["name"] = json!("broken");
    let marked = converted("example.com/v1alpha1", bad.clone()).expect("answered, not failed");
    assert_eq!(marked["apiVersion"], "example.com/v1alpha1");
    assert_eq!(marked["spec"], bad["spec"], "its spec as stored");
    let why = marked["metadata"]["annotations"][super::CONVERSION_ERROR]
        .as_str()
        .unwrap();
    assert!(
        why.starts_with("cannot convert Ticket ns/broken from v1 to v1alpha1")
            && why.contains("spec.rollout"),
        "{why}"
    );
    // Written back through the older version, it is refused: it was never converted.
    let message = converted("example.com/v1", marked.clone()).unwrap_err();
    assert!(
        message.contains("carries the kube-fsm.dev/conversion-error annotation"),
        "{message}"
    );
}

fn converted(desired: &str, object: Value) -> Result<Value, String> {
    let answer = review(desired, vec![object]);
    let response = &answer["response"];
    match response["result"]["status"].as_str() {
        Some("Success") => Ok(response["convertedObjects"][0].clone()),
        _ => Err(response["result"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()),
    }
}

#[test]
fn a_field_only_the_hub_has_survives_a_trip_through_the_older_version_and_an_edit_there() {
    let hub = stored(
        "example.com/v1",
        json!({ "summary": "t", "owner": { "name": "ana" }, "priority": 3 }),
    );
    let old = converted("example.com/v1alpha1", hub.clone()).expect("to v1alpha1");
    assert_eq!(old["spec"], json!({ "title": "t", "assignee": "ana" }));
    assert!(
        old["metadata"]["annotations"][super::CONVERSION_DATA].is_string(),
        "what v1alpha1 cannot hold is kept beside it: {old}"
    );
    // Read back unchanged, and the annotation does not reach the stored version.
    assert_eq!(converted("example.com/v1", old.clone()).unwrap(), hub);

    // Edited through v1alpha1 (what `kubectl label` or an old client does): the edit lands,
    // the hub-only field stays.
    let mut edited = old.clone();
    edited["spec"]["title"] = json!("renamed");
    edited["metadata"]["labels"] = json!({ "team": "a" });
    let back = converted("example.com/v1", edited).unwrap();
    assert_eq!(
        back["spec"],
        json!({ "summary": "renamed", "owner": { "name": "ana" }, "priority": 3 })
    );
    assert_eq!(back["metadata"]["labels"], json!({ "team": "a" }));
    assert!(back["metadata"].get("annotations").is_none(), "{back}");
}

#[test]
fn every_version_pair_round_trips_and_nothing_is_annotated_when_nothing_would_be_lost() {
    let hub = stored(
        "example.com/v1",
        json!({ "summary": "t", "owner": { "name": null } }),
    );
    let old = converted("example.com/v1alpha1", hub.clone()).unwrap();
    assert!(old["metadata"].get("annotations").is_none(), "{old}");
    for (from, through) in [
        (hub.clone(), "example.com/v1alpha1"),
        (old.clone(), "example.com/v1"),
    ] {
        let there = converted(through, from.clone()).unwrap();
        let api = from["apiVersion"].as_str().unwrap();
        assert_eq!(converted(api, there).unwrap(), from, "through {through}");
    }
}

#[test]
fn a_field_this_binary_does_not_know_fails_the_conversion_naming_it() {
    // A newer CRD during a rolling update: v1alpha1 gained a field this binary lacks.
    let newer = stored(
        "example.com/v1alpha1",
        json!({ "title": "t", "assignee": null, "due": "friday", "extra": { "a": 1 } }),
    );
    let message = converted("example.com/v1", newer).unwrap_err();
    assert!(
        message.contains("spec.due, spec.extra not known"),
        "{message}"
    );
    assert!(message.contains("would drop"), "{message}");
}

#[test]
fn a_panicking_conversion_fails_the_review_with_a_message() {
    #[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, CustomResource)]
    #[kube(group = "example.com", version = "v2", kind = "Ticket", namespaced)]
    pub struct BrokenSpec {
        pub summary: String,
    }
    impl From<BrokenSpec> for v1::TicketSpec {
        fn from(_: BrokenSpec) -> Self {
            panic!("not written yet")
        }
    }
    impl From<v1::TicketSpec> for BrokenSpec {
        fn from(new: v1::TicketSpec) -> Self {
            BrokenSpec {
                summary: new.summary,
            }
        }
    }
    let converter = Converter::hub::<v1::Ticket>().spoke::<Ticket>().build();
    let review = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {
            "uid": "u-3",
            "desiredAPIVersion": "example.com/v1",
            "objects": [stored("example.com/v2", json!({ "summary": "t" }))],
        },
    });
    let answered = converter.review(serde_json::from_value(review).unwrap());
    let answered = serde_json::to_value(answered).unwrap();
    let message = answered["response"]["result"]["message"].as_str().unwrap();
    assert!(
        message.contains("cannot convert Ticket ns/t from v2 to v1")
            && message.contains("panicked")
            && message.contains("not written yet"),
        "{message}"
    );
}
