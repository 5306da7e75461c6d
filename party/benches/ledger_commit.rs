//! Microseconds per frame of a party's release commit (`Ledger::record_releases`), the
//! ledger's share of every step: a durable ledger (on a known boot, as `party serve` runs
//! it: one write to the release log per frame, merged into SQLite every 512 releases, the
//! merges timed too) against the in-memory one that simulated federations use, for frames
//! of 1 and 4 chains' releases (issue 25). The gRPC bench's durable / in-memory gap is this
//! cost, paid once per party per frame.
//!
//! `cargo bench -p fedmcmc-party --bench ledger_commit [-- FRAMES]` (20 000 by default);
//! each setting is timed in 3 rounds on a fresh ledger, the median reported.
use std::time::Instant;

use fedmcmc_common::diagnostics::quantile;
use fedmcmc_party::ledger::{Ledger, ReleaseRecord, RunTerms};

const ROUNDS: usize = 3;

/// A full-data penalty run's terms: `chains` × `steps` releases.
fn terms(chains: u32, steps: u64) -> RunTerms {
    serde_json::from_value(serde_json::json!({
        "variant": "full-penalty", "chains": chains, "steps_per_chain": steps,
        "planned_releases": u64::from(chains) * steps,
        "clip": 2.0, "tau": 0.1, "noise_multiplier": 1.0
    }))
    .expect("penalty terms")
}

/// A penalty release on the 2-d banana, as the release path records it: θ and θ′ in, one
/// noisy ratio out.
fn release(run_id: &str, chain: u32, step: u64) -> ReleaseRecord {
    ReleaseRecord {
        run_id: run_id.to_string(),
        chain,
        step,
        mechanism: "gaussian".into(),
        noise_multiplier: 1.0,
        inputs: vec![0.25, -1.5, 0.2508, -1.4931],
        value: vec![-3.75 + step as f64 * 1e-6],
        noise_variance: 12.5,
        masked: None,
    }
}

/// Seconds per frame of `frames` frames of `chains` releases each, on `ledger`; the records
/// are made before the clock starts, so only the commit is timed.
async fn seconds_per_frame(ledger: &Ledger, chains: u32, frames: u64, round: usize) -> f64 {
    let run_id = format!("bench-{chains}-{round}");
    ledger
        .open_run(&run_id, &terms(chains, frames))
        .await
        .expect("run opened");
    let made: Vec<Vec<ReleaseRecord>> = (0..frames)
        .map(|step| (0..chains).map(|c| release(&run_id, c, step)).collect())
        .collect();
    let start = Instant::now();
    for records in &made {
        for outcome in ledger.record_releases(records).await {
            outcome.expect("release recorded");
        }
    }
    start.elapsed().as_secs_f64() / frames as f64
}

fn main() {
    let frames: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20_000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!("ledger commit of one frame, {frames} frames, median of {ROUNDS} rounds");
    println!(
        "{:<10} {:>8} {:>16} {:>16} {:>10}",
        "ledger", "chains", "µs per frame", "releases/s", "/ memory"
    );
    runtime.block_on(async {
        for chains in [1u32, 4] {
            let mut in_memory = Vec::new();
            let mut durable = Vec::new();
            for round in 0..ROUNDS {
                let memory = Ledger::in_memory().expect("in-memory ledger");
                in_memory.push(seconds_per_frame(&memory, chains, frames, round).await);
                let dir = tempfile::tempdir().expect("temporary directory");
                let (file, _) = Ledger::open(&dir.path().join("ledger.sqlite")).expect("ledger");
                durable.push(seconds_per_frame(&file, chains, frames, round).await);
            }
            let memory = quantile(&in_memory, 0.5);
            for (name, seconds) in [("in-memory", memory), ("durable", quantile(&durable, 0.5))] {
                println!(
                    "{name:<10} {chains:>8} {:>16.1} {:>16.0} {:>10.2}",
                    seconds * 1e6,
                    f64::from(chains) / seconds,
                    seconds / memory
                );
            }
        }
    });
}
