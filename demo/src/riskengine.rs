//! `demo --example riskengine`: the multi-tenant RiskEngine operator end to end on a real API
//! server. Every step checks what it shows, so the demo exits non-zero when the operator or
//! the API server does not behave as described.
//!
//! 1. The API server refuses a RiskEngine whose `spec.timeoutSeconds` is out of [30, 300].
//! 2. RiskEngines in three tenant namespaces reach Active with a config and credentials each;
//!    one whose version is off the allow-list waits in Validating with a message.
//! 3. The platform adds that version to the allow-list: the watch of the list reconciles it,
//!    and it reaches Active.
//! 4. A credentials Secret deleted by accident is recreated, the engine Active again.
//! 5. Deleting the RiskEngines runs their cleanup: no child is left.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use kube_fsm_examples::riskengine::{
    self, ALLOW_LIST, Handlers, RiskEngine, RiskEnginePhase, RiskEngineSpec,
};
use kube_fsm_testkit::operator::Running;

use crate::{BoxError, cluster};

/// Options of the RiskEngine demo.
#[derive(Clone, Debug)]
pub struct RiskDemoOptions {
    /// Tenant namespaces are `{prefix}-tenant-a`, `-b`, `-c`.
    pub prefix: String,
    /// Where the platform keeps its allow-list.
    pub platform_namespace: String,
    /// How long each wait may take.
    pub timeout: Duration,
    /// Leave the objects in place at the end.
    pub keep: bool,
    /// The operator runs already (the process's Manager runs both machines).
    pub shared: bool,
}

/// The engines the demo creates: (tenant, name, version).
const ENGINES: [(&str, &str, &str); 7] = [
    ("a", "pricing", "1.5"),
    ("a", "fraud", "2.0"),
    ("b", "pricing", "1.5"),
    ("b", "credit", "1.4"),
    ("c", "pricing", "2.0"),
    ("c", "fraud", "2.0"),
    ("c", "legacy", "0.9"),
];

/// Runs the demo; exits 0 when every step showed what it should.
pub async fn run(options: RiskDemoOptions) -> Result<ExitCode, BoxError> {
    let start = Instant::now();
    let client = cluster::client().await?;
    let tenants: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|t| format!("{}-tenant-{t}", options.prefix))
        .collect();
    println!(
        "kube-fsm demo: RiskEngines of tenants {} (allow-list in {})",
        tenants.join(", "),
        options.platform_namespace
    );
    cluster::install_crd(&client, riskengine::crd()).await?;
    for ns in tenants.iter().chain([&options.platform_namespace]) {
        cluster::ensure_namespace(&client, ns).await?;
    }
    set_allow_list(&client, &options.platform_namespace, "1.4, 1.5, 2.0").await?;
    println!(
        "allow-list {}/{ALLOW_LIST}: 1.4, 1.5, 2.0",
        options.platform_namespace
    );

    refuse_out_of_range_timeout(&client, &tenants[0]).await?;

    let handlers = Handlers::new(options.platform_namespace.clone());
    let operator =
        (!options.shared).then(|| Running::spawn(riskengine::operator(client.clone(), handlers)));
    let result = scenario(&client, &tenants, &options, start).await;
    if let Some(operator) = operator {
        operator.stop().await;
    }
    match result {
        Ok(()) => {
            println!(
                "the RiskEngine demo held every promise in {:.1} s",
                start.elapsed().as_secs_f64()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(err) => {
            eprintln!("error: {err}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Steps 2 to 4, with the operator running.
async fn scenario(
    client: &Client,
    tenants: &[String],
    options: &RiskDemoOptions,
    start: Instant,
) -> Result<(), BoxError> {
    for (tenant, name, version) in ENGINES {
        let api = engines(client, &tenant_ns(tenants, tenant));
        let spec = RiskEngineSpec {
            version: version.into(),
            timeout_seconds: 60,
            parameters: BTreeMap::from([("model".to_owned(), format!("{name}-v1"))]),
        };
        match api
            .create(&PostParams::default(), &RiskEngine::new(name, spec))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_already_exists() => {}
            Err(err) => return Err(err.into()),
        }
    }
    println!(
        "created {} RiskEngines; the operator reconciles them",
        ENGINES.len()
    );

    let legacy_ns = tenant_ns(tenants, "c");
    wait_until(client, tenants, options.timeout, |all| {
        all.iter().all(|e| {
            let legacy = e.name_any() == "legacy";
            let phase = phase(e);
            if legacy {
                phase == Some(RiskEnginePhase::Validating)
                    && condition(e, "VersionAllowed").is_some_and(|(s, _)| s == "False")
            } else {
                phase == Some(RiskEnginePhase::Active)
            }
        }) && all.len() == ENGINES.len()
    })
    .await
    .map_err(|table| format!("not every RiskEngine settled as expected:\n{table}"))?;
    println!(
        "after {:.1} s: six Active, legacy waiting for the allow-list:\n{}",
        start.elapsed().as_secs_f64(),
        table(&list(client, tenants).await?)
    );
    check_children(client, tenants, ENGINES.len() - 1).await?;

    set_allow_list(client, &options.platform_namespace, "0.9, 1.4, 1.5, 2.0").await?;
    println!("the platform adds 0.9 to the allow-list");
    wait_until(client, tenants, options.timeout, |all| {
        all.iter()
            .all(|e| phase(e) == Some(RiskEnginePhase::Active))
    })
    .await
    .map_err(|table| format!("legacy did not follow the allow-list:\n{table}"))?;
    let legacy = engines(client, &legacy_ns).get("legacy").await?;
    println!(
        "legacy is Active (version {}) {:.1} s after the start",
        legacy
            .status
            .and_then(|s| s.active_version)
            .unwrap_or_default(),
        start.elapsed().as_secs_f64()
    );
    check_children(client, tenants, ENGINES.len()).await?;
    repair_lost_credentials(client, &tenant_ns(tenants, "a"), options.timeout).await?;

    if options.keep {
        println!("--keep: leaving the RiskEngines and their children in place");
        return Ok(());
    }
    for ns in tenants {
        engines(client, ns)
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await?;
    }
    wait_until(client, tenants, options.timeout, <[RiskEngine]>::is_empty)
        .await
        .map_err(|table| format!("RiskEngines left after deletion:\n{table}"))?;
    check_children(client, tenants, 0).await?;
    println!("deleted; the cleanup removed every config and credentials child");
    Ok(())
}

fn tenant_ns(tenants: &[String], tenant: &str) -> String {
    tenants
        .iter()
        .find(|ns| ns.ends_with(&format!("-tenant-{tenant}")))
        .cloned()
        .unwrap_or_default()
}

fn engines(client: &Client, ns: &str) -> Api<RiskEngine> {
    Api::namespaced(client.clone(), ns)
}

fn phase(engine: &RiskEngine) -> Option<RiskEnginePhase> {
    engine.status.as_ref()?.machine.phase()
}

fn condition(engine: &RiskEngine, type_: &str) -> Option<(String, String)> {
    let c = engine.status.as_ref()?.machine.condition(type_)?;
    Some((c.status.clone(), c.message.clone()))
}

/// Deletes the credentials of tenant a's `pricing`, as an accident would: the operator sees
/// the child gone, degrades the engine, recreates the Secret (a new token) and returns to
/// Active.
async fn repair_lost_credentials(
    client: &Client,
    ns: &str,
    timeout: Duration,
) -> Result<(), BoxError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let before = secrets.get("pricing-credentials").await?;
    secrets
        .delete("pricing-credentials", &DeleteParams::default())
        .await?;
    println!("deleted {ns}/pricing-credentials by accident");
    let deadline = Instant::now() + timeout;
    loop {
        let engine = engines(client, ns).get("pricing").await?;
        let recreated = secrets
            .get_opt("pricing-credentials")
            .await?
            .filter(|s| s.uid() != before.uid());
        if recreated.is_some() && phase(&engine) == Some(RiskEnginePhase::Active) {
            println!("the operator recreated it (a new token); pricing is Active again");
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("pricing-credentials not repaired within {timeout:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Step 1: the schema's bounds hold at the API server, with a message naming the field.
async fn refuse_out_of_range_timeout(client: &Client, ns: &str) -> Result<(), BoxError> {
    let spec = RiskEngineSpec {
        version: "1.5".into(),
        timeout_seconds: 10,
        parameters: BTreeMap::new(),
    };
    match engines(client, ns)
        .create(&PostParams::default(), &RiskEngine::new("too-eager", spec))
        .await
    {
        Err(kube::Error::Api(status))
            if status.code == 422 && status.message.contains("spec.timeoutSeconds") =>
        {
            println!(
                "the API server refuses timeoutSeconds: 10: {}",
                status.message
            );
            Ok(())
        }
        Err(err) => Err(format!("expected a 422 naming spec.timeoutSeconds, got: {err}").into()),
        Ok(_) => Err("the API server accepted timeoutSeconds: 10".into()),
    }
}

/// Writes the allow-list as the platform team would (its own field manager).
async fn set_allow_list(client: &Client, ns: &str, versions: &str) -> Result<(), BoxError> {
    Ok(riskengine::apply_allow_list(client, ns, versions).await?)
}

async fn list(client: &Client, tenants: &[String]) -> Result<Vec<RiskEngine>, BoxError> {
    let mut all = Vec::new();
    for ns in tenants {
        all.extend(
            engines(client, ns)
                .list(&ListParams::default())
                .await?
                .items,
        );
    }
    Ok(all)
}

/// Polls every 200 ms until `done` holds for the RiskEngines of all tenants; on timeout,
/// returns their table.
async fn wait_until(
    client: &Client,
    tenants: &[String],
    timeout: Duration,
    done: impl Fn(&[RiskEngine]) -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let all = list(client, tenants).await.map_err(|e| e.to_string())?;
        if done(&all) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(table(&all));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One line per RiskEngine: where, phase, and the message of its last relevant condition.
fn table(all: &[RiskEngine]) -> String {
    all.iter()
        .map(|e| {
            let note = match condition(e, "VersionAllowed") {
                Some((status, message)) if status != "True" => message,
                _ => condition(e, "ConfigReady")
                    .map(|(_, m)| m)
                    .unwrap_or_default(),
            };
            format!(
                "  {:<32} {:<11} {note}",
                format!("{}/{}", e.namespace().unwrap_or_default(), e.name_any()),
                phase(e).map(|p| p.to_string()).unwrap_or_default(),
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Checks that the tenants hold `expected` config ConfigMaps and as many Secrets.
async fn check_children(
    client: &Client,
    tenants: &[String],
    expected: usize,
) -> Result<(), BoxError> {
    let selector = ListParams::default().labels(&riskengine::selector());
    let (mut configs, mut secrets) = (0, 0);
    for ns in tenants {
        configs += Api::<ConfigMap>::namespaced(client.clone(), ns)
            .list_metadata(&selector)
            .await?
            .items
            .len();
        secrets += Api::<Secret>::namespaced(client.clone(), ns)
            .list_metadata(&selector)
            .await?
            .items
            .len();
    }
    if (configs, secrets) == (expected, expected) {
        Ok(())
    } else {
        Err(format!(
            "expected {expected} config ConfigMaps and Secrets, found {configs} and {secrets}"
        )
        .into())
    }
}
