//! Which sampler a job runs and with which parameters, and how a variant becomes each
//! party's run plan. A variant is a query the parties answer (`party/src/statistics/`), their
//! accountant entry (`party/src/variants.rs::mechanism_of`) and a kernel (`kernels/`).
use fedmcmc_common::accountant;
use fedmcmc_common::barker::CorrectionFit;
use fedmcmc_common::proposal::ProposalKind;
use fedmcmc_party::node::{
    BARKER, FULL_PENALTY, HMC, MINIBATCH_PENALTY, SUFFICIENT_STATISTICS, SUMMARIES,
};
use serde::Serialize;

use crate::federation::{HmcPlan, NoiseChoice, PartyInfo, RunPlan};
use crate::planning;

/// The variants as `--variant` spells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum VariantName {
    /// Full-data DP penalty (Yıldırım & Ermiş 2019, Alg. 2).
    Penalty,
    /// Minibatch DP penalty (Räisä 2020, Sec. 3.4).
    MinibatchPenalty,
    /// DP Barker (Heikkilä et al. 2019; Räisä 2020, Alg. 3).
    Barker,
    /// DP HMC with noisy clipped gradients (Räisä 2020, Alg. 4).
    Hmc,
    /// The DP penalty on noisy sufficient statistics (Yıldırım & Ermiş 2019, Alg. 3): the
    /// gaussian GLM's.
    SufficientStatistics,
    /// Pay once: a few releases of summaries, then the noise-aware posterior sampled at no
    /// further privacy cost (Kulkarni et al. 2021; Bernstein & Sheldon 2018); the GLMs', and
    /// a gaussian or banana model's with bounds (simulate gives a preset its prior
    /// predictive's).
    Summaries,
}

/// The rows per step over the whole federation when none is given: the papers' b (Heikkilä
/// et al. 2019; Räisä 2020, Sec. 5).
pub const DEFAULT_BATCH: u64 = 1000;
/// DP Barker's total noise variance when none is given: the C of Räisä 2020, Thm 3.3.
pub const DEFAULT_BARKER_C: f64 = 2.0;
/// The fewest rows a party may draw per DP Barker step: the fewest its accountant takes.
pub use fedmcmc_common::accountant::rdp::MIN_BARKER_BATCH as BARKER_MIN_BATCH;
/// DP HMC's leapfrog steps per iteration when none are given: the thesis's L for the
/// bananas (Räisä 2020, Sec. 6.3).
pub const DEFAULT_LEAPFROG_STEPS: u32 = 10;
/// DP HMC's clip on each row's untempered gradient norm when none is given.
pub const DEFAULT_GRADIENT_CLIP: f64 = 2.0;
/// DP HMC's gradient τ when none is given: the gradient's noise multiplier is τ_g·√nᵢ.
pub const DEFAULT_GRADIENT_TAU: f64 = 0.5;
/// DP HMC's initial leapfrog step size when none is given; warm-up adapts it.
pub const DEFAULT_STEP_SIZE: f64 = 1e-3;

/// DP HMC's choices as given on the command line (`None`: the default).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HmcOptions {
    pub leapfrog_steps: Option<u32>,
    pub step_size: Option<f64>,
    pub gradient_clip: Option<f64>,
    pub gradient_tau: Option<f64>,
}

/// A variant with its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "variant", rename_all = "kebab-case")]
pub enum Variant {
    Penalty,
    /// `batch_size` rows per step over the federation, split among the parties in proportion
    /// to their rows.
    MinibatchPenalty {
        batch_size: u64,
    },
    /// The same split, and total noise variance `c` split the same way (each party's share
    /// Cᵢ = C·nᵢ/n, so the fixed clip equals the pooled one of Thm 3.3). With no
    /// `batch_size`, the largest batch every party's budget allows for the run's iterations
    /// (`planning::barker_batch`): the clip, and so the step the walk may take, grows as √b.
    Barker {
        batch_size: Option<u64>,
        c: f64,
    },
    /// `leapfrog_steps` L, the initial `step_size` η, and the gradient release's clip b_g
    /// and τ_g; the ratio release takes the run's clip and τ.
    Hmc {
        leapfrog_steps: u32,
        step_size: f64,
        gradient_clip: f64,
        gradient_tau: f64,
    },
    /// Each party's noisy sufficient statistics at every step, the ratio and its variance
    /// computed from their sum; the sensitivity follows from the model's column bounds, so
    /// the run's clip plays no part.
    SufficientStatistics,
    /// The summaries route (`summaries.rs`): its releases and their centres follow from the
    /// model (`Schedule::default_for`), its sampling from convergence.
    Summaries,
}

impl Variant {
    /// From the command line's choices: a batch size, C or HMC setting given to a variant
    /// that takes none is an error, not ignored. DP Barker's C must have a committed
    /// correction fit.
    pub fn new(
        name: VariantName,
        batch_size: Option<u64>,
        c: Option<f64>,
        hmc: HmcOptions,
    ) -> Result<Self, String> {
        let no_c = |v: &str| match c {
            Some(c) => Err(format!(
                "--barker-c {c} applies to the barker variant, not {v}"
            )),
            None => Ok(()),
        };
        let full_data = |v: &str| match batch_size {
            Some(b) => Err(format!(
                "--batch-size {b} applies to the minibatch-penalty and barker variants; the {v} variant uses every row"
            )),
            None => Ok(()),
        };
        if name != VariantName::Hmc && hmc != HmcOptions::default() {
            return Err(
                "--leapfrog-steps, --step-size, --gradient-clip and --gradient-tau apply to the hmc variant only"
                    .into(),
            );
        }
        Ok(match name {
            VariantName::Summaries => {
                no_c("summaries")?;
                full_data("summaries")?;
                Variant::Summaries
            }
            VariantName::SufficientStatistics => {
                no_c("sufficient-statistics")?;
                full_data("sufficient-statistics")?;
                Variant::SufficientStatistics
            }
            VariantName::Penalty => {
                no_c("penalty")?;
                full_data("penalty")?;
                Variant::Penalty
            }
            VariantName::MinibatchPenalty => {
                no_c("minibatch-penalty")?;
                Variant::MinibatchPenalty {
                    batch_size: batch_size.unwrap_or(DEFAULT_BATCH),
                }
            }
            VariantName::Barker => {
                let c = c.unwrap_or(DEFAULT_BARKER_C);
                CorrectionFit::load(c).map_err(|e| e.to_string())?;
                Variant::Barker { batch_size, c }
            }
            VariantName::Hmc => {
                no_c("hmc")?;
                full_data("hmc")?;
                let positive = |flag: &str, v: f64| {
                    if v.is_finite() && v > 0.0 {
                        Ok(v)
                    } else {
                        Err(format!("{flag} must be a positive number, got {v}"))
                    }
                };
                let leapfrog_steps = hmc.leapfrog_steps.unwrap_or(DEFAULT_LEAPFROG_STEPS);
                if leapfrog_steps == 0 {
                    return Err("--leapfrog-steps must be at least 1".into());
                }
                Variant::Hmc {
                    leapfrog_steps,
                    step_size: positive("--step-size", hmc.step_size.unwrap_or(DEFAULT_STEP_SIZE))?,
                    gradient_clip: positive(
                        "--gradient-clip",
                        hmc.gradient_clip.unwrap_or(DEFAULT_GRADIENT_CLIP),
                    )?,
                    gradient_tau: positive(
                        "--gradient-tau",
                        hmc.gradient_tau.unwrap_or(DEFAULT_GRADIENT_TAU),
                    )?,
                }
            }
        })
    }

    /// The penalty variants take any proposal (Räisä 2020, Sec. 3.1; Sec. 3.4 for the
    /// minibatch); DP Barker takes the random walk it was built and tested with, and DP HMC
    /// proposes by its trajectory.
    pub fn check_proposal(&self, proposal: ProposalKind) -> Result<(), String> {
        match (self, proposal) {
            (Variant::Summaries, ProposalKind::Rw) => Ok(()),
            (Variant::Summaries, p) => Err(format!(
                "--proposal {} applies to the penalty variants; the summaries route samples its posterior by plain HMC",
                p.name()
            )),
            (_, ProposalKind::Rw) | (Variant::Penalty | Variant::MinibatchPenalty { .. }, _) => {
                Ok(())
            }
            (v, p) => Err(format!(
                "--proposal {} applies to the penalty and minibatch-penalty variants, not {}",
                p.name(),
                v.name()
            )),
        }
    }

    /// The clip on each row's gradient norm the private initialiser uses: DP HMC's own, else
    /// the ratio's clip coefficient (a bound on |ℓ(x|θ′) − ℓ(x|θ)|/‖θ′ − θ‖, the same units
    /// as a gradient norm), else the HMC default.
    pub fn gradient_clip(&self, clip: Option<f64>) -> f64 {
        match *self {
            Variant::Hmc { gradient_clip, .. } => gradient_clip,
            _ => clip.unwrap_or(DEFAULT_GRADIENT_CLIP),
        }
    }

    /// Releases per party per iteration: L + 1 gradients and a ratio for DP HMC, else one.
    pub fn releases_per_iteration(&self) -> u64 {
        match *self {
            Variant::Hmc { leapfrog_steps, .. } => u64::from(leapfrog_steps) + 2,
            _ => 1,
        }
    }

    /// The privacy-loss parameter μ one iteration costs a party with `rows` rows at ratio τ,
    /// for the variants made of plain Gaussian releases (μ = 1/(2s²) per release at
    /// multiplier s, composed by adding, Räisä 2020, Thms 3.2 and 4.3); `None` for the
    /// subsampled ones, which the parties' accountants plan. A step of the summaries route is
    /// one release of its summary.
    pub fn mu_per_iteration(&self, tau: f64, rows: u64) -> Option<f64> {
        let sqrt_n = (rows as f64).sqrt();
        let ratio = accountant::mu_per_release(tau * sqrt_n);
        match *self {
            Variant::Penalty | Variant::SufficientStatistics | Variant::Summaries => Some(ratio),
            Variant::Hmc {
                leapfrog_steps,
                gradient_tau,
                ..
            } => Some(
                ratio
                    + (f64::from(leapfrog_steps) + 1.0)
                        * accountant::mu_per_release(gradient_tau * sqrt_n),
            ),
            Variant::MinibatchPenalty { .. } | Variant::Barker { .. } => None,
        }
    }

    /// The command-line spelling.
    pub fn name(&self) -> &'static str {
        match self {
            Variant::Penalty => "penalty",
            Variant::MinibatchPenalty { .. } => "minibatch-penalty",
            Variant::Barker { .. } => "barker",
            Variant::Hmc { .. } => "hmc",
            Variant::SufficientStatistics => "sufficient-statistics",
            Variant::Summaries => "summaries",
        }
    }

    /// Whether warm-up may adapt the walk's step. Not DP Barker's: each row's ratio is clipped
    /// at a fixed √(C/2)·√b/n₀ (Räisä 2020, Thm 3.3), so the clipped posterior is flatter than
    /// the true one and adapting towards a target acceptance grows the step into it (on the
    /// flat 2-d banana from 8e-3 to 0.09–0.13 against posterior sds of 0.014 and 0.008; MMD
    /// 0.53 at ε = 6, 0.34 at the thesis's fixed 8e-4).
    pub fn adapts(&self) -> bool {
        !matches!(self, Variant::Barker { .. })
    }

    /// True for the variants that pay privacy on every iteration.
    pub fn per_iteration(&self) -> bool {
        !matches!(self, Variant::Summaries)
    }

    /// The parties' name for it.
    pub fn party_variant(&self) -> &'static str {
        match self {
            Variant::Penalty => FULL_PENALTY,
            Variant::MinibatchPenalty { .. } => MINIBATCH_PENALTY,
            Variant::Barker { .. } => BARKER,
            Variant::Hmc { .. } => HMC,
            Variant::SufficientStatistics => SUFFICIENT_STATISTICS,
            Variant::Summaries => SUMMARIES,
        }
    }

    /// The method with its parameters and source, for CSV headers and tables.
    pub fn describe(&self) -> String {
        match self {
            Variant::Penalty => "DP penalty, federated (Yıldırım & Ermiş 2019, Alg. 2)".into(),
            Variant::SufficientStatistics => {
                "DP penalty on noisy sufficient statistics, federated (Yıldırım & Ermiş 2019, Alg. 3)"
                    .into()
            }
            Variant::Summaries => {
                "noise-aware posterior of quadratic summaries released once, federated (Kulkarni et al. 2021; Bernstein & Sheldon 2018; Huggins et al. 2017), sampled by plain HMC until R̂ ≤ 1.01 and ESS ≥ 400"
                    .into()
            }
            Variant::MinibatchPenalty { batch_size } => format!(
                "minibatch DP penalty, federated (Räisä 2020, Sec. 3.4): {batch_size} rows per step"
            ),
            Variant::Barker { batch_size, c } => format!(
                "DP Barker, federated (Heikkilä et al. 2019; Räisä 2020, Alg. 3): {}, C = {c}, random walk at a fixed step (adapting it would move the chain into the clipped posterior)",
                match batch_size {
                    Some(b) => format!("{b} rows per step"),
                    None => "the largest batch per step the parties' budgets allow".into(),
                }
            ),
            Variant::Hmc {
                leapfrog_steps,
                step_size,
                gradient_clip,
                gradient_tau,
            } => format!(
                "DP HMC, federated (Räisä 2020, Alg. 4): {leapfrog_steps} leapfrog steps, initial step size {step_size}, gradient clip {gradient_clip}, gradient tau {gradient_tau}"
            ),
        }
    }

    /// Each party's plan for `iterations` per chain: the batch split by largest remainder in
    /// proportion to the rows, DP Barker's C likewise. A party whose share of the batch is
    /// too small for its variant or larger than its rows is named.
    pub fn plans(
        &self,
        parties: &[PartyInfo],
        chains: u32,
        iterations: u64,
        clip: f64,
        noise: NoiseChoice,
    ) -> Result<Vec<RunPlan>, String> {
        let base = RunPlan {
            variant: self.party_variant(),
            chains,
            steps_per_chain: iterations
                .checked_mul(self.releases_per_iteration())
                .ok_or("too many iterations")?,
            clip,
            noise,
            batch_size: None,
            barker_variance: None,
            hmc: None,
            aggregation: None,
        };
        let (batch, min) = match *self {
            Variant::Penalty | Variant::SufficientStatistics => {
                return Ok(vec![base; parties.len()]);
            }
            // One chain of `iterations` releases; the rows' bounds are the model's.
            Variant::Summaries => {
                return Ok(vec![
                    RunPlan {
                        chains: 1,
                        clip: 0.0,
                        ..base
                    };
                    parties.len()
                ]);
            }
            Variant::Hmc {
                leapfrog_steps,
                gradient_clip,
                gradient_tau,
                ..
            } => {
                if !matches!(noise, NoiseChoice::Tau(_)) {
                    return Err(
                        "the hmc variant needs a ratio tau (--tau): the parties do not calibrate its two noises".into(),
                    );
                }
                let hmc = Some(HmcPlan {
                    leapfrog_steps,
                    gradient_clip,
                    gradient_tau,
                });
                return Ok(vec![RunPlan { hmc, ..base }; parties.len()]);
            }
            Variant::MinibatchPenalty { batch_size } => (batch_size, 2),
            Variant::Barker { batch_size, .. } => match batch_size {
                Some(b) => (b, BARKER_MIN_BATCH),
                None => (
                    planning::barker_batch(parties, chains, iterations)?,
                    BARKER_MIN_BATCH,
                ),
            },
        };
        let rows: Vec<u64> = parties.iter().map(|p| p.rows).collect();
        let total: u64 = rows.iter().sum();
        if batch > total {
            return Err(format!(
                "--batch-size {batch} exceeds the federation's {total} rows"
            ));
        }
        let batches = split(batch, &rows);
        parties
            .iter()
            .zip(&batches)
            .map(|(p, &b)| {
                if b < min || b > p.rows {
                    return Err(format!(
                        "party {} would draw {b} of the {batch} rows per step in proportion to its {} rows, but the {} variant needs {min} to {} rows per party: raise --batch-size",
                        p.name, p.rows, self.name(), p.rows
                    ));
                }
                Ok(match *self {
                    Variant::Barker { c, .. } => RunPlan {
                        batch_size: Some(b),
                        barker_variance: Some(c * p.rows as f64 / total as f64),
                        clip: 0.0,
                        noise: NoiseChoice::Calibrate,
                        ..base.clone()
                    },
                    _ => RunPlan {
                        batch_size: Some(b),
                        ..base.clone()
                    },
                })
            })
            .collect()
    }
}

/// `total` split in proportion to `weights` by largest remainder (ties to the earlier
/// party), so the parts sum to `total` exactly.
pub(crate) fn split(total: u64, weights: &[u64]) -> Vec<u64> {
    let sum: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    if sum == 0 {
        return vec![0; weights.len()];
    }
    let exact: Vec<u128> = weights
        .iter()
        .map(|&w| u128::from(total) * u128::from(w))
        .collect();
    let mut parts: Vec<u64> = exact.iter().map(|e| (e / sum) as u64).collect();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(exact[i] % sum));
    let left = total - parts.iter().sum::<u64>();
    for &i in order.iter().take(left as usize) {
        parts[i] += 1;
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_is_proportional_and_exact() {
        assert_eq!(split(1000, &[50_000, 30_000, 20_000]), vec![500, 300, 200]);
        assert_eq!(split(10, &[1, 1, 1]), vec![4, 3, 3]);
        assert_eq!(
            split(1000, &[33_334, 33_333, 33_333]).iter().sum::<u64>(),
            1000
        );
    }

    #[test]
    fn parameters_belong_to_their_variant() {
        let none = HmcOptions::default();
        assert!(Variant::new(VariantName::Penalty, Some(10), None, none).is_err());
        assert!(Variant::new(VariantName::SufficientStatistics, Some(10), None, none).is_err());
        assert!(Variant::new(VariantName::SufficientStatistics, None, Some(2.0), none).is_err());
        assert_eq!(
            Variant::new(VariantName::SufficientStatistics, None, None, none),
            Ok(Variant::SufficientStatistics)
        );
        assert!(Variant::new(VariantName::MinibatchPenalty, None, Some(2.0), none).is_err());
        assert!(
            Variant::new(VariantName::Barker, None, Some(1.5), none)
                .unwrap_err()
                .contains("no correction")
        );
        let steps = HmcOptions {
            leapfrog_steps: Some(5),
            ..none
        };
        assert!(Variant::new(VariantName::Penalty, None, None, steps).is_err());
        assert!(Variant::new(VariantName::Hmc, Some(10), None, none).is_err());
        assert!(
            Variant::new(
                VariantName::Hmc,
                None,
                None,
                HmcOptions {
                    leapfrog_steps: Some(0),
                    ..none
                }
            )
            .is_err()
        );
        assert_eq!(
            Variant::new(VariantName::Hmc, None, None, steps)
                .unwrap()
                .releases_per_iteration(),
            7
        );
        assert_eq!(
            Variant::new(VariantName::Barker, None, None, none).unwrap(),
            Variant::Barker {
                batch_size: None,
                c: DEFAULT_BARKER_C
            }
        );
    }
}
