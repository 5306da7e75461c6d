//! The job's contract with the parties' budgets, against party nodes in this process (same
//! release path, ledger and accountant as a served party): whatever the coordinator can
//! refuse on its own it refuses before OpenRun, and a stopped job closes its run on every
//! party and still writes what it sampled.
mod support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use fedmcmc_common::models::{Model, ModelSpec};
use fedmcmc_coordinator::federation::{
    CallError, CallErrorKind, Closed, Contribution, Federation, Grant, PartyHandle, PartyInfo,
    Query, RunPlan,
};
use fedmcmc_coordinator::initialiser::InitialiserSettings;
use fedmcmc_coordinator::interrupt::{Signal, Stop};
use fedmcmc_coordinator::job::{self, Inits, JobResult, JobSettings, Start};
use fedmcmc_coordinator::output;
use fedmcmc_coordinator::sampler::{ChainTrace, Progress, Quiet};
use fedmcmc_party::PartyNode;

/// An in-process party that counts the OpenRun calls reaching it and, with `fail_first`,
/// fails chain 1's first step as an unreachable party would.
struct Counted {
    node: Arc<PartyNode>,
    opens: Arc<AtomicUsize>,
    fail_first: bool,
}

impl PartyHandle for Counted {
    async fn describe(&self) -> Result<PartyInfo, CallError> {
        PartyHandle::describe(&self.node).await
    }

    async fn open_run(&self, plan: &RunPlan, fingerprint: &str) -> Result<Grant, CallError> {
        self.opens.fetch_add(1, Ordering::SeqCst);
        PartyHandle::open_run(&self.node, plan, fingerprint).await
    }

    async fn step(
        &self,
        run_id: &str,
        chain: u32,
        step: u64,
        query: Query<'_>,
    ) -> Result<Contribution, CallError> {
        if self.fail_first && (chain, step) == (0, 0) {
            return Err(CallError {
                kind: CallErrorKind::Unavailable,
                message: "injected failure".into(),
            });
        }
        PartyHandle::step(&self.node, run_id, chain, step, query).await
    }

    async fn close_run(&self, run_id: &str) -> Result<Closed, CallError> {
        PartyHandle::close_run(&self.node, run_id).await
    }
}

const CHAINS: u32 = 2;

struct Setup {
    model: Arc<dyn Model>,
    nodes: Vec<Arc<PartyNode>>,
    opens: Arc<AtomicUsize>,
    federation: Arc<Federation<Counted>>,
}

/// Two parties of 300 banana rows each, with budgets far larger than any run here.
fn setup() -> Setup {
    setup_failing(false)
}

/// [`setup`], where with `fail_first` the first party fails chain 1's first step.
fn setup_failing(fail_first: bool) -> Setup {
    let spec = ModelSpec::flat_banana(2);
    let model = spec.build().unwrap();
    let parties = support::parties(&spec, 2);
    let opens = Arc::new(AtomicUsize::new(0));
    let handles = parties
        .iter()
        .enumerate()
        .map(|(i, (name, node))| {
            (
                name.clone(),
                Counted {
                    node: Arc::clone(node),
                    opens: Arc::clone(&opens),
                    fail_first: fail_first && i == 0,
                },
            )
        })
        .collect();
    Setup {
        model,
        nodes: parties.into_iter().map(|(_, n)| n).collect(),
        opens,
        federation: Arc::new(Federation::new(handles)),
    }
}

fn settings(iterations: u64) -> JobSettings {
    JobSettings {
        aggregation: Default::default(),
        collusion: 0,
        variant: fedmcmc_coordinator::variant::Variant::Penalty,
        chains: CHAINS,
        iterations: Some(iterations),
        tau: Some(1.0),
        warmup: None,
        clip: 2.0,
        proposal: fedmcmc_common::proposal::ProposalKind::Rw,
        proposal_sd: Some(0.05),
        adapt: true,
        target_accept: 0.25,
        seed: 3,
    }
}

fn inits(point: &[f64]) -> Start {
    Start::Given(Inits {
        points: vec![point.to_vec(); CHAINS as usize],
        label: "test".into(),
    })
}

impl Setup {
    async fn run(
        &self,
        settings: &JobSettings,
        inits: Start,
        out: &Path,
        progress: Arc<dyn Progress>,
        stop: &Stop,
    ) -> anyhow::Result<JobResult> {
        job::run(
            Arc::clone(&self.federation),
            Arc::clone(&self.model),
            settings,
            inits,
            out,
            Vec::new(),
            move |_, _| progress,
            stop,
        )
        .await
    }

    /// Runs a job that must be refused, and checks that no OpenRun reached any party and
    /// nothing is reserved or spent. Returns the refusal.
    async fn refused(&self, settings: &JobSettings, inits: Start, out: &Path) -> String {
        let err = self
            .run(settings, inits, out, Arc::new(Quiet), &Stop::new())
            .await
            .err()
            .expect("the job is refused")
            .to_string();
        assert_eq!(self.opens.load(Ordering::SeqCst), 0, "{err}");
        for node in &self.nodes {
            let d = PartyNode::describe(node);
            assert_eq!((d.open_runs, d.epsilon_committed), (0, 0.0), "{err}");
        }
        err
    }
}

#[tokio::test]
async fn chains_too_short_to_split_are_refused_before_opening() {
    let s = setup();
    let out = tempfile::tempdir().unwrap();
    // 4 iterations, 2 of them warm-up: 2 draws per chain, and R̂ needs 4.
    let err = s
        .refused(&settings(4), inits(&[0.0, 3.0]), out.path())
        .await;
    assert!(
        err.contains("at least 4 draws are needed to split chains"),
        "{err}"
    );
    let mut long_warmup = settings(100);
    long_warmup.warmup = Some(97);
    let err = s
        .refused(&long_warmup, inits(&[0.0, 3.0]), out.path())
        .await;
    assert!(err.contains("leave 3 draws per chain"), "{err}");
}

#[tokio::test]
async fn initial_points_of_the_wrong_dimension_are_refused_before_opening() {
    let s = setup();
    let out = tempfile::tempdir().unwrap();
    let err = s.refused(&settings(100), inits(&[0.0]), out.path()).await;
    assert!(err.contains("dimension 2"), "{err}");
    let err = s
        .refused(&settings(100), inits(&[0.0, f64::NAN]), out.path())
        .await;
    assert!(err.contains("not a finite vector"), "{err}");
}

/// DP Barker's default walk is shaped by the private initialiser's fit: from a given point
/// with no walk sd there is none, so the job is refused before any run is opened. The
/// budget too small for any batch is refused likewise.
#[tokio::test]
async fn a_barker_job_without_a_walk_or_a_batch_that_fits_is_refused_before_opening() {
    let s = setup();
    let out = tempfile::tempdir().unwrap();
    let barker = JobSettings {
        variant: fedmcmc_coordinator::variant::Variant::Barker {
            batch_size: None,
            c: 2.0,
        },
        tau: None,
        clip: 0.0,
        proposal_sd: None,
        ..settings(100)
    };
    let err = s.refused(&barker, inits(&[0.0, 3.0]), out.path()).await;
    assert!(
        err.contains("shaped by the posterior covariance") && err.contains("--proposal-sd"),
        "{err}"
    );
    let err = s
        .refused(
            &JobSettings {
                iterations: Some(1 << 40),
                ..barker
            },
            inits(&[0.0, 3.0]),
            out.path(),
        )
        .await;
    assert!(err.contains("fit no batch"), "{err}");
}

#[tokio::test]
async fn an_unwritable_output_directory_is_refused_before_opening() {
    let s = setup();
    let dir = tempfile::tempdir().unwrap();
    // A path below a regular file cannot be created, whoever runs the test.
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let out = file.join("out");
    let err = s.refused(&settings(100), inits(&[0.0, 3.0]), &out).await;
    assert!(
        err.contains("cannot create") && err.contains("a-file"),
        "{err}"
    );
}

#[tokio::test]
async fn a_stop_before_opening_opens_nothing() {
    let s = setup();
    let out = tempfile::tempdir().unwrap();
    let stop = Stop::new();
    stop.request(Signal::Terminate);
    let err = s
        .run(
            &settings(100),
            inits(&[0.0, 3.0]),
            out.path(),
            Arc::new(Quiet),
            &stop,
        )
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("nothing was released"), "{err}");
    assert_eq!(s.opens.load(Ordering::SeqCst), 0);
}

/// Requests a stop, as a signal would, once every chain (or, with `all` false, any chain)
/// has made `at` steps.
struct StopAt {
    stop: Stop,
    at: u64,
    all: bool,
    steps: std::sync::Mutex<Vec<u64>>,
}

impl Progress for StopAt {
    fn step(&self, trace: &ChainTrace) -> anyhow::Result<()> {
        let mut steps = self.steps.lock().unwrap();
        steps[trace.chain as usize] = trace.steps() as u64;
        let reached = |&n: &u64| n >= self.at;
        if (self.all && steps.iter().all(reached)) || (!self.all && steps.iter().any(reached)) {
            self.stop.request(Signal::Interrupt);
        }
        Ok(())
    }
}

/// Runs a 400-iteration job that `progress` stops, writes its output, and checks what every
/// party was charged and what the files say. Returns the job and its summary.json.
async fn stopped(
    settings: &JobSettings,
    at: u64,
    all: bool,
) -> (JobResult, serde_json::Value, tempfile::TempDir) {
    let s = setup();
    let out = tempfile::tempdir().unwrap();
    let stop = Stop::new();
    let progress = Arc::new(StopAt {
        stop: stop.clone(),
        at,
        all,
        steps: std::sync::Mutex::new(vec![0; CHAINS as usize]),
    });
    let job = s
        .run(settings, inits(&[0.0, 3.0]), out.path(), progress, &stop)
        .await
        .unwrap();
    assert_eq!(job.interrupted, Some(Signal::Interrupt));
    let (fewest, most) = job.steps_range();
    assert!(fewest < 400 && most >= at, "{fewest} to {most} steps");
    let steps: u64 = job.traces.iter().map(|t| t.steps() as u64).sum();
    for (node, closed) in s.nodes.iter().zip(&job.closed) {
        // Closed: charged for the releases made, not the plan.
        assert_eq!(closed.releases, steps);
        let d = PartyNode::describe(node);
        assert_eq!(d.open_runs, 0);
        assert_eq!(d.epsilon_committed, closed.epsilon_committed);
    }
    let report = output::finish(
        out.path(),
        &*ModelSpec::flat_banana(2).build().unwrap(),
        &job,
        None,
    )
    .unwrap();
    assert_eq!(report.partial.map(|p| p.signal), Some(Signal::Interrupt));
    assert!(report.table.starts_with("PARTIAL: stopped by SIGINT"));
    let line = report.interrupted_line(Signal::Interrupt);
    assert!(line.contains(&out.path().display().to_string()), "{line}");
    let text = std::fs::read_to_string(out.path().join("summary.json")).unwrap();
    let summary: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(summary["partial"], true);
    assert_eq!(summary["stopped_by"], "SIGINT");
    for (c, t) in summary["chains"]
        .as_array()
        .unwrap()
        .iter()
        .zip(&job.traces)
    {
        assert_eq!(c["iterations"], t.steps() as u64);
        assert_eq!(c["planned_iterations"], 400);
        let status = if t.steps() < 400 {
            "stopped by SIGINT"
        } else {
            "completed"
        };
        assert_eq!(c["status"], status);
    }
    for c in 1..=CHAINS {
        let csv = std::fs::read_to_string(out.path().join(format!("chain-{c}.csv"))).unwrap();
        let rows = csv.lines().filter(|l| !l.starts_with('#')).count();
        let draws = job.traces[c as usize - 1].draws();
        assert_eq!(rows, 1 + draws, "header and the post-warm-up draws");
        assert!(csv.contains("# partial = stopped by SIGINT"));
    }
    (job, summary, out)
}

#[tokio::test]
async fn a_stop_after_warm_up_keeps_the_draws_and_their_statistics() {
    // Every chain has 300 of its 400 steps, 100 past the warm-up.
    let (job, summary, _out) = stopped(&settings(400), 300, true).await;
    let draws = job.traces.iter().map(|t| t.draws()).min().unwrap();
    assert!(draws >= 100, "{draws}");
    assert_eq!(summary["draws_per_chain"], draws as u64);
    for p in summary["parameters"].as_array().unwrap() {
        for key in [
            "mean", "sd", "q5", "q50", "q95", "ess_bulk", "ess_tail", "r_hat",
        ] {
            assert!(p[key].is_f64(), "{key}: {p}");
        }
    }
}

#[tokio::test]
async fn a_stop_during_warm_up_writes_a_partial_summary_without_statistics() {
    let mut long_warmup = settings(400);
    long_warmup.warmup = Some(396);
    let (job, summary, _out) = stopped(&long_warmup, 5, false).await;
    assert!(job.traces.iter().all(|t| t.draws() == 0));
    assert_eq!(summary["draws_per_chain"], 0);
    for p in summary["parameters"].as_array().unwrap() {
        for key in ["mean", "sd", "ess_bulk", "r_hat"] {
            assert!(p[key].is_null(), "{key}: {p}");
        }
    }
    for c in summary["chains"].as_array().unwrap() {
        assert!(c["acceptance_rate"].is_null() && c["mean_noise_variance"].is_null());
    }
}

#[tokio::test]
async fn a_failed_chain_fails_the_job_and_the_run_is_still_closed() {
    let s = setup_failing(true);
    let out = tempfile::tempdir().unwrap();
    let err = s
        .run(
            &settings(400),
            inits(&[0.0, 3.0]),
            out.path(),
            Arc::new(Quiet),
            &Stop::new(),
        )
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("chain 0 stopped at step 0") && err.contains("injected"),
        "{err}"
    );
    for node in &s.nodes {
        assert_eq!(PartyNode::describe(node).open_runs, 0);
    }
}

fn private() -> Start {
    Start::Private(InitialiserSettings {
        share: 0.1,
        steps: 40,
        gradient_clip: 2.0,
    })
}

/// A sampling plan that cannot fit what the initialiser would leave is refused before the
/// initialiser spends anything.
#[tokio::test]
async fn a_private_start_is_refused_before_spending_when_sampling_cannot_fit() {
    let s = setup();
    let out = tempfile::tempdir().unwrap();
    let err = s.refused(&settings(1 << 40), private(), out.path()).await;
    assert!(err.contains("does not fit the privacy budget"), "{err}");
}

/// The initialiser is its own run on every party, charged and closed before the sampling
/// run opens; its cost is its share of each party's μ, the chains start at distinct points
/// around what it found, and each party's commitment is the two runs together.
#[tokio::test]
async fn a_private_start_is_charged_then_the_chains_sample() {
    let s = setup();
    let before: Vec<f64> = s
        .nodes
        .iter()
        .map(|n| PartyNode::describe(n).mu_remaining)
        .collect();
    let out = tempfile::tempdir().unwrap();
    let job = s
        .run(
            &settings(100),
            private(),
            out.path(),
            Arc::new(Quiet),
            &Stop::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        s.opens.load(Ordering::SeqCst),
        4,
        "two runs on each of two parties"
    );
    let init = job.initialiser.as_ref().expect("the initialiser ran");
    for (i, closed) in init.closed.iter().enumerate() {
        assert_eq!(closed.releases, 40);
        // k releases at s cost k/(2s²) of μ: the share of what was left.
        let s_i = init.grants[i].noise_multiplier;
        let mu = 40.0 / (2.0 * s_i * s_i);
        assert!(
            (mu - 0.1 * before[i]).abs() <= 1e-9 * mu,
            "{mu} vs {}",
            before[i]
        );
        assert!(closed.run_epsilon > 0.0);
    }
    let starts: Vec<&[f64]> = job.traces.iter().map(|t| t.draw(0)).collect();
    assert_ne!(starts[0], starts[1], "chains start apart");
    assert!(job.inits.label.starts_with("private initialiser"));
    for (node, closed) in s.nodes.iter().zip(&job.closed) {
        let d = PartyNode::describe(node);
        assert_eq!(
            (d.open_runs, d.epsilon_committed),
            (0, closed.epsilon_committed)
        );
    }
}
