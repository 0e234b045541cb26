//! The commands that need no cluster: `crd`, `manifests`, `monitoring`, `diagram`.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::args::{
    DiagramArgs, Format, LogFormat, ManifestsArgs, MonitoringArgs, RunArgs, read_policy,
    registration,
};
use super::{App, CliError};
use kube_fsm::admission::{Policy, validating_admission_policies_for};
use kube_fsm::machine::DiagramFormat;
use kube_fsm::operator::rbac::Rbac;
use kube_fsm_generate::alerts::Alerts;
use kube_fsm_generate::dashboard::Dashboard;
use kube_fsm_generate::manifests::{Deploy, Kind, Manifest};

/// The port the Deployment's webhook listens on.
const WEBHOOK_PORT: u16 = 9443;
/// The port of `/metrics`, `/healthz`, `/readyz` in the Deployment.
const METRICS_PORT: u16 = 8080;

fn yaml(value: &impl Serialize) -> Result<String, CliError> {
    serde_saphyr::to_string(value).map_err(|err| CliError::Invalid(err.to_string()))
}

/// `crd`: every kind's CRD, one YAML stream.
pub(super) fn crd(app: &App) -> Result<(), CliError> {
    let several = app.machines.len() > 1;
    for machine in &app.machines {
        let separator = if several { "---\n" } else { "" };
        print!("{separator}{}", yaml(&machine.crd())?);
    }
    Ok(())
}

/// The namespace the operator is deployed to when none is given.
fn default_namespace(app: &App) -> String {
    format!("{}-system", app.name)
}

/// What `manifests` writes: the base, and the notes on what least privilege still reaches.
pub(super) fn base(
    app: &App,
    args: &ManifestsArgs,
) -> Result<(Vec<Manifest>, Vec<String>), CliError> {
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| default_namespace(app));
    let several = args.replicas() > 1 || args.shards.is_some();
    let run = RunArgs {
        namespace: args.watch_namespace.clone(),
        leader_elect: args.replicas() > 1 && args.shards.is_none(),
        shards: args.shards,
        identity: several.then(|| "$(POD_NAME)".to_owned()),
        lease_namespace: Some(namespace.clone()),
        metrics_addr: ([0, 0, 0, 0], METRICS_PORT).into(),
        metrics_auth: args.metrics_auth,
        webhook_addr: args.webhook.then(|| ([0, 0, 0, 0], WEBHOOK_PORT).into()),
        webhook_tls: args.webhook.then(|| {
            let dir = Path::new(Deploy::webhook_cert_dir());
            vec![dir.join("tls.crt"), dir.join("tls.key")]
        }),
        log_format: LogFormat::Json,
        ..RunArgs::default()
    };
    let replicas = run.replicas(&app.name);
    // The operators as the Deployment runs them, for their RBAC; the client is never used.
    let runtime = App::runtime()?;
    let _entered = runtime.enter();
    let offline = kube::Config::new(http::Uri::from_static("https://kubernetes.default.svc"));
    let client =
        kube::Client::try_from(offline).map_err(|err| CliError::Cluster(err.to_string()))?;
    let mut rbac = Rbac::default();
    for machine in &app.machines {
        let own = machine.rbac(client.clone(), run.namespace.as_deref(), replicas.clone());
        rbac.merge(&own);
    }
    let mut deploy = Deploy::new(&app.name, &namespace, &args.image)
        .replicas(args.replicas())
        .metrics_port(METRICS_PORT)
        .metrics_auth(args.metrics_auth);
    if args.webhook {
        let (failure, namespaces) = registration(
            args.webhook_fail_open,
            args.webhook_namespace_label.as_ref(),
        );
        deploy = deploy.webhook(WEBHOOK_PORT, Policy::default(), failure, namespaces);
    }
    for (kind, file) in &args.admission_policy {
        let machine = app
            .machines
            .iter()
            .find(|m| m.kind() == *kind)
            .ok_or_else(|| {
                CliError::Invalid(format!(
                    "--admission-policy names {kind:?}, which this operator does not run"
                ))
            })?;
        let validator = machine
            .validator(read_policy(file)?)
            .map_err(|err| CliError::Invalid(format!("the {kind} policy: {err}")))?;
        deploy = deploy.admission_policies(validating_admission_policies_for(
            &machine.crd(),
            &validator,
            None,
        ));
    }
    let kinds: Vec<Kind> = app.machines.iter().map(|m| Kind::new(m.crd())).collect();
    let manifests = deploy.args(run.to_args()).manifests_of(&kinds, &rbac);
    Ok((manifests, rbac.reach()))
}

/// `manifests`: the base, printed or written one file per object.
pub(super) fn manifests(app: &App, args: &ManifestsArgs) -> Result<(), CliError> {
    let (manifests, reach) = base(app, args)?;
    // What least privilege still reaches, because RBAC cannot narrow it: said, not hidden.
    for line in reach {
        eprintln!("note: {line}");
    }
    for manifest in &manifests {
        let text = yaml(&manifest.object)?;
        match &args.out {
            Some(dir) => write(&dir.join(&manifest.file), &text)?,
            None => print!("---\n# {}\n{text}", manifest.file),
        }
    }
    if let Some(dir) = &args.out {
        eprintln!(
            "wrote {} files to {}: kubectl apply -k {} (where prometheus-operator runs, \
             kubectl apply -k {} too: its ServiceMonitor)",
            manifests.len(),
            dir.display(),
            dir.display(),
            dir.join("prometheus").display()
        );
    }
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<(), CliError> {
    let file = |source| CliError::File {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(file)?;
    }
    std::fs::write(path, text).map_err(file)
}

/// `monitoring`: the rules of every machine (printed, or written with the PrometheusRule and
/// the dashboard).
pub(super) fn monitoring(app: &App, args: &MonitoringArgs) -> Result<(), CliError> {
    let mut alerts = Alerts::new()
        .stuck_after(Duration::from_secs(args.stuck_after))
        .matchers(&args.matchers)
        .webhook(args.webhook);
    let mut dashboard = Dashboard::new(format!("{} operator", app.name)).matchers(&args.matchers);
    for machine in &app.machines {
        alerts = alerts.description(machine.description());
        dashboard = dashboard.description(machine.description());
    }
    let rules = yaml(&alerts.rules())?;
    let Some(dir) = &args.out else {
        print!("{rules}");
        return Ok(());
    };
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| default_namespace(app));
    let object = alerts.prometheus_rule(&app.name, &namespace);
    let mut json = serde_json::to_string_pretty(&dashboard.json())
        .map_err(|err| CliError::Invalid(err.to_string()))?;
    json.push('\n');
    write(&dir.join("prometheus-rules.yaml"), &rules)?;
    write(&dir.join("prometheus-rule.yaml"), &yaml(&object)?)?;
    write(&dir.join("dashboard.json"), &json)?;
    eprintln!(
        "wrote prometheus-rules.yaml, prometheus-rule.yaml and dashboard.json to {}",
        dir.display()
    );
    Ok(())
}

/// `diagram`: one machine, or every one (Mermaid and DOT only).
pub(super) fn diagram(app: &App, args: &DiagramArgs) -> Result<(), CliError> {
    let kinds: Vec<String> = app.machines.iter().map(|m| m.kind()).collect();
    let chosen: Vec<_> = match &args.kind {
        Some(kind) => {
            let found = app
                .machines
                .iter()
                .find(|m| m.kind().eq_ignore_ascii_case(kind));
            let machine = found.ok_or_else(|| {
                CliError::Invalid(format!(
                    "no machine of kind {kind:?}: this operator runs {}",
                    kinds.join(", ")
                ))
            })?;
            vec![machine]
        }
        None => app.machines.iter().collect(),
    };
    let format = match args.format {
        Format::Mermaid => DiagramFormat::Mermaid,
        Format::Dot => DiagramFormat::Dot,
        Format::Svg if chosen.len() > 1 => {
            return Err(CliError::Invalid(format!(
                "an SVG draws one machine: name it with --kind ({})",
                kinds.join(", ")
            )));
        }
        Format::Svg => DiagramFormat::Svg,
    };
    for machine in chosen {
        let text = machine
            .description()
            .diagram(format, None)
            .map_err(|err| CliError::Invalid(err.to_string()))?;
        print!("{text}");
        if !text.ends_with('\n') {
            println!();
        }
    }
    Ok(())
}
