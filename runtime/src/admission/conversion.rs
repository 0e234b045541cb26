//! The conversion webhook's decision (pure): hub-and-spoke conversion of a resource served in
//! several versions. Each version's spec converts to and from the hub's with the user's `From`
//! impls; everything else of an object — `metadata`, and `status` with the machine's fields —
//! passes through as stored, so a conversion never changes a phase, a condition or an entry
//! time. [`crate::admission::Webhook::converter`] serves it at [`CONVERT_PATH`];
//! [`crate::admission::conversion_webhook`] points the CRD's `spec.conversion` at it.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use kube::Resource;
use kube::core::Status;
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use kube::core::object::HasSpec;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The path the API server posts `ConversionReview`s to.
pub const CONVERT_PATH: &str = "/convert";

/// One spec, as JSON, into another.
type Step = Box<dyn Fn(Value) -> Result<Value, String> + Send + Sync>;

/// A version's two conversions.
struct Pair {
    to_hub: Step,
    from_hub: Step,
}

/// The conversions of one resource between its versions, through its hub version.
///
/// ```no_run
/// # mod v1alpha1 {
/// #     use kube::CustomResource; use kube_fsm::{MachineStatus, state_machine};
/// #     use schemars::JsonSchema; use serde::{Deserialize, Serialize};
/// #     #[state_machine(phases(Open(initial), Closed(terminal)), transitions(Open -> Closed))]
/// #     #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
/// #     #[kube(group = "example.com", version = "v1alpha1", kind = "Ticket", namespaced, status = "TicketStatus")]
/// #     pub struct TicketSpec { pub title: String }
/// #     #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
/// #     pub struct TicketStatus { #[serde(flatten)] pub machine: MachineStatus<TicketPhase> }
/// # }
/// # mod v1 {
/// #     use kube::CustomResource; use kube_fsm::{MachineStatus, state_machine};
/// #     use schemars::JsonSchema; use serde::{Deserialize, Serialize};
/// #     #[state_machine(phases(Open(initial), Closed(terminal)), transitions(Open -> Closed))]
/// #     #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
/// #     #[kube(group = "example.com", version = "v1", kind = "Ticket", namespaced, status = "TicketStatus")]
/// #     pub struct TicketSpec { pub summary: String }
/// #     #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
/// #     pub struct TicketStatus { #[serde(flatten)] pub machine: MachineStatus<TicketPhase> }
/// # }
/// use kube_fsm::admission::{
///     Converter, Endpoint, Policy, ServingCertificate, Validator, Webhook, WebhookOptions,
///     conversion_webhook, validating_webhook_configuration_for,
/// };
///
/// // v1 (the hub) renamed `title` to `summary`: one `From` each way.
/// impl From<v1alpha1::TicketSpec> for v1::TicketSpec {
///     fn from(old: v1alpha1::TicketSpec) -> Self {
///         v1::TicketSpec { summary: old.title }
///     }
/// }
/// impl From<v1::TicketSpec> for v1alpha1::TicketSpec {
///     fn from(new: v1::TicketSpec) -> Self {
///         v1alpha1::TicketSpec { title: new.summary }
///     }
/// }
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let crd = kube_fsm::crd_versions(
///     vec![kube_fsm::crd::<v1alpha1::Ticket>(), kube_fsm::crd::<v1::Ticket>()],
///     "v1",
/// )?;
/// let converter = Converter::hub::<v1::Ticket>().spoke::<v1alpha1::Ticket>().build();
/// let certificate = ServingCertificate::from_files("/tls/tls.crt", "/tls/tls.key")?;
/// let validator = Validator::new::<v1::Ticket>(Policy::default())?;
/// let webhook = Webhook::bind("0.0.0.0:9443".parse()?, validator, certificate).await?;
/// tokio::spawn(webhook.converter(converter).run());
/// // Registered once, e.g. by the deployment:
/// let options = WebhookOptions::new(Endpoint::Service {
///     namespace: "tickets".into(),
///     name: "ticket-webhook".into(),
///     port: Some(443),
/// });
/// let crd = conversion_webhook(crd, &options); // spec.conversion: the webhook's /convert
/// let reviews = validating_webhook_configuration_for(&crd, &options, &Policy::default());
/// # Ok(()) }
/// ```
pub struct Converter {
    group: String,
    kind: String,
    hub: String,
    spokes: BTreeMap<String, Pair>,
}

impl std::fmt::Debug for Converter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Converter")
            .field("kind", &self.kind)
            .field("hub", &self.hub)
            .field("spokes", &self.spokes.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The builder of a [`Converter`] whose hub is `Hub`'s version.
#[derive(Debug)]
pub struct Conversions<Hub> {
    converter: Converter,
    hub: PhantomData<fn() -> Hub>,
}

impl Converter {
    /// Conversions through `Hub`'s version (typically the stored one).
    pub fn hub<Hub>() -> Conversions<Hub>
    where
        Hub: Resource<DynamicType = ()>,
    {
        Conversions {
            converter: Converter {
                group: Hub::group(&()).into_owned(),
                kind: Hub::kind(&()).into_owned(),
                hub: Hub::version(&()).into_owned(),
                spokes: BTreeMap::new(),
            },
            hub: PhantomData,
        }
    }

    /// Answers one review: every object converted to the desired version, in order, or a
    /// failure naming the object and both versions (the API server then fails the request).
    #[must_use]
    pub fn review(&self, review: ConversionReview) -> ConversionReview {
        let request = match ConversionRequest::from_review(review) {
            Ok(request) => request,
            Err(_) => {
                return ConversionResponse::invalid(Status::failure(
                    "a ConversionReview without a request",
                    "BadRequest",
                ))
                .into_review();
            }
        };
        let desired = request.desired_api_version.clone();
        let converted: Result<Vec<Value>, String> = request
            .objects
            .iter()
            .map(|object| self.convert(object.clone(), &desired))
            .collect();
        let response = ConversionResponse::for_request(request);
        match converted {
            Ok(objects) => response.success(objects),
            Err(message) => response.failure(Status::failure(&message, "ConversionFailed")),
        }
        .into_review()
    }

    /// `object` as `desired` (`group/version`).
    fn convert(&self, mut object: Value, desired: &str) -> Result<Value, String> {
        let from_api = object["apiVersion"].as_str().unwrap_or_default().to_owned();
        let name = match object["metadata"]["namespace"].as_str() {
            Some(ns) => format!("{ns}/{}", object["metadata"]["name"].as_str().unwrap_or("")),
            None => object["metadata"]["name"].as_str().unwrap_or("").to_owned(),
        };
        let version = |api: &str| -> Result<String, String> {
            match api.split_once('/') {
                Some((group, version)) if group == self.group => Ok(version.to_owned()),
                _ => Err(format!(
                    "cannot convert {} {name} from {from_api} to {desired}: not a version of {}",
                    self.kind, self.group
                )),
            }
        };
        let (from, to) = (version(&from_api)?, version(desired)?);
        if from != to {
            let failed = |err: String| {
                format!(
                    "cannot convert {} {name} from {from} to {to}: {err}",
                    self.kind
                )
            };
            let spec = object
                .get_mut("spec")
                .map(Value::take)
                .unwrap_or(Value::Null);
            let hub = match self.spoke(&from)? {
                None => spec,
                Some(spoke) => (spoke.to_hub)(spec).map_err(failed)?,
            };
            let spec = match self.spoke(&to)? {
                None => hub,
                Some(spoke) => (spoke.from_hub)(hub).map_err(failed)?,
            };
            object["spec"] = spec;
        }
        object["apiVersion"] = Value::String(desired.to_owned());
        Ok(object)
    }

    /// The conversions of `version`: `None` for the hub itself.
    fn spoke(&self, version: &str) -> Result<Option<&Pair>, String> {
        if version == self.hub {
            return Ok(None);
        }
        self.spokes.get(version).map(Some).ok_or_else(|| {
            let known: Vec<&str> = std::iter::once(self.hub.as_str())
                .chain(self.spokes.keys().map(String::as_str))
                .collect();
            format!(
                "no conversion for version {version} of {} (converted: {})",
                self.kind,
                known.join(", ")
            )
        })
    }
}

impl<Hub> Conversions<Hub>
where
    Hub: Resource<DynamicType = ()> + HasSpec,
    Hub::Spec: Serialize + DeserializeOwned + 'static,
{
    /// Converts `Spoke`'s version to and from the hub with the `From` impls between their specs.
    #[must_use]
    pub fn spoke<Spoke>(mut self) -> Self
    where
        Spoke: Resource<DynamicType = ()> + HasSpec,
        Spoke::Spec: Serialize + DeserializeOwned + Into<Hub::Spec> + From<Hub::Spec> + 'static,
    {
        let version = Spoke::version(&()).into_owned();
        let pair = Pair {
            to_hub: step::<Spoke::Spec, Hub::Spec>(&version),
            from_hub: step::<Hub::Spec, Spoke::Spec>(&self.converter.hub),
        };
        self.converter.spokes.insert(version, pair);
        self
    }

    /// The converter.
    #[must_use]
    pub fn build(self) -> Converter {
        self.converter
    }
}

/// A spec read as `From` (written in version `version`) and written as `To`.
fn step<From, To>(version: &str) -> Step
where
    From: DeserializeOwned + Into<To> + 'static,
    To: Serialize + 'static,
{
    let version = version.to_owned();
    Box::new(move |spec| {
        let read: From = serde_json::from_value(spec)
            .map_err(|err| format!("its spec does not read as version {version}: {err}"))?;
        serde_json::to_value(read.into()).map_err(|err| err.to_string())
    })
}

#[cfg(test)]
pub(super) mod tests {
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
}
