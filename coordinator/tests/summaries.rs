//! The summaries route against party nodes in this process (the same release path, ledger
//! and accountant as a served party): at a generous budget it matches the exact posteriors
//! of the gaussian GLM and of the bounded gaussian and banana models and, for a logistic GLM
//! with coefficients up to 1.5, a long non-private chain on the pooled rows; and a job the parties cannot serve, or whose plan cannot fit
//! what the private initialiser would leave, is refused before anything is spent.
use std::sync::Arc;

use fedmcmc_common::data::Columns;
use fedmcmc_common::models::{Family, GlmColumn, GlmSpec, Model, ModelSpec, Reading};
use fedmcmc_common::noise_aware::LogDensity;
use fedmcmc_common::noise_aware::hmc::{Settings, sample_until_converged};
use fedmcmc_common::noise_aware::rounds::EXACT_RELEASES;
use fedmcmc_common::proposal::ProposalKind;
use fedmcmc_coordinator::federation::Federation;
use fedmcmc_coordinator::federation::local::nodes;
use fedmcmc_coordinator::initialiser::{self, InitialiserSettings};
use fedmcmc_coordinator::interrupt::Stop;
use fedmcmc_coordinator::job::{self, JobResult, JobSettings, Start};
use fedmcmc_coordinator::sampler::Quiet;
use fedmcmc_coordinator::variant::{HmcOptions, Variant, VariantName};
use fedmcmc_party::PartyNode;
use fedmcmc_party::config::BudgetConfig;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

struct Federated {
    model: Arc<dyn Model>,
    data: Columns,
    nodes: Vec<Arc<PartyNode>>,
    federation: Arc<Federation<Arc<PartyNode>>>,
}

/// `rows` simulated from `spec` at its true θ, split among three parties with ε each.
fn federated(spec: &ModelSpec, rows: usize, epsilon: f64, seed: u64) -> Federated {
    let model = spec.build().unwrap();
    let data = model.simulate(
        &spec.true_theta(),
        rows,
        &mut ChaCha8Rng::seed_from_u64(seed),
    );
    let budget = BudgetConfig {
        epsilon,
        delta: 0.1 / rows as f64,
        accountant: Default::default(),
    };
    let parties = nodes(spec, data.split(3), budget, None).unwrap();
    let nodes: Vec<Arc<PartyNode>> = parties.iter().map(|(_, n)| Arc::clone(n)).collect();
    Federated {
        model,
        data,
        nodes,
        federation: Arc::new(Federation::new(parties)),
    }
}

fn settings(variant: Variant, tau: Option<f64>) -> JobSettings {
    JobSettings {
        aggregation: Default::default(),
        collusion: 0,
        variant,
        chains: 4,
        iterations: None,
        tau,
        warmup: None,
        clip: 0.0,
        proposal: ProposalKind::Rw,
        proposal_sd: Some(0.0),
        adapt: true,
        target_accept: 0.25,
        seed: 7,
    }
}

fn private_start(model: &dyn Model, gradient_clip: f64) -> Start {
    Start::Private(InitialiserSettings {
        share: initialiser::DEFAULT_SHARE,
        steps: initialiser::default_steps(model.dim()),
        gradient_clip,
    })
}

impl Federated {
    async fn run(&self, settings: &JobSettings, start: Start) -> anyhow::Result<JobResult> {
        let out = tempfile::tempdir().unwrap();
        job::run(
            Arc::clone(&self.federation),
            Arc::clone(&self.model),
            settings,
            start,
            out.path(),
            Vec::new(),
            |_, _| Arc::new(Quiet),
            &Stop::new(),
        )
        .await
    }

    /// Runs the summaries route at its defaults.
    async fn summaries(&self) -> JobResult {
        let start = private_start(self.model.as_ref(), 2.0);
        self.run(&settings(Variant::Summaries, None), start)
            .await
            .unwrap()
    }

    /// The route's draws against the model's exact posterior on the pooled rows, in the
    /// coordinates `map` gives (u = g⁻¹(θ) for the banana, whose θ₂ is skewed: there its
    /// latent u is Gaussian, where the Monte Carlo errors below hold). The exact moments are
    /// those of 200 000 exact draws (errors under sd/400). The route converged with ESS ≥ 400,
    /// so the mean's Monte Carlo error is at most sd/20 and the sd's about sd/28; 5 of each.
    /// At ε = 10⁵ the noise moves a mean by a few hundredths of a posterior sd (the gaussian
    /// GLM: σ ≈ 0.6 per entry against X̃ᵀX̃ ≈ 3000·I; at ε = 1000 it is about 0.1, with a
    /// label bound of ±20 widening every row's bound. The bounded models: σ about 1 on each
    /// sum against its sampling sd √(nΣⱼⱼ) ≥ 55).
    fn assert_matches_exact(&self, result: &JobResult, map: &dyn Fn(&[f64]) -> Vec<f64>) {
        let exact = self.model.exact_posterior(&self.data).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(17);
        let exact: Vec<Vec<f64>> = (0..200_000).map(|_| map(&exact.sample(&mut rng))).collect();
        let d = self.model.dim();
        let route: Vec<Vec<f64>> = result
            .traces
            .iter()
            .flat_map(|t| {
                let columns: Vec<Vec<f64>> = (0..d).map(|j| t.parameter(j)).collect();
                (0..columns[0].len())
                    .map(move |i| map(&columns.iter().map(|c| c[i]).collect::<Vec<_>>()))
                    .collect::<Vec<_>>()
            })
            .collect();
        let name = self.model.name();
        for j in 0..d {
            let column = |x: &[Vec<f64>]| x.iter().map(|v| v[j]).collect::<Vec<_>>();
            let ((mu, sd), (m, s)) = (mean_sd(&column(&exact)), mean_sd(&column(&route)));
            assert!(
                (m - mu).abs() < 5.0 * sd / 20.0,
                "{name} coordinate {j}: mean {m} vs exact {mu} (sd {sd})"
            );
            assert!(
                (s - sd).abs() < 5.0 * sd / 28.0,
                "{name} coordinate {j}: sd {s} vs exact {sd}"
            );
        }
    }

    /// Runs a job that must be refused, checks that nothing was opened, reserved or spent
    /// on any party, and returns the refusal.
    async fn refused(&self, settings: &JobSettings) -> String {
        let start = private_start(self.model.as_ref(), 2.0);
        let err = self
            .run(settings, start)
            .await
            .err()
            .expect("refused")
            .to_string();
        for node in &self.nodes {
            let d = PartyNode::describe(node);
            assert_eq!((d.open_runs, d.epsilon_committed), (0, 0.0), "{err}");
        }
        err
    }
}

/// Pooled post-warm-up draws of parameter `j`.
fn draws(result: &JobResult, j: usize) -> Vec<f64> {
    result.traces.iter().flat_map(|t| t.parameter(j)).collect()
}

fn mean_sd(x: &[f64]) -> (f64, f64) {
    let m = x.iter().sum::<f64>() / x.len() as f64;
    let v = x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / x.len() as f64;
    (m, v.sqrt())
}

#[tokio::test]
async fn at_a_generous_budget_the_route_matches_the_exact_gaussian_glm_posterior() {
    let spec = ModelSpec::Glm(GlmSpec::example(Family::Gaussian, 4));
    let f = federated(&spec, 3000, 1e5, 2);
    let result = f.summaries().await;
    // Three releases per party, the later ones weighted by the first's spread (the gaussian
    // summary is exact at any centre, and all three are pooled), then sampling only.
    for c in &result.closed {
        assert_eq!(c.releases, u64::from(EXACT_RELEASES));
    }
    f.assert_matches_exact(&result, &|x| x.to_vec());
}

#[tokio::test]
async fn at_a_generous_budget_the_route_matches_the_bounded_gaussian_and_banana_posteriors() {
    let gaussian = ModelSpec::gaussian(vec![vec![1.0, 0.6], vec![0.6, 2.0]], 100.0);
    for spec in [gaussian, ModelSpec::flat_banana(2)] {
        let spec = spec.with_predictive_bounds(6.0);
        let f = federated(&spec, 3000, 1e5, 5);
        let result = f.summaries().await;
        // One release per party: the sum of rows is sufficient.
        for c in &result.closed {
            assert_eq!(c.releases, 1);
        }
        let Some(Reading::Mean(means)) = f.model.summaries().map(|s| s.reading()) else {
            panic!("mean summaries")
        };
        f.assert_matches_exact(&result, &|theta| means.mean(theta));
    }
}

/// The exact log posterior over pooled rows, up to a constant, for the non-private
/// reference chain: the log-likelihood ratio to a fixed `reference` θ and its gradient, by
/// the model's whole-column sums with no clip (bound ∞; `common/tests/models` holds them
/// to the per-row log-likelihood). Row by row, the poisson test took 77 s of CPU; so, 48 s.
struct Pooled<'a> {
    model: &'a dyn Model,
    data: &'a Columns,
    reference: Vec<f64>,
}

impl LogDensity for Pooled<'_> {
    fn dim(&self) -> usize {
        self.model.dim()
    }

    fn log_density(&self, theta: &[f64], grad: &mut [f64]) -> f64 {
        self.model.grad_log_prior(theta, grad);
        let mut likelihood = vec![0.0; theta.len()];
        self.model
            .clipped_grad_sum(self.data, theta, f64::INFINITY, &mut likelihood);
        for (a, b) in grad.iter_mut().zip(&likelihood) {
            *a += b;
        }
        let ratio = self
            .model
            .clipped_llr_sum(self.data, &self.reference, theta, f64::INFINITY);
        self.model.log_prior(theta) + ratio.sum
    }
}

/// At a generous budget every coefficient of the route's posterior is within half a
/// posterior sd of a long non-private chain on the pooled rows (and its sd within a fifth).
async fn assert_within_half_an_sd_of_the_pooled_chain(spec: &ModelSpec, rows: usize, seed: u64) {
    let f = federated(spec, rows, 1e5, seed);
    let result = f.summaries().await;
    let pooled = Pooled {
        model: f.model.as_ref(),
        data: &f.data,
        reference: spec.true_theta(),
    };
    let reference = sample_until_converged(
        &pooled,
        vec![spec.true_theta(); 4],
        &[1, 2, 3, 4],
        Settings::default(),
        &|x| x.to_vec(),
    )
    .unwrap();
    assert!(reference.converged);
    for j in 0..spec.dim() {
        let pooled_draws: Vec<f64> = reference
            .chains
            .iter()
            .flat_map(|c| c.states[reference.warmup..].iter().map(|x| x[j]))
            .collect();
        let (mu, sd) = mean_sd(&pooled_draws);
        let (m, s) = mean_sd(&draws(&result, j));
        assert!(
            (m - mu).abs() < 0.5 * sd,
            "θ{j}: route {m} vs pooled {mu}: {:.2} posterior sds",
            (m - mu) / sd
        );
        assert!(
            (s / sd - 1.0).abs() < 0.2,
            "θ{j}: route's sd {s} vs pooled {sd}"
        );
    }
}

/// Features in [−1, 1] with coefficients `theta` (intercept first).
fn glm_over_unit_box(family: Family, theta: Vec<f64>) -> ModelSpec {
    let d = theta.len();
    let features = (1..d)
        .map(|j| GlmColumn::new(&format!("feature{j}"), Some([-1.0, 1.0])))
        .collect();
    ModelSpec::Glm(GlmSpec {
        features,
        true_theta: Some(theta),
        ..GlmSpec::example(family, d)
    })
}

#[tokio::test]
async fn a_logistic_glm_with_large_coefficients_is_within_half_a_posterior_sd_of_the_pooled_chain()
{
    // The case: coefficients up to |θ| = 1.5 over features in [−1, 1], 6 000 rows.
    let spec = glm_over_unit_box(Family::Logistic, vec![-0.7, 1.5, -1.4, 0.9, 0.3]);
    assert_within_half_an_sd_of_the_pooled_chain(&spec, 6000, 3).await;
}

#[tokio::test]
async fn a_poisson_glm_is_within_half_a_posterior_sd_of_the_pooled_chain() {
    // Its tilted-covariates posterior (`noise_aware/tilted.rs`), counts up to e^2.4.
    let spec = glm_over_unit_box(Family::Poisson, vec![0.3, 0.8, -0.6, 0.4]);
    assert_within_half_an_sd_of_the_pooled_chain(&spec, 6000, 5).await;
}

#[tokio::test]
async fn a_variant_the_parties_do_not_serve_is_refused_before_the_initialiser_spends() {
    let spec = ModelSpec::Glm(GlmSpec::example(Family::Logistic, 3));
    let f = federated(&spec, 600, 3.0, 4);
    let variant = Variant::new(
        VariantName::SufficientStatistics,
        None,
        None,
        HmcOptions::default(),
    )
    .unwrap();
    let mut s = settings(variant, Some(0.1));
    s.clip = 1e6;
    let err = f.refused(&s).await;
    assert!(
        err.contains("does not serve the sufficient-statistics variant"),
        "{err}"
    );
    // The banana without bounds has no summaries: the route is refused the same way.
    let spec = ModelSpec::flat_banana(2);
    let f = federated(&spec, 600, 3.0, 4);
    let err = f.refused(&settings(Variant::Summaries, None)).await;
    assert!(
        err.contains("does not serve the summaries variant"),
        "{err}"
    );
}

#[tokio::test]
async fn a_plan_too_short_after_the_initialiser_is_refused_before_it_spends() {
    // simulate --model logistic-glm --rows 12000 --parties 3 --epsilon 3 --tau 0.1: what
    // the initialiser would leave affords chains too short to split.
    let spec = ModelSpec::Glm(GlmSpec::example(Family::Logistic, 3));
    let f = federated(&spec, 12_000, 3.0, 5);
    let mut s = settings(Variant::Penalty, Some(0.1));
    s.clip = 2.0;
    s.proposal_sd = Some(0.008);
    let err = f.refused(&s).await;
    assert!(err.contains("draws are needed to split chains"), "{err}");
}

/// A dry run (`job::preview`) says what each party would be asked for and spends nothing:
/// the summaries route's releases, and a penalty job planned on what the private
/// initialiser would leave.
#[tokio::test]
async fn a_dry_run_plans_each_party_and_spends_nothing() {
    let spec = ModelSpec::Glm(GlmSpec::example(Family::Logistic, 3));
    let f = federated(&spec, 3000, 3.0, 9);
    // The private initialiser's start, with the run's gradient clip.
    let preview = |settings: JobSettings, clip: f64| {
        let f = &f;
        async move {
            let start = private_start(f.model.as_ref(), clip);
            job::preview(&f.federation, &f.model, &settings, &start).await
        }
    };
    let plan = preview(settings(Variant::Summaries, None), 2.0)
        .await
        .unwrap();
    assert!(
        plan.contains("dry run: nothing was opened or released"),
        "{plan}"
    );
    assert!(plan.contains("releases: 8 per party"), "{plan}");
    let mut penalty = settings(Variant::Penalty, Some(0.5));
    (penalty.clip, penalty.proposal_sd) = (1e6, Some(0.05));
    let plan = preview(penalty.clone(), 1e6).await.unwrap();
    assert!(
        plan.contains("initialiser: first, 10% of each party's remaining budget"),
        "{plan}"
    );
    assert!(plan.contains("sampling: 4 chains × "), "{plan}");
    for i in 1..=3 {
        assert!(plan.contains(&format!("party-{i} ")), "{plan}");
    }
    // DP Barker's batch, the largest the budgets allow, is shown split among the parties.
    let mut barker = settings(
        Variant::Barker {
            batch_size: None,
            c: 2.0,
        },
        None,
    );
    (barker.clip, barker.proposal_sd, barker.iterations) = (0.0, None, Some(20));
    let plan = preview(barker, 2.0).await.unwrap();
    assert!(plan.contains("batch per step: 30 + 30 + 30 rows"), "{plan}");
    for node in &f.nodes {
        assert_eq!(node.describe().epsilon_committed, 0.0);
    }
    // A plan that cannot fit is refused by the dry run as by the run.
    penalty.iterations = Some(10_000_000);
    let e = preview(penalty, 1e6).await.unwrap_err();
    assert!(format!("{e:#}").contains("budget"), "{e:#}");
}
