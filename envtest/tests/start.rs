//! A started cluster serves namespaces, CRDs and their objects, and leaves nothing behind.
//! Without an API server these tests skip loudly (fail with `KUBE_FSM_REQUIRE_CLUSTER=1`).

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::time::Instant;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionNames, CustomResourceDefinitionSpec,
    CustomResourceDefinitionVersion, CustomResourceValidation, JSONSchemaProps,
};
use kube::api::{Api, ApiResource, DynamicObject, ObjectMeta, PostParams};
use kube_fsm_envtest::{Source, TestCluster};

const GROUP: &str = "envtest.kube-fsm.dev";

fn object(properties: &[(&str, JSONSchemaProps)]) -> JSONSchemaProps {
    JSONSchemaProps {
        type_: Some("object".into()),
        properties: Some(
            properties
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..JSONSchemaProps::default()
    }
}

/// `widgets.envtest.kube-fsm.dev`: a namespaced `Widget` whose spec has an integer `size`.
fn widget_crd() -> CustomResourceDefinition {
    let size = JSONSchemaProps {
        type_: Some("integer".into()),
        minimum: Some(0.0),
        ..JSONSchemaProps::default()
    };
    CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(format!("widgets.{GROUP}")),
            ..ObjectMeta::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: GROUP.into(),
            names: CustomResourceDefinitionNames {
                kind: "Widget".into(),
                plural: "widgets".into(),
                singular: Some("widget".into()),
                list_kind: Some("WidgetList".into()),
                ..CustomResourceDefinitionNames::default()
            },
            scope: "Namespaced".into(),
            versions: vec![CustomResourceDefinitionVersion {
                name: "v1".into(),
                served: true,
                storage: true,
                schema: Some(CustomResourceValidation {
                    open_api_v3_schema: Some(object(&[("spec", object(&[("size", size)]))])),
                }),
                ..CustomResourceDefinitionVersion::default()
            }],
            ..CustomResourceDefinitionSpec::default()
        },
        status: None,
    }
}

fn widgets() -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: "v1".into(),
        api_version: format!("{GROUP}/v1"),
        kind: "Widget".into(),
        plural: "widgets".into(),
    }
}

#[tokio::test]
async fn serves_namespaces_crds_and_their_objects() {
    let t0 = Instant::now();
    let Some(cluster) = TestCluster::start("serves_namespaces_crds_and_their_objects").await else {
        return;
    };
    let version = cluster.client().apiserver_version().await.unwrap();
    eprintln!(
        "started {} from {:?} in {:?}",
        version.git_version,
        cluster.source(),
        t0.elapsed()
    );

    let ns = cluster.namespace("envtest").await.unwrap();
    let suffix = ns.strip_prefix("envtest-").unwrap();
    assert_eq!(suffix.len(), 6, "{ns}");
    assert!(
        suffix
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    );
    Api::<Namespace>::all(cluster.client())
        .get(&ns)
        .await
        .unwrap();

    cluster.install_crd(widget_crd()).await.unwrap();
    // Installing it again (as every test of a suite may) replaces it.
    cluster.install_crd(widget_crd()).await.unwrap();
    let crd = Api::<CustomResourceDefinition>::all(cluster.client())
        .get(&format!("widgets.{GROUP}"))
        .await
        .unwrap();
    let conditions = crd.status.unwrap().conditions.unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );

    let api: Api<DynamicObject> = Api::namespaced_with(cluster.client(), &ns, &widgets());
    let widget =
        DynamicObject::new("first", &widgets()).data(serde_json::json!({ "spec": { "size": 3 } }));
    api.create(&PostParams::default(), &widget).await.unwrap();
    let stored = api.get("first").await.unwrap();
    assert_eq!(stored.data["spec"]["size"], 3);
    // The schema is enforced.
    let negative = DynamicObject::new("second", &widgets())
        .data(serde_json::json!({ "spec": { "size": -1 } }));
    let refused = api.create(&PostParams::default(), &negative).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 422),
        "{refused:?}"
    );
}

#[tokio::test]
async fn drop_stops_the_servers_and_removes_the_directory() {
    let Some(cluster) =
        TestCluster::start("drop_stops_the_servers_and_removes_the_directory").await
    else {
        return;
    };
    if let Source::Existing { .. } = cluster.source() {
        eprintln!("the user's cluster: nothing to stop");
        return;
    }

    // The kubeconfig file serves a client of its own, as it would kubectl.
    let kubeconfig = kube::config::Kubeconfig::read_from(cluster.kubeconfig()).unwrap();
    let server = kubeconfig.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.server.clone())
        .unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config)
        .unwrap()
        .apiserver_version()
        .await
        .unwrap();

    let port: u16 = server.rsplit(':').next().unwrap().parse().unwrap();
    let dir = cluster.kubeconfig().parent().unwrap().to_owned();
    assert!(dir.join("etcd.log").is_file());
    assert!(TcpStream::connect(("127.0.0.1", port)).is_ok());

    drop(cluster);
    let refused = TcpStream::connect(("127.0.0.1", port));
    assert!(refused.is_err(), "port {port} still answers");
    assert!(!dir.exists(), "{} is still there", dir.display());
}
