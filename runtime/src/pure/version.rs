//! The stale-cache guard: after a write, kube's watch may deliver events (a child's, say) that
//! re-trigger the object before the cache holds our write. Acting on such a stale copy would
//! redo the step and collide with our own write, so the engine waits for the next event.
//!
//! A cached copy is stale when it does not reach the newest version this controller knows the
//! server holds (returned by its last write, or read by a GET after a conflict). Comparing
//! needs an order on resourceVersions: Kubernetes defines them as decimal integers without
//! leading zeros that grow with every write of a resource (comparable resourceVersions, GA in
//! 1.35; etcd-backed servers have always produced them so, as etcd revisions). Values of any
//! other shape (an aggregated API server of its own kind) are compared by identity only: a
//! copy is stale while it shows a version we saw before our write.

use std::cmp::Ordering;

/// How many versions older than the newest are remembered for servers whose versions are not
/// comparable.
const OLDER_KEPT: usize = 8;

/// What one object's writes and reads taught us about its versions.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Versions {
    /// The newest version we know the server holds.
    newest: Option<String>,
    /// Versions we read or wrote over before `newest` (used only for incomparable versions).
    older: Vec<String>,
}

impl Versions {
    /// Our write over `based_on` was accepted and the server now holds `returned`.
    pub fn wrote(&mut self, based_on: Option<&str>, returned: Option<&str>) {
        if let Some(based_on) = based_on {
            self.push_older(based_on);
        }
        if let Some(returned) = returned {
            self.learn(returned);
        }
    }

    /// The newest version this controller wrote or read since the cache last caught up.
    pub fn newest(&self) -> Option<&str> {
        self.newest.as_deref()
    }

    /// The server was seen holding `version` (a GET).
    pub fn read(&mut self, version: Option<&str>) {
        if let Some(version) = version {
            self.learn(version);
        }
    }

    fn learn(&mut self, version: &str) {
        if let Some(newest) = &self.newest
            && compare(version, newest) == Some(Ordering::Less)
        {
            return;
        }
        if let Some(newest) = self.newest.take() {
            self.push_older(&newest);
        }
        self.older.retain(|v| v != version);
        self.newest = Some(version.to_owned());
    }

    fn push_older(&mut self, version: &str) {
        if self.newest.as_deref() == Some(version) || self.older.iter().any(|v| v == version) {
            return;
        }
        if self.older.len() >= OLDER_KEPT {
            self.older.remove(0);
        }
        self.older.push(version.to_owned());
    }

    /// Whether a cached copy at `cached` is older than what we know the server holds. Once
    /// the cache has caught up, the guard is cleared.
    pub fn is_stale(&mut self, cached: Option<&str>) -> bool {
        let (Some(newest), Some(cached)) = (&self.newest, cached) else {
            return false;
        };
        let stale = match compare(cached, newest) {
            Some(order) => order == Ordering::Less,
            None => cached != newest && self.older.iter().any(|v| v == cached),
        };
        if !stale {
            *self = Versions::default();
        }
        stale
    }
}

/// Orders two resourceVersions when both are decimal integers without leading zeros (as
/// Kubernetes defines comparable versions); `None` otherwise.
pub(crate) fn compare(a: &str, b: &str) -> Option<Ordering> {
    let well_formed =
        |v: &str| !v.is_empty() && !v.starts_with('0') && v.bytes().all(|c| c.is_ascii_digit());
    (well_formed(a) && well_formed(b)).then(|| a.len().cmp(&b.len()).then_with(|| a.cmp(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_as_integers_of_any_length() {
        assert_eq!(compare("9", "10"), Some(Ordering::Less));
        assert_eq!(
            compare("123456789012345678901", "99"),
            Some(Ordering::Greater)
        );
        assert_eq!(compare("42", "42"), Some(Ordering::Equal));
        assert_eq!(compare("042", "42"), None, "leading zero: not comparable");
        assert_eq!(compare("0", "1"), None);
        assert_eq!(compare("abc", "1"), None);
        assert_eq!(compare("", "1"), None);
    }

    #[test]
    fn every_version_before_our_write_is_stale_not_only_the_one_it_was_based_on() {
        let mut v = Versions::default();
        // cache at 5; our write based on 7 (read after a 409) returned 9.
        v.wrote(Some("7"), Some("9"));
        assert!(
            v.is_stale(Some("5")),
            "older than the write it was based on"
        );
        assert!(v.is_stale(Some("7")));
        assert!(v.is_stale(Some("8")), "another writer's, before ours");
        assert!(!v.is_stale(Some("9")), "our write arrived");
        assert!(
            !v.is_stale(Some("5")),
            "the guard is cleared once the cache caught up"
        );
    }

    #[test]
    fn a_later_version_than_ours_is_fresh() {
        let mut v = Versions::default();
        v.wrote(Some("7"), Some("9"));
        assert!(!v.is_stale(Some("12")));
    }

    #[test]
    fn a_read_after_a_conflict_makes_older_copies_stale() {
        let mut v = Versions::default();
        v.read(Some("20"));
        assert!(v.is_stale(Some("19")));
        v.read(Some("15"));
        assert!(
            v.is_stale(Some("19")),
            "an older read does not move the guard back"
        );
        assert!(!v.is_stale(Some("20")));
    }

    #[test]
    fn incomparable_versions_are_stale_while_they_show_a_version_seen_before_our_write() {
        let mut v = Versions::default();
        v.read(Some("a"));
        v.wrote(Some("b"), Some("c"));
        assert!(v.is_stale(Some("a")));
        assert!(v.is_stale(Some("b")));
        assert!(!v.is_stale(Some("d")), "a version never seen is newer");
        assert!(!v.is_stale(Some("a")), "cleared");
    }

    #[test]
    fn nothing_written_nothing_stale() {
        assert!(!Versions::default().is_stale(Some("1")));
        let mut v = Versions::default();
        v.wrote(Some("1"), Some("2"));
        assert!(!v.is_stale(None));
    }
}
