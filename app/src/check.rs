//! `check`: the cluster against this binary, before it is rolled out. Each kind's CRD is
//! installed; no object is stored in a version this binary no longer serves; and no stored
//! object is in a phase this machine neither declares nor retires (the engine would leave it
//! alone, and the spec lock would have refused the edit that dropped it).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DynamicObject, ListParams};

use super::machine::Entry;
use super::{App, CliError};

/// Prints one line per kind; fails when a problem is found.
pub(super) fn check(app: &App) -> Result<(), CliError> {
    App::runtime()?.block_on(async {
        let config = kube::Config::infer()
            .await
            .map_err(|err| CliError::Cluster(err.to_string()))?;
        let client =
            kube::Client::try_from(config).map_err(|err| CliError::Cluster(err.to_string()))?;
        let mut problems = 0;
        for machine in &app.machines {
            let found = check_one(app, machine.as_ref(), &client).await?;
            for problem in &found {
                println!("{}: {problem}", machine.kind());
            }
            problems += found.len();
        }
        match problems {
            0 => Ok(()),
            n => Err(CliError::Problems(n)),
        }
    })
}

/// The problems of one kind (a line saying it is fine is printed here).
async fn check_one(
    app: &App,
    machine: &dyn Entry,
    client: &kube::Client,
) -> Result<Vec<String>, CliError> {
    let ours = machine.crd();
    let name = ours.metadata.name.clone().unwrap_or_default();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let cluster_error = |err: kube::Error| CliError::Cluster(err.to_string());
    let Some(theirs) = crds.get_opt(&name).await.map_err(cluster_error)? else {
        return Ok(vec![format!(
            "the CRD {name} is not installed; install it with `{} crd | kubectl apply -f -`",
            app.name
        )]);
    };
    let mut problems = Vec::new();
    let served: BTreeSet<&str> = ours.spec.versions.iter().map(|v| v.name.as_str()).collect();
    let stored = theirs
        .status
        .and_then(|s| s.stored_versions)
        .unwrap_or_default();
    for version in stored.iter().filter(|v| !served.contains(v.as_str())) {
        problems.push(format!(
            "objects were stored as {version}, which this binary no longer serves; migrate them to a served version ({}) and remove {version} from the CRD's storedVersions first",
            served.iter().copied().collect::<Vec<_>>().join(", ")
        ));
    }
    let description = machine.description();
    let known: BTreeSet<&str> = (description.phases.iter().map(|p| p.name.as_str()))
        .chain(description.retired.keys().map(String::as_str))
        .collect();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &machine.api_resource());
    let (mut objects, mut strays) = (0usize, BTreeMap::<String, Vec<String>>::new());
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await.map_err(cluster_error)?;
        for object in &page.items {
            objects += 1;
            if let Some(phase) = object.data["status"]["phase"]
                .as_str()
                .filter(|p| !known.contains(p))
            {
                let name = match &object.metadata.namespace {
                    Some(ns) => format!("{ns}/{}", object.metadata.name.as_deref().unwrap_or("")),
                    None => object.metadata.name.clone().unwrap_or_default(),
                };
                strays.entry(phase.to_owned()).or_default().push(name);
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    for (phase, names) in &strays {
        let shown: Vec<&str> = names.iter().take(3).map(String::as_str).collect();
        let more = names.len().saturating_sub(shown.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        problems.push(format!(
            "{} object(s) are in phase {phase}, which this machine neither declares nor retires ({}{more}); declare it, or retire it to a declared phase in the spec",
            names.len(),
            shown.join(", ")
        ));
    }
    if problems.is_empty() {
        println!(
            "{}: the CRD {name} is installed and serves this binary's versions; {objects} object(s), every one in a phase this machine knows",
            machine.kind()
        );
    }
    Ok(problems)
}
