//! Wiring the Database handlers into a kube-fsm operator.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::runtime::watcher;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::database::{Database, Handlers, child_selector};

/// The operator for `handlers`: Databases in `namespace` (or everywhere), reconciled again when
/// a child ConfigMap they control changes. Only the children (by label) are watched.
pub fn operator(
    client: Client,
    handlers: Handlers,
    namespace: Option<&str>,
) -> kube_fsm::Operator<Database, Handlers> {
    let operator = kube_fsm::Operator::<Database, Handlers>::new(client, handlers)
        .reporter("kube-fsm-examples")
        .owns::<ConfigMap>(watcher::Config::default().labels(&child_selector()));
    match namespace {
        Some(namespace) => operator.namespace(namespace),
        None => operator,
    }
}

/// An operator running in this process, in its own task.
#[derive(Debug)]
pub struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Running {
    /// Starts the operator for `handlers` on `namespace`.
    pub fn start(client: Client, handlers: Handlers, namespace: &str) -> Self {
        let (stop, stopped) = oneshot::channel::<()>();
        let operator = operator(client, handlers, Some(namespace)).shutdown_on(async move {
            // A dropped sender stops the operator as well.
            let _ = stopped.await;
        });
        Running {
            stop,
            task: tokio::spawn(operator.run()),
        }
    }

    /// Stops gracefully: in-flight reconciles finish, nothing new starts. Gives up after
    /// `patience` (the task is then aborted). Returns whether it stopped in time.
    pub async fn stop(self, patience: Duration) -> bool {
        let _ = self.stop.send(());
        let mut task = self.task;
        match tokio::time::timeout(patience, &mut task).await {
            Ok(_) => true,
            Err(_) => {
                task.abort();
                false
            }
        }
    }
}
