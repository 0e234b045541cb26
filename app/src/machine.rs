//! One machine of an [`App`](super::App): how to build its operator from a client, its CRD
//! (one version or several), its webhook's conversions; and the same, its types erased, for
//! the commands that handle every machine alike.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::ApiResource;
use kube::{Client, CustomResourceExt, Resource};

use kube_fsm::Manager;
use kube_fsm::Operator;
use kube_fsm::Reconcilable;
use kube_fsm::admission::{Converter, Policy, PolicyError, Validator};
use kube_fsm::machine::Description;
use kube_fsm::operator::rbac::Rbac;
use kube_fsm::replicas::Replicas;

/// A machine for [`App::machine_with`](super::App::machine_with): its operator's builder, and
/// what the commands need beyond its types (`App::machine` takes the builder alone).
pub struct Machine<K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + 'static, H> {
    build: Box<dyn Fn(Client) -> Operator<K, H>>,
    crd: Option<CustomResourceDefinition>,
    converter: Option<Box<dyn Fn() -> Converter>>,
}

impl<K, H> std::fmt::Debug for Machine<K, H>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + 'static,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Machine")
            .field("kind", &K::kind(&()))
            .finish_non_exhaustive()
    }
}

impl<K, H> Machine<K, H>
where
    K: Reconcilable<H> + CustomResourceExt,
    H: Send + Sync + 'static,
{
    /// The machine whose operator `build` makes from the client (its handlers and wiring:
    /// `owns`, `watches`, concurrency, pacing). The command line sets its namespace and the
    /// replicas.
    pub fn new(build: impl Fn(Client) -> Operator<K, H> + 'static) -> Self {
        Machine {
            build: Box::new(build),
            crd: None,
            converter: None,
        }
    }

    /// Installs `crd` instead of [`kube_fsm::crd()`] of `K` (its several versions, say:
    /// [`kube_fsm::crd_versions`]).
    #[must_use]
    pub fn crd(mut self, crd: CustomResourceDefinition) -> Self {
        self.crd = Some(crd);
        self
    }

    /// The webhook also converts between the CRD's versions with what `converter` builds.
    #[must_use]
    pub fn converter(mut self, converter: impl Fn() -> Converter + 'static) -> Self {
        self.converter = Some(Box::new(converter));
        self
    }
}

/// A [`Machine`] with its types erased: what [`App::machine_with`](super::App::machine_with)
/// holds. Converting a `Machine<K, H>` into it compiles the engine's code for `K` and `H` where
/// the conversion is written. Written in the library that defines the machine (a function
/// returning `AnyMachine`), the operator's binary compiles none of the engine again: an
/// optimized build instantiates generic code once per crate, so the engine would otherwise be
/// compiled into both the library and the binary.
///
/// ```no_run
/// # fn demo<K, H>(handlers: fn() -> H) -> kube_fsm_app::AnyMachine
/// # where K: kube_fsm::Reconcilable<H> + kube::CustomResourceExt, H: Send + Sync + 'static {
/// use kube_fsm::Operator;
/// use kube_fsm_app::{AnyMachine, Machine};
///
/// // in the library, beside the handlers:
/// Machine::new(move |client| Operator::<K, H>::new(client, handlers())).into()
/// # }
/// ```
pub struct AnyMachine(pub(crate) Box<dyn Entry>);

impl std::fmt::Debug for AnyMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnyMachine")
            .field("kind", &self.0.kind())
            .finish_non_exhaustive()
    }
}

impl<K, H> From<Machine<K, H>> for AnyMachine
where
    K: Reconcilable<H> + CustomResourceExt,
    H: Send + Sync + 'static,
{
    fn from(machine: Machine<K, H>) -> Self {
        AnyMachine(Box::new(machine))
    }
}

/// A machine, its types erased.
pub(crate) trait Entry {
    /// The kind.
    fn kind(&self) -> String;
    /// The CRD to install.
    fn crd(&self) -> CustomResourceDefinition;
    /// The machine as data.
    fn description(&self) -> Description;
    /// What the operator needs, run as `namespace` and `replicas` say.
    fn rbac(&self, client: Client, namespace: Option<&str>, replicas: Replicas) -> Rbac;
    /// `manager` with this machine's operator added.
    fn add_to(&self, manager: Manager, client: Client, namespace: Option<&str>) -> Manager;
    /// The webhook's decision for this kind under `policy`.
    fn validator(&self, policy: Policy) -> Result<Validator, PolicyError>;
    /// Its conversions, if the webhook converts it.
    fn converter(&self) -> Option<Converter>;
    /// The API resource, to list its objects whatever their phase.
    fn api_resource(&self) -> ApiResource;
}

impl<K, H> Machine<K, H>
where
    K: Reconcilable<H> + CustomResourceExt,
    H: Send + Sync + 'static,
{
    fn operator(&self, client: Client, namespace: Option<&str>) -> Operator<K, H> {
        let operator = (self.build)(client);
        match namespace {
            Some(namespace) => operator.namespace(namespace),
            None => operator,
        }
    }
}

impl<K, H> Entry for Machine<K, H>
where
    K: Reconcilable<H> + CustomResourceExt,
    H: Send + Sync + 'static,
{
    fn kind(&self) -> String {
        K::kind(&()).into_owned()
    }

    fn crd(&self) -> CustomResourceDefinition {
        self.crd.clone().unwrap_or_else(kube_fsm::crd::<K>)
    }

    fn description(&self) -> Description {
        Description::of(K::machine())
    }

    fn rbac(&self, client: Client, namespace: Option<&str>, replicas: Replicas) -> Rbac {
        self.operator(client, namespace).replicas(replicas).rbac()
    }

    fn add_to(&self, manager: Manager, client: Client, namespace: Option<&str>) -> Manager {
        manager.machine(self.operator(client, namespace))
    }

    fn validator(&self, policy: Policy) -> Result<Validator, PolicyError> {
        Validator::new::<K>(policy)
    }

    fn converter(&self) -> Option<Converter> {
        self.converter.as_ref().map(|build| build())
    }

    fn api_resource(&self) -> ApiResource {
        ApiResource::erase::<K>(&())
    }
}
