//! The run plans the contract's calls open, one builder per variant, each a full-data
//! penalty plan ([`plan`]) with its variant's fields set.
use fedmcmc_proto::v1 as pb;

/// A full-data penalty plan.
pub fn plan(chains: u32, steps: u64, clip: f64, noise: pb::run_plan::Noise) -> pb::RunPlan {
    pb::RunPlan {
        variant: pb::Variant::FullPenalty as i32,
        chains,
        steps_per_chain: steps,
        clip,
        noise: Some(noise),
        ..Default::default()
    }
}

/// The noise choice τ: each release's sd is τ·√nᵢ times its sensitivity.
pub fn tau(t: f64) -> pb::run_plan::Noise {
    pb::run_plan::Noise::Tau(t)
}

/// A minibatch-penalty plan with `batch` rows per step.
pub fn minibatch_plan(
    chains: u32,
    steps: u64,
    clip: f64,
    batch: u64,
    noise: pb::run_plan::Noise,
) -> pb::RunPlan {
    pb::RunPlan {
        variant: pb::Variant::MinibatchPenalty as i32,
        batch_size: batch,
        ..plan(chains, steps, clip, noise)
    }
}

/// A DP Barker plan: `batch` rows per step, variance share `share`, the party calibrating.
pub fn barker_plan(chains: u32, steps: u64, batch: u64, share: f64) -> pb::RunPlan {
    pb::RunPlan {
        variant: pb::Variant::Barker as i32,
        batch_size: batch,
        barker_variance: share,
        ..plan(chains, steps, 0.0, pb::run_plan::Noise::Calibrate(true))
    }
}

/// A DP HMC plan of `iterations` per chain with `leapfrog` steps: the ratio's clip and τ,
/// then the gradient's.
pub fn hmc_plan(
    chains: u32,
    iterations: u64,
    leapfrog: u32,
    (clip, tau_l): (f64, f64),
    (gradient_clip, gradient_tau): (f64, f64),
) -> pb::RunPlan {
    pb::RunPlan {
        variant: pb::Variant::Hmc as i32,
        leapfrog_steps: leapfrog,
        gradient_clip,
        gradient_tau,
        ..plan(
            chains,
            iterations * (u64::from(leapfrog) + 2),
            clip,
            tau(tau_l),
        )
    }
}

/// A private-initialiser plan: `steps` gradient releases per chain, clip b_g, τ_g.
pub fn initialiser_plan(
    chains: u32,
    steps: u64,
    gradient_clip: f64,
    noise: pb::run_plan::Noise,
) -> pb::RunPlan {
    pb::RunPlan {
        variant: pb::Variant::Initialiser as i32,
        ..plan(chains, steps, gradient_clip, noise)
    }
}

/// A sufficient-statistics plan: `steps` releases per chain at τ (its clip, checked as any
/// ratio plan's, plays no part: the model's column bounds give the sensitivity).
pub fn sufficient_plan(chains: u32, steps: u64, noise: pb::run_plan::Noise) -> pb::RunPlan {
    pb::RunPlan {
        variant: pb::Variant::SufficientStatistics as i32,
        ..plan(chains, steps, 1.0, noise)
    }
}

/// A summaries plan: one chain of `steps` releases; the clip is unset (the model's column
/// bounds give the sensitivity).
pub fn summaries_plan(steps: u64, noise: pb::run_plan::Noise) -> pb::RunPlan {
    pb::RunPlan {
        variant: pb::Variant::Summaries as i32,
        ..plan(1, steps, 0.0, noise)
    }
}
