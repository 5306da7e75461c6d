//! The variants a party serves, by their wire names, and the mechanism each one's releases
//! are: what the accountant composes for them.
use fedmcmc_common::accountant::MechanismKind;
use fedmcmc_common::neighbours::Neighbours;

/// Variants this party serves (the wire names of `fedmcmc.v1.Variant`).
pub const FULL_PENALTY: &str = "full-penalty";
pub const MINIBATCH_PENALTY: &str = "minibatch-penalty";
pub const BARKER: &str = "barker";
pub const HMC: &str = "hmc";
pub const INITIALISER: &str = "initialiser";
pub const SUFFICIENT_STATISTICS: &str = "sufficient-statistics";
pub const SUMMARIES: &str = "summaries";

/// The variants a party serves under its neighbour relation: the minibatch ones rest on
/// substitute-neighbour bounds (Räisä 2020, Lemma 3.4, Thms 3.3, 3.5); the full-data ones
/// are clipped sums, whose sensitivity each relation bounds. `sufficient-statistics` and
/// `summaries` need a model that has them ([`PartyNode`] lists them only then).
pub fn variants_served(neighbours: Neighbours) -> &'static [&'static str] {
    match neighbours {
        Neighbours::Substitute => &[
            FULL_PENALTY,
            MINIBATCH_PENALTY,
            BARKER,
            HMC,
            INITIALISER,
            SUFFICIENT_STATISTICS,
            SUMMARIES,
        ],
        Neighbours::AddRemove => &[
            FULL_PENALTY,
            HMC,
            INITIALISER,
            SUFFICIENT_STATISTICS,
            SUMMARIES,
        ],
    }
}

/// The mechanism a variant's releases are, as the accountant composes them, or why it has
/// none. The one place a variant maps to a [`MechanismKind`].
pub fn mechanism_of(
    variant: &str,
    batch: Option<u64>,
    population: Option<u64>,
) -> Result<MechanismKind, String> {
    let kind = match (variant, batch, population) {
        // Σ clip(r_x) over all rows plus Gaussian noise (Yıldırım & Ermiş 2019, Alg. 2), and
        // the clipped gradient sums of DP HMC and the initialiser: each release a Gaussian
        // mechanism, composed heterogeneously (Räisä 2020, Thm 4.3); and the sufficient
        // statistics' sum over all rows (Yıldırım & Ermiş 2019, Alg. 3) and the summaries
        // route's quadratic summaries, each a Gaussian mechanism on a vector.
        (FULL_PENALTY | HMC | INITIALISER | SUFFICIENT_STATISTICS | SUMMARIES, None, None) => {
            MechanismKind::Gaussian
        }
        // A Gaussian release on a batch drawn without replacement (Räisä 2020, Thm 3.5).
        (MINIBATCH_PENALTY, Some(batch), Some(population)) => {
            MechanismKind::BatchGaussian { batch, population }
        }
        // One DP Barker iteration (Räisä 2020, Thm 3.3).
        (BARKER, Some(batch), Some(population)) => MechanismKind::DpBarker { batch, population },
        (
            FULL_PENALTY
            | MINIBATCH_PENALTY
            | BARKER
            | HMC
            | INITIALISER
            | SUFFICIENT_STATISTICS
            | SUMMARIES,
            ..,
        ) => {
            return Err(format!(
                "a {variant} run with a batch of {batch:?} out of {population:?}"
            ));
        }
        _ => return Err(format!("the unknown variant {variant:?}")),
    };
    Ok(kind)
}

/// Noise multipliers s = τ·√n a requested τ may give. Below, one release's privacy loss
/// μ = 1/(2s²) is beyond any budget and overflows the accountant for tiny τ; above, the noise
/// is pointless and its variance overflows. (Calibration searches inside this range.)
pub const NOISE_MULTIPLIERS: (f64, f64) = (1e-9, 1e12);
