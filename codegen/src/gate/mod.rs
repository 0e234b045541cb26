//! Gate stage: the checked spec against its lock (the last released spec, [`lock::Lock`]), so a
//! change that would strand stored objects does not compile. Refused, each located in the
//! spec with the lock's line named and a fix:
//!
//! - a phase of the lock that the spec neither declares nor retires (objects stored in it
//!   would be held): the initial phase too;
//! - a retired name of the lock that the spec no longer retires;
//! - a condition type of the lock that the spec no longer declares (objects carry it);
//! - a phase whose meaning changed: terminal in the lock and not now, or the other way round.
//!
//! New phases, conditions, edges and retired names pass. Every fix offers both ways: keep the
//! objects (declare, or `retired: { Old: New }`), or mean it and bump the lock with
//! `kube-fsm lock SPEC`.

pub mod lock;

use crate::diag::{Diagnostic, Diagnostics, Loc, SourceFile};
use crate::model::Machine;
use crate::spec::{RawSpec, Section};

use lock::Lock;

/// The gate for a spec with no other error: `machine` (read from `spec`, shown as
/// `spec_path`) against the lock in `lock_file`; a lock that does not read is an error at
/// `at`, one per mistake.
pub fn apply(
    spec: &RawSpec,
    machine: &Machine,
    lock_file: &SourceFile,
    spec_path: &str,
    at: Loc,
    diags: &mut Diagnostics,
) {
    match Lock::read(lock_file) {
        Ok(lock) => check(spec, machine, &lock, spec_path, diags),
        Err(errors) => {
            for error in errors {
                diags.push(lock::invalid(at, &error, spec_path));
            }
        }
    }
}

/// Checks `machine` (read from `spec`, the file shown as `spec_path`) against `lock`.
pub fn check(
    spec: &RawSpec,
    machine: &Machine,
    lock: &Lock,
    spec_path: &str,
    diags: &mut Diagnostics,
) {
    let bump = format!(
        "if you mean it (no stored object can be affected), bump the lock: `kube-fsm lock {spec_path}`"
    );
    let phases_at = spec.section(Section::Phases).unwrap_or(spec.loc);
    let declared = |name: &str| machine.phases.iter().position(|p| p.name == name);
    let retired = |name: &str| machine.retired.iter().any(|r| r.name == name);
    for locked in &lock.phases {
        let name = &locked.name.text;
        match declared(name) {
            None if !retired(name) => {
                let what = if locked.initial {
                    "the initial phase"
                } else {
                    "phase"
                };
                diags.push(
                    Diagnostic::new(
                        spec.section(Section::Retired).unwrap_or(phases_at),
                        format!(
                            "{what} `{name}` of the released spec is neither declared nor retired: objects stored in it would be held"
                        ),
                    )
                    .note(format!("released at {}", lock.at(&locked.name)))
                    .help(format!(
                        "if it was renamed or merged, add `retired: {{ {name}: NewPhase }}`: objects in `{name}` move to `NewPhase`"
                    ))
                    .help(bump.clone()),
                );
            }
            None => {}
            Some(i) => {
                let now = machine.phases[i].terminal;
                if now != locked.terminal {
                    let (was, is) = if locked.terminal {
                        (
                            "terminal",
                            "not terminal: objects that rested in it would move on",
                        )
                    } else {
                        ("not terminal", "terminal: objects in it would never leave")
                    };
                    let at = spec
                        .phases
                        .iter()
                        .find(|p| p.name.text == *name)
                        .map_or(phases_at, |p| p.terminal.unwrap_or(p.name.loc));
                    diags.push(
                        Diagnostic::new(
                            at,
                            format!(
                                "phase `{name}` changed its meaning: it was {was} in the released spec and is {is}"
                            ),
                        )
                        .note(format!("released at {}", lock.at(&locked.name)))
                        .help(format!(
                            "give the new meaning a new phase and retire `{name}` into it (`retired: {{ {name}: NewPhase }}`)"
                        ))
                        .help(bump.clone()),
                    );
                }
            }
        }
    }
    for locked in &lock.retired {
        let name = &locked.text;
        if declared(name).is_none() && !retired(name) {
            diags.push(
                Diagnostic::new(
                    spec.section(Section::Retired).unwrap_or(phases_at),
                    format!(
                        "the retired phase name `{name}` of the released spec is gone: objects still stored with it would be held"
                    ),
                )
                .note(format!("released at {}", lock.at(locked)))
                .help(format!("keep `{name}: …` under `retired:`"))
                .help(bump.clone()),
            );
        }
    }
    let conditions_at = spec.section(Section::Conditions).unwrap_or(phases_at);
    for locked in &lock.conditions {
        let name = &locked.text;
        if !machine.conditions.iter().any(|c| c.type_name == *name) {
            diags.push(
                Diagnostic::new(
                    conditions_at,
                    format!(
                        "condition `{name}` of the released spec is no longer declared: stored objects carry it, and nothing would set or clear it"
                    ),
                )
                .note(format!("released at {}", lock.at(locked)))
                .help(format!(
                    "keep `{name}` under `conditions:` (its description can say it is deprecated)"
                ))
                .help(bump.clone()),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::lock::{self, Lock};
    use crate::diag::{Diagnostics, SourceFile};
    use crate::read::from_yaml;
    use crate::validate;

    const RELEASED: &str = "\
phases:
  Queued: { initial: true }
  Running: {}
  Done: { terminal: true }
  Failed: { terminal: true }
retired:
  Starting: Running
conditions:
  Ready: {}
transitions:
  - { from: Queued, to: Running }
  - { from: Running, to: Done, when: Ready }
  - { from: Running, to: Failed }
";

    /// The gate's messages for `spec` against the lock of [`RELEASED`].
    fn gate(spec: &str) -> Vec<String> {
        let mut diags = Diagnostics::default();
        let released = SourceFile::new("released.yaml", RELEASED);
        let raw = from_yaml::read_file(&released, &mut diags).unwrap();
        let machine = validate::validate(&raw, &mut diags);
        assert!(diags.is_empty());
        let text = lock::render(&machine, "specs/job.yaml");
        let lock = Lock::read(&SourceFile::new("specs/job.lock.yaml", text)).unwrap();
        let file = SourceFile::new("specs/job.yaml", spec);
        let raw = from_yaml::read_file(&file, &mut diags).unwrap();
        let machine = validate::validate(&raw, &mut diags);
        assert!(diags.is_empty(), "{:?}", diags.into_vec());
        super::check(&raw, &machine, &lock, "specs/job.yaml", &mut diags);
        diags
            .into_vec()
            .iter()
            .map(|d| d.render(Some(&file)))
            .collect()
    }

    #[test]
    fn the_released_spec_itself_and_additions_pass() {
        assert_eq!(gate(RELEASED), Vec::<String>::new());
        let grown = RELEASED.replace(
            "  Failed: { terminal: true }\n",
            "  Failed: { terminal: true }\n  Paused: {}\n",
        ) + "  - { from: Running, to: Paused }\n  - { from: Paused, to: Running }\n";
        assert_eq!(gate(&grown), Vec::<String>::new());
    }

    #[test]
    fn a_renamed_phase_passes_once_retired() {
        let renamed = RELEASED.replace("Queued", "Pending");
        let errors = gate(&renamed);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with(
                "the initial phase `Queued` of the released spec is neither declared nor retired"
            ),
            "{}",
            errors[0]
        );
        assert!(
            errors[0].contains("--> specs/job.yaml:6:1"),
            "{}",
            errors[0]
        );
        assert!(
            errors[0].contains("released at specs/job.lock.yaml:6:3"),
            "{}",
            errors[0]
        );
        assert!(
            errors[0].contains("`retired: { Queued: NewPhase }`"),
            "{}",
            errors[0]
        );
        assert!(
            errors[0].contains("`kube-fsm lock specs/job.yaml`"),
            "{}",
            errors[0]
        );
        let retired = renamed.replace(
            "  Starting: Running\n",
            "  Starting: Running\n  Queued: Pending\n",
        );
        assert_eq!(gate(&retired), Vec::<String>::new());
    }

    #[test]
    fn a_dropped_retired_name_and_condition_are_refused() {
        let spec = RELEASED
            .replace("retired:\n  Starting: Running\n", "")
            .replace("conditions:\n  Ready: {}\n", "conditions:\n  Healthy: {}\n")
            .replace("when: Ready", "when: Healthy");
        let errors = gate(&spec);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].starts_with("the retired phase name `Starting`"),
            "{}",
            errors[0]
        );
        assert!(
            errors[1].starts_with("condition `Ready` of the released spec"),
            "{}",
            errors[1]
        );
        assert!(
            errors[1].contains("--> specs/job.yaml:6:1"),
            "{}",
            errors[1]
        );
    }

    #[test]
    fn a_phase_whose_terminal_meaning_changed_is_refused_at_it() {
        let spec = RELEASED
            .replace("  Failed: { terminal: true }", "  Failed: {}")
            .replace("  Running: {}", "  Running: { terminal: true }")
            .replace("  - { from: Running, to: Done, when: Ready }\n  - { from: Running, to: Failed }\n", "  - { from: Failed, to: Queued }\n")
            .replace("  - { from: Queued, to: Running }\n", "  - { from: Queued, to: Running }\n  - { from: Queued, to: Failed }\n  - { from: Queued, to: Done, when: Ready }\n");
        let errors = gate(&spec);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].starts_with("phase `Running` changed its meaning: it was not terminal"),
            "{}",
            errors[0]
        );
        assert!(
            errors[0].contains("--> specs/job.yaml:3:14"),
            "{}",
            errors[0]
        );
        assert!(
            errors[1].starts_with("phase `Failed` changed its meaning: it was terminal"),
            "{}",
            errors[1]
        );
    }

    #[test]
    fn the_lock_of_a_spec_reads_back_as_its_phases_retired_names_and_conditions() {
        let mut diags = Diagnostics::default();
        let raw = from_yaml::read_file(&SourceFile::new("r.yaml", RELEASED), &mut diags).unwrap();
        let machine = validate::validate(&raw, &mut diags);
        let text = lock::render(&machine, "specs/job.yaml");
        assert!(text.contains("  Queued: { initial: true }\n"), "{text}");
        assert!(text.contains("  Done: { terminal: true }\n"), "{text}");
        assert!(text.contains("retired:\n  Starting: Running\n"), "{text}");
        let lock = Lock::read(&SourceFile::new("l.yaml", text)).unwrap();
        let names: Vec<&str> = lock.phases.iter().map(|p| p.name.text.as_str()).collect();
        assert_eq!(names, ["Queued", "Running", "Done", "Failed"]);
        assert!(lock.phases[0].initial && lock.phases[2].terminal && !lock.phases[1].terminal);
        assert_eq!(lock.retired[0].text, "Starting");
        assert_eq!(lock.conditions[0].text, "Ready");
        let err = Lock::read(&SourceFile::new("l.yaml", "phases: [")).unwrap_err();
        assert!(err[0].contains("--> l.yaml:1:"), "{err:?}");
    }

    #[test]
    fn the_lock_sits_beside_its_spec() {
        let path = crate::read::load::lock_path(std::path::Path::new("specs/database.yaml"));
        assert_eq!(path, std::path::Path::new("specs/database.lock.yaml"));
    }
}
