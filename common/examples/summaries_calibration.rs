//! The calibration table of the `summaries` route: for each family, rows and ε, the share
//! of 50 % and 90 % intervals (every coefficient, fresh data and noise each repetition)
//! that cover the true θ, noise-aware and plug-in, and for reference the exact posterior's
//! on the same pooled rows without noise (its Laplace approximation); `width` is the
//! noise-aware 90 % intervals' mean width over the exact posterior's on the same rows. With
//! `prior`, each repetition draws θ from the prior N(0, s²) (s = 1, 0.5 for the poisson
//! family, whose counts must stay within their bound); with `fixed`, θ is the examples'
//! (0.5, 1, −0.5, …) under the examples' prior (`GlmSpec::example`: the logistic family's
//! weakly informative one, sd 10 for the others), and with `fixed:S` under sd S on every
//! coefficient (`fixed:10`: the vague prior under which the logistic GLM ran out).
//!
//! cargo run --release -p fedmcmc-common --example summaries_calibration -- [reps] [prior|fixed|fixed:S] [family] [dims] [epsilons] [seed] [covariates] [curvature]
//!
//! `dims` and `epsilons` select rows by comma-separated lists (e.g. `5,6` and `0.5,1`; `all`
//! for every one); each d has its own rows (3: 2 000, 5: 20 000, 6: 100 000). `seed` (1 by
//! default) is the first repetition's; repetition r uses seed + 1000r. `covariates` says
//! where the rows' covariates lie within the public box the posterior knows: `box` (uniform
//! over it, the default), `inner` (uniform over the middle half of each feature's bounds),
//! `offset` (uniform over the upper half) or `normal` (normal about the box's centre, sd a
//! quarter of each half-width). `curvature` is `released` (the product's
//! posterior, the default) or `known`: a diagnostic oracle that tells the posterior the
//! rows' own curvature A in place of the release's Â (`support::Curvature::Known`), to
//! separate what the latent curvature costs from everything else.
#[path = "../tests/support/summaries.rs"]
mod support;

use fedmcmc_common::models::Family;
use support::{Config, Covariates, Curvature, Prior, coverage};

fn main() {
    let reps: u64 = std::env::args()
        .nth(1)
        .map_or(100, |a| a.parse().expect("reps"));
    let truth = std::env::args()
        .nth(2)
        .unwrap_or_else(|| "prior".to_string());
    let fixed = match truth.as_str() {
        "prior" => None,
        "fixed" => Some(None),
        other => Some(Some(
            other
                .strip_prefix("fixed:")
                .and_then(|sd| sd.parse::<f64>().ok())
                .expect("prior, fixed or fixed:S"),
        )),
    };
    let only = std::env::args().nth(3).filter(|f| f != "all");
    let list = |n: usize| -> Option<Vec<f64>> {
        std::env::args()
            .nth(n)
            .filter(|a| a != "all")
            .map(|a| a.split(',').map(|v| v.parse().expect("a number")).collect())
    };
    let seed: u64 = std::env::args()
        .nth(6)
        .map_or(1, |a| a.parse().expect("seed"));
    let covariates = std::env::args().nth(7).map_or(Covariates::Box, |a| {
        Covariates::parse(&a).expect("covariates: box, inner, offset or normal")
    });
    let curvature = match std::env::args().nth(8).as_deref() {
        None | Some("released") => Curvature::Released,
        Some("known") => Curvature::Known,
        Some(other) => panic!("curvature: released or known, not {other}"),
    };
    let (dims, epsilons) = (list(4), list(5));
    let chosen = |set: &Option<Vec<f64>>, v: f64| set.as_ref().is_none_or(|s| s.contains(&v));
    println!(
        "family    d  rows    eps   aware50 aware90 se50  se90  plug50 plug90 exact50 exact90 intervals converged width"
    );
    for family in [Family::Logistic, Family::Poisson, Family::Gaussian] {
        if only
            .as_ref()
            .is_some_and(|f| !format!("{family:?}").eq_ignore_ascii_case(f))
        {
            continue;
        }
        for (dim, rows) in [(3, 2_000), (5, 20_000), (6, 100_000)] {
            if !chosen(&dims, dim as f64) {
                continue;
            }
            for epsilon in [0.5, 1.0, 3.0, 10.0] {
                if !chosen(&epsilons, epsilon) {
                    continue;
                }
                let config = Config {
                    family,
                    dim,
                    rows,
                    parties: 3,
                    epsilon,
                    delta: 1e-5,
                    seed,
                    covariates,
                    curvature,
                    prior: match fixed {
                        Some(sd) => Prior::Fixed(sd),
                        None if family == Family::Poisson => Prior::Drawn(0.5),
                        None => Prior::Drawn(1.0),
                    },
                };
                let c = coverage(config, reps);
                println!(
                    "{:<9} {dim}  {rows:<7} {epsilon:<5} {:.3}   {:.3}   {:.3} {:.3} {:.3}  {:.3}  {:.3}   {:.3}   {:<9} {}/{reps}     {:.2}",
                    format!("{family:?}"),
                    c.aware.0,
                    c.aware.1,
                    c.aware_se.0,
                    c.aware_se.1,
                    c.plug_in.0,
                    c.plug_in.1,
                    c.exact.0,
                    c.exact.1,
                    c.intervals,
                    c.converged,
                    c.width
                );
            }
        }
    }
}
