//! How far each route's posterior mean lands from the non-private posterior's, in that
//! posterior's sds: the summaries route and the product's default per-iteration variant
//! (the full-data DP penalty at its defaults: τ = 0.1, as many iterations as the budget
//! allows, the private initialiser, clip 1e6 so that the GLM's own bound clips), on
//! simulated GLMs split among three in-process parties (the release path, ledgers and
//! accountants of served parties). The non-private posterior is the Laplace approximation
//! at the pooled rows' exact mode (Newton on the exact gradient and Hessian): at these row
//! counts within a few hundredths of a posterior sd of the exact one. Beside the summaries
//! route's error it prints its posterior's own sd in the same units: where noise leaves that
//! posterior many exact sds wide, an error of as many sds is what it says it may be.
//!
//! cargo run --release -p fedmcmc-coordinator --example route_accuracy -- [reps] [family] [dims]
//!
//! `dims` selects rows by a comma-separated list (e.g. `3,5`); each d has its own rows
//! (3: 2 000, 5: 20 000, 6: 100 000).
use std::sync::Arc;

use fedmcmc_common::models::summaries::split_summary;
use fedmcmc_common::models::{Family, GlmSpec, Model, ModelSpec};
use fedmcmc_common::noise_aware::quadratic::{Approximation, Release};
use fedmcmc_common::proposal::ProposalKind;
use fedmcmc_coordinator::federation::Federation;
use fedmcmc_coordinator::federation::local::nodes;
use fedmcmc_coordinator::initialiser::{self, InitialiserSettings};
use fedmcmc_coordinator::interrupt::Stop;
use fedmcmc_coordinator::job::{self, JobResult, JobSettings, Start};
use fedmcmc_coordinator::sampler::Quiet;
use fedmcmc_coordinator::variant::Variant;
use fedmcmc_party::config::BudgetConfig;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The pooled rows' posterior mode and Laplace sds.
fn laplace(model: &dyn Model, data: &fedmcmc_common::data::Columns) -> (Vec<f64>, Vec<f64>) {
    let s = model.summaries().unwrap();
    let d = model.dim();
    let mut centre = model.prior_mode();
    let mut a = Vec::new();
    for _ in 0..50 {
        let (g, aa) = split_summary(d, &s.summary(data, &centre, 0.0, 1.0));
        let release = Release {
            centre: centre.clone(),
            g,
            a: aa.clone(),
            noise_variance: 0.0,
            curvature_noise_variance: 0.0,
        };
        centre = Approximation::of(model, &release).mode;
        a = aa;
    }
    let mut prior = vec![0.0; d];
    let mut moved = vec![0.0; d];
    model.grad_log_prior(&centre, &mut prior);
    let h = nalgebra::DMatrix::from_fn(d, d, |i, j| {
        let mut t = centre.clone();
        t[j] += 1.0;
        model.grad_log_prior(&t, &mut moved);
        a[i][j] + prior[i] - moved[i]
    });
    let cov = h.try_inverse().unwrap();
    (centre, (0..d).map(|i| cov[(i, i)].sqrt()).collect())
}

/// Each coefficient's posterior mean and sd over every chain's kept draws.
fn moments(result: &JobResult, d: usize) -> (Vec<f64>, Vec<f64>) {
    (0..d)
        .map(|j| {
            let x: Vec<f64> = result.traces.iter().flat_map(|t| t.parameter(j)).collect();
            let n = x.len().max(1) as f64;
            let mean = x.iter().sum::<f64>() / n;
            let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
            (mean, var.sqrt())
        })
        .unzip()
}

/// The median over coefficients of a posterior's sd / the exact sd: how many of the exact
/// posterior's sds one of its sds spans, the scale its error should be read against.
fn sd_ratio(sds: &[f64], exact: &(Vec<f64>, Vec<f64>)) -> f64 {
    let mut r: Vec<f64> = sds.iter().zip(&exact.1).map(|(s, e)| s / e).collect();
    r.sort_by(f64::total_cmp);
    r[r.len() / 2]
}

/// The median over coefficients of |mean − exact mean| / exact sd.
fn error(mean: &[f64], exact: &(Vec<f64>, Vec<f64>)) -> f64 {
    let mut e: Vec<f64> = mean
        .iter()
        .zip(&exact.0)
        .zip(&exact.1)
        .map(|((m, mu), sd)| (m - mu).abs() / sd)
        .collect();
    e.sort_by(f64::total_cmp);
    e[e.len() / 2]
}

#[tokio::main]
async fn main() {
    let reps: u64 = std::env::args()
        .nth(1)
        .map_or(3, |a| a.parse().expect("reps"));
    println!(
        "family    d  rows    eps   summaries(median sd err)  its sd  converged  penalty(median sd err)  penalty iterations"
    );
    let only = std::env::args().nth(2).filter(|f| f != "all");
    let dims: Option<Vec<usize>> = std::env::args().nth(3).map(|a| {
        a.split(',')
            .map(|v| v.parse().expect("a dimension"))
            .collect()
    });
    for family in [Family::Logistic, Family::Poisson, Family::Gaussian] {
        if only
            .as_ref()
            .is_some_and(|f| !format!("{family:?}").eq_ignore_ascii_case(f))
        {
            continue;
        }
        for (dim, rows) in [(3, 2_000), (5, 20_000), (6, 100_000)] {
            if dims.as_ref().is_some_and(|d| !d.contains(&dim)) {
                continue;
            }
            for epsilon in [0.5, 1.0, 3.0, 10.0] {
                let (mut summ, mut wide, mut pen, mut iters) =
                    (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                let mut converged = 0;
                for r in 0..reps {
                    let spec = ModelSpec::Glm(GlmSpec::example(family, dim));
                    let model = spec.build().unwrap();
                    let data = model.simulate(
                        &spec.true_theta(),
                        rows,
                        &mut ChaCha8Rng::seed_from_u64(100 + r),
                    );
                    let exact = laplace(model.as_ref(), &data);
                    for variant in [Variant::Summaries, Variant::Penalty] {
                        let budget = BudgetConfig {
                            epsilon,
                            delta: 0.1 / rows as f64,
                            accountant: Default::default(),
                        };
                        let parties = nodes(&spec, data.split(3), budget, None).unwrap();
                        let federation = Arc::new(Federation::new(parties));
                        let settings = JobSettings {
                            aggregation: Default::default(),
                            collusion: 0,
                            variant,
                            chains: 4,
                            iterations: None,
                            tau: (variant == Variant::Penalty).then_some(0.1),
                            warmup: None,
                            clip: if variant == Variant::Penalty {
                                1e6
                            } else {
                                0.0
                            },
                            proposal: ProposalKind::Rw,
                            proposal_sd: Some(0.008),
                            adapt: true,
                            target_accept: 0.25,
                            seed: r + 1,
                        };
                        let start = Start::Private(InitialiserSettings {
                            share: initialiser::DEFAULT_SHARE,
                            steps: initialiser::default_steps(dim),
                            gradient_clip: 2.0,
                        });
                        let out = tempfile::tempdir().unwrap();
                        let result = job::run(
                            federation,
                            Arc::clone(&model),
                            &settings,
                            start,
                            out.path(),
                            Vec::new(),
                            |_, _| Arc::new(Quiet),
                            &Stop::new(),
                        )
                        .await;
                        match (variant, result) {
                            (Variant::Summaries, Ok(r)) => {
                                converged += usize::from(r.comments.iter().any(|(k, v)| {
                                    k == "convergence" && !v.contains("NOT converged")
                                }));
                                let (mean, sds) = moments(&r, dim);
                                summ.push(error(&mean, &exact));
                                wide.push(sd_ratio(&sds, &exact));
                            }
                            (_, Ok(r)) => {
                                iters.push(r.sampler.iterations);
                                pen.push(error(&moments(&r, dim).0, &exact));
                            }
                            (v, Err(e)) => {
                                eprintln!("{family:?} {dim} {rows} ε={epsilon} {}: {e}", v.name());
                                if v == Variant::Penalty {
                                    iters.push(0);
                                    pen.push(f64::INFINITY);
                                } else {
                                    summ.push(f64::INFINITY);
                                    wide.push(f64::INFINITY);
                                }
                            }
                        }
                    }
                }
                let median = |v: &mut Vec<f64>| {
                    v.sort_by(f64::total_cmp);
                    v[v.len() / 2]
                };
                iters.sort();
                println!(
                    "{:<9} {dim}  {rows:<7} {epsilon:<5} {:<25.2} {:<7.2} {converged}/{reps}        {:<23.2} {:?}",
                    format!("{family:?}"),
                    median(&mut summ),
                    median(&mut wide),
                    median(&mut pen),
                    iters
                );
            }
        }
    }
}
