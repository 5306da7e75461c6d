//! Privacy planning: how many iterations a run may take, or how much noise it needs.
//!
//! Either τ is given and the iterations are the most that fit every party's remaining budget
//! (Räisä 2020, Alg. 2, here in closed form: every release is Gaussian, so k releases at
//! multiplier s cost k/(2s²) of the party's μ, Thm 3.2, and a DP HMC iteration the sum over
//! its ratio and L + 1 gradients, Thm 4.3), or the iterations are given and each party
//! calibrates its own τ. Giving both is checked: a plan that does not fit is an error naming
//! the party and what does fit.
use fedmcmc_common::accountant::{
    Choice, Composition, CompositionError, MechanismKind, Release, largest_fitting, max_mu,
};

use crate::federation::{NoiseChoice, PartyInfo};
use crate::variant::{BARKER_MIN_BATCH, Variant, split};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Planned {
    pub iterations: u64,
    pub noise: NoiseChoice,
}

/// Most iterations of `variant` a party can still take at ratio τ, over all chains (its
/// multiplier is τ·√nᵢ); `None` for a variant the parties' accountants plan.
pub fn iterations_that_fit(party: &PartyInfo, variant: &Variant, tau: f64) -> Option<u64> {
    let per_iteration = variant.mu_per_iteration(tau, party.rows)?;
    Some((party.mu_remaining / per_iteration).floor() as u64)
}

/// The choices [`plan`] refuses without asking any party: no chains, a τ that is not a
/// positive number, a τ or iterations the variant cannot take. A job makes these checks
/// before it writes or opens anything.
pub fn check(
    variant: &Variant,
    chains: u32,
    tau: Option<f64>,
    iterations: Option<u64>,
) -> Result<(), String> {
    if chains == 0 {
        return Err("a job needs at least one chain, got 0".into());
    }
    if let Some(t) = tau
        && !(t.is_finite() && t > 0.0)
    {
        return Err(format!("tau must be a positive number, got {t}"));
    }
    match (variant, tau, iterations) {
        (Variant::Penalty | Variant::SufficientStatistics, None, None) => {
            Err("give --tau, --iterations, or both".into())
        }
        (Variant::Penalty | Variant::SufficientStatistics, ..)
        | (Variant::Hmc { .. }, Some(_), _) => Ok(()),
        (Variant::Hmc { .. }, None, _) => Err(
            "the hmc variant needs --tau for its ratio releases: the parties do not calibrate its two noises (--gradient-tau sets the other)".into(),
        ),
        (Variant::Barker { .. }, Some(t), _) => Err(format!(
            "the barker variant's noise is its total variance C, not a tau ({t}): leave --tau out"
        )),
        (_, _, None) => Err(format!(
            "the {} variant needs --iterations: each party's accountant then checks that its subsampled releases fit (and calibrates the noise unless --tau is given)",
            variant.name()
        )),
        (_, _, Some(_)) => Ok(()),
    }
}

/// Chooses iterations per chain and the noise, or says why nothing fits. The closed form
/// above covers the full-data variant; the subsampled ones are planned by the parties'
/// accountants at OpenRun, so they need the iterations (DP Barker's noise is fixed by C).
pub fn plan(
    parties: &[PartyInfo],
    variant: &Variant,
    chains: u32,
    tau: Option<f64>,
    iterations: Option<u64>,
) -> Result<Planned, String> {
    check(variant, chains, tau, iterations)?;
    match (tau, iterations) {
        (None, None) => unreachable!("refused by check"),
        (None, Some(iterations)) => Ok(Planned {
            iterations,
            noise: NoiseChoice::Calibrate,
        }),
        // A subsampled variant has no closed form: the parties' accountants check the
        // given iterations at OpenRun (its --iterations is required above).
        (Some(tau), Some(iterations)) if variant.mu_per_iteration(tau, 1).is_none() => {
            Ok(Planned {
                iterations,
                noise: NoiseChoice::Tau(tau),
            })
        }
        (Some(tau), given) => {
            let (limiting, fit) = parties
                .iter()
                .map(|p| {
                    let fit = iterations_that_fit(p, variant, tau)
                        .expect("a variant with a closed form, the others handled above");
                    (p, fit / u64::from(chains))
                })
                .min_by_key(|&(_, k)| k)
                .ok_or("the federation has no parties")?;
            let budget_sentence = |what: String| {
                format!(
                    "{what} does not fit the privacy budget of party {} (ε = {}, δ = {:e}, ε = {:.4} already committed): at τ = {tau} at most {fit} iterations per chain fit with {chains} chains",
                    limiting.name, limiting.epsilon, limiting.delta, limiting.epsilon_committed
                )
            };
            match given {
                Some(iterations) if iterations > fit => Err(budget_sentence(format!(
                    "{iterations} iterations per chain"
                ))),
                Some(iterations) => Ok(Planned {
                    iterations,
                    noise: NoiseChoice::Tau(tau),
                }),
                None if fit < 2 => Err(budget_sentence("even a two-step chain".into())),
                None => Ok(Planned {
                    iterations: fit,
                    noise: NoiseChoice::Tau(tau),
                }),
            }
        }
    }
}

/// DP Barker's batch over the federation when none is given: the largest b whose split in
/// proportion to the rows (at least [`BARKER_MIN_BATCH`] per party) lets every party make
/// `chains × iterations` releases within its budget. Each row's clip is √(Cᵢbᵢ/2)/nᵢ
/// (Räisä 2020, Thm 3.3), so the larger the batch the further the walk may step
/// (`kernels::barker::step_within_clip`). A step's cost grows with b, but Thm 3.3's bound
/// holds only at orders α < b/5, so a small batch is costly too (at b = 16 only α = 3 is
/// left, whose conversion alone costs ln(1/δ)/2): stepping down from every row by a factor of
/// 2^¼ finds a batch that fits, then bisection the largest between it and the step above (the
/// batches that fit would have to lie within that factor of each other to be missed; a
/// `--batch-size` among them is still taken). A party's cost is its
/// accountant's: the releases' RDP (Thm 3.3 via Wang et al. 2019, Thm 9) composed after
/// what it has spent, one Gaussian release of its spent μ. Each party's own accountant still
/// decides at OpenRun; this is the coordinator's reading of it.
pub fn barker_batch(parties: &[PartyInfo], chains: u32, iterations: u64) -> Result<u64, String> {
    let rows: Vec<u64> = parties.iter().map(|p| p.rows).collect();
    let total: u64 = rows.iter().sum();
    let releases = u64::from(chains)
        .checked_mul(iterations)
        .ok_or("too many iterations")?;
    // Whether batch b gives every party its minimum share and fits every party's budget.
    let fits = |b: u64| -> Result<bool, String> {
        for (p, &share) in parties.iter().zip(&split(b, &rows)) {
            if share < BARKER_MIN_BATCH || share > p.rows {
                return Ok(false);
            }
            if barker_releases_that_fit(p, share)? < releases {
                return Ok(false);
            }
        }
        Ok(true)
    };
    let (mut lo, mut hi) = (total, total + 1);
    while !fits(lo)? {
        hi = lo;
        lo = (lo as f64 / BARKER_BATCH_STEP) as u64;
        if lo < BARKER_MIN_BATCH {
            return Err(format!(
                "{iterations} iterations per chain of the barker variant with {chains} chains fit no batch within every party's privacy budget (Räisä 2020, Thm 3.3): give fewer iterations, or raise the budgets"
            ));
        }
    }
    // lo fits, and hi does not (or is past every row).
    largest_fitting(lo, hi, fits)
}

/// The factor between the batches [`barker_batch`] tries on its way down.
const BARKER_BATCH_STEP: f64 = 1.189_207_115_002_721; // 2^¼

/// Most DP Barker releases of `batch` of its rows `party` can make after what it has spent
/// (0 when what it has spent alone exceeds its budget, as the party counts it).
fn barker_releases_that_fit(party: &PartyInfo, batch: u64) -> Result<u64, String> {
    // μ adds over Gaussian releases (1/(2s²) each), so what is spent is one release of it.
    let total = max_mu(party.epsilon, party.delta).map_err(|e| e.to_string())?;
    let spent = (total - party.mu_remaining).max(0.0);
    let prefix: Vec<Release> = (spent > 0.0)
        .then_some(Release {
            mechanism: MechanismKind::Gaussian,
            noise_multiplier: (2.0 * spent).sqrt().recip(),
            count: 1.0,
        })
        .into_iter()
        .collect();
    let prefix = Composition::new(prefix, party.neighbours).map_err(|e| e.to_string())?;
    let mechanism = MechanismKind::DpBarker {
        batch,
        population: party.rows,
    };
    match Choice::Best.max_releases(&prefix, mechanism, 1.0, party.epsilon, party.delta) {
        Ok(answer) => Ok(answer.estimate.value.releases),
        Err(CompositionError::PrefixExceedsBudget) => Ok(0),
        Err(e) => Err(format!("party {}: {e}", party.name)),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use fedmcmc_common::accountant::{Accountant, max_mu, max_releases};

    use super::*;

    /// A party of `rows` banana rows with a fresh budget (ε, δ).
    pub(crate) fn party(name: &str, rows: u64, epsilon: f64, delta: f64) -> PartyInfo {
        PartyInfo {
            name: name.into(),
            model: "banana".into(),
            model_fingerprint: "f".into(),
            dim: 2,
            rows,
            neighbours: fedmcmc_common::neighbours::Neighbours::Substitute,
            epsilon,
            delta,
            epsilon_committed: 0.0,
            mu_remaining: max_mu(epsilon, delta).unwrap(),
            variants: Vec::new(),
            secure_aggregation: false,
        }
    }

    /// DP Barker's default batch is the largest that fits every party: all rows at a
    /// generous budget; at the thesis's ε = 4 (10 % spent) about its b = 1 300, with one row
    /// more per party no longer fitting; none when even the best batch cannot pay.
    #[test]
    fn barker_batch_is_the_largest_that_fits() {
        let rows = [33_334, 33_333, 33_333];
        let at = |epsilon: f64, spent: f64| -> Vec<PartyInfo> {
            rows.iter()
                .map(|&n| PartyInfo {
                    mu_remaining: (1.0 - spent) * max_mu(epsilon, 1e-6).unwrap(),
                    ..party("p", n, epsilon, 1e-6)
                })
                .collect()
        };
        assert_eq!(barker_batch(&at(1e7, 0.1), 4, 1000), Ok(100_000));
        let parties = at(4.0, 0.1);
        let b = barker_batch(&parties, 4, 434).unwrap();
        assert!((1_000..1_600).contains(&b), "{b}");
        let fit = |b: u64, p: &PartyInfo| barker_releases_that_fit(p, b).unwrap();
        let shares = split(b, &rows);
        assert!(
            parties
                .iter()
                .zip(&shares)
                .all(|(p, &s)| fit(s, p) >= 4 * 434)
        );
        assert!(
            parties
                .iter()
                .zip(&shares)
                .any(|(p, &s)| fit(s + 1, p) < 4 * 434)
        );
        let refused = barker_batch(&parties, 4, 1_000_000).unwrap_err();
        assert!(refused.contains("fit no batch"), "{refused}");
    }

    /// A minibatch plan with --tau and --iterations goes to the parties' accountants as it
    /// is (it once panicked here: the closed form covers full-data releases only).
    #[test]
    fn a_minibatch_plan_with_tau_is_left_to_the_parties() {
        let parties = [party("a", 1000, 1.0, 1e-5)];
        let variant = Variant::MinibatchPenalty { batch_size: 100 };
        let planned = plan(&parties, &variant, 4, Some(0.01), Some(10)).unwrap();
        assert_eq!(planned.iterations, 10);
        assert_eq!(planned.noise, NoiseChoice::Tau(0.01));
    }

    #[test]
    fn no_chains_is_refused_with_a_sentence() {
        let parties = [party("a", 1000, 1.0, 1e-5)];
        let e = plan(&parties, &Variant::Penalty, 0, Some(0.1), None).unwrap_err();
        assert_eq!(e, "a job needs at least one chain, got 0");
    }

    #[test]
    fn a_fresh_party_allows_what_algorithm_2_allows() {
        // Thesis flat banana, one party: τ = 0.1, n = 100 000, δ = 0.1/n.
        for epsilon in [1.0, 2.0, 4.0, 6.0] {
            let p = party("a", 100_000, epsilon, 1e-6);
            let s = 0.1 * (100_000f64).sqrt();
            let alg2 = max_releases(Accountant::Analytic, s, epsilon, 1e-6).unwrap();
            let ours = iterations_that_fit(&p, &Variant::Penalty, 0.1).unwrap();
            assert!(
                ours.abs_diff(alg2) <= 1,
                "ε = {epsilon}: {ours} vs Alg. 2 {alg2}"
            );
        }
    }

    #[test]
    fn the_smallest_party_limits_the_run_and_overdrawn_plans_name_the_budget() {
        let parties = [
            party("big", 90_000, 4.0, 1e-6),
            party("small", 10_000, 4.0, 1e-6),
        ];
        let planned = plan(&parties, &Variant::Penalty, 2, Some(0.1), None).unwrap();
        assert_eq!(
            planned.iterations,
            iterations_that_fit(&parties[1], &Variant::Penalty, 0.1).unwrap() / 2
        );
        let err = plan(
            &parties,
            &Variant::Penalty,
            2,
            Some(0.1),
            Some(planned.iterations + 1),
        )
        .unwrap_err();
        assert!(err.contains("budget") && err.contains("small"), "{err}");
        assert!(
            plan(
                &parties,
                &Variant::Penalty,
                2,
                Some(0.1),
                Some(planned.iterations)
            )
            .is_ok()
        );
        assert_eq!(
            plan(&parties, &Variant::Penalty, 2, None, Some(10))
                .unwrap()
                .noise,
            NoiseChoice::Calibrate
        );
        assert!(plan(&parties, &Variant::Penalty, 2, None, None).is_err());
        assert!(plan(&parties, &Variant::Penalty, 2, Some(-1.0), None).is_err());
    }
}
