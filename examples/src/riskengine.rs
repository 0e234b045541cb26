//! The `RiskEngine` custom resource of a multi-tenant platform, driven by
//! `specs/riskengine.yaml`: each tenant (namespace) runs its own risk engines.
//!
//! - `spec.version` must be on the platform's allow-list, a ConfigMap in the platform's
//!   namespace (key `versions`, comma-separated) that the operator watches: a version off the
//!   list is the condition `VersionAllowed=False` with a message saying what to do, and a
//!   change of the list reconciles every RiskEngine at once.
//! - `spec.timeoutSeconds` must lie in [30, 300]: the CRD's schema says so, and the API server
//!   refuses other values with a message naming the field; the operator never sees them.
//! - Children, applied server-side and read from the operator's cache: a ConfigMap with the
//!   rendered config, and a Secret with the engine's credentials (generated once, never
//!   rotated by a reconcile). Deletion runs the finalizer's cleanup, which deletes both.
//!
//! Phases: Pending → Validating → Deploying → Active ⇄ Degraded, back to Validating when the
//! version leaves the allow-list, Failed when deploying takes longer than two minutes.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DeleteParams;
use kube::runtime::watcher;
use kube::{Api, Client, CustomResource, ResourceExt};
use kube_fsm::handler::ContextError;
use kube_fsm::machine::ConditionError;
use kube_fsm::{Cleanup, MachineStatus, Next, Step, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// The label on the allow-list and on every child ([`crate::MANAGED_BY`]): the operator watches
// only objects with it (the Database's too: in one process, the two machines share one watch).
use crate::MANAGED_BY;

/// The allow-list ConfigMap's name (in the platform's namespace).
pub const ALLOW_LIST: &str = "riskengine-versions";

/// The allow-list's key holding the versions.
pub const VERSIONS_KEY: &str = "versions";

/// The platform's allow-list in `namespace`: the versions a RiskEngine may run
/// (comma-separated), labelled as part of the platform so the operator's watch sees it.
pub fn allow_list(namespace: &str, versions: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(ALLOW_LIST.into()),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([(MANAGED_BY.0.into(), MANAGED_BY.1.into())])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(VERSIONS_KEY.into(), versions.into())])),
        ..ConfigMap::default()
    }
}

/// Writes the allow-list of `namespace` (server-side apply, as the platform team).
///
/// # Errors
/// The API server's refusal.
pub async fn apply_allow_list(
    client: &Client,
    namespace: &str,
    versions: &str,
) -> Result<(), kube::Error> {
    kube::Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .patch(
            ALLOW_LIST,
            &kube::api::PatchParams::apply("platform-team").force(),
            &kube::api::Patch::Apply(&allow_list(namespace, versions)),
        )
        .await
        .map(drop)
}

/// A RiskEngine `name` of `version` (a 60 s evaluation timeout, no parameters).
pub fn engine(name: &str, version: &str) -> RiskEngine {
    RiskEngine::new(
        name,
        RiskEngineSpec {
            version: version.into(),
            timeout_seconds: 60,
            parameters: BTreeMap::new(),
        },
    )
}

/// The label selector of the watched ConfigMaps and Secrets.
pub fn selector() -> String {
    crate::child_selector()
}

/// A tenant's risk engine: the spec the tenant writes.
#[state_machine(spec = "../specs/riskengine.yaml")]
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "example.kube-fsm.dev",
    version = "v1",
    kind = "RiskEngine",
    namespaced,
    status = "RiskEngineStatus",
    shortname = "re"
)]
#[serde(rename_all = "camelCase")]
pub struct RiskEngineSpec {
    /// The risk engine release; must be on the platform's allow-list.
    pub version: String,
    /// How long one risk evaluation may take, in seconds.
    #[schemars(range(min = 30, max = 300))]
    pub timeout_seconds: u32,
    /// Engine parameters, rendered into the config.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
}

/// What the operator reports about a RiskEngine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RiskEngineStatus {
    /// Phase, conditions, observedGeneration and phase entry time, owned by kube-fsm.
    #[serde(flatten)]
    pub machine: MachineStatus<RiskEnginePhase>,
    /// The version the rendered config is for, once deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_version: Option<String>,
    /// The ConfigMap holding the rendered config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<String>,
}

/// Why a handler failed; the engine logs it and retries the object with backoff.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// A request for a child failed, or a cache is missing.
    #[error("children: {0}")]
    Child(#[from] ContextError),
    /// The cleanup's delete failed.
    #[error("cleanup: {0}")]
    Kube(#[from] kube::Error),
    /// A condition was rejected (a bug: reasons are constants).
    #[error(transparent)]
    Condition(#[from] ConditionError),
    /// The operating system's random generator could not make credentials.
    #[error("cannot make credentials: {0}")]
    Random(#[from] getrandom::Error),
}

/// The handlers: where the platform keeps its allow-list. They hold no client: every request
/// goes through the step's (or, in cleanup, the given) `Context`.
#[derive(Clone, Debug)]
pub struct Handlers {
    platform_namespace: String,
}

/// The operator for RiskEngines in every namespace: children (ConfigMaps and Secrets with the
/// [`crate::MANAGED_BY`] label) owned and cached, and the allow-list watched, so that a change of it
/// reconciles every RiskEngine.
pub fn operator(client: Client, handlers: Handlers) -> kube_fsm::Operator<RiskEngine, Handlers> {
    let labelled = || watcher::Config::default().labels(&selector());
    let platform = handlers.platform_namespace.clone();
    kube_fsm::Operator::<RiskEngine, Handlers>::new(client, handlers)
        .reporter("riskengine-operator")
        .owns::<ConfigMap>(labelled())
        .owns::<Secret>(labelled())
        .watches_shared::<ConfigMap>(labelled(), move |cm| is_allow_list(cm, &platform))
}

fn is_allow_list(cm: &ConfigMap, platform: &str) -> bool {
    cm.metadata.name.as_deref() == Some(ALLOW_LIST)
        && cm.metadata.namespace.as_deref() == Some(platform)
}

/// What the allow-list says about a version.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Allowed,
    NotListed(Vec<String>),
    NoList,
}

/// The versions of an allow-list ConfigMap's `versions` key.
fn listed(cm: &ConfigMap) -> Vec<String> {
    cm.data
        .as_ref()
        .and_then(|d| d.get(VERSIONS_KEY))
        .map(|v| {
            v.split([',', ' ', '\n'])
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

impl Handlers {
    /// Handlers reading the allow-list from `platform_namespace`.
    pub fn new(platform_namespace: impl Into<String>) -> Self {
        Handlers {
            platform_namespace: platform_namespace.into(),
        }
    }

    /// Checks the version against the cached allow-list and reports it as `VersionAllowed`.
    fn check_version(
        &self,
        engine: &RiskEngine,
        step: &mut Step<RiskEngine>,
    ) -> Result<bool, HandlerError> {
        let list = step
            .cache::<ConfigMap>()?
            .get(ALLOW_LIST, Some(&self.platform_namespace));
        let version = &engine.spec.version;
        let verdict = match list {
            None => Verdict::NoList,
            Some(cm) => {
                let versions = listed(&cm);
                if versions.contains(version) {
                    Verdict::Allowed
                } else {
                    Verdict::NotListed(versions)
                }
            }
        };
        let (allowed, reason, message) = match verdict {
            Verdict::Allowed => (
                true,
                "Allowed",
                format!("version {version} is on the platform's allow-list"),
            ),
            Verdict::NotListed(versions) => (
                false,
                "VersionNotAllowed",
                format!(
                    "version {version} is not on the platform's allow-list ({}); set \
                     spec.version to one of those, or ask the platform team to add it to \
                     ConfigMap {}/{ALLOW_LIST}",
                    versions.join(", "),
                    self.platform_namespace
                ),
            ),
            Verdict::NoList => (
                false,
                "AllowListMissing",
                format!(
                    "the platform's allow-list ConfigMap {}/{ALLOW_LIST} (label {}) does not \
                     exist; no version can be approved",
                    self.platform_namespace,
                    selector()
                ),
            ),
        };
        step.set_condition(
            RiskEngineCondition::VersionAllowed,
            allowed,
            reason,
            message,
        )?;
        Ok(allowed)
    }

    /// Applies the config (no request while unchanged) and creates the credentials once;
    /// reports `ConfigReady`, and the deployed version and config in the status.
    async fn deploy(
        &self,
        engine: &RiskEngine,
        step: &mut Step<RiskEngine>,
    ) -> Result<(), HandlerError> {
        step.apply(rendered_config(engine)).await?;
        if step.child::<Secret>(&credentials_name(engine))?.is_none() {
            step.apply(credentials(engine)?).await?;
        }
        let name = config_name(engine);
        step.set_condition(
            RiskEngineCondition::ConfigReady,
            true,
            "Rendered",
            format!(
                "config {name} and credentials {} in place",
                credentials_name(engine)
            ),
        )?;
        let status = step.status_mut();
        status.active_version = Some(engine.spec.version.clone());
        status.config_map = Some(name);
        Ok(())
    }

    /// Whether both children are in the cache; if not, `ConfigReady` goes False.
    fn children_present(
        &self,
        engine: &RiskEngine,
        step: &mut Step<RiskEngine>,
    ) -> Result<bool, HandlerError> {
        let config = step.child::<ConfigMap>(&config_name(engine))?.is_some();
        let secret = step.child::<Secret>(&credentials_name(engine))?.is_some();
        if !(config && secret) {
            let missing = if config {
                "credentials Secret"
            } else {
                "config ConfigMap"
            };
            step.set_condition(
                RiskEngineCondition::ConfigReady,
                false,
                "ChildMissing",
                format!("the {missing} is gone; recreating it"),
            )?;
        }
        Ok(config && secret)
    }
}

fn config_name(engine: &RiskEngine) -> String {
    format!("{}-config", engine.name_any())
}

fn credentials_name(engine: &RiskEngine) -> String {
    format!("{}-credentials", engine.name_any())
}

fn labels(engine: &RiskEngine) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned()),
        (
            "example.kube-fsm.dev/riskengine".to_owned(),
            engine.name_any(),
        ),
    ])
}

/// The engine's settings, as its config file holds them.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Settings<'a> {
    version: &'a str,
    tenant: String,
    evaluation_timeout_seconds: u32,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    parameters: &'a BTreeMap<String, String>,
}

/// The rendered config: the engine's settings as one YAML document, serialised (never
/// templated: a tenant's parameters are data, whatever characters they hold).
fn rendered_config(engine: &RiskEngine) -> ConfigMap {
    let settings = Settings {
        version: &engine.spec.version,
        tenant: engine.namespace().unwrap_or_default(),
        evaluation_timeout_seconds: engine.spec.timeout_seconds,
        parameters: &engine.spec.parameters,
    };
    // Strings and a map of strings always serialise.
    let config = serde_saphyr::to_string(&settings).unwrap_or_default();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(config_name(engine)),
            labels: Some(labels(engine)),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("config.yaml".to_owned(), config)])),
        ..ConfigMap::default()
    }
}

/// Fresh credentials: a token of 32 bytes from the operating system's CSPRNG, as hex.
fn credentials(engine: &RiskEngine) -> Result<Secret, getrandom::Error> {
    let token = crate::random_hex(32)?;
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(credentials_name(engine)),
            labels: Some(labels(engine)),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "token".to_owned(),
            ByteString(token.into_bytes()),
        )])),
        ..Secret::default()
    })
}

impl RiskEngineHandler for Handlers {
    type Error = HandlerError;

    /// Nothing to check before validation.
    async fn on_pending(
        &self,
        _: &RiskEngine,
        _: &mut Step<RiskEngine>,
    ) -> Result<RiskEnginePendingNext, HandlerError> {
        Ok(RiskEnginePendingEvent::Accept.into())
    }

    /// Checks the version; `when VersionAllowed` moves on. A version off the list stays here
    /// with a message, and is looked at again when the allow-list changes.
    async fn on_validating(
        &self,
        engine: &RiskEngine,
        step: &mut Step<RiskEngine>,
    ) -> Result<RiskEngineValidatingNext, HandlerError> {
        self.check_version(engine, step)?;
        Ok(Next::Stay)
    }

    /// Renders the children; `when ConfigReady` moves to Active in the same status write.
    async fn on_deploying(
        &self,
        engine: &RiskEngine,
        step: &mut Step<RiskEngine>,
    ) -> Result<RiskEngineDeployingNext, HandlerError> {
        self.deploy(engine, step).await?;
        Ok(Next::Stay)
    }

    /// Keeps the children as the spec says (no request while they are) and the version
    /// allowed; a missing child degrades, a version off the list goes back to Validating.
    async fn on_active(
        &self,
        engine: &RiskEngine,
        step: &mut Step<RiskEngine>,
    ) -> Result<RiskEngineActiveNext, HandlerError> {
        if self.check_version(engine, step)? && self.children_present(engine, step)? {
            self.deploy(engine, step).await?;
        }
        Ok(Next::Stay)
    }

    /// Recreates what is missing; `when ConfigReady` moves back to Active.
    async fn on_degraded(
        &self,
        engine: &RiskEngine,
        step: &mut Step<RiskEngine>,
    ) -> Result<RiskEngineDegradedNext, HandlerError> {
        if self.check_version(engine, step)? {
            self.deploy(engine, step).await?;
        }
        Ok(Next::Stay)
    }

    /// Deletes both children (envtest runs no garbage collector to follow the owner).
    async fn cleanup(
        &self,
        engine: &RiskEngine,
        context: &kube_fsm::Context,
    ) -> Result<Cleanup, HandlerError> {
        let ns = engine.namespace().unwrap_or_else(|| "default".into());
        let configs: Api<ConfigMap> = Api::namespaced(context.client().clone(), &ns);
        let secrets: Api<Secret> = Api::namespaced(context.client().clone(), &ns);
        for deleted in [
            configs
                .delete(&config_name(engine), &DeleteParams::background())
                .await
                .map(drop),
            secrets
                .delete(&credentials_name(engine), &DeleteParams::background())
                .await
                .map(drop),
        ] {
            match deleted {
                Ok(()) => {}
                Err(kube::Error::Api(status)) if status.is_not_found() => {}
                Err(err) => return Err(err.into()),
            }
        }
        Ok(Cleanup::Done)
    }
}

/// The RiskEngine CRD, with the machine's CEL rules and printer columns.
pub fn crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    kube_fsm::crd::<RiskEngine>()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;
    use kube_fsm::watch::Cache;
    use kube_fsm::{Context, testing};

    use super::*;

    const PLATFORM: &str = "platform";

    fn engine(version: &str) -> RiskEngine {
        let mut engine = RiskEngine::new(
            "risk",
            RiskEngineSpec {
                version: version.into(),
                timeout_seconds: 60,
                parameters: BTreeMap::new(),
            },
        );
        engine.metadata.namespace = Some("tenant-a".into());
        engine.metadata.uid = Some("uid-1".into());
        engine
    }

    /// A context with `config_maps` cached, whose client answers every request with its own
    /// body (as an apply of a new object would).
    fn context(config_maps: Vec<ConfigMap>) -> std::sync::Arc<Context> {
        let (client, _) = kube_fsm_testkit::canned::client(kube_fsm_testkit::canned::echo);
        std::sync::Arc::new(
            Context::new(client)
                .with_cache(Cache::from_objects(config_maps))
                .with_cache(Cache::<Secret>::from_objects([])),
        )
    }

    fn handlers() -> Handlers {
        Handlers::new(PLATFORM)
    }

    #[test]
    fn a_tenants_parameters_are_data_in_the_config_never_yaml_of_their_own() {
        let mut engine = engine("1.2.0");
        engine.spec.parameters = BTreeMap::from([
            ("limit".to_owned(), "7\"\ntenant: other".to_owned()),
            ("x: y\ntenant".to_owned(), "z".to_owned()),
        ]);
        let config = rendered_config(&engine);
        let text = &config.data.as_ref().expect("data")["config.yaml"];
        let read: serde_json::Value = serde_saphyr::from_str(text).expect("one YAML document");
        assert_eq!(read["tenant"], "tenant-a", "{text}");
        assert_eq!(read["parameters"]["limit"], "7\"\ntenant: other", "{text}");
        assert_eq!(read["parameters"]["x: y\ntenant"], "z", "{text}");
        assert_eq!(read["evaluationTimeoutSeconds"], 60);
    }

    #[test]
    fn credentials_are_32_random_bytes_and_differ_each_time() {
        let engine = engine("1.2.0");
        let token = |secret: Result<Secret, _>| {
            secret.expect("random").data.expect("data")["token"]
                .0
                .clone()
        };
        let (a, b) = (token(credentials(&engine)), token(credentials(&engine)));
        assert_eq!(a.len(), 64, "32 bytes, hex");
        assert_ne!(a, b);
    }

    #[tokio::test]
    async fn a_version_off_the_list_stays_in_validating_with_a_message() {
        let context = context(vec![allow_list(PLATFORM, "1.4, 1.5")]);
        let engine = testing::in_phase(engine("0.9"), RiskEnginePhase::Validating);
        let outcome = testing::step_in(&handlers(), &engine, Timestamp::now(), &context)
            .await
            .expect("no error: a condition");
        assert_eq!(outcome.phase, RiskEnginePhase::Validating);
        let condition = &outcome.conditions()[0];
        assert_eq!(condition.reason, "VersionNotAllowed");
        assert!(
            condition
                .message
                .contains("0.9 is not on the platform's allow-list (1.4, 1.5)"),
            "{}",
            condition.message
        );
    }

    #[tokio::test]
    async fn a_missing_allow_list_is_a_condition_too() {
        let context = context(vec![]);
        let engine = testing::in_phase(engine("1.4"), RiskEnginePhase::Validating);
        let outcome = testing::step_in(&handlers(), &engine, Timestamp::now(), &context)
            .await
            .expect("no error");
        assert_eq!(outcome.conditions()[0].reason, "AllowListMissing");
    }

    #[tokio::test]
    async fn an_allowed_version_deploys_and_reports_it_in_the_status() {
        let context = context(vec![allow_list(PLATFORM, "1.4 1.5")]);
        let validating = testing::in_phase(engine("1.5"), RiskEnginePhase::Validating);
        let handlers = handlers();
        let validated = testing::step_in(&handlers, &validating, Timestamp::now(), &context)
            .await
            .expect("validated");
        assert_eq!(validated.phase, RiskEnginePhase::Deploying);
        let mut deploying = validating.clone();
        testing::apply(&mut deploying, &validated);
        let deployed = testing::step_in(&handlers, &deploying, Timestamp::now(), &context)
            .await
            .expect("deployed");
        assert_eq!(deployed.phase, RiskEnginePhase::Active);
        assert_eq!(deployed.status.active_version.as_deref(), Some("1.5"));
        assert_eq!(deployed.status.config_map.as_deref(), Some("risk-config"));
    }

    #[test]
    fn the_crd_bounds_the_timeout() {
        let crd = serde_json::to_value(crd()).expect("encodes");
        let timeout = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["timeoutSeconds"];
        assert_eq!(timeout["minimum"], 30.0);
        assert_eq!(timeout["maximum"], 300.0);
    }
}
