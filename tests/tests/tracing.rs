//! The engine's tracing: one `reconcile` span per reconcile, carrying `object`, and, when the
//! phase moves, `state.from`, `state.to` and `reason` (real API server).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kube::Api;
use kube::api::PostParams;
use kube_fsm::Operator;
use kube_fsm_testkit::cluster::{self, eventually};
use kube_fsm_testkit::handlers::Databases;
use kube_fsm_testkit::operator::Running;
use kube_fsm_testkit::resources::{Database, sample};
use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

#[derive(Clone, Debug, Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

/// Collects the fields of every closed `reconcile` span.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Fields>>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() != "reconcile" {
            return;
        }
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<Fields>()
        {
            values.record(fields);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id)
            && let Some(fields) = span.extensions().get::<Fields>()
        {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(fields.clone());
        }
    }
}

#[tokio::test]
async fn each_reconcile_has_a_span_naming_the_object_and_the_transition() {
    let capture = Capture::default();
    // A current-thread runtime: the operator's tasks run on this thread, under this subscriber.
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    let Some((client, ns)) = cluster::prepare("each_reconcile_has_a_span", "fsm-tracing").await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let operator =
        Running::spawn(Operator::<Database, _>::new(client.clone(), Databases).namespace(&ns));
    api.create(&PostParams::default(), &sample("db"))
        .await
        .expect("create");
    let object = format!("Database.v1.example.kube-fsm.dev/db.{ns}");
    let moves = |spans: &[Fields]| -> Vec<(String, String, String)> {
        spans
            .iter()
            .filter(|f| f.0.get("object") == Some(&object) && f.0.contains_key("state.to"))
            .map(|f| {
                let get = |k: &str| f.0.get(k).cloned().unwrap_or_default();
                (get("state.from"), get("state.to"), get("reason"))
            })
            .collect()
    };
    let seen = eventually(Duration::from_secs(30), || async {
        let spans = capture
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let moves = moves(&spans);
        (moves.len() >= 2).then_some(moves)
    })
    .await
    .expect("two transitions traced");
    assert_eq!(
        seen,
        [
            ("Pending".into(), "Provisioning".into(), "Accept".into()),
            (
                "Provisioning".into(),
                "Running".into(),
                "PhaseChanged".into()
            ),
        ]
    );
    operator.stop().await;
}
