//! TEMPORARY: dumps `expand::expand` output for every `#[state_machine]` use in the workspace
//! plus hand-written invalid inputs, to diff the restructuring's before/after. Run with
//! `DUMP_DIR=/tmp/before cargo test -p kube-fsm-macros dump_tmp -- --nocapture`.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use proc_macro2::TokenStream;
use quote::{ToTokens, quote};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Every Rust file of the workspace that uses the attribute (not target dirs).
fn sources() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "target" && name != "macros" && !name.starts_with('.') {
                    walk(&path, out);
                }
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), &mut out);
    out
}

fn collect(items: &[syn::Item], out: &mut Vec<(TokenStream, TokenStream)>) {
    for item in items {
        match item {
            syn::Item::Mod(m) => {
                if let Some((_, items)) = &m.content {
                    collect(items, out);
                }
            }
            syn::Item::Fn(f) => {
                let items: Vec<syn::Item> = f
                    .block
                    .stmts
                    .iter()
                    .filter_map(|s| match s {
                        syn::Stmt::Item(i) => Some(i.clone()),
                        _ => None,
                    })
                    .collect();
                collect(&items, out);
            }
            syn::Item::Struct(s) => {
                let mut s = s.clone();
                if let Some(i) = s
                    .attrs
                    .iter()
                    .position(|a| a.path().is_ident("state_machine"))
                {
                    let attr = s.attrs.remove(i);
                    let args = match attr.meta {
                        syn::Meta::List(list) => list.tokens,
                        _ => TokenStream::new(),
                    };
                    out.push((args, s.into_token_stream()));
                }
            }
            _ => {}
        }
    }
}

/// `spec = "x"` relative to the crate of `file` → relative to this crate.
fn rebase(args: TokenStream, crate_dir: &str) -> TokenStream {
    args.into_iter()
        .map(|tt| match &tt {
            proc_macro2::TokenTree::Literal(lit) => {
                let text = lit.to_string();
                if let Ok(s) = syn::parse_str::<syn::LitStr>(&text) {
                    let v = s.value();
                    if v.ends_with(".yaml") && !v.starts_with('/') {
                        let new = syn::LitStr::new(&format!("../{crate_dir}/{v}"), lit.span());
                        return proc_macro2::TokenTree::Literal(
                            syn::parse_str::<proc_macro2::Literal>(
                                &new.to_token_stream().to_string(),
                            )
                            .unwrap(),
                        );
                    }
                }
                tt
            }
            _ => tt,
        })
        .collect()
}

/// The rendered messages of the `compile_error!`s in an expansion.
fn messages(out: &TokenStream) -> String {
    let mut text = String::new();
    let tokens: Vec<_> = out.clone().into_iter().collect();
    for (i, tt) in tokens.iter().enumerate() {
        if let proc_macro2::TokenTree::Ident(id) = tt
            && id == "compile_error"
            && let Some(proc_macro2::TokenTree::Group(g)) = tokens.get(i + 2)
        {
            let lit: syn::LitStr = syn::parse2(g.stream()).unwrap();
            text.push_str(&lit.value());
            text.push_str("\n----\n");
        }
    }
    text
}

const REFERENCE_DSL: &str = r#"
    phases(
        Pending(initial, description = "Accepted, waiting to be provisioned."),
        Provisioning(description = "Child resources are being created.", requeue_after = "10s",
                     timeout = "10m" -> Failed),
        Running(description = "Serving."),
        Degraded(description = "Serving, but not every part is healthy.", requeue_after = "30s"),
        Failed(description = "Gave up; needs a human.", terminal),
    ),
    conditions(
        PodsReady(description = "All database pods are ready."),
        ServiceAvailable(description = "The service answers."),
    ),
    transitions(
        Pending -> Provisioning on Accept,
        Provisioning -> Running when PodsReady,
        Running -> Degraded when !ServiceAvailable,
        Degraded -> Running when ServiceAvailable && PodsReady,
        [Provisioning, Running, Degraded] -> Failed on Fail,
    ),
    finalizer = "example.com/cleanup",
    ready = ServiceAvailable,
"#;

const YAML_CASES: &[(&str, &str)] = &[
    (
        "unknown_phase",
        "phases:\n  Pending: { initial: true }\n  Done: { terminal: true }\ntransitions:\n  - { from: Pending, to: Dne }\n",
    ),
    (
        "duplicate_initial",
        "phases:\n  A: { initial: true }\n  B: { initial: true }\n  C: { terminal: true }\ntransitions:\n  - { from: A, to: C }\n  - { from: B, to: C }\n",
    ),
    (
        "unreachable",
        "phases:\n  A: { initial: true }\n  B: {}\n  C: { terminal: true }\ntransitions:\n  - { from: A, to: C }\n  - { from: B, to: C }\n",
    ),
    (
        "bad_duration",
        "phases:\n  A: { initial: true, requeueAfter: 10 }\n  B: { timeout: { after: 5y, to: C, reason: bad-reason } }\n  C: { terminal: true, requeueAfter: 1s }\ntransitions:\n  - { from: A, to: B }\n",
    ),
    (
        "unknown_key",
        "phases:\n  A: { initial: true, terminl: true }\ntransition: []\n",
    ),
    (
        "mixed",
        "phases:\n  A: { initial: true, timeout: { after: 1m } }\n  b: {}\n  A: {}\nconditions:\n  X: {}\n  X: {}\n  bad/: {}\nevents:\n  Go: {}\n  Go: {}\n  self: {}\ntransitions:\n  - { from: A, to: A, when: X }\n  - { from: [], to: A }\n  - { from: A, on: Go, when: X, to: A }\n  - { to: A }\n  - { from: A, to: A, when: \"X && \" }\n  - { from: A, to: A, on: Stop }\nfinalizer: nope\nready: Y\ndrift: rvert\n",
    ),
    (
        "timeouts",
        "phases:\n  A: { initial: true, timeout: { after: 1m, to: C } }\n  B: { timeout: { after: 1m, to: Nowhere } }\n  C: { terminal: true, timeout: { after: 1s, to: A } }\ntransitions:\n  - { from: A, to: B }\n  - { from: B, to: C }\n",
    ),
    (
        "shadowed",
        "phases:\n  A: { initial: true }\n  B: {}\n  C: { terminal: true }\nconditions:\n  X: {}\n  Y: {}\ntransitions:\n  - { from: A, to: B, when: X }\n  - { from: A, to: C, when: X && Y }\n  - { from: B, to: C, on: Go }\n  - { from: B, to: A, on: Go }\n  - { from: B, to: C }\n",
    ),
    ("empty", ""),
    ("not_a_map", "- a\n- b\n"),
    ("syntax", "phases:\n  A: {x: 1\n"),
    ("no_phases", "phases: {}\n"),
    (
        "condition_twice_after_bad",
        "phases:\n  A: { initial: true }\n  B: { terminal: true }\nconditions:\n  bad/: {}\n  X: {}\n  X: {}\ntransitions:\n  - { from: A, to: B }\n",
    ),
    (
        "graph_after_read_error",
        "phases:\n  A: { initial: true, bogus: 1 }\n  B: {}\n  C: { terminal: true }\ntransitions:\n  - { from: A, to: C }\n",
    ),
    (
        "graph_mixed",
        "phases:\n  A: { initial: true, timeout: { after: 1m, to: C } }\n  B: { timeout: { after: 5y, to: Nowhere, reason: lower } }\n  C: {}\n  D: { terminal: true }\nconditions:\n  X: {}\n  Y: {}\ntransitions:\n  - { from: A, to: B, when: X }\n  - { from: A, to: D, when: X && Y }\n  - { from: B, to: D }\n",
    ),
];

const DSL_CASES: &[&str] = &[
    "",
    "phases()",
    "phases(A(timeout = \"1m\" -> ))",
    "transitions(A -> B when)",
    "nonsense = 1",
    "spec = \"/etc/passwd\"",
    "spec = \"does/not/exist.yaml\"",
    "spec = \"\"",
    "phases(A, A), transitions(A -> A when X && !X)",
    "phases(A(terminal)), retired(A -> A, B -> B, B -> C, self -> A)",
    "phases(A(terminal)), retired(B ->)",
    "phases(A(terminal)), retired(B -> A -> A)",
    "phases(A(initial, terminl))",
    "phases(A(initial, bogus))",
    "phases(A(initial), B(terminal)), conditions(X(descr = \"a\")), transitions(A -> B)",
    "phases(A(initial), B(terminal)), transitions(A -> B whenever X)",
    "phases(A(terminal)), spec = \"x.yaml\"",
    "spec = \"x.yaml\", phases(A(terminal))",
    "phase(A(terminal))",
    "phases(A(terminal)), trnsitions(A -> A)",
    "phases(A(terminal)), status_field = other_field",
    "phases(A(initial), B, C(terminal)), transitions(A -> C)",
    "phases(A(initial), B(terminal)), transitions(A -> Bee)",
    "phases(A(initial), B(terminal)), conditions(Synced), transitions(A -> B), ready = Sinced, drift = revrt",
    "phases(A(initial), B(terminal)), transitions(A -> B), retired(Old -> B, Older -> A)",
    "phases(A(initial), B(terminal)), transitions(A -> B), retired(A -> B, Old -> Bee, Old -> A, Self -> A, Gone -> Older, Older -> B)",
    "phases(A(initial), A, b, C(terminal)), transitions(A -> C on Go, A -> C on Go, A -> Cee, C -> A, A -> C on Stop)",
    "phases(A(initial), B, C(terminal)), events(Go, Go, bad), transitions(A -> B on Go, B -> C on Stop)",
    "phases(Pending(initial), Creating, Running, Done(terminal)), transitions(Pending -> Creating, Creating -> Running, Running -> Done), retired(Provisioning -> Creating, Starting -> Running)",
    "phases(Pending(initial), Running, Done(terminal)), transitions(Pending -> Running on Go, Pending -> Done, Running -> Running on Again, Running -> Done)",
    "phases(A(initial), B(requeue_after = \"0s\"), C(terminal)), conditions(\"example.com/pods-ready\", \"Ready\"), transitions([A, B] -> C when \"example.com/pods-ready\" && !Ready, A -> B)",
    "phases(HTTPServer(initial), Http_server, C(terminal)), transitions(HTTPServer -> C)",
    "phases(A(initial), B(terminal)), conditions(pods-ready), transitions(A -> B)",
    "phases(A(initial, requeue_after = \"x\"), b, C(terminal, requeue_after = \"1s\", timeout = \"1m\" -> A as bad), D(initial)), conditions(X, \"bad/\", X), events(Go, go), transitions(A -> C on Go, A -> Z when X && !X, [A, Q] -> C on Stop, C -> A, A -> A when X, A -> C when X, A -> D on Go), finalizer = \"nope\", ready = Y, drift = rvert, retired(A -> Z, Old -> C, Old -> A, self -> A)",
    "phases(A(initial, timeout = \"1m\" -> C), B(timeout = \"5y\" -> Nowhere as lower), C, D(terminal)), transitions(A -> B, B -> D)",
    "phases(A(initial, timeout = \"1m\" -> C), B(timeout = \"5s\" -> D as lower), C, D(terminal)), transitions(A -> B, B -> D)",
    "phases(A(initial), B, C(terminal), E), conditions(X, Y), transitions(A -> B when X, A -> C when X && Y, B -> C, E -> C, B -> E when Y, B -> C when Y && X)",
    "phases(A(initial), B(terminal)), conditions(\"bad/\", X, X), transitions(A -> B)",
    "phases(A(initial), HTTPReady, HttpReady(terminal)), transitions(A -> HTTPReady, HTTPReady -> HttpReady)",
    "phases(A(initial), B(terminal)), conditions(\"a.com/pods-ready\", \"b.com/pods-ready\"), transitions(A -> B)",
    "phases(A(initial), B(initial), C(terminal), Z), transitions(A -> C, B -> C)",
    "phases(A(initial), B, C(terminal)), transitions(A -> B on Go, A -> C on Go, A -> B, B -> C, B -> C when X)",
    "phases(A(initial), B, C(terminal)), events(Go), transitions(A -> B on Stop, B -> C on go, A -> C on Go when X)",
    "phases(A(initial), B, C(terminal)), transitions(A -> B on go, A -> B on Self, B -> C)",
    "phases(A(initial), B(terminal)), transitions(A -> B), retired(Old -> Older, Older -> B, Gone -> Lost, Lost -> Nowhere)",
];

fn items() -> Vec<(&'static str, TokenStream)> {
    vec![
        (
            "db",
            quote! {
                #[kube(group = "example.com", version = "v1", kind = "Database", status = "DatabaseStatus")]
                pub struct DatabaseSpec {}
            },
        ),
        (
            "nostatus",
            quote! {
                #[kube(group = "example.com", version = "v1", kind = "Database")]
                pub struct DatabaseSpec {}
            },
        ),
        (
            "nokind",
            quote! {
                #[kube(group = "example.com", version = "v1")]
                pub struct DatabaseSpec {}
            },
        ),
        (
            "badkind",
            quote! {
                #[kube(kind = "My-Kind", status = "S")]
                pub struct XSpec {}
            },
        ),
        (
            "notstruct",
            quote! {
                pub fn f() {}
            },
        ),
        (
            "badkube",
            quote! {
                #[kube(kind = 5)]
                pub struct XSpec {}
            },
        ),
    ]
}

#[test]
fn dump_tmp() {
    let Some(dir) = std::env::var_os("DUMP_DIR") else {
        return;
    };
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fixtures = PathBuf::from("/tmp/dump-fixtures");
    std::fs::create_dir_all(&fixtures).unwrap();
    let mut n = 0;
    let mut write = |name: &str, out: TokenStream| {
        n += 1;
        let text = out.to_string();
        std::fs::write(dir.join(format!("{name}.tokens")), format!("{text}\n")).unwrap();
        std::fs::write(dir.join(format!("{name}.errors")), messages(&out)).unwrap();
    };

    let root = root();
    for file in sources() {
        let rel = file
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let crate_dir = rel.split('/').next().unwrap().to_owned();
        let Ok(parsed) = syn::parse_file(&std::fs::read_to_string(&file).unwrap()) else {
            continue;
        };
        let mut found = Vec::new();
        collect(&parsed.items, &mut found);
        for (i, (args, item)) in found.into_iter().enumerate() {
            let args = rebase(args, &crate_dir);
            let out = crate::expand::expand(args, item);
            write(&format!("ws__{}__{i}", rel.replace('/', "_")), out);
        }
    }

    for (name, text) in YAML_CASES {
        std::fs::write(fixtures.join(format!("{name}.yaml")), text).unwrap();
        let attr = TokenStream::from_str(&format!(
            "spec = \"../../../tmp/dump-fixtures/{name}.yaml\""
        ))
        .unwrap();
        for (iname, item) in items().into_iter().take(2) {
            write(
                &format!("yaml__{name}__{iname}"),
                crate::expand::expand(attr.clone(), item),
            );
        }
    }
    for spec in ["database", "pipeline", "riskengine"] {
        let attr = TokenStream::from_str(&format!("spec = \"../specs/{spec}.yaml\"")).unwrap();
        for (iname, item) in items() {
            write(
                &format!("spec__{spec}__{iname}"),
                crate::expand::expand(attr.clone(), item),
            );
        }
    }
    let attr = TokenStream::from_str(REFERENCE_DSL).unwrap();
    for (iname, item) in items() {
        write(
            &format!("reference_dsl__{iname}"),
            crate::expand::expand(attr.clone(), item),
        );
    }
    let status_attr =
        TokenStream::from_str(&format!("status_field = state, {REFERENCE_DSL}")).unwrap();
    write(
        "reference_dsl_status_field",
        crate::expand::expand(status_attr, items()[0].1.clone()),
    );
    for (i, dsl) in DSL_CASES.iter().enumerate() {
        let attr = TokenStream::from_str(dsl).unwrap();
        for (iname, item) in items().into_iter().take(2) {
            write(
                &format!("dsl__{i:02}__{iname}"),
                crate::expand::expand(attr.clone(), item),
            );
        }
    }
    eprintln!("dumped {n} expansions to {}", dir.display());
}
