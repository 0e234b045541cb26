//! `can_transition_to` on a 150-phase / 320-edge machine: the generated bit matrix against a
//! hand-written `matches!` over the same edges, on the same pseudo-random pairs.
//!
//! ```text
//! cargo run --release -p kube-fsm-benches --bin transition-bench [-- --runs 15 --passes 100]
//! ```
//!
//! Each run times every lookup once, in an order that rotates from run to run, over
//! `passes` sweeps of 65,536 pairs; the report gives the median (and the fastest) ns per call
//! over the runs, and the median of the per-run ratios, so a noisy neighbour slows both sides
//! of a ratio alike.

use std::hint::black_box;
use std::time::Instant;

use kube_fsm_benches::{BigPhase, SEED, harness, random_pairs};

const PAIRS: usize = 1 << 16;

type Lookup = fn(&[(BigPhase, BigPhase)]) -> u64;

const LOOKUPS: [(&str, Lookup); 5] = [
    (
        "generated bit matrix, default inlining",
        harness::bit_matrix,
    ),
    ("hand-written match, default inlining", harness::match_edges),
    (
        "generated bit matrix, #[inline(never)] call",
        harness::bit_matrix_not_inlined,
    ),
    (
        "hand-written match, #[inline(never)] call",
        harness::match_edges_not_inlined,
    ),
    ("loop only (`from < to`)", harness::baseline),
];

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} wants a number"))
        })
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        f64::midpoint(values[mid - 1], values[mid])
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Nanoseconds per call of one sweep set.
fn time(lookup: Lookup, pairs: &[(BigPhase, BigPhase)], passes: usize, expected: u64) -> f64 {
    let start = Instant::now();
    for _ in 0..passes {
        let legal = lookup(black_box(pairs));
        assert_eq!(black_box(legal), expected);
    }
    let elapsed = start.elapsed();
    #[allow(clippy::cast_precision_loss)]
    let calls = (passes * pairs.len()) as f64;
    elapsed.as_secs_f64() * 1e9 / calls
}

fn main() {
    let runs = arg("--runs", 15).max(1);
    let passes = arg("--passes", 100).max(1);
    let pairs = random_pairs(PAIRS, SEED);
    let expected = harness::bit_matrix(&pairs);
    println!(
        "machine: {} phases, {} edges; {PAIRS} pairs (xorshift64, seed {SEED:#x}), {expected} of them edges",
        BigPhase::ALL.len(),
        BigPhase::MACHINE.edges.len()
    );
    println!(
        "cpu: {} ({} threads); {runs} runs x {passes} passes x {PAIRS} pairs per lookup",
        cpu_model(),
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
    );

    // What each loop counts (the four lookups agree; the baseline counts `from < to`), then a
    // warm-up: caches, branch predictors, CPU frequency.
    let counts = LOOKUPS.map(|(_, lookup)| lookup(&pairs));
    assert!(counts[..4].iter().all(|&c| c == expected), "{counts:?}");
    for ((_, lookup), count) in LOOKUPS.iter().zip(counts) {
        time(*lookup, &pairs, passes.div_ceil(4), count);
    }
    let mut ns: Vec<Vec<f64>> = vec![Vec::with_capacity(runs); LOOKUPS.len()];
    for run in 0..runs {
        for k in 0..LOOKUPS.len() {
            let i = (run + k) % LOOKUPS.len();
            ns[i].push(time(LOOKUPS[i].1, &pairs, passes, counts[i]));
        }
    }
    // Per-run ratios against the generated lookup of the same form (inlined or called).
    let mut ratio_inlined: Vec<f64> = (0..runs).map(|r| ns[1][r] / ns[0][r]).collect();
    let mut ratio_call: Vec<f64> = (0..runs).map(|r| ns[3][r] / ns[2][r]).collect();

    println!();
    println!("| lookup | median ns/call | fastest ns/call |");
    println!("|---|---:|---:|");
    for (i, (name, _)) in LOOKUPS.iter().enumerate() {
        let fastest = ns[i].iter().copied().fold(f64::INFINITY, f64::min);
        println!("| {name} | {:.2} | {:.2} |", median(&mut ns[i]), fastest);
    }
    println!();
    println!(
        "match / bit matrix, median of per-run ratios: default inlining {:.1}x, #[inline(never)] call {:.1}x",
        median(&mut ratio_inlined),
        median(&mut ratio_call)
    );
}
