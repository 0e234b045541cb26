//! One machine, two served versions, on the real API server: the CRD `crd_versions` makes
//! serves `v1alpha1` and `v1` (stored) with the machine on both; an operator running on `v1`
//! converges objects created in either version; each object reads back the same in the other
//! version (spec and status), and its phase is the one the operator wrote.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;
use kube_fsm::Step;
use kube_fsm_testkit::cluster::{self, install_crd, wait_phase};
use kube_fsm_testkit::operator::{self, Running};
use kube_fsm_testkit::tickets::{self, v1, v1alpha1};

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

#[tokio::test]
async fn objects_of_either_version_converge_and_read_back_the_same_in_the_other() {
    let test = "versions::both";
    let Some((client, ns)) = cluster::prepare(test, "fsm-versions").await else {
        return;
    };
    install_crd(&client, tickets::crd()).await;
    let served: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = served
        .get("tickets.fsm.example.com")
        .await
        .expect("the CRD");
    let versions: Vec<(String, bool, bool)> = crd
        .spec
        .versions
        .iter()
        .map(|v| (v.name.clone(), v.served, v.storage))
        .collect();
    assert_eq!(
        versions,
        [("v1".into(), true, true), ("v1alpha1".into(), true, false)],
        "both served, v1 stored"
    );
    for version in &crd.spec.versions {
        let columns = version
            .additional_printer_columns
            .as_deref()
            .unwrap_or_default();
        assert!(
            columns.iter().any(|c| c.name == "Phase"),
            "{}: the Phase column",
            version.name
        );
    }

    let running = Running::spawn(operator::in_namespace::<v1::Ticket, _>(&client, &ns, Desk));
    let old: Api<v1alpha1::Ticket> = Api::namespaced(client.clone(), &ns);
    let new: Api<v1::Ticket> = Api::namespaced(client.clone(), &ns);
    let spec_old = v1alpha1::TicketSpec {
        title: "filed as v1alpha1".into(),
    };
    old.create(
        &PostParams::default(),
        &v1alpha1::Ticket::new("old", spec_old.clone()),
    )
    .await
    .expect("create as v1alpha1");
    let spec_new = v1::TicketSpec {
        title: "filed as v1".into(),
    };
    new.create(
        &PostParams::default(),
        &v1::Ticket::new("new", spec_new.clone()),
    )
    .await
    .expect("create as v1");
    for name in ["old", "new"] {
        wait_phase(&new, name, "Closed").await;
    }
    for name in ["old", "new"] {
        let as_old = old.get(name).await.expect("read as v1alpha1");
        let as_new = new.get(name).await.expect("read as v1");
        assert_eq!(
            as_old.spec.title, as_new.spec.title,
            "{name}: the spec in both versions"
        );
        assert_eq!(
            serde_json::to_value(&as_old.status).expect("JSON"),
            serde_json::to_value(&as_new.status).expect("JSON"),
            "{name}: the status in both versions"
        );
        assert_eq!(
            as_old
                .status
                .as_ref()
                .and_then(|s| s.machine.phase.as_ref())
                .map(ToString::to_string),
            Some("Closed".to_owned()),
            "{name}: the phase the operator wrote, read as v1alpha1"
        );
    }
    assert_eq!(old.get("old").await.expect("get").spec, spec_old);
    assert_eq!(new.get("new").await.expect("get").spec, spec_new);
    running.stop().await;
}
