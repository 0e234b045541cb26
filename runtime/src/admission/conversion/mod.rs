//! The conversion webhook's decision (pure): hub-and-spoke conversion of a resource served in
//! several versions. Each version's spec converts to and from the hub's with the user's `From`
//! impls; everything else of an object — `metadata`, and `status` with the machine's fields —
//! passes through as stored, so a conversion never changes a phase, a condition or an entry
//! time. [`crate::admission::Webhook::converter`] serves it at [`CONVERT_PATH`];
//! [`crate::admission::conversion_webhook`] points the CRD's `spec.conversion` at it.
//!
//! A conversion loses nothing, or fails saying what it would lose:
//! - a field of the hub that a spoke cannot hold (added in the newer version) is kept beside the
//!   spoke's object, in its [`CONVERSION_DATA`] annotation (the hub's spec as JSON, as Cluster
//!   API does), and put back when the object comes back to the hub — also after an edit made
//!   through the spoke, which keeps its own changes. So `kubectl label` through an old version
//!   loses nothing; the stored (hub) object never carries the annotation;
//! - a field the operator's types do not know (a newer CRD served during a rolling update) fails
//!   the conversion, naming the field, instead of being dropped;
//! - a `From` impl that panics fails the review with its message.
//!
//! One object fails alone. The API server converts a list one object at a time and fails the
//! whole LIST (or WATCH) when one of them fails, so an object read out of the hub (the stored
//! version) through an older one that does not convert is answered unconverted — its spec as
//! stored, under the desired `apiVersion` — and marked with the [`CONVERSION_ERROR`]
//! annotation saying why; everyone else's lists go on. A conversion toward the hub (a write)
//! still fails with the message, and so does any object carrying that mark (it was never
//! converted: writing it back would store the wrong version's spec).
//!
//! The rule for the `From` impls: map every field the other version also has (renamed or
//! restructured as you like); a field only one side has is the converter's business.

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

/// The annotation that marks an object read through an older version and answered
/// unconverted, with why its conversion failed: only its `apiVersion` says the desired
/// version, its spec is as stored. A write of an object carrying it is refused (it would store
/// that spec in the wrong version).
pub const CONVERSION_ERROR: &str = "kube-fsm.dev/conversion-error";

/// The annotation that keeps, beside an object converted to an older version, what of the hub's
/// spec that version cannot hold (the hub's spec, as JSON).
pub const CONVERSION_DATA: &str = "kube-fsm.dev/conversion-data";

mod lossless;

/// `object` answered as `desired` without converting it: its spec as stored, marked with the
/// [`CONVERSION_ERROR`] annotation carrying `message` (a conversion may change labels and
/// annotations, and the API server requires the desired `apiVersion`).
fn unconverted(mut object: Value, desired: &str, message: &str) -> Value {
    tracing::warn!(
        message,
        "answered an object read through an older version unconverted"
    );
    object["apiVersion"] = Value::String(desired.to_owned());
    let metadata = &mut object["metadata"];
    if !metadata["annotations"].is_object() {
        metadata["annotations"] = Value::Object(serde_json::Map::new());
    }
    metadata["annotations"][CONVERSION_ERROR] = Value::String(message.to_owned());
    object
}

/// One spec, as JSON, into another.
type Step = Box<dyn Fn(Value) -> Result<Value, String> + Send + Sync>;

/// A version's two conversions.
struct Pair {
    to_hub: Step,
    from_hub: Step,
}

impl Pair {
    /// The hub's spec of a spoke's `spec`, with what the spoke could not hold put back from
    /// `saved` (the hub's spec it was converted from), where the spoke left it empty.
    fn up(&self, spec: Value, saved: Option<&Value>) -> Result<Value, String> {
        let mut hub = call(&self.to_hub, spec)?;
        if let Some(saved) = saved {
            let shown = call(&self.from_hub, saved.clone())?;
            let back = call(&self.to_hub, shown)?;
            for path in lossless::dropped("spec", saved, &back) {
                lossless::fill(&mut hub, saved, &path);
            }
        }
        Ok(hub)
    }

    /// The spoke's spec of the hub's `hub`, and the hub's spec to keep beside it when the
    /// spoke cannot hold all of it.
    fn down(&self, hub: Value) -> Result<(Value, Option<Value>), String> {
        let spec = call(&self.from_hub, hub.clone())?;
        let back = call(&self.to_hub, spec.clone())?;
        let lost = !lossless::dropped("spec", &hub, &back).is_empty();
        Ok((spec, lost.then_some(hub)))
    }
}

/// Runs a conversion; a panic in the user's `From` impl becomes an error with its message.
fn call(step: &Step, spec: Value) -> Result<Value, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| step(spec))).unwrap_or_else(|panic| {
        let said = panic
            .downcast_ref::<&str>()
            .map(ToString::to_string)
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(format!("the conversion panicked: {said}"))
    })
}

/// Takes the [`CONVERSION_DATA`] annotation off `object`: the hub's spec it keeps, if any.
fn take_saved(object: &mut Value) -> Result<Option<Value>, String> {
    let Some(annotations) = object["metadata"]
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
    else {
        return Ok(None);
    };
    let Some(saved) = annotations.remove(CONVERSION_DATA) else {
        return Ok(None);
    };
    if annotations.is_empty()
        && let Some(metadata) = object["metadata"].as_object_mut()
    {
        metadata.remove("annotations");
    }
    let saved = saved.as_str().unwrap_or_default();
    serde_json::from_str(saved)
        .map(Some)
        .map_err(|err| format!("its {CONVERSION_DATA} annotation is not the JSON of a spec: {err}"))
}

/// Keeps `hub` (the hub's spec) in `object`'s [`CONVERSION_DATA`] annotation.
fn save(object: &mut Value, hub: &Value) {
    let metadata = &mut object["metadata"];
    if !metadata["annotations"].is_object() {
        metadata["annotations"] = Value::Object(serde_json::Map::new());
    }
    metadata["annotations"][CONVERSION_DATA] = Value::String(hub.to_string());
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

    /// Whether `review` is of this converter's kind: its desired version of this group, its
    /// objects of this kind (a webhook converting several kinds routes by it).
    #[must_use]
    pub fn converts(&self, review: &ConversionReview) -> bool {
        let Some(request) = &review.request else {
            return false;
        };
        let group = request.desired_api_version.split_once('/').map(|(g, _)| g);
        group == Some(self.group.as_str())
            && request
                .objects
                .iter()
                .all(|object| object["kind"].as_str() == Some(self.kind.as_str()))
    }

    /// The answer to a review no converter of a webhook converts: a failure naming its kind.
    #[must_use]
    pub fn unconvertible(review: ConversionReview) -> ConversionReview {
        let Ok(request) = ConversionRequest::from_review(review) else {
            return ConversionResponse::invalid(Status::failure(
                "a ConversionReview without a request",
                "BadRequest",
            ))
            .into_review();
        };
        let kinds: Vec<&str> = request
            .objects
            .iter()
            .filter_map(|o| o["kind"].as_str())
            .collect();
        let message = format!(
            "this webhook converts no {} to {}: the CRD sends its conversions to a webhook that does not serve it",
            kinds.first().copied().unwrap_or("object"),
            request.desired_api_version
        );
        ConversionResponse::for_request(request)
            .failure(Status::failure(&message, "ConversionFailed"))
            .into_review()
    }

    /// Answers one review: every object converted to the desired version, in order, or a
    /// failure naming the object and both versions (the API server then fails the request) —
    /// but an object read through an older version that does not convert is answered
    /// unconverted and marked ([`CONVERSION_ERROR`]) instead.
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
        if object["metadata"]["annotations"][CONVERSION_ERROR].is_string() {
            return Err(format!(
                "{} {name} carries the {CONVERSION_ERROR} annotation: it was read without its \
                 conversion, and writing it back would store its spec in the wrong version; \
                 fix its spec through the stored version",
                self.kind
            ));
        }
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
            match self.translate(&object, &from, &to) {
                Ok(converted) => object = converted,
                Err(err) => {
                    let message = format!(
                        "cannot convert {} {name} from {from} to {to}: {err}",
                        self.kind
                    );
                    // Read through an older version (out of the hub, which is stored): that
                    // object alone is answered unconverted and marked, so that everyone
                    // else's LIST and WATCH go on (the API server asks one object at a time,
                    // and fails a list with any one of them). Toward the hub (a write), it
                    // fails.
                    return if from == self.hub {
                        Ok(unconverted(object, desired, &message))
                    } else {
                        Err(message)
                    };
                }
            }
        }
        object["apiVersion"] = Value::String(desired.to_owned());
        Ok(object)
    }

    /// `object` with its spec (and what the conversion keeps beside it) from version `from`
    /// to `to`, or why it cannot be.
    fn translate(&self, object: &Value, from: &str, to: &str) -> Result<Value, String> {
        let mut object = object.clone();
        let spec = object
            .get_mut("spec")
            .map(Value::take)
            .unwrap_or(Value::Null);
        let saved = take_saved(&mut object)?;
        let hub = match self.spoke(from)? {
            None => spec,
            Some(spoke) => spoke.up(spec, saved.as_ref())?,
        };
        let (spec, keep) = match self.spoke(to)? {
            None => (hub, None),
            Some(spoke) => spoke.down(hub)?,
        };
        object["spec"] = spec;
        if let Some(hub) = keep {
            save(&mut object, &hub);
        }
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
    From: Serialize + DeserializeOwned + Into<To> + 'static,
    To: Serialize + 'static,
{
    let version = version.to_owned();
    Box::new(move |spec| {
        let read: From = serde_json::from_value(spec.clone())
            .map_err(|err| format!("its spec does not read as version {version}: {err}"))?;
        // What the types do not know, serde drops: refuse rather than lose it.
        let known = serde_json::to_value(&read).map_err(|err| err.to_string())?;
        let unknown = lossless::dropped("spec", &spec, &known);
        if !unknown.is_empty() {
            let fields: Vec<String> = unknown.iter().map(ToString::to_string).collect();
            return Err(format!(
                "{} not known to this operator's version {version} (is the CRD newer than the operator?); converting would drop {}",
                fields.join(", "),
                if fields.len() == 1 { "it" } else { "them" }
            ));
        }
        serde_json::to_value(read.into()).map_err(|err| err.to_string())
    })
}

#[cfg(test)]
pub(super) mod tests;
