//! The admission webhook's cost, measured on the API server the tests use: the example operator
//! runs as its own process with `--webhook`, registered for the namespaces labelled
//! `kube-fsm.dev/bench-webhook=on`; the bench then sends the same legal status patches
//! (server-side dry runs, so nothing is stored and etcd stays out of the figure) to one object
//! with the webhook off and on, alternating by relabelling the namespace, and reports the
//! latency each patch took, the added latency, and the operator's CPU per 1 000 reviews.
//!
//! ```text
//! cargo run --release -p kube-fsm-benches --bin admission -- [--reviews N] [--rounds R]
//! ```
//! (`--reviews`: patches per batch, default 2000; `--rounds`: off/on pairs, default 3, the
//! order alternating.) Needs `KUBECONFIG` (scripts/envtest) and the example's release binary.

use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use kube_fsm_benches::example::{BoxError, Operator, install_crd, process_stats};
use kube_fsm_testkit::cluster::example_databases;
use kube_fsm_testkit::prometheus::sum;
use serde_json::json;

const LABEL: &str = "kube-fsm.dev/bench-webhook";

struct Batch {
    on: bool,
    latencies: Vec<Duration>,
    cpu: f64,
    /// The webhook's own time per review (its latency histogram), when on.
    served: Option<Duration>,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let (mut reviews, mut rounds) = (2000_usize, 3_usize);
    while let Some(flag) = args.next() {
        let value: usize = args.next().ok_or("a value")?.parse()?;
        match flag.as_str() {
            "--reviews" => reviews = value,
            "--rounds" => rounds = value,
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    let client = Client::try_default().await?;
    install_crd(&client).await;
    let id = fastrand::u32(..0x00ff_ffff);
    let (ns, idle) = (
        format!("bench-admission-{id:06x}"),
        format!("bench-idle-{id:06x}"),
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for name in [&ns, &idle] {
        let object: Namespace = serde_json::from_value(json!({ "metadata": { "name": name } }))?;
        namespaces.create(&PostParams::default(), &object).await?;
    }
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &example_databases());
    let mut object = DynamicObject::new("bench", &example_databases());
    object.data = json!({ "spec": {} });
    api.create(&PostParams::default(), &object).await?;
    for phase in ["Pending", "Provisioning", "Running"] {
        api.patch_status("bench", &PatchParams::default(), &phase_patch(phase))
            .await?;
    }

    // The operator watches an empty namespace: its CPU is the webhook's.
    let operator = Operator::start(&[
        "--namespace".into(),
        idle.clone(),
        "--events".into(),
        "off".into(),
        "--webhook".into(),
        "127.0.0.1:0".into(),
        "--webhook-register".into(),
        "bound".into(),
        "--webhook-namespace-label".into(),
        format!("{LABEL}=on"),
    ])
    .await?;
    let pid = operator.pid().ok_or("the operator has no pid")?;
    let mut batches = Vec::new();
    for round in 0..rounds {
        for on in if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        } {
            set_label(&namespaces, &ns, on).await?;
            wait_effective(&api, on).await?;
            let served_before = served(&operator).await?;
            let cpu_before = process_stats(pid).ok_or("no /proc stats")?.0;
            let mut latencies = Vec::with_capacity(reviews);
            let dry_run = PatchParams {
                dry_run: true,
                ..PatchParams::default()
            };
            for i in 0..reviews {
                let patch = Patch::Merge(json!({ "status": { "observedGeneration": i } }));
                let started = Instant::now();
                api.patch_status("bench", &dry_run, &patch).await?;
                latencies.push(started.elapsed());
            }
            let cpu = process_stats(pid).ok_or("no /proc stats")?.0 - cpu_before;
            let served_after = served(&operator).await?;
            let count = served_after.1 - served_before.1;
            batches.push(Batch {
                on,
                latencies,
                cpu,
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                served: (count > 0.0)
                    .then(|| Duration::from_secs_f64((served_after.0 - served_before.0) / count)),
            });
        }
    }
    report(&batches, reviews, rounds);

    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete("databases.example.kube-fsm.dev", &DeleteParams::default())
        .await?;
    operator.stop(Duration::from_secs(10)).await?;
    for name in [&ns, &idle] {
        namespaces.delete(name, &DeleteParams::default()).await?;
    }
    Ok(())
}

fn phase_patch(phase: &str) -> Patch<serde_json::Value> {
    Patch::Merge(json!({ "status": { "phase": phase } }))
}

async fn set_label(namespaces: &Api<Namespace>, ns: &str, on: bool) -> Result<(), BoxError> {
    let value = if on { "on" } else { "off" };
    let patch = Patch::Merge(json!({ "metadata": { "labels": { LABEL: value } } }));
    namespaces
        .patch(ns, &PatchParams::default(), &patch)
        .await?;
    Ok(())
}

/// Waits until the API server calls the webhook exactly when `on`: a dry-run move the machine
/// has no edge for (Running -> Pending) is refused only then.
async fn wait_effective(api: &Api<DynamicObject>, on: bool) -> Result<(), BoxError> {
    let dry_run = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let refused = api
            .patch_status("bench", &dry_run, &phase_patch("Pending"))
            .await
            .is_err();
        if refused == on {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the webhook is still {} after 30 s",
                if on { "off" } else { "on" }
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// (seconds, count) of the webhook's latency histogram.
async fn served(operator: &Operator) -> Result<(f64, f64), BoxError> {
    let text = operator.metrics().await?;
    let metric = "controller_runtime_webhook_latency_seconds";
    Ok((
        sum(&text, &format!("{metric}_sum"), &[]),
        sum(&text, &format!("{metric}_count"), &[]),
    ))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[allow(clippy::cast_precision_loss)]
fn report(batches: &[Batch], reviews: usize, rounds: usize) {
    println!("admission webhook cost: {rounds} off/on pairs of {reviews} dry-run status patches\n");
    println!(
        "| batch | webhook | p50 ms | p99 ms | mean ms | webhook's own time per review | operator CPU s per 1 000 |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|");
    let mut totals = [(0.0, 0.0, 0.0, 0.0); 2];
    for (i, batch) in batches.iter().enumerate() {
        let mut sorted = batch.latencies.clone();
        sorted.sort();
        let mean = sorted.iter().sum::<Duration>() / u32::try_from(sorted.len()).unwrap_or(1);
        let (p50, p99) = (percentile(&sorted, 0.5), percentile(&sorted, 0.99));
        let cpu = batch.cpu * 1000.0 / reviews as f64;
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {} | {:.3} |",
            i + 1,
            if batch.on { "on" } else { "off" },
            ms(p50),
            ms(p99),
            ms(mean),
            batch
                .served
                .map_or("-".to_owned(), |d| format!("{:.3} ms", ms(d))),
            cpu
        );
        let t = &mut totals[usize::from(batch.on)];
        *t = (t.0 + ms(p50), t.1 + ms(p99), t.2 + ms(mean), t.3 + cpu);
    }
    let n = (batches.len() / 2).max(1) as f64;
    let [off, on] = totals.map(|(a, b, c, d)| (a / n, b / n, c / n, d / n));
    println!(
        "\nmean of the batches: p50 {:.2} → {:.2} ms ({:.2}×, +{:.2} ms), p99 {:.2} → {:.2} ms ({:.2}×), \
         mean {:.2} → {:.2} ms (+{:.2} ms per admitted request); operator CPU per 1 000 reviews {:.3} s \
         (idle baseline {:.3} s)",
        off.0,
        on.0,
        on.0 / off.0,
        on.0 - off.0,
        off.1,
        on.1,
        on.1 / off.1,
        off.2,
        on.2,
        on.2 - off.2,
        on.3 - off.3,
        off.3
    );
}
