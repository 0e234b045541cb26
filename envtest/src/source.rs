//! Where the API server comes from: the user's cluster, `KUBEBUILDER_ASSETS`, or the kube-fsm
//! cache, in that order.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::Error;

/// Where the API server of a [`TestCluster`](crate::TestCluster) comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// The cluster of the user's kubeconfig, asked for with `USE_EXISTING_CLUSTER=true`
    /// (controller-runtime's variable) or `KUBE_FSM_USE_EXISTING_CLUSTER=1`.
    Existing {
        /// The kubeconfig file: `$KUBECONFIG`'s first entry, else `~/.kube/config`; `None` when
        /// that file does not exist (e.g. an in-cluster configuration).
        kubeconfig: Option<PathBuf>,
    },
    /// `etcd` and `kube-apiserver` binaries, started for the test and stopped when it ends.
    Binaries {
        /// The directory they were found in.
        dir: PathBuf,
        /// Which convention found them: `"KUBEBUILDER_ASSETS"` or `"the kube-fsm cache"`.
        from: &'static str,
    },
}

/// The `from` of binaries found through `KUBEBUILDER_ASSETS`.
pub(crate) const ASSETS: &str = "KUBEBUILDER_ASSETS";
/// The `from` of binaries found in `$KUBE_FSM_CACHE/bin`.
pub(crate) const CACHE: &str = "the kube-fsm cache";

/// A resolved source, with the binaries to start when there are any.
#[derive(Debug)]
pub(crate) struct Found {
    pub(crate) source: Source,
    pub(crate) binaries: Option<Binaries>,
}

/// The two programs to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Binaries {
    pub(crate) etcd: PathBuf,
    pub(crate) apiserver: PathBuf,
}

/// The source the environment `env` (a lookup of variables, `std::env::var_os` outside the
/// tests) names, in the documented order.
pub(crate) fn resolve(env: impl Fn(&str) -> Option<OsString>) -> Result<Found, Error> {
    let set = |name: &str| env(name).filter(|v| !v.is_empty());
    if set("USE_EXISTING_CLUSTER").is_some_and(|v| is_true(&v))
        || set("KUBE_FSM_USE_EXISTING_CLUSTER").is_some_and(|v| is_true(&v))
    {
        let kubeconfig = user_kubeconfig(set("KUBECONFIG"), set("HOME")).filter(|p| p.is_file());
        return Ok(Found {
            source: Source::Existing { kubeconfig },
            binaries: None,
        });
    }
    if let Some(dir) = set("KUBEBUILDER_ASSETS") {
        let dir = PathBuf::from(dir);
        for binary in ["etcd", "kube-apiserver"] {
            if !dir.join(binary).is_file() {
                return Err(Error::Assets { dir, binary });
            }
        }
        let binaries = Binaries {
            etcd: dir.join("etcd"),
            apiserver: dir.join("kube-apiserver"),
        };
        return Ok(binaries_in(dir, ASSETS, binaries));
    }
    let cache = set("KUBE_FSM_CACHE")
        .map(PathBuf::from)
        .or_else(|| set("HOME").map(|home| Path::new(&home).join(".cache/kube-fsm")))
        .map(|cache| cache.join("bin"));
    if let Some(dir) = cache
        && let Some(binaries) = in_cache(&dir, set("PATH"))
    {
        return Ok(binaries_in(dir, CACHE, binaries));
    }
    Err(Error::NoServer)
}

fn binaries_in(dir: PathBuf, from: &'static str, binaries: Binaries) -> Found {
    Found {
        source: Source::Binaries { dir, from },
        binaries: Some(binaries),
    }
}

/// Go's `strconv.ParseBool` true values, as controller-runtime reads `USE_EXISTING_CLUSTER`.
fn is_true(value: &OsString) -> bool {
    matches!(
        value.to_str(),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True")
    )
}

/// The kubeconfig file kube reads: `$KUBECONFIG`'s first entry, else `~/.kube/config`.
fn user_kubeconfig(kubeconfig: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    let first =
        kubeconfig.and_then(|k| std::env::split_paths(&k).find(|p| !p.as_os_str().is_empty()));
    first.or_else(|| home.map(|home| Path::new(&home).join(".kube/config")))
}

/// In the cache directory `dir`: the newest versioned `kube-apiserver-X.Y.Z` with the newest
/// `etcd-X.Y.Z`, else an unversioned `kube-apiserver` with the `etcd` on `path`.
fn in_cache(dir: &Path, path: Option<OsString>) -> Option<Binaries> {
    let names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.path().is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    let apiserver = newest(names.iter().map(String::as_str), "kube-apiserver-");
    let etcd = newest(names.iter().map(String::as_str), "etcd-");
    if let (Some(apiserver), Some(etcd)) = (apiserver, etcd) {
        return Some(Binaries {
            etcd: dir.join(etcd),
            apiserver: dir.join(apiserver),
        });
    }
    let apiserver = dir.join("kube-apiserver");
    let etcd = on_path(path?, "etcd")?;
    apiserver.is_file().then_some(Binaries { etcd, apiserver })
}

/// The `name` in the directories of the search path `path`.
fn on_path(path: OsString, name: &str) -> Option<PathBuf> {
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Of `names`, the one `PREFIX` + the highest version (compared numerically, part by part).
pub(crate) fn newest<'a>(names: impl Iterator<Item = &'a str>, prefix: &str) -> Option<&'a str> {
    names
        .filter_map(|name| Some((version(name.strip_prefix(prefix)?)?, name)))
        .max()
        .map(|(_, name)| name)
}

/// `X.Y.Z` (or `vX.Y.Z`) as numbers; `None` for anything else (`1.37.2.recipe`, `1.38.0-beta.0`).
fn version(text: &str) -> Option<Vec<u64>> {
    let text = text.strip_prefix('v').unwrap_or(text);
    let parts: Option<Vec<u64>> = text
        .split('.')
        .map(|p| {
            (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                .then(|| p.parse().ok())
                .flatten()
        })
        .collect();
    parts.filter(|p| p.len() >= 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let vars: Vec<(String, OsString)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), OsString::from(v)))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    /// A fresh directory holding empty files named `files`; removed by the caller.
    fn dir_with(tag: &str, files: &[&str]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "kube-fsm-envtest-unit-{}-{tag}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for file in files {
            std::fs::write(dir.join(file), "").unwrap();
        }
        dir
    }

    #[test]
    fn versions_compare_numerically() {
        let names = [
            "kube-apiserver",
            "kube-apiserver-1.9.9",
            "kube-apiserver-1.37.2",
            "kube-apiserver-1.37.2.recipe",
            "kube-apiserver-1.20.15",
            "kube-apiserver-1.38.0-beta.0",
            "etcd-3.7.3",
        ];
        assert_eq!(
            newest(names.into_iter(), "kube-apiserver-"),
            Some("kube-apiserver-1.37.2")
        );
        assert_eq!(
            newest(["etcd-3.10.0", "etcd-3.9.9"].into_iter(), "etcd-"),
            Some("etcd-3.10.0")
        );
        assert_eq!(
            newest(["kube-apiserver"].into_iter(), "kube-apiserver-"),
            None
        );
        assert_eq!(version("v1.2.3"), Some(vec![1, 2, 3]));
        assert_eq!(version("1"), None);
        assert_eq!(version("1..2"), None);
    }

    #[test]
    fn existing_cluster_comes_first() {
        let assets = dir_with("existing", &["etcd", "kube-apiserver"]);
        let assets = assets.to_str().unwrap();
        for var in ["USE_EXISTING_CLUSTER", "KUBE_FSM_USE_EXISTING_CLUSTER"] {
            let found = resolve(env(&[
                (var, "true"),
                ("KUBEBUILDER_ASSETS", assets),
                ("KUBECONFIG", "/nonexistent/a:/nonexistent/b"),
            ]))
            .unwrap();
            assert!(matches!(
                found.source,
                Source::Existing { kubeconfig: None }
            ));
            assert!(found.binaries.is_none());
        }
        // "false" is not a request for it.
        let found = resolve(env(&[
            ("USE_EXISTING_CLUSTER", "false"),
            ("KUBEBUILDER_ASSETS", assets),
        ]))
        .unwrap();
        assert!(matches!(
            found.source,
            Source::Binaries { from: ASSETS, .. }
        ));
        std::fs::remove_dir_all(assets).unwrap();
    }

    #[test]
    fn the_user_kubeconfig_is_the_first_entry_else_home() {
        let first = user_kubeconfig(Some("/a/one:/b/two".into()), Some("/home/u".into()));
        assert_eq!(first, Some(PathBuf::from("/a/one")));
        let home = user_kubeconfig(None, Some("/home/u".into()));
        assert_eq!(home, Some(PathBuf::from("/home/u/.kube/config")));
        assert_eq!(user_kubeconfig(None, None), None);
    }

    #[test]
    fn assets_come_before_the_cache() {
        let assets = dir_with("assets", &["etcd", "kube-apiserver"]);
        let cache = dir_with("cache-too", &[]);
        std::fs::create_dir(cache.join("bin")).unwrap();
        std::fs::write(cache.join("bin/kube-apiserver-1.37.2"), "").unwrap();
        std::fs::write(cache.join("bin/etcd-3.7.3"), "").unwrap();
        let found = resolve(env(&[
            ("KUBEBUILDER_ASSETS", assets.to_str().unwrap()),
            ("KUBE_FSM_CACHE", cache.to_str().unwrap()),
        ]))
        .unwrap();
        assert!(matches!(&found.source, Source::Binaries { dir, from: ASSETS } if *dir == assets));
        assert_eq!(
            found.binaries,
            Some(Binaries {
                etcd: assets.join("etcd"),
                apiserver: assets.join("kube-apiserver"),
            })
        );
        std::fs::remove_dir_all(&assets).unwrap();
        std::fs::remove_dir_all(&cache).unwrap();
    }

    #[test]
    fn incomplete_assets_are_an_error() {
        let assets = dir_with("incomplete", &["kube-apiserver"]);
        let err = resolve(env(&[("KUBEBUILDER_ASSETS", assets.to_str().unwrap())])).unwrap_err();
        assert!(matches!(err, Error::Assets { binary: "etcd", .. }), "{err}");
        std::fs::remove_dir_all(&assets).unwrap();
    }

    #[test]
    fn the_cache_takes_the_newest_versions() {
        let cache = dir_with("cache", &[]);
        let bin = cache.join("bin");
        std::fs::create_dir(&bin).unwrap();
        for file in [
            "kube-apiserver",
            "kube-apiserver-1.9.0",
            "kube-apiserver-1.37.2",
            "kube-apiserver-1.37.2.recipe",
            "etcd-3.4.23",
            "etcd-3.7.3",
        ] {
            std::fs::write(bin.join(file), "").unwrap();
        }
        let found = resolve(env(&[("KUBE_FSM_CACHE", cache.to_str().unwrap())])).unwrap();
        assert!(matches!(&found.source, Source::Binaries { dir, from: CACHE } if *dir == bin));
        assert_eq!(
            found.binaries,
            Some(Binaries {
                etcd: bin.join("etcd-3.7.3"),
                apiserver: bin.join("kube-apiserver-1.37.2"),
            })
        );
        std::fs::remove_dir_all(&cache).unwrap();
    }

    #[test]
    fn an_unversioned_apiserver_takes_etcd_from_path() {
        let home = dir_with("home", &[]);
        let bin = home.join(".cache/kube-fsm/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("kube-apiserver"), "").unwrap();
        let path_dir = home.join("path");
        std::fs::create_dir(&path_dir).unwrap();
        let home_str = home.to_str().unwrap();
        // No etcd on PATH: nothing.
        let none = resolve(env(&[("HOME", home_str), ("PATH", "/nonexistent")]));
        assert!(matches!(none, Err(Error::NoServer)));
        std::fs::write(path_dir.join("etcd"), "").unwrap();
        let path = format!("/nonexistent:{}", path_dir.display());
        let found = resolve(env(&[("HOME", home_str), ("PATH", &path)])).unwrap();
        assert_eq!(
            found.binaries,
            Some(Binaries {
                etcd: path_dir.join("etcd"),
                apiserver: bin.join("kube-apiserver"),
            })
        );
        std::fs::remove_dir_all(&home).unwrap();
    }

    #[test]
    fn nothing_is_no_server() {
        let empty = dir_with("empty", &[]);
        let err = resolve(env(&[("HOME", empty.to_str().unwrap())])).unwrap_err();
        assert!(matches!(err, Error::NoServer));
        let message = err.to_string();
        for way in [
            "USE_EXISTING_CLUSTER",
            "KUBEBUILDER_ASSETS",
            "KUBE_FSM_CACHE",
        ] {
            assert!(message.contains(way), "{message}");
        }
        assert!(matches!(resolve(env(&[])), Err(Error::NoServer)));
        std::fs::remove_dir_all(&empty).unwrap();
    }
}
