use super::*;

/// The tests' policy: its operator is named by field manager only (trusted, as on a
/// development cluster), so one user can play both parts.
fn policy() -> Policy {
    serde_json::from_value(serde_json::json!({
        "operator": { "fieldManagers": ["kube-fsm"], "trustFieldManagers": true },
        "platform": [{ "onlyOperatorEnters": ["Failed"] }],
        "tiers": [{
            "name": "restricted",
            "namespaceSelector": { "matchLabels": { "tier": "restricted" } },
            "rules": ["onlyOperatorMovesPhase"],
        }],
    }))
    .unwrap()
}

const OPERATOR: Requester<'static> = Requester {
    user: "admin",
    field_manager: "kube-fsm",
    groups: &[],
};
const HUMAN: Requester<'static> = Requester {
    user: "alice",
    field_manager: "kubectl-edit",
    groups: &[],
};

#[test]
fn the_platform_reserves_a_phase_for_the_operator() {
    let policy = policy();
    let err = policy
        .evaluate(None, HUMAN, Some("Running"), Some("Failed"), Move::Engine)
        .unwrap_err();
    assert_eq!(
        err.message,
        "on this platform, only the operator (field manager kube-fsm) may move an object to \
         Failed; user alice (field manager kubectl-edit) may not"
    );
    assert!(
        policy
            .evaluate(
                None,
                OPERATOR,
                Some("Running"),
                Some("Failed"),
                Move::Engine
            )
            .is_ok()
    );
    assert!(
        policy
            .evaluate(None, HUMAN, Some("Pending"), Some("Running"), Move::Engine)
            .is_ok()
    );
}

#[test]
fn a_restricted_tier_leaves_the_phase_to_the_operator() {
    let policy = policy();
    let tier = policy.tier("restricted");
    assert!(
        policy
            .evaluate(tier, HUMAN, Some("Pending"), Some("Running"), Move::Engine)
            .is_err()
    );
    assert!(
        policy
            .evaluate(tier, HUMAN, None, Some("Pending"), Move::Engine)
            .is_err()
    );
    assert!(
        policy
            .evaluate(tier, HUMAN, Some("Pending"), Some("Pending"), Move::Engine)
            .is_ok()
    );
    assert!(
        policy
            .evaluate(
                tier,
                OPERATOR,
                Some("Pending"),
                Some("Running"),
                Move::Engine
            )
            .is_ok()
    );
}

#[test]
fn every_list_given_must_match_the_operator() {
    let operator = OperatorIdentity {
        users: vec!["system:serviceaccount:db:operator".into()],
        field_managers: vec!["kube-fsm".into()],
        trust_field_managers: false,
    };
    assert!(!operator.is(OPERATOR), "right field manager, wrong user");
    assert!(operator.is(Requester {
        user: "system:serviceaccount:db:operator",
        field_manager: "kube-fsm",
        groups: &[],
    }));
    assert!(!OperatorIdentity::default().is(OPERATOR));
}

#[test]
fn policies_are_checked_against_the_machine() {
    let machine = &crate::admission::tests_support::MACHINE;
    assert_eq!(policy().check(machine), Ok(()));
    let mut unknown = policy();
    unknown.platform = vec![PolicyRule::OnlyOperatorEnters(vec!["Paused".into()])];
    assert!(matches!(
        unknown.check(machine),
        Err(PolicyError::UnknownPhase { .. })
    ));
    let mut anonymous = policy();
    anonymous.operator = OperatorIdentity::default();
    assert_eq!(anonymous.check(machine), Err(PolicyError::NoOperator));
    // A field manager is anyone's to claim: not an identity, unless trusted on purpose.
    let mut claimed = policy();
    claimed.operator.trust_field_managers = false;
    let refused = claimed.check(machine).unwrap_err();
    assert!(refused.to_string().contains("operator.users"), "{refused}");
    claimed.operator.users = vec!["system:serviceaccount:db:operator".into()];
    assert_eq!(claimed.check(machine), Ok(()));
    let mut twice = policy();
    twice.tiers.push(twice.tiers[0].clone());
    assert!(matches!(
        twice.check(machine),
        Err(PolicyError::TierName(_))
    ));
    assert_eq!(Policy::default().check(machine), Ok(()));
}

/// A policy whose platform lets group `sre` take manual transitions (the tests' machine has
/// `Failed -> Pending` manual).
fn sre_only() -> Policy {
    let mut policy = policy();
    policy.platform = vec![PolicyRule::ManualBy(People {
        users: vec!["bob".into()],
        groups: vec!["sre".into()],
    })];
    policy
}

#[test]
fn manual_transitions_are_taken_by_the_people_named_and_never_by_the_operator() {
    let policy = sre_only();
    let sre = ["sre".to_owned()];
    let on_call = Requester {
        user: "carol",
        field_manager: "kubectl-fsm",
        groups: &sre,
    };
    let bob = Requester {
        user: "bob",
        ..HUMAN
    };
    let retry = |who| policy.evaluate(None, who, Some("Failed"), Some("Pending"), Move::Manual);
    assert_eq!(retry(on_call), Ok(()), "a member of the group");
    assert_eq!(retry(bob), Ok(()), "a user named");
    assert_eq!(
        retry(HUMAN).unwrap_err().message,
        "on this platform, only user bob, group sre may take the manual transition Failed -> \
         Pending; user alice (field manager kubectl-edit) may not"
    );
    assert_eq!(
        retry(OPERATOR).unwrap_err().message,
        "Failed -> Pending is a manual transition: only people take it, and user admin (field \
         manager kube-fsm) is the operator"
    );
    // Without a `manualBy` rule anyone but the operator may; other moves are not its business.
    assert_eq!(
        Policy::default().evaluate(None, HUMAN, Some("Failed"), Some("Pending"), Move::Manual),
        Ok(())
    );
    assert_eq!(
        policy.evaluate(None, HUMAN, Some("Pending"), Some("Running"), Move::Engine),
        Ok(())
    );
    // A person's way out of a value the spec does not declare is judged as a manual move;
    // the operator's drift repair is not one.
    let out = |who| {
        policy.evaluate(
            None,
            who,
            Some("Archived"),
            Some("Pending"),
            Move::OutOfUndeclared,
        )
    };
    assert_eq!(out(on_call), Ok(()));
    assert_eq!(
        out(HUMAN).unwrap_err().message,
        "on this platform, only user bob, group sre may move an object out of Archived, which \
         the spec does not declare (as a manual transition); user alice (field manager \
         kubectl-edit) may not"
    );
    assert_eq!(out(OPERATOR), Ok(()));
    let mut nobody = sre_only();
    nobody.platform = vec![PolicyRule::ManualBy(People::default())];
    assert_eq!(
        nobody.check(&crate::admission::tests_support::MACHINE),
        Err(PolicyError::NobodyNamed(
            "manualBy",
            "take manual transitions"
        ))
    );
}

#[test]
fn a_manual_by_rule_reads_from_yaml() {
    let policy: Policy = serde_json::from_value(serde_json::json!({
        "operator": { "users": ["system:serviceaccount:db:operator"] },
        "platform": [{ "manualBy": { "groups": ["sre"] } }],
    }))
    .unwrap();
    assert_eq!(
        policy.platform,
        [PolicyRule::ManualBy(People {
            users: vec![],
            groups: vec!["sre".into()]
        })]
    );
}

#[test]
fn who_may_steer_the_engine_by_annotation_is_the_rules_business_and_never_the_operators() {
    use crate::admission::steering::changed;
    use crate::pure::pause::{PAUSED_ANNOTATION, RECONCILE_ANNOTATION};
    let policy: Policy = serde_json::from_value(serde_json::json!({
        "operator": { "fieldManagers": ["kube-fsm"], "trustFieldManagers": true },
        "platform": [{ "pauseBy": { "groups": ["sre"] } }],
        "tiers": [{
            "name": "restricted",
            "namespaceSelector": { "matchLabels": { "tier": "restricted" } },
            "rules": [{ "requestReconcileBy": { "users": ["bob"] } }],
        }],
    }))
    .unwrap();
    let paused = [(PAUSED_ANNOTATION.to_owned(), "true".to_owned())].into();
    let requested = [(RECONCILE_ANNOTATION.to_owned(), "1".to_owned())].into();
    let pause = changed(None, Some(&paused));
    let request = changed(None, Some(&requested));
    let err = policy.steering(None, HUMAN, &pause).unwrap_err();
    assert_eq!(
        err.message,
        "on this platform, only group sre may pause or resume an object, or skip its cleanup \
         (annotation kube-fsm.dev/paused); user alice (field manager kubectl-edit) may not"
    );
    assert_eq!(err.field, "metadata.annotations[kube-fsm.dev/paused]");
    assert_eq!(policy.steering(None, OPERATOR, &pause), Ok(()));
    let sre = ["sre".to_owned()];
    let on_call = Requester {
        groups: &sre,
        ..HUMAN
    };
    assert_eq!(policy.steering(None, on_call, &pause), Ok(()));
    // Each rule guards its own annotations, in its own layer.
    assert_eq!(policy.steering(None, HUMAN, &request), Ok(()));
    let tier = policy.tier("restricted");
    assert!(policy.steering(tier, HUMAN, &request).is_err());
    assert_eq!(policy.steering(tier, HUMAN, &pause), Ok(()));
    assert!(policy.guards_steering(None) && policy.guards_steering(tier));
    assert!(!Policy::default().guards_steering(None));
}
