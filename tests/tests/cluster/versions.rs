//! One machine, two served versions, on the real API server: `Ticket` is served as `v1alpha1`
//! and `v1` (stored), `v1` renamed and restructured the spec, and the operator's own webhook
//! server converts between them (hub-and-spoke) and reviews both. Objects created in either
//! version read back unchanged in both (generated specs, through the API server); an operator
//! running on `v1` converges objects of both; conversion never changes a status; an illegal
//! move written through either version is refused.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube_fsm::Step;
use kube_fsm_testkit::admission::{self, PROBE};
use kube_fsm_testkit::cluster::{self, wait_phase};
use kube_fsm_testkit::operator::{self, Running};
use kube_fsm_testkit::tickets::{self, v1, v1alpha1};
use serde_json::json;

/// Starts every ticket, then closes it.
#[derive(Clone, Copy, Debug)]
struct Desk;

impl v1::TicketHandler for Desk {
    type Error = std::convert::Infallible;

    async fn on_open(
        &self,
        _: &v1::Ticket,
        _: &mut Step<v1::Ticket>,
    ) -> Result<v1::TicketOpenNext, Self::Error> {
        Ok(v1::TicketOpenEvent::Start.into())
    }

    async fn on_working(
        &self,
        _: &v1::Ticket,
        _: &mut Step<v1::Ticket>,
    ) -> Result<v1::TicketWorkingNext, Self::Error> {
        Ok(v1::TicketWorkingEvent::Close.into())
    }
}

/// A generated `v1alpha1` spec: a title of awkward characters, an assignee or none.
fn generated(rng: &mut fastrand::Rng) -> v1alpha1::TicketSpec {
    const CHARS: &[char] = &[
        'a', 'Z', '0', ' ', '"', '\\', '/', 'é', '漢', '🙂', '\n', ':',
    ];
    let length = rng.usize(0..24);
    let title: String = (0..length)
        .map(|_| CHARS[rng.usize(0..CHARS.len())])
        .collect();
    let assignee = rng.bool().then(|| format!("user-{}", rng.u16(..)));
    v1alpha1::TicketSpec { title, assignee }
}

#[tokio::test]
async fn objects_of_either_version_read_back_unchanged_in_both_and_converge() {
    let test = "versions::converted";
    let Some(client) = cluster::client(test).await else {
        return;
    };
    let ns = admission::namespace(&client, "fsm-versions", &[]).await;
    let probe = v1::Ticket::new(PROBE, v1::TicketSpec::default());
    let registration =
        admission::serve_versions(&client, &ns, probe, tickets::crd(), tickets::converter()).await;
    let served: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = served
        .get("tickets.fsm.example.com")
        .await
        .expect("the CRD");
    let versions: BTreeMap<String, (bool, bool)> = crd
        .spec
        .versions
        .iter()
        .map(|v| (v.name.clone(), (v.served, v.storage)))
        .collect();
    assert_eq!(
        versions,
        BTreeMap::from([
            ("v1".into(), (true, true)),
            ("v1alpha1".into(), (true, false))
        ]),
        "both served, v1 stored"
    );
    assert_eq!(
        crd.spec.conversion.as_ref().map(|c| c.strategy.as_str()),
        Some("Webhook")
    );

    let old: Api<v1alpha1::Ticket> = Api::namespaced(client.clone(), &ns);
    let new: Api<v1::Ticket> = Api::namespaced(client.clone(), &ns);
    let seed = fastrand::u64(..);
    eprintln!("{test}: seed {seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut written = Vec::new();
    for i in 0..16 {
        let spec = generated(&mut rng);
        let name = format!("t-{i}");
        if i % 2 == 0 {
            old.create(
                &PostParams::default(),
                &v1alpha1::Ticket::new(&name, spec.clone()),
            )
            .await
            .unwrap_or_else(|e| panic!("create {name} as v1alpha1 ({spec:?}): {e}"));
        } else {
            let as_new: v1::TicketSpec = spec.clone().into();
            new.create(&PostParams::default(), &v1::Ticket::new(&name, as_new))
                .await
                .unwrap_or_else(|e| panic!("create {name} as v1 ({spec:?}): {e}"));
        }
        written.push((name, spec));
    }
    for (name, spec) in &written {
        let as_old = old.get(name).await.expect("read as v1alpha1");
        let as_new = new.get(name).await.expect("read as v1");
        assert_eq!(&as_old.spec, spec, "{name} as v1alpha1 (seed {seed})");
        assert_eq!(
            as_new.spec,
            spec.clone().into(),
            "{name} as v1 (seed {seed})"
        );
    }

    let running = Running::spawn(operator::in_namespace::<v1::Ticket, _>(&client, &ns, Desk));
    for (name, _) in &written {
        wait_phase(&new, name, "Closed").await;
    }
    for (name, spec) in &written {
        let as_old = old.get(name).await.expect("read as v1alpha1");
        let as_new = new.get(name).await.expect("read as v1");
        assert_eq!(
            serde_json::to_value(&as_old.status).expect("JSON"),
            serde_json::to_value(&as_new.status).expect("JSON"),
            "{name}: the status is the same in both versions"
        );
        assert_eq!(
            &as_old.spec, spec,
            "{name}: the spec after the operator's writes"
        );
    }

    // Closed is terminal: moving it back is refused through either version, in its words.
    let params = PatchParams::default();
    let back = Patch::Merge(json!({ "status": { "phase": "Open" } }));
    let via_old = old
        .patch_status("t-0", &params, &back)
        .await
        .expect_err("refused");
    let via_new = new
        .patch_status("t-1", &params, &back)
        .await
        .expect_err("refused");
    for refused in [via_old, via_new] {
        let said = refused.to_string();
        assert!(
            said.contains(
                "cannot move from Closed to Open: the Ticket state machine has no such transition"
            ),
            "{said}"
        );
    }
    running.stop().await;
    registration.remove().await;
}
