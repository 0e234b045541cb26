//! The tests on a real API server (`kube_fsm_testkit::cluster`: skipped loudly without one,
//! required with `KUBE_FSM_REQUIRE_CLUSTER=1`). The tracing test has a binary of its own: it
//! captures spans with a thread's default subscriber, and other tests' threads in the same
//! process change which callsites are enabled.

mod admission;
mod admission_policy;
mod children;
mod co_writer;
mod columns;
mod control_plane;
mod database;
mod drift;
mod events;
mod fairness;
mod faults;
mod handler_context;
mod isolation;
mod kstatus;
mod kstatus_rules;
mod leader;
mod machine_page;
mod manager;
mod manual;
mod metrics_auth;
mod outage;
mod overload;
mod pause;
mod prometheus;
mod random_machines;
mod rbac;
mod reconcile;
mod sharding;
mod steering;
mod stop;
mod versions;
mod watches;
mod webhook_certificate;
mod webhook_flood;
