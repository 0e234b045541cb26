//! The children the spec declares (`children:`), applied by the engine in every step before the
//! phase handler runs: each is applied from its builder while the object is in one of its
//! phases (once its `after:` children are ready), found again instead for `apply: once`, and
//! deleted in the other phases for `onLeave: delete`; what the step saw of each becomes the
//! conditions the spec derives from it. The generated `Dispatch::children` calls
//! [`Step::declared`] and [`Step::apply_declared`] per child, in `after:` order; the decisions
//! are [`crate::children`]'s.

use serde::Serialize;

use crate::children::{CHILD_LABEL, Observed, Seen, derived};
use crate::handler::children::Applied;
use crate::handler::context::ContextError;
use crate::handler::step::Step;
use crate::machine::conditions;
use crate::machine::data::{ChildData, Phase};
use crate::machine::state_machine::StateMachine;
use crate::watch::cache::Watched;

/// Wires the watches a machine's declared children need: implemented by the operator, called
/// by the generated `Dispatch::wire_children` once per declared child type.
pub trait Wiring {
    /// Watch and cache `C`, owned by the machine's objects (as `Operator::owns`).
    fn owns<C: Watched>(&mut self);
}

impl<K: StateMachine> Step<K> {
    fn declared_data(index: usize) -> &'static ChildData {
        &K::machine().children[index]
    }

    /// The engine's part before the builder of declared child `index` in `phase`: whether to
    /// call the builder now. Outside the child's phases it deletes the child (`onLeave:
    /// delete`) or leaves it; inside, a child waiting for its `after:` children is recorded
    /// as waiting, and an `apply: once` child that exists is observed as it is.
    ///
    /// # Errors
    ///
    /// As [`Step::delete`] when a child is pruned, and [`ContextError::NotCached`] when the
    /// operator does not watch `C` (the generated operator does).
    #[doc(hidden)]
    pub async fn declared<C: Watched + Serialize>(
        &mut self,
        index: usize,
        phase: K::Phase,
    ) -> Result<bool, ContextError> {
        let data = Self::declared_data(index);
        if !data.in_phase(phase.index()) {
            if data.delete_on_leave {
                for existing in self.declared_existing::<C>(data)? {
                    let name = existing.meta().name.clone().unwrap_or_default();
                    self.delete::<C>(&name).await?;
                }
            }
            return Ok(false);
        }
        let children = &K::machine().children;
        let waiting: Vec<&'static str> = (data.after.iter())
            .filter(|&&a| {
                !self.seen[a]
                    .as_ref()
                    .is_some_and(|s| s.is_ready(&children[a]))
            })
            .map(|&a| children[a].name)
            .collect();
        if !waiting.is_empty() {
            self.seen[index] = Some(Seen::Waiting(waiting));
            return Ok(false);
        }
        if data.once {
            // Its own, or one of its default name that someone else made: never written.
            let existing = match self.declared_existing::<C>(data)?.into_iter().next() {
                Some(own) => Some(own),
                None => self.child::<C>(&default_name(&self.object.reference.name, data.name))?,
            };
            if let Some(existing) = existing {
                self.observe(index, &*existing)?;
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Applies declared child `index` as its builder made it: named `{object}-{child}` (`_` as
    /// `-`) unless the builder named it, labelled with [`CHILD_LABEL`], owned by the object,
    /// through [`Step::apply`] (no request when the cache already holds it); an `apply: once`
    /// child is created instead, and one that exists by its name is read, not written.
    ///
    /// # Errors
    ///
    /// As [`Step::apply`].
    #[doc(hidden)]
    pub async fn apply_declared<C: Watched + Serialize>(
        &mut self,
        index: usize,
        mut child: C,
    ) -> Result<(), ContextError> {
        let data = Self::declared_data(index);
        let meta = child.meta_mut();
        if meta.name.as_deref().unwrap_or_default().is_empty() {
            meta.name = Some(default_name(&self.object.reference.name, data.name));
        }
        (meta.labels.get_or_insert_with(Default::default))
            .insert(CHILD_LABEL.to_owned(), data.name.to_owned());
        if data.once {
            let made = self.create_once(child).await?;
            return self.observe(index, &made);
        }
        match self.apply(child).await? {
            Applied::Unchanged(cached) => self.observe(index, &*cached),
            Applied::Written(written) => self.observe(index, &written),
        }
    }

    /// On the object's deletion, removes declared child `index` and says whether it is gone
    /// (one with finalizers of its own stays, terminating, until they are done): the
    /// generated `Dispatch::remove_children` goes through the ordered children in reverse
    /// `after:` order and stops at the first still there. Deleted in the background: its own
    /// dependents (a StatefulSet's pods) go after it, by garbage collection.
    ///
    /// # Errors
    ///
    /// As [`Step::delete`].
    #[doc(hidden)]
    pub async fn remove_declared<C: Watched>(&self, index: usize) -> Result<bool, ContextError> {
        let mut gone = true;
        for child in self.declared_existing::<C>(Self::declared_data(index))? {
            let name = child.meta().name.clone().unwrap_or_default();
            gone &= child.meta().deletion_timestamp.is_none()
                && self.delete_now::<C>(&name).await? != Some(false);
        }
        Ok(gone)
    }

    /// The cached children of `C` this object owns with `data`'s label.
    fn declared_existing<C: Watched>(
        &self,
        data: &ChildData,
    ) -> Result<Vec<std::sync::Arc<C>>, ContextError> {
        let labelled = |child: &std::sync::Arc<C>| {
            (child.meta().labels.as_ref())
                .and_then(|labels| labels.get(CHILD_LABEL))
                .is_some_and(|name| name == data.name)
        };
        Ok(self.children::<C>()?.into_iter().filter(labelled).collect())
    }

    fn observe<C: Watched + Serialize>(
        &mut self,
        index: usize,
        child: &C,
    ) -> Result<(), ContextError> {
        // A typed resource serializes its `apiVersion` and `kind`, which kstatus reads.
        let value = serde_json::to_value(child)?;
        self.seen[index] = Some(Seen::Observed(Observed::of(&value, self.now())));
        Ok(())
    }

    /// Writes the conditions the spec derives from the children this step saw.
    pub(crate) fn derive_declared(&mut self) {
        for derived in derived(K::machine(), &self.seen) {
            let type_ = K::machine().conditions[derived.condition].name;
            let (generation, now) = (self.generation(), self.now());
            let conditions = &mut K::machine_in_mut(self.status_mut()).conditions;
            // `derived` makes the reason valid and cuts the message to the limit, so nothing
            // refuses it; were it refused, the condition would stay as it was.
            if let Err(error) = conditions::set(
                conditions,
                type_,
                derived.status,
                &derived.reason,
                derived.message,
                generation,
                now,
            ) {
                tracing::warn!(condition = type_, %error, "a derived condition was not set");
            }
        }
    }
}

/// `{object}-{child}`, with the child's `_` as `-` (a DNS label).
fn default_name(object: &Option<String>, child: &str) -> String {
    let object = object.as_deref().unwrap_or_default();
    format!("{object}-{}", child.replace('_', "-"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_childs_default_name_is_the_objects_and_the_childs() {
        assert_eq!(
            super::default_name(&Some("orders".into()), "schema_migrate"),
            "orders-schema-migrate"
        );
    }
}
