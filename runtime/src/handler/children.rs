//! A handler's requests through its step: read children and related objects from the
//! operator's caches, server-side apply children (skipped when the cache already holds what
//! would be applied), delete them, and record Events on the object.

use std::sync::Arc;

use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::{Api, Client};
use serde::Serialize;
use serde_json::Value;

use crate::handler::context::ContextError;
use crate::handler::step::Step;
use crate::machine::state_machine::StateMachine;
use crate::replicas::turn;
use crate::watch::cache::{Cache, Cached, Watched};
use crate::watch::scope::Scoped;

/// How [`Step::apply`] ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Applied<C> {
    /// The cached child already held every applied field: no request was sent.
    Unchanged(Arc<C>),
    /// The apply was sent; the child as the API server returned it.
    Written(C),
}

impl<C> Applied<C> {
    /// Whether a request was sent.
    pub fn was_written(&self) -> bool {
        matches!(self, Applied::Written(_))
    }
}

impl<K: StateMachine> Step<K> {
    /// The operator's client.
    pub fn client(&self) -> &Client {
        self.context.client()
    }

    /// An `Api` of `R` in the object's namespace (all objects for cluster-scoped kinds, or
    /// for a cluster-scoped object).
    ///
    /// ```no_run
    /// # async fn demo<K: kube_fsm::StateMachine>(step: &kube_fsm::Step<K>) -> Result<(), kube::Error> {
    /// use k8s_openapi::api::core::v1::Pod;
    /// let pods = step.api::<Pod>().list(&Default::default()).await?; // a request: prefer the cache
    /// # Ok(()) }
    /// ```
    pub fn api<R: Scoped>(&self) -> Api<R> {
        R::api_in(self.client().clone(), self.object.namespace.as_deref())
    }

    /// The operator's cache of `R` (wired with `Operator::owns` or `Operator::watches`).
    ///
    /// ```no_run
    /// # async fn demo<K: kube_fsm::StateMachine>(step: &kube_fsm::Step<K>) -> Result<(), kube_fsm::handler::ContextError> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// let versions = step.cache::<ConfigMap>()?.get("allowed-versions", Some("platform"));
    /// # Ok(()) }
    /// ```
    pub fn cache<R: Cached>(&self) -> Result<Arc<Cache<R>>, ContextError> {
        self.context.cache::<R>()
    }

    /// The cached objects of `C` whose ownerReferences name this object: an index lookup, no
    /// request (wire the kind with `Operator::owns::<C>`).
    ///
    /// ```no_run
    /// # async fn demo<K: kube_fsm::StateMachine>(step: &kube_fsm::Step<K>) -> Result<(), kube_fsm::handler::ContextError> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// for child in step.children::<ConfigMap>()? {
    ///     println!("{:?}", child.metadata.name);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn children<C: Cached>(&self) -> Result<Vec<Arc<C>>, ContextError> {
        let Some(uid) = &self.object.uid else {
            return Ok(Vec::new());
        };
        Ok(self.cache::<C>()?.owned_by(uid))
    }

    /// The cached object `name` of `C` in the object's namespace, if there is one.
    pub fn child<C: Cached>(&self, name: &str) -> Result<Option<Arc<C>>, ContextError> {
        Ok(self
            .cache::<C>()?
            .get(name, self.object.namespace.as_deref()))
    }

    /// Server-side applies `child` with this object as its controller owner (its namespace
    /// too, when unset) and the operator's field manager, taking over fields other managers
    /// hold. When the cached child already holds every field `child` sets and the operator's
    /// last apply set no field that `child` leaves out, no request is sent
    /// ([`Applied::Unchanged`]): a converged operator writes nothing, and a field a handler
    /// stops setting is removed, as server-side apply removes it. The written child goes
    /// into the cache at once, so the next step reads it even before its watch event arrives.
    /// With [`crate::Operator::replicas`] with [`crate::replicas::Sharding`], the child also
    /// gets its owner's shard label.
    ///
    /// # Errors
    ///
    /// [`ContextError::Fenced`] when this replica no longer holds the owner's Lease or shard
    /// (the request is not sent; so for [`Step::delete`] and [`Step::publish`]); the API server's
    /// refusal or an unreachable server as [`ContextError::Kube`];
    /// [`ContextError::ForeignNamespace`] for a child in another namespace than its owner's
    /// (Kubernetes would garbage-collect it); [`ContextError::NoOwner`] when the object cannot
    /// own children. A kind the operator does not watch (`Operator::owns`) is applied on every
    /// call, as nothing tells the engine it is unchanged.
    ///
    /// # Guarantees
    ///
    /// The request is sent at most once per call and only while the reconcile's holding
    /// stands; a step that returns the error leaves the object's status as it was (the
    /// engine retries the reconcile with backoff), so an apply is never lost, only repeated.
    ///
    /// ```no_run
    /// # async fn demo<K: kube_fsm::StateMachine>(step: &kube_fsm::Step<K>) -> Result<(), kube_fsm::handler::ContextError> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// let mut child = ConfigMap::default();
    /// child.metadata.name = Some("db-config".into());
    /// child.data = Some([("version".to_owned(), "16".to_owned())].into());
    /// step.apply(child).await?;
    /// # Ok(()) }
    /// ```
    pub async fn apply<C>(&self, mut child: C) -> Result<Applied<C>, ContextError>
    where
        C: Watched + Serialize,
    {
        self.own(&mut child)?;
        let meta = child.meta();
        let name = meta.name.clone().unwrap_or_default();
        let namespace = meta.namespace.clone();
        let desired = applied_fields(&child)?;
        if let Some(cached) = self
            .context
            .cache::<C>()
            .ok()
            .and_then(|cache| cache.get(&name, namespace.as_deref()))
            && unchanged(
                &serde_json::to_value(cached.as_ref())?,
                &desired,
                self.context.field_manager(),
            )
        {
            return Ok(Applied::Unchanged(cached));
        }
        let api: Api<C> = C::api_in(self.client().clone(), namespace.as_deref());
        let params = PatchParams::apply(self.context.field_manager()).force();
        self.context.pace().write().await;
        let written = fenced(api.patch(&name, &params, &Patch::Apply(&desired))).await??;
        if let Ok(cache) = self.context.cache::<C>() {
            cache.remember(written.clone());
        }
        Ok(Applied::Written(written))
    }

    /// Makes `child` this object's: its namespace (when unset), this object as its controller
    /// owner, and its owner's shard label when sharded.
    fn own<C: Watched>(&self, child: &mut C) -> Result<(), ContextError> {
        let owner = self.object.as_owner.clone().ok_or(ContextError::NoOwner)?;
        let meta = child.meta_mut();
        if meta.namespace.is_none() {
            meta.namespace.clone_from(&self.object.namespace);
        }
        // Kubernetes garbage-collects a child whose owner is in another namespace (as
        // absent): applying one would create it again on every step.
        if let Some(owner_namespace) = &self.object.namespace
            && meta.namespace.as_ref() != Some(owner_namespace)
        {
            return Err(ContextError::ForeignNamespace {
                child: meta.namespace.clone().unwrap_or_default(),
                owner: owner_namespace.clone(),
            });
        }
        let references = meta.owner_references.get_or_insert_with(Vec::new);
        references.retain(|r| r.uid != owner.uid);
        references.push(owner);
        if let Some((label, shard)) = &self.object.shard_label {
            // The owner's replica watches only its shards' children.
            let labels = meta.labels.get_or_insert_with(Default::default);
            labels.insert(label.clone(), shard.clone());
        }
        Ok(())
    }

    /// Creates `child` (made this object's as by [`Step::apply`]) unless an object of its name
    /// exists, which is then read and returned as it is, never written: an `apply: once`
    /// child is made once even when the cache does not hold it yet (another replica made it
    /// a moment ago) or holds it outside the watch's selection (someone made it by hand).
    pub(crate) async fn create_once<C>(&self, mut child: C) -> Result<C, ContextError>
    where
        C: Watched + Serialize,
    {
        self.own(&mut child)?;
        let name = child.meta().name.clone().unwrap_or_default();
        let api: Api<C> = C::api_in(self.client().clone(), child.meta().namespace.as_deref());
        let params = PostParams {
            field_manager: Some(self.context.field_manager().to_owned()),
            ..PostParams::default()
        };
        self.context.pace().write().await;
        match fenced(api.create(&params, &child)).await? {
            Ok(created) => {
                if let Ok(cache) = self.context.cache::<C>() {
                    cache.remember(created.clone());
                }
                Ok(created)
            }
            Err(kube::Error::Api(status)) if status.is_already_exists() => {
                Ok(api.get(&name).await?)
            }
            Err(err) => Err(err.into()),
        }
    }

    /// Deletes the object `name` of `C` in the object's namespace (in the background: its own
    /// dependents follow), and drops it from the cache at once. Returns whether it existed.
    ///
    /// # Errors
    ///
    /// As [`Step::apply`]: [`ContextError::Fenced`] once the owner's Lease or shard is no longer held
    /// (nothing is sent), the API server's answer as [`ContextError::Kube`] (a missing object
    /// is not an error: `Ok(false)`).
    ///
    /// # Guarantees
    ///
    /// The object stays out of the cache until its deletion event or the next list, so the
    /// next step does not read it back from an older event.
    ///
    /// ```no_run
    /// # async fn demo<K: kube_fsm::StateMachine>(step: &kube_fsm::Step<K>) -> Result<(), kube_fsm::handler::ContextError> {
    /// use k8s_openapi::api::core::v1::Secret;
    /// let existed = step.delete::<Secret>("db-credentials").await?;
    /// # Ok(()) }
    /// ```
    pub async fn delete<C>(&self, name: &str) -> Result<bool, ContextError>
    where
        C: Watched,
    {
        let deleted = self.delete_now::<C>(name).await?;
        if deleted == Some(false)
            && let Ok(cache) = self.context.cache::<C>()
        {
            cache.forget(name, self.object.namespace.as_deref());
        }
        Ok(deleted.is_some())
    }

    /// Deletes `name` in the background: `Some(true)` when it is gone at once (dropped from
    /// the cache), `Some(false)` when it stays, terminating, until its own finalizers are
    /// done (left in the cache, whose watch will see it go), `None` when it was not there.
    pub(crate) async fn delete_now<C>(&self, name: &str) -> Result<Option<bool>, ContextError>
    where
        C: Watched,
    {
        self.context.pace().write().await;
        let api = self.api::<C>();
        match fenced(api.delete(name, &DeleteParams::background())).await? {
            Ok(answer) => {
                let gone = answer.is_right();
                if gone && let Ok(cache) = self.context.cache::<C>() {
                    cache.forget(name, self.object.namespace.as_deref());
                }
                Ok(Some(gone))
            }
            Err(kube::Error::Api(status)) if status.is_not_found() => Ok(None),
            Err(err) => Err(err.into()),
        }
    }

    /// Records an Event on the object, through the recorder and reporter the engine's own
    /// Events use (repeats within kube's series window are counted, not duplicated).
    pub async fn publish(
        &self,
        type_: EventType,
        reason: &str,
        action: &str,
        note: impl Into<String>,
    ) -> Result<(), ContextError> {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note.into()),
            action: action.to_owned(),
            secondary: None,
        };
        self.context.pace().write().await;
        let recorder = self.context.recorder_for(&self.object.reference);
        fenced(recorder.publish(&event, &self.object.reference)).await??;
        Ok(())
    }
}

/// Sends `request`, a write of a reconcile, unless its Lease or shard is no longer held (see
/// [`crate::replicas::turn`]).
async fn fenced<F: Future>(request: F) -> Result<F::Output, ContextError> {
    turn::write(request).await.ok_or(ContextError::Fenced)
}

/// The fields an apply of `child` sets: its JSON without what the server owns.
fn applied_fields<C: Serialize>(child: &C) -> Result<Value, serde_json::Error> {
    let mut value = serde_json::to_value(child)?;
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        for owned_by_server in [
            "managedFields",
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "generation",
        ] {
            meta.remove(owned_by_server);
        }
    }
    if let Some(object) = value.as_object_mut() {
        object.remove("status");
    }
    Ok(value)
}

/// Whether applying `desired` as `manager` over `cached` (as JSON, its managedFields entries
/// of applies kept) would change nothing: `cached` holds every field of `desired` with the
/// same value, and `manager`'s last apply owns no field that `desired` leaves out (the server
/// would remove it).
fn unchanged(cached: &Value, desired: &Value, manager: &str) -> bool {
    let own = cached["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|entry| entry["manager"] == manager && entry["operation"] == "Apply");
    holds(cached, desired) && own.is_none_or(|entry| covers(&entry["fieldsV1"], desired))
}

/// Whether `desired` sets every field that `owned` (a managedFields entry's `fieldsV1`) names,
/// down to lists: list items are compared by [`holds`].
fn covers(owned: &Value, desired: &Value) -> bool {
    let (Some(owned), Some(desired)) = (owned.as_object(), desired.as_object()) else {
        return true;
    };
    owned
        .iter()
        .all(|(key, owned)| match key.strip_prefix("f:") {
            Some(name) => desired
                .get(name)
                .is_some_and(|desired| !desired.is_null() && covers(owned, desired)),
            // "." (the field itself), or a list item ("k:", "v:", "i:").
            None => true,
        })
}

/// Whether `actual` holds every field of `desired` with the same value: objects may have more
/// keys; lists must match element by element (each element held in the same way).
pub fn holds(actual: &Value, desired: &Value) -> bool {
    match (actual, desired) {
        (Value::Object(actual), Value::Object(desired)) => {
            desired.iter().all(|(key, want)| match actual.get(key) {
                Some(have) => holds(have, want),
                None => want.is_null(),
            })
        }
        (Value::Array(actual), Value::Array(desired)) => {
            actual.len() == desired.len() && actual.iter().zip(desired).all(|(a, d)| holds(a, d))
        }
        (actual, desired) => actual == desired,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{covers, holds, unchanged};

    #[test]
    fn held_fields_ignore_extra_keys_but_not_extra_list_items() {
        let actual = json!({
            "metadata": {"name": "a", "labels": {"x": "1", "y": "2"}, "managedFields": []},
            "data": {"k": "v"},
            "items": [{"name": "p", "port": 1}],
        });
        assert!(holds(&actual, &json!({"metadata": {"labels": {"x": "1"}}})));
        assert!(holds(&actual, &json!({"items": [{"name": "p"}]})));
        assert!(holds(&actual, &json!({"gone": null})));
        assert!(!holds(&actual, &json!({"data": {"k": "w"}})));
        assert!(!holds(&actual, &json!({"data": {"other": "v"}})));
        assert!(!holds(&actual, &json!({"items": []})));
        assert!(!holds(&actual, &json!({"data": null})));
    }

    #[test]
    fn an_apply_leaving_out_an_owned_field_is_a_change() {
        let owned = json!({
            "f:data": {".": {}, "f:a": {}, "f:b": {}},
            "f:metadata": {"f:ownerReferences": {".": {}, "k:{\"uid\":\"u\"}": {}}},
        });
        let cached = json!({
            "metadata": {
                "name": "c",
                "ownerReferences": [{"uid": "u"}],
                "managedFields": [
                    {"manager": "other", "operation": "Update", "fieldsV1": {"f:data": {"f:z": {}}}},
                    {"manager": "op", "operation": "Apply", "fieldsV1": owned},
                ],
            },
            "data": {"a": "1", "b": "2", "z": "3"},
        });
        let both =
            json!({"metadata": {"ownerReferences": [{"uid": "u"}]}, "data": {"a": "1", "b": "2"}});
        let only_a = json!({"metadata": {"ownerReferences": [{"uid": "u"}]}, "data": {"a": "1"}});
        assert!(unchanged(&cached, &both, "op"), "z is someone else's");
        assert!(!unchanged(&cached, &only_a, "op"), "b would be removed");
        assert!(
            unchanged(&cached, &only_a, "another-operator"),
            "it owns nothing here"
        );
        assert!(!covers(&owned, &json!({"data": {"a": "1", "b": null}})));
        assert!(covers(
            &owned,
            &json!({"data": {"a": "1", "b": "2"}, "metadata": {"ownerReferences": []}})
        ));
    }
}
