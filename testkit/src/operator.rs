//! Running an operator in a test, and stopping it (gracefully) or crashing it.

use kube_fsm::Operator;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// An operator for `K` in `namespace`, with a short backoff (tests want quick retries).
pub fn in_namespace<K, H>(client: &kube::Client, namespace: &str, handler: H) -> Operator<K, H>
where
    K: kube_fsm::Reconcilable<H>,
    H: Send + Sync + 'static,
{
    Operator::<K, H>::new(client.clone(), handler)
        .namespace(namespace)
        .backoff(
            std::time::Duration::from_millis(200),
            std::time::Duration::from_secs(2),
        )
}

/// A running operator; dropping it does not stop it, `stop`/`crash` do.
#[derive(Debug)]
pub struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<kube_fsm::Stopped>,
}

impl Running {
    /// Spawns `operator`, to be stopped with [`Running::stop`].
    pub fn spawn<K, H>(operator: Operator<K, H>) -> Self
    where
        K: kube_fsm::Reconcilable<H>,
        H: Send + Sync + 'static,
    {
        Self::start(|stopped| tokio::spawn(operator.shutdown_on(stopped).run()))
    }

    /// Spawns `manager` (several machines in one process), to be stopped with
    /// [`Running::stop`].
    #[must_use]
    pub fn manager(manager: kube_fsm::Manager) -> Self {
        Self::start(|stopped| tokio::spawn(manager.shutdown_on(stopped).run()))
    }

    /// Runs what `spawn` starts with a shutdown signal that [`Running::stop`] sends.
    fn start(
        spawn: impl FnOnce(
            std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + Sync>>,
        ) -> JoinHandle<kube_fsm::Stopped>,
    ) -> Self {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = spawn(Box::pin(async move {
            let _ = stopped.await;
        }));
        Running { stop, task }
    }

    /// Shuts down gracefully (in-flight reconciles finish; a held Lease is released).
    ///
    /// # Panics
    /// When the operator panicked, or did not stop within 30 s (the default drain, 20 s, plus
    /// the Lease release's bound, 5 s, and slack): a test must not pass over either. A stop
    /// slower than 10 s is said on stderr (uncaptured) with its time: the tests' operators
    /// stop in 2 s or less when the API server is not loaded.
    pub async fn stop(self) {
        let asked = std::time::Instant::now();
        let _ = self.stop.send(());
        match tokio::time::timeout(std::time::Duration::from_secs(30), self.task).await {
            Ok(Ok(_)) => {}
            Ok(Err(err)) if err.is_panic() => {
                std::panic::resume_unwind(err.into_panic());
            }
            Ok(Err(err)) => panic!("the operator's task ended abnormally: {err}"),
            Err(elapsed) => {
                panic!("the operator did not stop within 30 s of its shutdown signal ({elapsed})")
            }
        }
        let took = asked.elapsed();
        if took > std::time::Duration::from_secs(10) {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "*** SLOW STOP: an operator took {took:?} to stop after its shutdown signal"
            );
        }
    }

    /// Stops at once, as a killed process would (nothing is released).
    pub async fn crash(self) {
        self.task.abort();
        let _ = self.task.await;
    }

    /// Waits up to `timeout` for `run` to return by itself; `None` if it did not.
    pub async fn stopped(self, timeout: std::time::Duration) -> Option<kube_fsm::Stopped> {
        // Keep the stop channel open meanwhile: dropping it would be the shutdown signal.
        let Running { stop, task } = self;
        let stopped = match tokio::time::timeout(timeout, task).await {
            Ok(Ok(stopped)) => Some(stopped),
            _ => None,
        };
        drop(stop);
        stopped
    }

    /// Whether `run` has returned.
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}
