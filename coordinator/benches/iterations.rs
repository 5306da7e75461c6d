//! Iterations per second of the DP-penalty sampler, in-process and over gRPC loopback, in
//! one run on one machine (issue 3), then of each variant in-process on the same data
//! (issue 10): full-data penalty, minibatch penalty and DP Barker with b = 1000 rows per step,
//! and DP HMC with the thesis's L = 10, step 5e-4, τ_g = 0.4 and gradient clip 1 (issue 11)
//! in-process and over gRPC, durable ledgers included (each iteration is 12 releases per
//! party). The thesis's Python DP HMC does 43–46 it/s on this machine. Last (issue 13), the
//! gaussian GLM (d = 3) at nᵢ = 10⁴ and 10⁶ rows per party: the sufficient-statistics
//! variant, whose step does not read the rows, against the full-data penalty.
//! The thesis's flat banana d = 2 setting: n = 100 000 rows, τ = 0.1, proposal sd 0.008,
//! clip 2, δ = 0.1/n. The budget is set large (ε = 1e6) so the run is long enough to time;
//! the budget does not change the work per iteration.
//!
//! Then the full-data penalty's proposals (random walk, OCU, guided walk) on the flat banana
//! at d = 10 (issue 13). Last (issue 22), the full-data penalty with secure aggregation
//! (exact discrete shares, masked) against plain releases, in-process and over gRPC.
//!
//! `cargo bench -p fedmcmc-coordinator --bench iterations [-- ITERATIONS] [rows=N] [SECTION…]`,
//! where a section is `penalty`, `variants`, `hmc`, `glm`, `proposals` or `secure` (all of
//! them by default), and `rows=N` replaces the banana's 100 000 rows: a step's reading grows
//! with the rows, the gRPC path's cost per frame does not.
use std::sync::Arc;
use std::time::Instant;

use fedmcmc_common::diagnostics::quantile;
use fedmcmc_common::models::{Family, GlmSpec, ModelSpec};
use fedmcmc_common::proposal::ProposalKind;
use fedmcmc_coordinator::federation::grpc::GrpcParty;
use fedmcmc_coordinator::federation::local::{identified, nodes};
use fedmcmc_coordinator::federation::{Federation, NoiseChoice, PartyHandle, secure};
use fedmcmc_coordinator::interrupt::Stop;
use fedmcmc_coordinator::sampler::{self, Quiet, SamplerConfig};
use fedmcmc_coordinator::variant::Variant;
use fedmcmc_party::PartyNode;
use fedmcmc_party::config::BudgetConfig;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tokio::sync::oneshot;

/// Rows in all unless `rows=N` says otherwise: the thesis's setting.
const ROWS: usize = 100_000;
const PARTIES: usize = 3;
const TOKEN: &str = "bench-token-0123456789";

struct Setting {
    spec: ModelSpec,
    rows: usize,
    parts: Vec<fedmcmc_common::data::Columns>,
    budget: BudgetConfig,
}

fn setting(rows: usize) -> Setting {
    let spec = ModelSpec::flat_banana(2);
    let model = spec.build().unwrap();
    let data = model.simulate(&spec.true_theta(), rows, &mut ChaCha8Rng::seed_from_u64(1));
    Setting {
        parts: data.split(PARTIES),
        spec,
        rows,
        budget: BudgetConfig {
            epsilon: 1e6,
            delta: 0.1 / rows as f64,
            accountant: Default::default(),
        },
    }
}

/// Iterations per second per chain, and in all, for `chains` chains of `iterations` steps.
async fn time_chains<P: PartyHandle>(
    federation: Arc<Federation<P>>,
    spec: &ModelSpec,
    (variant, proposal): (Variant, ProposalKind),
    chains: u32,
    iterations: u64,
) -> (f64, f64) {
    let model = spec.build().unwrap();
    let infos = federation.describe().await.unwrap();
    let (clip, noise) = match variant {
        Variant::Barker { .. } => (0.0, NoiseChoice::Calibrate),
        _ => (2.0, NoiseChoice::Tau(0.1)),
    };
    let mut plans = variant
        .plans(&infos, chains, iterations, clip, noise)
        .unwrap();
    // Secure aggregation at the same noise in the sum (`federation::secure`).
    if let (Some(t), NoiseChoice::Tau(tau)) = (federation.threshold(), noise) {
        for (plan, p) in plans.iter_mut().zip(&infos) {
            plan.noise = NoiseChoice::Tau(secure::tau_for(tau, p, &infos, t));
        }
    }
    federation.open(&plans, &model).await.unwrap();
    let config = SamplerConfig {
        variant,
        chains,
        iterations,
        warmup: 1,
        proposal,
        proposal_sd: 0.008,
        proposal_shape: None,
        clip,
        adapt: false,
        target_accept: 0.25,
        seed: 7,
        penalise: true,
    };
    let inits = vec![spec.true_theta(); chains as usize];
    let start = Instant::now();
    sampler::sample(
        federation.clone(),
        model,
        &config,
        inits,
        Arc::new(Quiet),
        &Stop::new(),
    )
    .await
    .unwrap();
    let seconds = start.elapsed().as_secs_f64();
    federation.close().await.unwrap();
    let per_chain = iterations as f64 / seconds;
    (per_chain, per_chain * f64::from(chains))
}

/// Serves `parties` on loopback ports and returns gRPC handles plus the means to stop them.
async fn serve(
    parties: Vec<(String, Arc<PartyNode>)>,
) -> (Federation<GrpcParty>, Vec<oneshot::Sender<()>>) {
    let mut handles = Vec::new();
    let mut stops = Vec::new();
    for (name, node) in parties {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            fedmcmc_party::service::serve(node, TOKEN, None, listener, None, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        handles.push((
            name,
            GrpcParty::connect(&address, TOKEN, None).await.unwrap(),
        ));
        stops.push(stop);
    }
    (Federation::new(handles), stops)
}

/// [`time_chains`] over gRPC loopback: serves `parties` (with secure aggregation at
/// `threshold`, if any), times the chains, then stops the servers.
async fn time_served(
    parties: Vec<(String, Arc<PartyNode>)>,
    threshold: Option<u32>,
    spec: &ModelSpec,
    run: (Variant, ProposalKind),
    chains: u32,
    iterations: u64,
) -> (f64, f64) {
    let (grpc, stops) = serve(parties).await;
    grpc.aggregate_securely(threshold);
    let rates = time_chains(Arc::new(grpc), spec, run, chains, iterations).await;
    for stop in stops {
        let _ = stop.send(());
    }
    rates
}

const SECTIONS: [&str; 6] = ["penalty", "variants", "hmc", "glm", "proposals", "secure"];

/// The full-data penalty, 1 chain, with plain releases and with secure aggregation (t = 0),
/// in-process and over gRPC loopback (in-memory ledgers), in one run.
async fn secure_section(s: &Setting, iterations: u64) {
    println!(
        "{:<44} {:>10} {:>10} {:>8}",
        "full-data penalty, 1 chain", "plain it/s", "secure it/s", "ratio"
    );
    let penalty = (Variant::Penalty, ProposalKind::Rw);
    let certificates = tempfile::tempdir().unwrap();
    let made = std::cell::Cell::new(0);
    let secure_nodes = || {
        made.set(made.get() + 1);
        let dir = certificates.path().join(format!("ca-{}", made.get()));
        identified(
            nodes(&s.spec, s.parts.clone(), s.budget, None).unwrap(),
            &dir,
        )
        .unwrap()
    };
    let local = Arc::new(Federation::new(
        nodes(&s.spec, s.parts.clone(), s.budget, None).unwrap(),
    ));
    let plain = time_chains(local, &s.spec, penalty, 1, iterations).await.0;
    let local = Arc::new(Federation::new(secure_nodes()));
    local.aggregate_securely(Some(0));
    let secure = time_chains(local, &s.spec, penalty, 1, iterations).await.0;
    println!(
        "{:<44} {plain:>10.0} {secure:>10.0} {:>8.2}",
        "in-process",
        secure / plain
    );
    let plain_nodes = nodes(&s.spec, s.parts.clone(), s.budget, None).unwrap();
    let plain = time_served(plain_nodes, None, &s.spec, penalty, 1, iterations)
        .await
        .0;
    let secure = time_served(secure_nodes(), Some(0), &s.spec, penalty, 1, iterations)
        .await
        .0;
    println!(
        "{:<44} {plain:>10.0} {secure:>10.0} {:>8.2}",
        "gRPC loopback",
        secure / plain
    );
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let iterations: u64 = args.iter().find_map(|a| a.parse().ok()).unwrap_or(20_000);
    let rows = match args.iter().find_map(|a| a.strip_prefix("rows=")) {
        Some(rows) => match rows.parse::<usize>() {
            Ok(rows) if rows >= PARTIES => rows,
            _ => {
                eprintln!("rows={rows}: give a whole number of rows, at least {PARTIES}");
                std::process::exit(2);
            }
        },
        None => ROWS,
    };
    let mut sections: Vec<&str> = args
        .iter()
        .filter(|a| a.parse::<u64>().is_err() && !a.starts_with("rows="))
        .map(String::as_str)
        .collect();
    if let Some(unknown) = sections.iter().find(|s| !SECTIONS.contains(s)) {
        eprintln!(
            "unknown section {unknown:?}: the sections are {}",
            SECTIONS.join(", ")
        );
        std::process::exit(2);
    }
    if sections.is_empty() {
        sections = SECTIONS.to_vec();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let s = setting(rows);
    let dir = tempfile::tempdir().unwrap();
    println!(
        "flat banana d=2, n={rows} over {PARTIES} parties, tau=0.1, proposal sd 0.008, clip 2; {iterations} iterations per chain"
    );
    rt.block_on(async {
        for section in sections {
            println!();
            match section {
                "penalty" => federations(&s, dir.path(), iterations).await,
                "secure" => secure_section(&s, iterations).await,
                "variants" => variants(&s, iterations).await,
                "hmc" => hmc(&s, dir.path(), iterations).await,
                "glm" => glm(&s.budget, iterations).await,
                _ => proposals_d10(&s.budget, iterations).await,
            }
        }
    });
}

/// Rounds of the penalty section: this machine's rates swing by a third from run to run (its
/// neighbours' load), so each round times the three federations back to back and the ratios
/// are each round's, their median reported.
const ROUNDS: usize = 3;

/// The full-data penalty with 1 and 4 chains: in-process, over gRPC loopback, and over gRPC
/// with durable ledgers, each for the same iterations, in [`ROUNDS`] rounds.
async fn federations(s: &Setting, dir: &std::path::Path, iterations: u64) {
    println!(
        "{:<44} {:>8} {:>6} {:>14} {:>12}",
        "federation", "chains", "round", "it/s per chain", "it/s total"
    );
    let mut medians = Vec::new();
    for chains in [1u32, 4] {
        let penalty = (Variant::Penalty, ProposalKind::Rw);
        let mut ratios = Vec::new();
        for round in 1..=ROUNDS {
            let local = Arc::new(Federation::new(
                nodes(&s.spec, s.parts.clone(), s.budget, None).unwrap(),
            ));
            let in_process = time_chains(local, &s.spec, penalty, chains, iterations).await;
            let in_memory = nodes(&s.spec, s.parts.clone(), s.budget, None).unwrap();
            let over_grpc =
                time_served(in_memory, None, &s.spec, penalty, chains, iterations).await;
            let ledgers = dir.join(format!("durable-{chains}-{round}"));
            std::fs::create_dir_all(&ledgers).unwrap();
            let durable = nodes(&s.spec, s.parts.clone(), s.budget, Some(&ledgers)).unwrap();
            let durable = time_served(durable, None, &s.spec, penalty, chains, iterations).await;
            for (name, (per_chain, total)) in [
                ("in-process (in-memory ledgers)", in_process),
                ("gRPC loopback (in-memory ledgers)", over_grpc),
                ("gRPC loopback (durable ledgers)", durable),
            ] {
                println!("{name:<44} {chains:>8} {round:>6} {per_chain:>14.0} {total:>12.0}");
            }
            ratios.push((over_grpc.0 / in_process.0, durable.0 / in_process.0));
        }
        let median = |v: Vec<f64>| quantile(&v, 0.5);
        medians.push((
            chains,
            median(ratios.iter().map(|r| r.0).collect()),
            median(ratios.iter().map(|r| r.1).collect()),
        ));
    }
    println!();
    for (chains, grpc, durable) in medians {
        println!(
            "{chains} chain(s), median of {ROUNDS} rounds: gRPC / in-process = {grpc:.2}; durable gRPC / in-process = {durable:.2}"
        );
    }
}

/// The full-data penalty, minibatch penalty and DP Barker in-process, 1 chain.
async fn variants(s: &Setting, iterations: u64) {
    println!(
        "{:<60} {:>14} {:>12}",
        "variant (in-process, 1 chain)", "it/s", "/ penalty"
    );
    let mut penalty = None;
    for variant in [
        Variant::Penalty,
        Variant::MinibatchPenalty { batch_size: 1000 },
        Variant::Barker {
            batch_size: Some(1000),
            c: 2.0,
        },
    ] {
        let local = Arc::new(Federation::new(
            nodes(&s.spec, s.parts.clone(), s.budget, None).unwrap(),
        ));
        let (rate, _) =
            time_chains(local, &s.spec, (variant, ProposalKind::Rw), 1, iterations).await;
        let base = *penalty.get_or_insert(rate);
        println!(
            "{:<60} {rate:>14.0} {:>12.2}",
            variant.describe(),
            rate / base
        );
    }
}

/// DP HMC with the thesis's settings, in-process and over gRPC with durable ledgers.
async fn hmc(s: &Setting, dir: &std::path::Path, iterations: u64) {
    let hmc = Variant::Hmc {
        leapfrog_steps: 10,
        step_size: 5e-4,
        gradient_clip: 1.0,
        gradient_tau: 0.4,
    };
    let hmc_iterations = (iterations / 10).max(100);
    println!("{}; {hmc_iterations} iterations", hmc.describe());
    println!(
        "{:<44} {:>8} {:>14} {:>14}",
        "federation", "chains", "it/s total", "rows/s"
    );
    let rows_per_iteration = 12.0 * s.rows as f64;
    let hmc = (hmc, ProposalKind::Rw);
    let mut ratios = Vec::new();
    for chains in [1u32, 4] {
        let local = Arc::new(Federation::new(
            nodes(&s.spec, s.parts.clone(), s.budget, None).unwrap(),
        ));
        let (_, in_process) = time_chains(local, &s.spec, hmc, chains, hmc_iterations).await;
        let ledgers = dir.join(format!("durable-hmc-{chains}"));
        std::fs::create_dir_all(&ledgers).unwrap();
        let durable = nodes(&s.spec, s.parts.clone(), s.budget, Some(&ledgers)).unwrap();
        let (_, over_grpc) = time_served(durable, None, &s.spec, hmc, chains, hmc_iterations).await;
        for (name, rate) in [
            ("in-process (in-memory ledgers)", in_process),
            ("gRPC loopback (durable ledgers)", over_grpc),
        ] {
            println!(
                "{name:<44} {chains:>8} {rate:>14.0} {:>14.3e}",
                rate * rows_per_iteration
            );
        }
        if chains == 1 {
            println!("in-process / thesis's 45 it/s = {:.1}", in_process / 45.0);
        }
        ratios.push((chains, over_grpc / in_process));
    }
    for (chains, ratio) in ratios {
        println!("{chains} chain(s): durable gRPC / in-process = {ratio:.2}");
    }
}

/// The gaussian GLM (d = 3) at nᵢ = 10⁴ and 10⁶: the sufficient-statistics variant against
/// the full-data penalty.
async fn glm(budget: &BudgetConfig, iterations: u64) {
    println!(
        "{:<60} {:>10} {:>14}",
        "gaussian GLM d=3, 3 parties in-process, 1 chain", "rows/party", "it/s"
    );
    let glm = ModelSpec::Glm(GlmSpec::example(Family::Gaussian, 3));
    let model = glm.build().unwrap();
    for rows in [10_000usize, 1_000_000] {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let parts = model
            .simulate(&glm.true_theta(), rows * PARTIES, &mut rng)
            .split(PARTIES);
        for variant in [Variant::SufficientStatistics, Variant::Penalty] {
            let local = Arc::new(Federation::new(
                nodes(&glm, parts.clone(), *budget, None).unwrap(),
            ));
            // The full-data penalty reads every row: fewer iterations at 10⁶.
            let n = match variant {
                Variant::Penalty => (iterations * 10_000 / rows as u64).max(200),
                _ => iterations,
            };
            let (rate, _) = time_chains(local, &glm, (variant, ProposalKind::Rw), 1, n).await;
            println!("{:<60} {rows:>10} {rate:>14.0}", variant.describe());
        }
    }
}

/// The penalty's proposals on the thesis's flat banana at d = 10 (n = 200 000 over three
/// parties, in-process, 1 chain): a one-component step's ratio reads one column of each
/// party's rows (two for θ1) where the walk's reads ten, so a step costs the parties a
/// fraction of the walk's.
async fn proposals_d10(budget: &BudgetConfig, iterations: u64) {
    let spec = ModelSpec::flat_banana(10);
    let rows = 200_000;
    let model = spec.build().unwrap();
    let data = model.simulate(&spec.true_theta(), rows, &mut ChaCha8Rng::seed_from_u64(2));
    let parts = data.split(PARTIES);
    println!(
        "full-data penalty on the flat banana d=10, n={rows} over {PARTIES} parties (in-process, 1 chain)"
    );
    println!("{:<12} {:>14} {:>12}", "proposal", "it/s", "/ rw");
    let mut walk = None;
    for proposal in [ProposalKind::Rw, ProposalKind::Ocu, ProposalKind::Gwmh] {
        let local = Arc::new(Federation::new(
            nodes(&spec, parts.clone(), *budget, None).unwrap(),
        ));
        let variant = (Variant::Penalty, proposal);
        let (rate, _) = time_chains(local, &spec, variant, 1, iterations).await;
        let base = *walk.get_or_insert(rate);
        println!("{:<12} {rate:>14.0} {:>12.2}", proposal.name(), rate / base);
    }
}
