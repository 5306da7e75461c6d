//! The DP Barker kernel (Heikkilä et al. 2019; Räisä 2020, Alg. 3): a Gaussian random walk
//! proposes θ′, each party releases its batch estimate λ*ᵢ with noise topping the batch's
//! variance up to its share Cᵢ, and `fedmcmc_common::acceptance::barker_accept` decides with
//! a draw of the correction V_corr for C = ΣCᵢ.
use std::sync::Arc;

use fedmcmc_common::acceptance;
use fedmcmc_common::barker::CorrectionFit;
use fedmcmc_common::models::Model;
use fedmcmc_common::proposal::ProposalKind;
use rand_chacha::ChaCha8Rng;

use super::walk::Walk;
use super::{ChainLink, Kernel, LinkError, Transition};
use fedmcmc_party::statistics::minibatch::barker_bound;

use crate::federation::{
    CallError, CallErrorKind, FederationError, PartyHandle, PartyInfo, Query, RunPlan,
};

pub struct Barker {
    fit: Arc<CorrectionFit>,
    walk: Walk,
}

impl Barker {
    /// `fit` is the correction for the run's total C; the walk is N(0, proposal_sd²·Σ) with
    /// Σ the `shape` where one is given, else isotropic.
    pub fn new(
        model: Arc<dyn Model>,
        fit: Arc<CorrectionFit>,
        proposal_sd: f64,
        target_accept: f64,
        shape: Option<&[Vec<f64>]>,
    ) -> Result<Self, String> {
        let walk = Walk::new(model, ProposalKind::Rw, proposal_sd, target_accept);
        Ok(Barker {
            fit,
            walk: match shape {
                Some(covariance) => walk.shaped(covariance)?,
                None => walk,
            },
        })
    }
}

/// How many sds of the rows' ratios the default step keeps inside the clip. A row's ratio
/// under a walk step is about normal given the step and the step is normal, so their product
/// has heavier tails than a normal: at 3 sds some 1–2 % of rows reach the clip, each only
/// by a little.
pub const CLIP_MARGIN: f64 = 3.0;

/// DP Barker's walk when none is given: shaped by the posterior covariance Σ̂ the private
/// initialiser fitted, θ′ ~ N(θ, s²Σ̂), with the longest s that keeps the rows' ratios within
/// every party's clip to [`CLIP_MARGIN`] sds. Adapting the step instead moves the chain into
/// the clipped posterior (warm-up found 0.03–0.14 on the flat banana, where the clip binds
/// on about 99 % of rows); an isotropic walk within the clip crawls along the posterior's
/// long axes (on the flat banana, 4 chains × 20 000 iterations at every row per step had an
/// ESS of 24).
///
/// Party i clips each row's tempered ratio at cᵢ = √(Cᵢbᵢ/2)/nᵢ (`barker_bound`, Räisä
/// 2020, Thm 3.3). A row's tempered ratio for a move δ is about T·δᵀ∇ℓ(x), whose variance
/// over the rows is T²·δᵀIδ with I the per-row Fisher information; the tempered posterior's
/// precision H is about T·n·I for n rows in all, so the variance is T·δᵀHδ/n. For
/// δ ~ N(0, s²Σ̂) that is T·s²·tr(HΣ̂)/n, and tr(HΣ̂) = d where Σ̂ = H⁻¹. So
/// s = min cᵢ·√n / (CLIP_MARGIN·√(T·d)): in posterior sds a step of √(Cβ/2d)/CLIP_MARGIN
/// at batch fraction β, a third of one at every row (C = 2, d = 2). Σ̂ is post-processing of
/// releases, never of rows.
pub fn step_within_clip(
    plans: &[RunPlan],
    parties: &[PartyInfo],
    temperature: f64,
    dim: usize,
) -> Result<f64, String> {
    let n: u64 = parties.iter().map(|p| p.rows).sum();
    let clip = plans
        .iter()
        .zip(parties)
        .map(|(plan, p)| match (plan.batch_size, plan.barker_variance) {
            (Some(b), Some(share)) => Ok(barker_bound(p.rows as usize, b, share).row),
            _ => Err(format!("party {} has no DP Barker plan", p.name)),
        })
        .try_fold(f64::INFINITY, |min, c| c.map(|c| min.min(c)))?;
    let step = clip * (n as f64).sqrt() / (CLIP_MARGIN * (temperature * dim as f64).sqrt());
    if step.is_finite() && step > 0.0 {
        Ok(step)
    } else {
        Err(format!(
            "no DP Barker step follows from the clip {clip:e}: give the walk's sd (--proposal-sd, or proposal_sd in [sampler])"
        ))
    }
}

/// The correction is only right for the C it was fitted for: a federation whose noise adds
/// up to another total (a party that ignored its share) stops the chain.
fn check_total(c: f64, noise_variance: f64, step: u64) -> Result<(), LinkError> {
    if (noise_variance - c).abs() <= 1e-9 * c {
        return Ok(());
    }
    Err(LinkError {
        step,
        source: FederationError {
            party: "(the federation)".into(),
            error: CallError {
                kind: CallErrorKind::Other,
                message: format!(
                    "the parties' noise variances add up to {noise_variance}, not the C = {c} the Barker correction was fitted for"
                ),
            },
        },
    })
}

impl Kernel for Barker {
    async fn transition<P: PartyHandle>(
        &mut self,
        link: &mut ChainLink<'_, P>,
        theta: &mut [f64],
        rng: &mut ChaCha8Rng,
    ) -> Result<Transition, LinkError> {
        // The random walk is symmetric: its proposal ratio is 0.
        let (log_prior_ratio, _) = self.walk.propose(theta, rng);
        let step = link.next_step();
        let answer = link
            .ask(Query::BarkerLogLikRatio {
                theta,
                theta_proposed: self.walk.proposal(),
            })
            .await?;
        check_total(self.fit.c, answer.noise_variance, step)?;
        let lambda_hat = answer.value[0] + log_prior_ratio;
        let accepted = acceptance::barker_accept(lambda_hat, self.fit.sample(rng));
        self.walk.decided(accepted, theta);
        Ok(Transition {
            accepted,
            accept_stat: self.fit.accept_probability(lambda_hat),
            noise_variance: answer.noise_variance,
        })
    }

    /// The walk keeps the step it was given ([`crate::variant::Variant::adapts`] says why);
    /// a sampler configured to adapt anyway does not move it.
    fn adapt(&mut self, _transition: &Transition) {}

    fn scale(&self) -> f64 {
        self.walk.scale()
    }
}

#[cfg(test)]
mod tests {
    use fedmcmc_common::models::ModelSpec;

    use super::*;

    /// The default step keeps a row's ratio CLIP_MARGIN sds inside the smallest clip, the
    /// rows' Fisher information read off the fitted covariance (tr(HΣ̂) = d).
    #[test]
    fn the_default_step_stays_within_the_clip() {
        let party = |name: &str, rows: u64| crate::planning::tests::party(name, rows, 1.0, 1e-6);
        let parties = [party("a", 1000), party("b", 3000)];
        let plans: Vec<RunPlan> = crate::variant::Variant::Barker {
            batch_size: Some(400),
            c: 2.0,
        }
        .plans(
            &parties,
            1,
            10,
            0.0,
            crate::federation::NoiseChoice::Calibrate,
        )
        .unwrap();
        let clip = |p: &RunPlan, rows: u64| {
            barker_bound(
                rows as usize,
                p.batch_size.unwrap(),
                p.barker_variance.unwrap(),
            )
            .row
        };
        let smallest = clip(&plans[0], 1000).min(clip(&plans[1], 3000));
        let step = step_within_clip(&plans, &parties, 0.5, 2).unwrap();
        // The rows' tempered ratio sd at that step: √(T·s²·d/n).
        let ratio_sd = (0.5 * step * step * 2.0 / 4000.0).sqrt();
        assert!((CLIP_MARGIN * ratio_sd / smallest - 1.0).abs() < 1e-12);
        let no_plan = RunPlan {
            batch_size: None,
            ..plans[0].clone()
        };
        assert!(step_within_clip(&[no_plan], &parties[..1], 0.5, 2).is_err());
    }

    /// Warm-up decisions leave DP Barker's step where it was set, however many are accepted.
    #[test]
    fn the_step_is_not_adapted() {
        let model = ModelSpec::flat_banana(2).build().unwrap();
        let fit = Arc::new(CorrectionFit::load(2.0).unwrap());
        let mut barker = Barker::new(model, fit, 8e-4, 0.5, None).unwrap();
        for accepted in [true; 500].into_iter().chain([false; 500]) {
            barker.adapt(&Transition {
                accepted,
                accept_stat: 0.9,
                noise_variance: 2.0,
            });
        }
        assert_eq!(barker.scale(), 8e-4);
    }
}
