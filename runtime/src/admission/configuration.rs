//! The `ValidatingWebhookConfiguration` that registers the webhook, derived from the same CRD
//! [`crate::crd()`] returns: one webhook for the machine's rules and the platform layer, plus
//! one per tenant tier with the tier's namespace selector.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ServiceReference, ValidatingWebhook, ValidatingWebhookConfiguration,
    WebhookClientConfig,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    self as extensions, CustomResourceDefinition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use kube::CustomResourceExt;

use super::conversion::CONVERT_PATH;
use super::policy::{Policy, Tier};

/// The path of the machine's (and the platform layer's) webhook.
pub const PATH: &str = "/validate";
/// The path prefix of a tier's webhook: `/validate/tier/NAME`.
pub const TIER_PATH: &str = "/validate/tier/";

/// What the API server does when the webhook cannot be reached or does not answer in time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Refuse the request (the default): nothing is written unchecked, and the operator's own
    /// status writes wait (they are retried) while its webhook is down.
    #[default]
    Fail,
    /// Admit the request unchecked.
    Ignore,
}

/// Where the API server sends reviews.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// A base URL (`https://HOST:PORT`), for webhooks outside the cluster or in tests.
    Url(String),
    /// A Service in front of the operator's pods.
    Service {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Its port (the API server defaults to 443).
        port: Option<i32>,
    },
}

/// How to register the webhook. [`WebhookOptions::new`] gives the defaults: failure policy
/// `Fail`, a 10-second timeout, every namespace and object.
#[derive(Clone, Debug, PartialEq)]
pub struct WebhookOptions {
    /// Where the API server sends reviews.
    pub endpoint: Endpoint,
    /// The PEM bundle of the CA(s) that signed the serving certificate (`caBundle`); `None`
    /// when something else injects it (cert-manager's CA injector).
    pub ca_bundle: Option<String>,
    /// What the API server does when the webhook fails.
    pub failure_policy: FailurePolicy,
    /// How long the API server waits for an answer (1 to 30 seconds).
    pub timeout_seconds: i32,
    /// Only objects in these namespaces (all tiers' selectors are narrowed by it too).
    pub namespace_selector: Option<LabelSelector>,
    /// Only objects with these labels — used only while the policy has no rules and names no
    /// operator (whose status fields it then guards): labels are
    /// edited through the resource itself, which no webhook reviews, so anyone who may label
    /// an object could take it out of the policy's reach (the machine's own rules are also the
    /// CRD's CEL rules).
    pub object_selector: Option<LabelSelector>,
}

impl WebhookOptions {
    /// Options with the defaults, sending reviews to `endpoint`.
    pub fn new(endpoint: Endpoint) -> Self {
        Self {
            endpoint,
            ca_bundle: None,
            failure_policy: FailurePolicy::Fail,
            timeout_seconds: 10,
            namespace_selector: None,
            object_selector: None,
        }
    }
}

/// The `ValidatingWebhookConfiguration` of `K`'s webhook: named `PLURAL.GROUP`, with the
/// webhook `phase.PLURAL.GROUP` (path [`PATH`]) and one `tier-NAME.PLURAL.GROUP` per tier of
/// `policy` (path [`TIER_PATH`]`NAME`), `sideEffects: None`, `admissionReviewVersions: [v1]`,
/// each on the requests that can carry a phase, in every served version: updates of the
/// status subresource where status is one (the API server drops status from creates and
/// updates of the resource itself then), else creates and updates of the resource. So
/// creates, deletions, finalizer removals and label changes never wait for the webhook,
/// even while it is down under `Fail` — except in a layer with `pauseBy` or
/// `requestReconcileBy` rules, whose webhook also reviews creates and updates of the resource
/// itself (where the annotations they guard are edited).
pub fn validating_webhook_configuration<K: CustomResourceExt>(
    options: &WebhookOptions,
    policy: &Policy,
) -> ValidatingWebhookConfiguration {
    validating_webhook_configuration_for(&K::crd(), options, policy)
}

/// [`validating_webhook_configuration`] for the resource `crd` defines: every version it
/// serves, e.g. all of a [`crate::crd_versions`] CRD's (one review handler judges them all: it
/// reads the phase, which every version keeps in the same place).
pub fn validating_webhook_configuration_for(
    crd: &CustomResourceDefinition,
    options: &WebhookOptions,
    policy: &Policy,
) -> ValidatingWebhookConfiguration {
    let spec = &crd.spec;
    let plural = &spec.names.plural;
    let served = |with_status: bool| -> Vec<String> {
        spec.versions
            .iter()
            .filter(|v| v.served)
            .filter(|v| v.subresources.as_ref().is_some_and(|s| s.status.is_some()) == with_status)
            .map(|v| v.name.clone())
            .collect()
    };
    let rule = |versions: Vec<String>, operations: &[&str], resource: String| {
        (!versions.is_empty()).then(|| RuleWithOperations {
            api_groups: Some(vec![spec.group.clone()]),
            api_versions: Some(versions),
            operations: Some(operations.iter().map(|&o| o.to_owned()).collect()),
            resources: Some(vec![resource]),
            scope: Some(spec.scope.clone()),
        })
    };
    // A layer with rules on the annotations that steer the engine also reviews writes of the
    // resource itself, where annotations are edited (so its creates and updates then wait for
    // the webhook too).
    let rules = |tier: Option<&Tier>| -> Vec<RuleWithOperations> {
        let resource = if policy.guards_steering(tier) {
            spec.versions
                .iter()
                .filter(|v| v.served)
                .map(|v| v.name.clone())
                .collect()
        } else {
            served(false)
        };
        [
            rule(served(true), &["UPDATE"], format!("{plural}/status")),
            rule(resource, &["CREATE", "UPDATE"], plural.clone()),
        ]
        .into_iter()
        .flatten()
        .collect()
    };
    let suffix = format!("{plural}.{}", spec.group);
    // Labels are edited through the resource itself, which no webhook reviews: with policy
    // rules, or the operator's own status fields guarded (a named operator), an object
    // selector would let anyone who may label an object walk around them.
    let guarded = policy.operator.named()
        || !policy.platform.is_empty()
        || policy.tiers.iter().any(|t| !t.rules.is_empty());
    let object_selector = if guarded {
        None
    } else {
        options.object_selector.clone()
    };
    if guarded && options.object_selector.is_some() {
        tracing::warn!(
            "the webhook's objectSelector is not used: removing the label would skip the policy"
        );
    }
    let webhook = |name: String,
                   path: String,
                   namespaces: Option<LabelSelector>,
                   tier: Option<&Tier>| ValidatingWebhook {
        name,
        client_config: client_config(options, &path),
        rules: Some(rules(tier)),
        failure_policy: Some(format!("{:?}", options.failure_policy)),
        timeout_seconds: Some(options.timeout_seconds),
        side_effects: "None".to_owned(),
        admission_review_versions: vec!["v1".to_owned()],
        namespace_selector: namespaces,
        object_selector: object_selector.clone(),
        ..ValidatingWebhook::default()
    };
    let mut webhooks = vec![webhook(
        format!("phase.{suffix}"),
        PATH.to_owned(),
        options.namespace_selector.clone(),
        None,
    )];
    for tier in &policy.tiers {
        webhooks.push(webhook(
            format!("tier-{}.{suffix}", tier.name),
            format!("{TIER_PATH}{}", tier.name),
            Some(narrowed(
                &tier.namespace_selector,
                options.namespace_selector.as_ref(),
            )),
            Some(tier),
        ));
    }
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(suffix),
            ..ObjectMeta::default()
        },
        webhooks: Some(webhooks),
    }
}

/// One registration for a webhook that serves several kinds ([`super::Webhook::validator`]):
/// each kind's webhooks ([`validating_webhook_configuration_for`] of its CRD under its
/// policy), all at `options`' endpoint. Named as that kind's own registration when there is one
/// kind, `name` when there are several.
pub fn validating_webhook_configuration_of(
    kinds: &[(&CustomResourceDefinition, &Policy)],
    options: &WebhookOptions,
    name: &str,
) -> ValidatingWebhookConfiguration {
    let mut each = kinds
        .iter()
        .map(|(crd, policy)| validating_webhook_configuration_for(crd, options, policy));
    let mut registration = each.next().unwrap_or_default();
    for other in each {
        let webhooks = registration.webhooks.get_or_insert_with(Vec::new);
        webhooks.extend(other.webhooks.unwrap_or_default());
    }
    if kinds.len() > 1 {
        registration.metadata.name = Some(name.to_owned());
    }
    registration
}

/// `crd` with its conversions sent to the operator's webhook (`strategy: Webhook`, at
/// `options`' endpoint and [`CONVERT_PATH`], with its `caBundle`; `conversionReviewVersions:
/// [v1]`), which [`super::Webhook::converter`] serves. The failure policy and selectors of
/// `options` do not apply: the API server converts every object, and a failed conversion
/// fails the request.
#[must_use]
pub fn conversion_webhook(
    mut crd: CustomResourceDefinition,
    options: &WebhookOptions,
) -> CustomResourceDefinition {
    let admission = client_config(options, CONVERT_PATH);
    let client_config = extensions::WebhookClientConfig {
        ca_bundle: admission.ca_bundle,
        url: admission.url,
        service: admission.service.map(|s| extensions::ServiceReference {
            name: s.name,
            namespace: s.namespace,
            path: s.path,
            port: s.port,
        }),
    };
    crd.spec.conversion = Some(extensions::CustomResourceConversion {
        strategy: "Webhook".to_owned(),
        webhook: Some(extensions::WebhookConversion {
            client_config: Some(client_config),
            conversion_review_versions: vec!["v1".to_owned()],
        }),
    });
    crd
}

fn client_config(options: &WebhookOptions, path: &str) -> WebhookClientConfig {
    let ca_bundle = options
        .ca_bundle
        .as_ref()
        .map(|pem| ByteString(pem.clone().into_bytes()));
    match &options.endpoint {
        Endpoint::Url(base) => WebhookClientConfig {
            url: Some(format!("{}{path}", base.trim_end_matches('/'))),
            ca_bundle,
            service: None,
        },
        Endpoint::Service {
            namespace,
            name,
            port,
        } => WebhookClientConfig {
            url: None,
            ca_bundle,
            service: Some(ServiceReference {
                namespace: namespace.clone(),
                name: name.clone(),
                path: Some(path.to_owned()),
                port: *port,
            }),
        },
    }
}

/// Both selectors at once: the outer one's labels become `In` expressions, so that a label
/// both name must match both values (and so matches nothing), as "and" means.
pub(super) fn narrowed(selector: &LabelSelector, outer: Option<&LabelSelector>) -> LabelSelector {
    let Some(outer) = outer else {
        return selector.clone();
    };
    let mut both = selector.clone();
    let expressions = both.match_expressions.get_or_insert_with(Vec::new);
    for (key, value) in outer.match_labels.iter().flatten() {
        expressions.push(LabelSelectorRequirement {
            key: key.clone(),
            operator: "In".to_owned(),
            values: Some(vec![value.clone()]),
        });
    }
    expressions.extend(outer.match_expressions.iter().flatten().cloned());
    both
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::policy::{PolicyRule, Tier};

    #[derive(
        kube::CustomResource,
        Clone,
        Debug,
        serde::Serialize,
        serde::Deserialize,
        schemars::JsonSchema,
    )]
    #[kube(group = "example.com", version = "v1", kind = "Job", namespaced)]
    struct JobSpec {}

    #[derive(
        kube::CustomResource,
        Clone,
        Debug,
        serde::Serialize,
        serde::Deserialize,
        schemars::JsonSchema,
    )]
    #[kube(
        group = "example.com",
        version = "v1",
        kind = "Task",
        namespaced,
        status = "TaskStatus"
    )]
    struct TaskSpec {}

    #[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    struct TaskStatus {}

    #[test]
    fn with_a_status_subresource_only_status_updates_are_reviewed() {
        let options = WebhookOptions::new(Endpoint::Url("https://127.0.0.1:9443/".into()));
        let configuration = validating_webhook_configuration::<Task>(&options, &Policy::default());
        let webhooks = configuration.webhooks.unwrap();
        let rules = webhooks[0].rules.as_deref().unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].resources.as_deref().unwrap(), ["tasks/status"]);
        assert_eq!(rules[0].operations.as_deref().unwrap(), ["UPDATE"]);
        assert_eq!(rules[0].api_versions.as_deref().unwrap(), ["v1"]);
    }

    #[test]
    fn a_layer_guarding_the_steering_annotations_also_reviews_the_resource_itself() {
        let options = WebhookOptions::new(Endpoint::Url("https://127.0.0.1:9443/".into()));
        let policy: Policy = serde_json::from_value(serde_json::json!({
            "operator": { "users": ["system:serviceaccount:ns:op"] },
            "tiers": [{
                "name": "restricted",
                "namespaceSelector": { "matchLabels": { "tier": "restricted" } },
                "rules": [{ "pauseBy": { "groups": ["sre"] } }],
            }],
        }))
        .unwrap();
        let webhooks = validating_webhook_configuration::<Task>(&options, &policy)
            .webhooks
            .unwrap();
        let resources = |i: usize| -> Vec<String> {
            webhooks[i]
                .rules
                .iter()
                .flatten()
                .flat_map(|r| r.resources.clone().unwrap())
                .collect()
        };
        assert_eq!(
            resources(0),
            ["tasks/status"],
            "the platform has no such rule"
        );
        assert_eq!(resources(1), ["tasks/status", "tasks"]);
        let operations = webhooks[1].rules.as_ref().unwrap()[1].operations.clone();
        assert_eq!(operations.unwrap(), ["CREATE", "UPDATE"]);
    }

    #[test]
    fn an_object_selector_never_narrows_a_policy_a_label_edit_would_walk_around() {
        let mut options = WebhookOptions::new(Endpoint::Url("https://127.0.0.1:9443/".into()));
        options.object_selector = Some(LabelSelector {
            match_labels: Some([("team".to_owned(), "db".to_owned())].into()),
            ..LabelSelector::default()
        });
        // Without policy rules: only the machine's rules, which CEL also enforces.
        let plain = validating_webhook_configuration::<Task>(&options, &Policy::default());
        assert!(plain.webhooks.unwrap()[0].object_selector.is_some());
        // With rules, removing the label (a write no webhook reviews) would skip them.
        let policy = Policy {
            operator: crate::admission::OperatorIdentity {
                users: vec!["system:serviceaccount:ops:operator".into()],
                ..Default::default()
            },
            platform: vec![PolicyRule::OnlyOperatorMovesPhase],
            tiers: vec![Tier {
                name: "restricted".into(),
                namespace_selector: LabelSelector::default(),
                rules: vec![PolicyRule::OnlyOperatorMovesPhase],
            }],
        };
        let guarded = validating_webhook_configuration::<Task>(&options, &policy);
        for webhook in guarded.webhooks.unwrap() {
            assert_eq!(webhook.object_selector, None, "{}", webhook.name);
        }
    }

    #[test]
    fn a_resource_of_several_versions_is_reviewed_in_every_one() {
        let options = WebhookOptions::new(Endpoint::Url("https://127.0.0.1:9443/".into()));
        let mut older = Task::crd();
        older.spec.versions[0].name = "v1alpha1".into();
        let crd = kube::core::crd::merge_crds(vec![older, Task::crd()], "v1").unwrap();
        let configuration =
            validating_webhook_configuration_for(&crd, &options, &Policy::default());
        let webhooks = configuration.webhooks.unwrap();
        let rules = webhooks[0].rules.as_deref().unwrap();
        assert_eq!(
            rules[0].api_versions.as_deref().unwrap(),
            ["v1", "v1alpha1"]
        );
    }

    #[test]
    fn conversions_go_to_the_webhook_at_its_own_path_with_its_ca() {
        let mut options = WebhookOptions::new(Endpoint::Service {
            namespace: "ops".into(),
            name: "db-webhook".into(),
            port: Some(443),
        });
        options.ca_bundle = Some("PEM".into());
        let crd = conversion_webhook(Task::crd(), &options);
        let conversion = crd.spec.conversion.unwrap();
        assert_eq!(conversion.strategy, "Webhook");
        let webhook = conversion.webhook.unwrap();
        assert_eq!(webhook.conversion_review_versions, ["v1"]);
        let config = webhook.client_config.unwrap();
        let service = config.service.unwrap();
        assert_eq!(
            (
                service.namespace.as_str(),
                service.name.as_str(),
                service.path.as_deref(),
                service.port
            ),
            ("ops", "db-webhook", Some("/convert"), Some(443))
        );
        assert_eq!(config.ca_bundle.unwrap().0, b"PEM");
    }

    fn selector(key: &str, value: &str) -> LabelSelector {
        LabelSelector {
            match_labels: Some([(key.to_owned(), value.to_owned())].into()),
            ..LabelSelector::default()
        }
    }

    #[test]
    fn one_webhook_for_the_machine_and_one_per_tier() {
        let mut options = WebhookOptions::new(Endpoint::Url("https://127.0.0.1:9443/".into()));
        options.ca_bundle = Some("PEM".into());
        options.failure_policy = FailurePolicy::Ignore;
        options.namespace_selector = Some(selector("team", "db"));
        let policy = Policy {
            tiers: vec![Tier {
                name: "restricted".into(),
                namespace_selector: selector("tier", "restricted"),
                rules: vec![PolicyRule::OnlyOperatorMovesPhase],
            }],
            ..Policy::default()
        };
        let configuration = validating_webhook_configuration::<Job>(&options, &policy);
        assert_eq!(
            configuration.metadata.name.as_deref(),
            Some("jobs.example.com")
        );
        let webhooks = configuration.webhooks.unwrap();
        let names: Vec<_> = webhooks.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(
            names,
            ["phase.jobs.example.com", "tier-restricted.jobs.example.com"]
        );
        let (machine, tier) = (&webhooks[0], &webhooks[1]);
        assert_eq!(
            machine.client_config.url.as_deref(),
            Some("https://127.0.0.1:9443/validate")
        );
        assert_eq!(
            tier.client_config.url.as_deref(),
            Some("https://127.0.0.1:9443/validate/tier/restricted")
        );
        assert_eq!(machine.client_config.ca_bundle.as_ref().unwrap().0, b"PEM");
        assert_eq!(machine.failure_policy.as_deref(), Some("Ignore"));
        assert_eq!(machine.side_effects, "None");
        assert_eq!(machine.admission_review_versions, ["v1"]);
        // Status is no subresource of Job: creates and updates of the resource carry it.
        let rules = machine.rules.as_deref().unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].resources.as_deref().unwrap(), ["jobs"]);
        assert_eq!(
            rules[0].operations.as_deref().unwrap(),
            ["CREATE", "UPDATE"]
        );
        assert_eq!(rules[0].scope.as_deref(), Some("Namespaced"));
        assert_eq!(machine.namespace_selector, options.namespace_selector);
        // The tier's namespaces are those of the tier *and* of the webhook.
        let narrowed = tier.namespace_selector.as_ref().unwrap();
        assert_eq!(
            narrowed.match_labels,
            selector("tier", "restricted").match_labels
        );
        let outer = &narrowed.match_expressions.as_ref().unwrap()[0];
        assert_eq!(
            (outer.key.as_str(), outer.operator.as_str()),
            ("team", "In")
        );
        assert_eq!(outer.values.as_deref().unwrap(), ["db"]);
    }

    #[test]
    fn a_service_endpoint_carries_the_path() {
        let options = WebhookOptions::new(Endpoint::Service {
            namespace: "ops".into(),
            name: "jobs-webhook".into(),
            port: Some(443),
        });
        let configuration = validating_webhook_configuration::<Job>(&options, &Policy::default());
        let client = &configuration.webhooks.unwrap()[0].client_config;
        let service = client.service.as_ref().unwrap();
        assert_eq!(
            (service.name.as_str(), service.path.as_deref()),
            ("jobs-webhook", Some(PATH))
        );
        assert_eq!(client.url, None);
        assert_eq!(
            configuration.metadata.name.as_deref(),
            Some("jobs.example.com")
        );
    }
}
