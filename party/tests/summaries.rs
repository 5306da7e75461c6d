//! The summaries route's release (a GLM's quadratic summary about a public centre, or a
//! bounded gaussian or banana model's sum of rows) on a party: its refusals are public
//! decisions (neighbouring rows, the substitute at a corner of the columns' bounds, decide
//! alike, for each GLM family and both Gaussian-likelihood models), its noise is the run's
//! multiplier times the sensitivity the model's public bound gives at the asked centre and
//! window, and a party whose model has no summaries refuses the variant.
mod contract;

use contract::plans::{plan, summaries_plan, tau};
use contract::{
    Call, Decision, QueryKind, RunRef, StepAt, Subject, decided_alike_for, fresh, refused,
    replayed, step_as,
};
use fedmcmc_common::accountant::{Choice, Method};
use fedmcmc_common::models::summaries::Reading;
use fedmcmc_common::models::{Family, GlmSpec, ModelSpec};
use fedmcmc_party::config::BudgetConfig;
use fedmcmc_proto::v1 as pb;
use rand::SeedableRng;
use tonic::Code;

const ROWS: usize = 300;

fn budget() -> BudgetConfig {
    BudgetConfig {
        epsilon: 10.0,
        delta: 1e-5,
        accountant: Choice::Only(Method::Analytic),
    }
}

fn summary(run: usize, step: StepAt, centre: &[f64], window: f64) -> Call {
    weighted(run, step, centre, window, 1.0)
}

/// A summary query whose curvature block is weighted by `weight`.
fn weighted(run: usize, step: StepAt, centre: &[f64], window: f64, weight: f64) -> Call {
    Call::Step {
        kind: QueryKind::Summary,
        run: RunRef::Slot(run),
        chain: 0,
        step,
        theta: centre.to_vec(),
        theta_proposed: vec![window, weight],
    }
}

/// Run slots: 0 a four-step summaries run, 1 a full-data penalty run. Then its steps (a
/// Chebyshev window, Taylor's, a far centre with its curvature weighted, which a model whose
/// summaries are a sum of rows refuses), a replay, a replay with another window and with
/// another weight, steps out of order and of an unknown run, malformed centres, windows
/// and curvature weights, the wrong query for each run, the exhausted run, plans the
/// variant refuses, a plan beyond the budget, and a step after closing.
fn battery() -> Vec<Call> {
    let centre = [0.5, 1.0, -0.5];
    let th = [0.5, 1.0, -0.5];
    let prop = [0.51, 0.99, -0.5];
    let mut clipped = summaries_plan(3, tau(0.5));
    clipped.clip = 2.0;
    let mut chains = summaries_plan(3, tau(0.5));
    chains.chains = 2;
    vec![
        Call::Open(summaries_plan(4, tau(0.5))),
        Call::Open(plan(1, 5, 2.0, tau(0.5))),
        summary(0, StepAt::Next, &[0.0, 0.0, 0.0], 2.0),
        summary(0, StepAt::Last, &[0.0, 0.0, 0.0], 2.0),
        summary(0, StepAt::Last, &[0.0, 0.0, 0.0], 3.0),
        summary(0, StepAt::Ahead(2), &centre, 0.0),
        Call::Step {
            kind: QueryKind::Summary,
            run: RunRef::Unknown,
            chain: 0,
            step: StepAt::At(0),
            theta: centre.to_vec(),
            theta_proposed: vec![0.0],
        },
        summary(0, StepAt::Next, &[0.5, f64::NAN, 0.0], 0.0),
        summary(0, StepAt::Next, &[0.5, 1.0], 0.0),
        summary(0, StepAt::Next, &centre, f64::NAN),
        summary(0, StepAt::Next, &centre, -1.0),
        summary(0, StepAt::Next, &centre, 1e9),
        weighted(0, StepAt::Last, &[0.0, 0.0, 0.0], 2.0, 2.0),
        weighted(0, StepAt::Next, &centre, 0.0, f64::NAN),
        weighted(0, StepAt::Next, &centre, 0.0, 0.0),
        weighted(0, StepAt::Next, &centre, 0.0, 0.5),
        weighted(0, StepAt::Next, &centre, 0.0, 2e3),
        step_as(QueryKind::Full, 0, 0, &th, &prop),
        summary(1, StepAt::Next, &centre, 0.0),
        step_as(QueryKind::Full, 1, 0, &th, &prop),
        summary(0, StepAt::Next, &centre, 0.0),
        weighted(0, StepAt::Next, &[3.0, -4.0, 2.0], 0.0, 3.0),
        summary(0, StepAt::Next, &centre, 0.0),
        summary(0, StepAt::Next, &centre, 0.0),
        Call::Open(clipped),
        Call::Open(chains),
        Call::Open(summaries_plan(1_000_000_000, tau(1e-3))),
        Call::Close(RunRef::Slot(0)),
        summary(0, StepAt::Next, &centre, 0.0),
    ]
}

#[tokio::test]
async fn summary_refusals_are_public_decisions_for_every_model_with_summaries() {
    let glms = [Family::Logistic, Family::Poisson, Family::Gaussian]
        .map(|family| ModelSpec::Glm(GlmSpec::example(family, 3)));
    let gaussian = ModelSpec::gaussian(
        vec![
            vec![2.0, 0.6, -0.3],
            vec![0.6, 1.0, 0.2],
            vec![-0.3, 0.2, 0.5],
        ],
        4.0,
    );
    let means = [ModelSpec::flat_banana(3), gaussian].map(|s| s.with_predictive_bounds(6.0));
    for (k, spec) in glms.into_iter().chain(means).enumerate() {
        let model = spec.build().unwrap();
        let family = format!("{} #{k}", model.name());
        let columns = model.columns();
        let bounds = |j: usize| columns[j].bounds.unwrap();
        // Corners of the columns' bounds: the rows that move a summary most.
        let substitutes: Vec<Vec<f64>> = [[1, 0, 1], [0, 1, 0], [1, 1, 1]]
            .iter()
            .map(|corner| (0..3).map(|j| bounds(j)[corner[j]]).collect())
            .collect();
        let tallies = decided_alike_for(&spec, &substitutes, ROWS, &battery(), budget()).await;
        let decisions = &tallies[0].decisions;
        // A sum of rows has no curvature block to weight: calls 12 and 21 are refused for
        // that (call 12, a replay with another weight, before the replay is looked at), so
        // call 23 is the run's fourth release rather than a step past its last.
        let summaries = model.summaries().unwrap();
        let mean = matches!(summaries.reading(), Reading::Mean(_));
        let released = |d: &Decision| matches!(d, Decision::Released { .. });
        let weighted_far = refused(
            Code::InvalidArgument,
            "no curvature block: ask for weight 1",
        );
        let exhausted = refused(Code::ResourceExhausted, "has used them all");
        let replay_reweighted = refused(Code::FailedPrecondition, "");
        type Check<'a> = (usize, &'a dyn Fn(&Decision) -> bool);
        let expect: [Check; 25] = [
            (2, &fresh),
            (3, &replayed),
            (4, &refused(Code::FailedPrecondition, "")),
            (5, &refused(Code::FailedPrecondition, "out of order")),
            (6, &refused(Code::NotFound, "no run")),
            (7, &refused(Code::InvalidArgument, "centre[1] is NaN")),
            (8, &refused(Code::InvalidArgument, "dimension 3")),
            (9, &refused(Code::InvalidArgument, "window is NaN")),
            (10, &refused(Code::InvalidArgument, "window is -1")),
            (11, &refused(Code::InvalidArgument, "window is 1000000000")),
            (
                12,
                if mean {
                    &weighted_far
                } else {
                    &replay_reweighted
                },
            ),
            (
                13,
                &refused(Code::InvalidArgument, "curvature weight is NaN"),
            ),
            (
                14,
                &refused(Code::InvalidArgument, "curvature weight is 0;"),
            ),
            (
                15,
                &refused(Code::InvalidArgument, "curvature weight is 0.5"),
            ),
            (
                16,
                &refused(Code::InvalidArgument, "curvature weight is 2000"),
            ),
            (
                17,
                &refused(
                    Code::FailedPrecondition,
                    "asks for a summary query, not log_lik_ratio",
                ),
            ),
            (
                18,
                &refused(
                    Code::FailedPrecondition,
                    "asks for a log_lik_ratio query, not summary",
                ),
            ),
            (20, &released),
            (21, if mean { &weighted_far } else { &released }),
            (23, if mean { &released } else { &exhausted }),
            (24, &refused(Code::InvalidArgument, "leave clip unset")),
            (25, &refused(Code::InvalidArgument, "one chain")),
            (26, &refused(Code::ResourceExhausted, "budget")),
            (27, &|d| matches!(d, Decision::Closed { releases: 4 })),
            (28, &refused(Code::FailedPrecondition, "closed")),
        ];
        for (i, check) in expect {
            assert!(
                check(&decisions[i]),
                "{family} call {i}: {:?}",
                decisions[i]
            );
        }
        // Each release states the noise of the public bound at its centre, window and
        // curvature weight: σ = τ·√n·(2R(centre, window, κ) + √d·γ), d entries rounded to
        // the public grid γ of τ·√n·2R, whatever the rows hold.
        let multiplier = 0.5 * (ROWS as f64).sqrt();
        let checked = [
            (2, [0.0, 0.0, 0.0], 2.0, 1.0),
            (20, [0.5, 1.0, -0.5], 0.0, 1.0),
            (21, [3.0, -4.0, 2.0], 0.0, 3.0),
        ];
        for &(i, centre, window, weight) in &checked[..if mean { 2 } else { 3 }] {
            let Decision::Released { noise_variance, .. } = decisions[i] else {
                panic!("{family} call {i}: {:?}", decisions[i])
            };
            let delta = 2.0 * summaries.row_bound(&centre, window, weight);
            let grid = fedmcmc_common::mechanism::grid_step(multiplier * delta).unwrap();
            let d = summaries.entries() as f64;
            let sigma = multiplier * (delta + d.sqrt() * grid);
            let got = f64::from_bits(noise_variance);
            assert!(
                (got - sigma * sigma).abs() <= 1e-12 * got,
                "{family} call {i}: {got} vs {}",
                sigma * sigma
            );
        }
    }
}

/// A party whose model has no summaries does not list the variant and refuses a plan for
/// it, saying why.
#[tokio::test]
async fn a_model_without_summaries_refuses_the_variant() {
    let spec = ModelSpec::flat_banana(2);
    let model = spec.build().unwrap();
    let rows = model.simulate(
        &spec.true_theta(),
        50,
        &mut rand_chacha::ChaCha8Rng::seed_from_u64(3),
    );
    let mut subject = Subject::new(rows, &spec, budget());
    let described = subject
        .describe()
        .await
        .variants
        .contains(&(pb::Variant::Summaries as i32));
    assert!(!described);
    let decision = subject
        .call(
            &Call::Open(summaries_plan(3, tau(0.5))),
            &model.fingerprint(),
        )
        .await;
    assert!(
        refused(Code::Unimplemented, "the banana model has no summaries")(&decision),
        "{decision:?}"
    );
}
