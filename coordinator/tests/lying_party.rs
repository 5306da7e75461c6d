//! A party that lies about its grant or its answers is stopped by name before its lie
//! reaches the draws: the coordinator checks every grant against the plan and every answer
//! against the noise and bound an honest party's would have (`federation/audit.rs`). The
//! liar here is an honest in-process node whose grant or answers are tampered with on the
//! way out, as a tampering proxy would.
mod support;

use std::path::Path;
use std::sync::Arc;

use fedmcmc_common::models::{Model, ModelSpec};
use fedmcmc_common::proposal::ProposalKind;
use fedmcmc_coordinator::federation::{
    CallError, Closed, Contribution, Federation, Grant, PartyHandle, PartyInfo, Query, RunPlan,
};
use fedmcmc_coordinator::interrupt::Stop;
use fedmcmc_coordinator::job::{self, Inits, JobSettings, Start};
use fedmcmc_coordinator::sampler::Quiet;
use fedmcmc_coordinator::variant::Variant;
use fedmcmc_party::PartyNode;

#[derive(Clone, Copy, Debug)]
enum Lie {
    /// Answers as it should.
    None,
    /// States this noise variance instead of its own.
    Variance(f64),
    /// Adds this to the first entry of every answer.
    Ratio(f64),
    /// Grants this many releases whatever the plan.
    Releases(u64),
    /// Grants this noise multiplier.
    Multiplier(f64),
    /// Answers honestly but cannot be reached when its run is closed.
    AwayAtClose,
}

struct Liar {
    node: Arc<PartyNode>,
    lie: Lie,
}

impl PartyHandle for Liar {
    async fn describe(&self) -> Result<PartyInfo, CallError> {
        self.node.describe().await
    }
    async fn open_run(&self, plan: &RunPlan, fingerprint: &str) -> Result<Grant, CallError> {
        let mut grant = self.node.open_run(plan, fingerprint).await?;
        match self.lie {
            Lie::Releases(k) => grant.releases = k,
            Lie::Multiplier(s) => grant.noise_multiplier = s,
            _ => {}
        }
        Ok(grant)
    }
    async fn step(
        &self,
        run_id: &str,
        chain: u32,
        step: u64,
        query: Query<'_>,
    ) -> Result<Contribution, CallError> {
        let mut answer = self.node.step(run_id, chain, step, query).await?;
        match self.lie {
            Lie::Variance(v) => answer.noise_variance = v,
            Lie::Ratio(r) => answer.value[0] += r,
            _ => {}
        }
        Ok(answer)
    }
    async fn close_run(&self, run_id: &str) -> Result<Closed, CallError> {
        if let Lie::AwayAtClose = self.lie {
            return Err(CallError {
                kind: fedmcmc_coordinator::federation::CallErrorKind::Unavailable,
                message: "the party could not be reached".into(),
            });
        }
        self.node.close_run(run_id).await
    }
}

/// Two parties of 300 flat-banana rows; the second lies as `lie` says. The job's error (or
/// `Ok` if it ran through) and the honest party's open runs after it.
async fn job_with(lie: Lie, out: &Path) -> (Result<(), String>, u32) {
    let (result, open, _) = job_and_liar(lie, out).await;
    (result.map(drop), open)
}

/// [`job_with`], with the job's result and the liar's node.
async fn job_and_liar(
    lie: Lie,
    out: &Path,
) -> (Result<job::JobResult, String>, u32, Arc<PartyNode>) {
    let spec = ModelSpec::flat_banana(2);
    let model: Arc<dyn Model> = spec.build().unwrap();
    let mut parties = support::parties(&spec, 2);
    let (_, liar) = parties.pop().unwrap();
    let (honest_name, honest) = parties.pop().unwrap();
    let federation = Federation::new(vec![
        (
            honest_name,
            Liar {
                node: Arc::clone(&honest),
                lie: Lie::None,
            },
        ),
        (
            "liar".to_string(),
            Liar {
                node: Arc::clone(&liar),
                lie,
            },
        ),
    ]);
    let settings = JobSettings {
        aggregation: Default::default(),
        collusion: 0,
        variant: Variant::Penalty,
        proposal: ProposalKind::Rw,
        chains: 2,
        iterations: Some(200),
        tau: Some(1.0),
        warmup: Some(50),
        clip: 2.0,
        proposal_sd: Some(0.05),
        adapt: true,
        target_accept: 0.25,
        seed: 3,
    };
    let start = Start::Given(Inits {
        points: vec![spec.true_theta(); 2],
        label: "the true θ".into(),
    });
    let result = job::run(
        Arc::new(federation),
        model,
        &settings,
        start,
        out,
        Vec::new(),
        |_, _| Arc::new(Quiet),
        &Stop::new(),
    )
    .await;
    let open = PartyNode::describe(&honest).open_runs;
    (result.map_err(|e| format!("{e:#}")), open, liar)
}

/// A party away when the run is closed (after every retry) does not cost the draws: the
/// job ends with its draws and summary written, the other party's run closed, and one
/// sentence naming the party whose run stays open at its reservation; that run is still
/// open on the party, for a resumed job (or the lease) to close.
#[tokio::test]
async fn a_party_away_at_the_close_leaves_the_draws_and_names_its_open_run() {
    let dir = tempfile::tempdir().unwrap();
    let (result, open, liar) = job_and_liar(Lie::AwayAtClose, dir.path()).await;
    let result = result.unwrap();
    assert_eq!(open, 0, "the reachable party's run is closed");
    assert_eq!(result.unclosed.len(), 1, "{:?}", result.unclosed);
    assert!(
        result.unclosed[0].contains("party liar") && result.unclosed[0].contains("stays open"),
        "{}",
        result.unclosed[0]
    );
    assert_eq!(result.closed[1].releases, result.grants[1].releases);
    assert_eq!(PartyNode::describe(&liar).open_runs, 1);
    let report = fedmcmc_coordinator::output::finish(
        dir.path(),
        &*ModelSpec::flat_banana(2).build().unwrap(),
        &result,
        None,
    )
    .unwrap();
    assert!(
        report.table.contains("NOT CLOSED: party liar"),
        "{}",
        report.table
    );
    assert!(dir.path().join("summary.json").is_file());
}

#[tokio::test]
async fn an_honest_pair_runs_through() {
    let dir = tempfile::tempdir().unwrap();
    let (result, open) = job_with(Lie::None, dir.path()).await;
    assert_eq!(result, Ok(()));
    assert_eq!(open, 0);
}

#[tokio::test]
async fn a_grant_other_than_the_plan_is_refused_by_name_before_any_step() {
    for (lie, says) in [
        (
            Lie::Releases(1),
            "granted 1 releases for a plan of 400 (2 chains × 200 steps)",
        ),
        (
            Lie::Multiplier(f64::NAN),
            "granted the noise multiplier NaN",
        ),
        (
            Lie::Multiplier(0.5),
            "granted the noise multiplier 0.5, where its τ = 1 and 300 rows give 17.32",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (result, open) = job_with(lie, dir.path()).await;
        let e = result.unwrap_err();
        assert!(
            e.starts_with("party liar: ") && e.contains(says),
            "{lie:?}: {e}"
        );
        assert_eq!(open, 0, "{lie:?}: the honest party's grant is released");
    }
}

#[tokio::test]
async fn an_answer_no_honest_party_gives_stops_the_job_by_name() {
    for (lie, says) in [
        (
            Lie::Variance(1e308),
            "stated noise variance 1e308 at step 0",
        ),
        (Lie::Variance(0.0), "stated noise variance 0e0 at step 0"),
        (Lie::Ratio(1e6), "beyond what its clipped statistic"),
        (Lie::Ratio(f64::NAN), "answered NaN in entry 0 at step 0"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (result, open) = job_with(lie, dir.path()).await;
        let e = result.unwrap_err();
        assert!(
            e.contains("party liar: ") && e.contains(says),
            "{lie:?}: {e}"
        );
        assert_eq!(open, 0, "{lie:?}: the honest party's run is closed");
    }
}
