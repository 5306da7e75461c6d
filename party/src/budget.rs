//! The accountant's view of the party's budget: does a run's whole plan fit what is left of
//! the party's (ε, δ)?
//!
//! Everything the party has released or reserved is one [`Composition`] under its neighbour
//! relation: one [`Release`] per open run (its mechanism and noise multiplier, with its
//! planned count), and the released counts of closed runs summed per mechanism and noise
//! multiplier (the same composition, kept small however many runs have closed). Every budget question (admit,
//! calibrate, how many more fit, ε spent) is asked of the configured accountant ([`Choice`])
//! on that composition. The general accountant rather than μ arithmetic, because μ = Σ 1/(2s²)
//! composes plain Gaussian releases only (Räisä 2020, Thms 3.2 and 4.3), while the variants to come
//! release subsampled mechanisms; for plain Gaussian releases `best` answers with the exact
//! analytic curve, so the numbers are those of the μ arithmetic.
use fedmcmc_common::accountant::{
    Cancel, Choice, Composition, CompositionError, MechanismKind, Method, Release, mu_per_release,
};
use fedmcmc_common::mechanism::{MAX_RELEASES, accounting_budget};
use fedmcmc_common::neighbours::Neighbours;

use crate::config::BudgetConfig;
use crate::error::PartyError;

#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub epsilon: f64,
    pub delta: f64,
    /// Which accountant answers: one method, or the tightest that covers the releases.
    pub accountant: Choice,
    /// (ε, δ) as the accountants are asked: the party's, less the reservation for exact
    /// discrete noise (`fedmcmc_common::mechanism::exact_noise_reservation`).
    accounting_epsilon: f64,
    accounting_delta: f64,
    /// The largest total μ of plain Gaussian releases the accountant admits (see
    /// [`Budget::mu_remaining`]).
    max_mu: f64,
}

/// Fraction of δ below which what is left counts as nothing: calibrating into a sliver left
/// by rounding would grant absurd noise.
const NEGLIGIBLE: f64 = 1e-6;

/// The noise a run asks for: a given τ to check, or the smallest τ that fits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NoiseRequest {
    Tau(f64),
    Calibrate,
}

/// What admission grants: the noise to use for every release of the run, and what it costs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Admission {
    pub tau: f64,
    pub noise_multiplier: f64,
    /// The accountant that admitted the plan (under `best`, the tightest one).
    pub method: Method,
    /// ε at the party's δ of the run's whole plan on its own.
    pub run_epsilon: f64,
    /// ε at the party's δ of everything committed, this run's plan included.
    pub epsilon_committed: f64,
}

impl Budget {
    pub fn new(config: BudgetConfig) -> Result<Self, CompositionError> {
        // For plain Gaussian releases each accountant's δ(ε) depends on the total μ alone
        // (the PLD up to its discretisation), so its budget is the μ of the least noise one
        // release may have (for `best` the exact analytic curve's). The neighbour relation
        // does not matter here: a multiplier is taken under the relation in force.
        let (accounting_epsilon, accounting_delta) =
            accounting_budget(config.epsilon, config.delta);
        let nothing = Composition::new(Vec::new(), Neighbours::Substitute)?;
        let s = config
            .accountant
            .calibrate(
                &nothing,
                MechanismKind::Gaussian,
                1,
                (accounting_epsilon, accounting_delta),
                &Cancel::new(),
            )?
            .estimate
            .value;
        Ok(Budget {
            epsilon: config.epsilon,
            delta: config.delta,
            accounting_epsilon,
            accounting_delta,
            accountant: config.accountant,
            max_mu: mu_per_release(s),
        })
    }

    /// ε at this budget's δ for a composition (0 for nothing), the reservation for exact
    /// discrete noise included. Should the accountant fail (it
    /// covers every release the party makes), +∞: nothing is vouched for.
    pub fn epsilon_of(&self, composition: &Composition) -> f64 {
        if composition.releases().iter().all(|r| r.count == 0.0) {
            return 0.0;
        }
        self.accountant
            .epsilon(composition, self.accounting_delta)
            .map(|a| a.estimate.value + (self.epsilon - self.accounting_epsilon))
            .unwrap_or_else(|e| {
                tracing::error!(accountant = %self.accountant, error = %e, "cannot account ε");
                f64::INFINITY
            })
    }

    /// μ still free for plain Gaussian releases, which the coordinator plans with
    /// (k releases at multiplier s cost k/(2s²)). It is defined only while every committed
    /// release is plain Gaussian, as all are today; otherwise 0: plan nothing from it.
    pub fn mu_remaining(&self, committed: &Composition) -> f64 {
        committed
            .gaussian()
            .map_or(0.0, |g| (self.max_mu - g.mu()).max(0.0))
    }

    /// The most releases of `mechanism` with multiplier `s` that still fit after `committed`
    /// (Räisä 2020, Alg. 2 on the composition; 0 when the committed releases alone exceed it).
    pub fn releases_that_fit(
        &self,
        committed: &Composition,
        mechanism: MechanismKind,
        s: f64,
    ) -> Result<u64, PartyError> {
        match self.accountant.max_releases(
            committed,
            mechanism,
            s,
            self.accounting_epsilon,
            self.accounting_delta,
        ) {
            Ok(a) => Ok(a.estimate.value.releases),
            Err(CompositionError::PrefixExceedsBudget) => Ok(0),
            Err(e) => Err(self.cannot_account(e)),
        }
    }

    fn cannot_account(&self, e: CompositionError) -> PartyError {
        if matches!(e, CompositionError::Cancelled) {
            return PartyError::FailedPrecondition(
                "the party is stopping: it cut short its calibration of this plan and reserved nothing"
                    .into(),
            );
        }
        PartyError::FailedPrecondition(format!(
            "the party's {} accountant cannot account this plan: {e}",
            self.accountant
        ))
    }

    /// Admits `releases` releases of `mechanism` from a party with `rows` rows on top of the
    /// `committed` composition: iff the accountant's δ at ε of committed-then-plan is within δ.
    /// A refusal says what is left in one sentence. A calibration ends early, refused, once
    /// `cancel` is set (the party is stopping).
    pub fn admit(
        &self,
        committed: &Composition,
        mechanism: MechanismKind,
        releases: u64,
        rows: u64,
        noise: NoiseRequest,
        cancel: &Cancel,
    ) -> Result<Admission, PartyError> {
        let (epsilon, delta) = (self.accounting_epsilon, self.accounting_delta);
        let sqrt_n = (rows as f64).sqrt();
        let what_is_left = || {
            format!(
                "ε = {:.4} of the party's ε = {} (δ = {:e}) is already spent or reserved",
                self.epsilon_of(committed),
                self.epsilon,
                self.delta
            )
        };
        let nothing_fits = || {
            PartyError::BudgetExhausted(format!(
                "budget exhausted: {}; no further release fits at any noise level",
                what_is_left()
            ))
        };
        let cannot_account = |e: CompositionError| match e {
            CompositionError::PrefixExceedsBudget | CompositionError::NoiseOutOfRange(..) => {
                nothing_fits()
            }
            e => self.cannot_account(e),
        };
        let plan = |s: f64| Release {
            mechanism,
            noise_multiplier: s,
            count: releases as f64,
        };
        // τ = s/√n: the multiplier of a sum over n rows whose noise is τ·√n·c (DESIGN §3).
        let (tau, s, method) = match noise {
            NoiseRequest::Tau(tau) => {
                let s = tau * sqrt_n;
                let total = committed.then(plan(s)).map_err(cannot_account)?;
                let answer = self
                    .accountant
                    .delta(&total, epsilon)
                    .map_err(cannot_account)?;
                if answer.estimate.value > delta {
                    let fit = self.releases_that_fit(committed, mechanism, s)?;
                    return Err(PartyError::BudgetExhausted(format!(
                        "budget exhausted: {}; this plan's {releases} releases at τ = {tau} would need ε = {:.4} on their own, and at most {fit} more releases fit at that τ",
                        what_is_left(),
                        self.epsilon_of(&alone(committed, plan(s)))
                    )));
                }
                (tau, s, answer.estimate.method)
            }
            NoiseRequest::Calibrate => {
                let spent = self
                    .accountant
                    .delta(committed, epsilon)
                    .map_err(cannot_account)?
                    .estimate
                    .value;
                if spent >= (1.0 - NEGLIGIBLE) * delta {
                    return Err(nothing_fits());
                }
                let answer = self
                    .accountant
                    .calibrate(committed, mechanism, releases, (epsilon, delta), cancel)
                    .map_err(cannot_account)?;
                let s = answer.estimate.value;
                (s / sqrt_n, s, answer.estimate.method)
            }
        };
        // After the budget's answer, which says more when both refuse.
        let made: f64 = committed.releases().iter().map(|r| r.count).sum();
        if made + releases as f64 > MAX_RELEASES as f64 {
            return Err(PartyError::BudgetExhausted(format!(
                "this party may make at most {MAX_RELEASES} releases in its lifetime (its exact noise's privacy bound holds up to there); {made} are made or reserved and the plan asks for {releases}"
            )));
        }
        let total = committed.then(plan(s)).map_err(cannot_account)?;
        Ok(Admission {
            tau,
            noise_multiplier: s,
            method,
            run_epsilon: self.epsilon_of(&alone(committed, plan(s))),
            epsilon_committed: self.epsilon_of(&total),
        })
    }
}

/// `release` on its own, under the same neighbour relation as `like`.
fn alone(like: &Composition, release: Release) -> Composition {
    Composition::new(vec![release], like.neighbours()).expect("a release already composed")
}

#[cfg(test)]
mod tests {
    use fedmcmc_common::accountant::max_mu;
    use rand::{RngExt, SeedableRng};

    use super::*;

    /// A power of 4, so that τ = s/√n and back is exact.
    const ROWS: u64 = 4096;
    const EPSILON: f64 = 1.0;
    const DELTA: f64 = 1e-6;

    /// μ's boundary as the accountant is asked: at (ε, δ) less the exact-noise reservation.
    fn max_mu_reserved() -> f64 {
        let (epsilon, delta) = accounting_budget(EPSILON, DELTA);
        max_mu(epsilon, delta).unwrap()
    }

    fn budget(accountant: &str) -> Budget {
        Budget::new(BudgetConfig {
            epsilon: EPSILON,
            delta: DELTA,
            accountant: accountant.parse().unwrap(),
        })
        .unwrap()
    }

    /// Plain Gaussian runs of (count, multiplier), as the node composes them.
    fn runs(runs: &[(f64, f64)]) -> Composition {
        let releases = runs
            .iter()
            .map(|&(count, noise_multiplier)| Release {
                mechanism: MechanismKind::Gaussian,
                noise_multiplier,
                count,
            })
            .collect();
        Composition::new(releases, Neighbours::Substitute).unwrap()
    }

    /// A run of `count` releases that takes `share` of the whole μ budget.
    fn share(count: f64, share: f64) -> (f64, f64) {
        (count, (count / (2.0 * share * max_mu_reserved())).sqrt())
    }

    fn admit(
        b: &Budget,
        committed: &Composition,
        releases: u64,
        noise: NoiseRequest,
    ) -> Result<Admission, PartyError> {
        b.admit(
            committed,
            MechanismKind::Gaussian,
            releases,
            ROWS,
            noise,
            &Cancel::new(),
        )
    }

    /// The μ arithmetic this module did before it asked the general accountant, as reference:
    /// μ left = max μ − Σ count/(2s²); k releases at s fit iff k/(2s²) ≤ μ left.
    struct MuArithmetic {
        left: f64,
    }

    impl MuArithmetic {
        fn new(committed: &Composition) -> Self {
            let committed_mu: f64 = committed
                .releases()
                .iter()
                .map(|r| r.count * mu_per_release(r.noise_multiplier))
                .sum();
            MuArithmetic {
                left: max_mu_reserved() - committed_mu,
            }
        }

        fn fit(&self, s: f64) -> u64 {
            if self.left > 0.0 {
                (self.left / mu_per_release(s)).floor() as u64
            } else {
                0
            }
        }

        /// Smallest s with releases/(2s²) ≤ μ left, nudged up past rounding.
        fn calibrate(&self, releases: u64) -> f64 {
            let k = releases as f64;
            let mut s = (k / (2.0 * self.left)).sqrt();
            while k * mu_per_release(s) > self.left {
                s *= 1.0 + 1e-12;
            }
            s
        }
    }

    /// Up to 3 committed runs taking up to 90% of the budget, then a plan: the calibrated
    /// multiplier agrees with the μ arithmetic to the accountant's bisection tolerance (1e-9
    /// relative; to the last bit without committed runs), and the releases that fit at a τ
    /// agree exactly. (The two could differ by one release only where count/(2s²) lands
    /// within rounding of the μ left: the accountant compares δ(μ_committed + k/(2s²)) with δ,
    /// the old code k/(2s²) with max μ − μ_committed; max μ is δ's boundary to the last bit.)
    /// Admission at exactly that count is granted, one more refused.
    fn agrees_with_the_mu_arithmetic(accountant: &str, cases: usize, seed: u64) {
        let b = budget(accountant);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        for case in 0..cases {
            let prior: Vec<_> = (0..rng.random_range(0..=3))
                .map(|_| share(rng.random_range(1..5000) as f64, rng.random_range(0.0..0.3)))
                .collect();
            let committed = runs(&prior);
            let reference = MuArithmetic::new(&committed);
            let releases = rng.random_range(1..10_000);
            let what = format!("case {case}: {prior:?} then {releases}");

            let a = admit(&b, &committed, releases, NoiseRequest::Calibrate).unwrap();
            let s = reference.calibrate(releases);
            let tolerance = if prior.is_empty() { 1e-12 } else { 1.1e-9 };
            assert!(
                (a.noise_multiplier / s - 1.0).abs() <= tolerance,
                "{what}: calibrated s = {} against {s}",
                a.noise_multiplier
            );
            assert_eq!(a.tau, a.noise_multiplier / (ROWS as f64).sqrt());
            assert_eq!(a.method, Method::Analytic, "{what}");

            // τ such that between 0 and twice the plan fits.
            let s = s * rng.random_range(0.05_f64..1.5).sqrt();
            let fit = b
                .releases_that_fit(&committed, MechanismKind::Gaussian, s)
                .unwrap();
            assert_eq!(fit, reference.fit(s), "{what}: fit at s = {s}");
            let tau = NoiseRequest::Tau(s / (ROWS as f64).sqrt());
            if fit > 0 {
                assert!(admit(&b, &committed, fit, tau).is_ok(), "{what}");
            }
            let err = admit(&b, &committed, fit + 1, tau).unwrap_err().to_string();
            assert!(
                err.contains(&format!("at most {fit} more releases fit at that τ")),
                "{what}: {err}"
            );
        }
    }

    #[test]
    fn analytic_admission_matches_the_mu_arithmetic() {
        agrees_with_the_mu_arithmetic("analytic", 200, 7);
    }

    /// `best` answers with the analytic curve for plain Gaussian releases (the others are
    /// looser, the PLD by its discretisation), so today's numbers are unchanged. One case
    /// (3 committed runs; seed 4): every PLD candidate is bisected, ~15 s in a debug build.
    #[test]
    fn best_admission_matches_the_mu_arithmetic() {
        agrees_with_the_mu_arithmetic("best", 1, 4);
    }

    #[test]
    fn zcdp_admits_fewer_releases_than_best() {
        let (best, zcdp) = (budget("best"), budget("zcdp"));
        let committed = runs(&[share(500.0, 0.2), share(2000.0, 0.1)]);
        let s = 300.0;
        let fit = |b: &Budget| {
            b.releases_that_fit(&committed, MechanismKind::Gaussian, s)
                .unwrap()
        };
        let (k_best, k_zcdp) = (fit(&best), fit(&zcdp));
        assert!(k_zcdp < k_best, "zcdp {k_zcdp}, best {k_best}");
        // The plan best admits is refused under zcdp, saying how many fit there.
        let tau = NoiseRequest::Tau(s / (ROWS as f64).sqrt());
        let granted = admit(&best, &committed, k_best, tau).unwrap();
        assert_eq!(granted.method, Method::Analytic);
        let err = admit(&zcdp, &committed, k_best, tau)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("at most {k_zcdp} more releases fit at that τ")),
            "{err}"
        );
        // And the same budget left under zcdp is less μ to plan with.
        assert!(zcdp.mu_remaining(&committed) < best.mu_remaining(&committed));
    }

    #[test]
    fn calibrated_plan_uses_exactly_what_is_left() {
        let b = budget("analytic");
        let committed = runs(&[share(300.0, 0.25)]);
        let a = admit(&b, &committed, 1000, NoiseRequest::Calibrate).unwrap();
        assert!((a.epsilon_committed - EPSILON).abs() < 1e-6, "{a:?}");
        // The granted τ, requested explicitly, is admitted; 0.1% less noise is not.
        assert!(admit(&b, &committed, 1000, NoiseRequest::Tau(a.tau)).is_ok());
        assert!(admit(&b, &committed, 1000, NoiseRequest::Tau(a.tau * 0.999)).is_err());
        // What is left after it is nothing.
        let all = committed
            .then(Release {
                mechanism: MechanismKind::Gaussian,
                noise_multiplier: a.noise_multiplier,
                count: 1000.0,
            })
            .unwrap();
        let err = admit(&b, &all, 1, NoiseRequest::Calibrate).unwrap_err();
        assert!(err.to_string().contains("no further release"), "{err}");
    }

    #[test]
    fn mu_remaining_is_the_analytic_mu_left() {
        let b = budget("best");
        let committed = runs(&[share(300.0, 0.25), share(10.0, 0.5)]);
        let left = b.mu_remaining(&committed);
        let expected = 0.25 * max_mu_reserved();
        assert!(
            (left / expected - 1.0).abs() < 1e-12,
            "{left} vs {expected}"
        );
        assert_eq!(b.mu_remaining(&runs(&[share(1.0, 1.5)])), 0.0);
    }

    #[test]
    fn refusals_say_what_is_left() {
        let b = budget("analytic");
        let err = admit(
            &b,
            &runs(&[share(10.0, 0.9)]),
            1_000_000,
            NoiseRequest::Tau(0.1),
        )
        .unwrap_err();
        assert!(matches!(err, PartyError::BudgetExhausted(_)));
        let err = err.to_string();
        assert!(
            err.starts_with("budget exhausted: ε = 0.9")
                && err.contains("more releases fit at that τ"),
            "{err}"
        );
        for spent in [1.0, 1.5] {
            let err =
                admit(&b, &runs(&[share(1.0, spent)]), 1, NoiseRequest::Calibrate).unwrap_err();
            assert!(matches!(err, PartyError::BudgetExhausted(_)));
            assert!(err.to_string().contains("no further release"), "{err}");
        }
    }
}
