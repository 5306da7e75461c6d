//! The model presets `simulate` offers by name (Räisä 2020, Table 5.1; Heikkilä et al. 2019):
//! each one's model, dimension and rows, and the thesis's tuned sampler settings for it.
use clap::ValueEnum;
use fedmcmc_common::models::{BananaSpec, CircleSpec, Family, GlmSpec, MixtureSpec, ModelSpec};
use fedmcmc_common::proposal::ProposalKind;
use serde::{Deserialize, Serialize};

/// Model presets selectable by name (Räisä 2020, Table 5.1; Heikkilä et al. 2019). Each
/// brings the thesis's rows and, for the full-data DP penalty, its τ, walk sd and clip
/// (flags override them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// Flat banana: a = 20, σ1² = 20, σ2² = 2.5, σ0² = 1000, θ = (0, 3, 0, …); n = 100 000
    /// at d = 2, 200 000 at d = 10.
    Banana,
    /// The flat banana tempered with T = 1000/n (n as for the flat banana).
    TemperedBanana,
    /// Gaussian with identity likelihood covariance, σ0² = 1000, θ = (0, 3, 0, …).
    Gaussian,
    /// The narrow banana (n = 150 000): the flat banana with a = 350. Two-dimensional.
    NarrowBanana,
    /// "Gauss 30d" (n = 200 000): the flat banana with a = 0, a Gaussian with likelihood
    /// variances (20, 2.5, 1, …); d = 30 unless --dim.
    ThesisGaussian,
    /// The correlated Gaussian (n = 200 000): likelihood covariance
    /// [[1, 0.999], [0.999, 1]], σ0² = 100, θ = (0, 3). Two-dimensional.
    CorrelatedGaussian,
    /// Logistic regression over named columns `feature1 …` (each within [−2, 2]) and a 0/1
    /// `label`, with an intercept; θ = (0.5, 1, −0.5, …); the weakly informative prior of
    /// Gelman et al. 2008 for these bounds (sd 10 for the intercept, 1.08 per slope); d = 3
    /// unless --dim. No exact posterior, so no MMD to one.
    LogisticGlm,
    /// Poisson regression, the same with features within [−1, 1], counts up to 100 and
    /// prior sd 10.
    PoissonGlm,
    /// Linear regression with noise sd 1, the label within [−20, 20] and prior sd 10;
    /// conjugate, so compared with its exact posterior.
    GaussianGlm,
    /// The circle (Räisä 2020, Sec. 5.1; n = 100 000): ln p(r|θ) = −a(‖θ‖² − r²)², a = 1e-5,
    /// flat prior, rows r ~ N(3, 1); the posterior is a ring with mean at the origin.
    Circle,
    /// The Gaussian mixture of Heikkilä et al. 2019 (n = 10⁶, tempered to n₀ = 100):
    /// x ~ ½N(θ1, 2) + ½N(θ1 + θ2, 2), θ = (0, 1). No exact posterior.
    Mixture,
}

/// The full-data DP penalty's (τ, proposal sd, clip) in the thesis's experiments (Räisä 2020,
/// Sec. 6, as its experiment code ran them).
pub(crate) type ThesisPenalty = (f64, f64, f64);

impl Preset {
    /// The preset's model; `dim` is the --dim given, if any.
    pub(crate) fn spec(self, dim: Option<usize>, rows: usize) -> anyhow::Result<ModelSpec> {
        let d = self.dim(dim)?;
        Ok(match self {
            Preset::Banana => ModelSpec::flat_banana(d),
            Preset::TemperedBanana => ModelSpec::tempered_banana(d, rows),
            Preset::Gaussian => {
                let cov = (0..d)
                    .map(|i| (0..d).map(|j| f64::from(u8::from(i == j))).collect())
                    .collect();
                ModelSpec::gaussian(cov, 1000.0)
            }
            Preset::NarrowBanana => ModelSpec::Banana(BananaSpec {
                a: 350.0,
                ..BananaSpec::flat(2)
            }),
            Preset::ThesisGaussian => ModelSpec::Banana(BananaSpec {
                a: 0.0,
                ..BananaSpec::flat(d)
            }),
            Preset::CorrelatedGaussian => {
                ModelSpec::gaussian(vec![vec![1.0, 0.999], vec![0.999, 1.0]], 100.0)
            }
            Preset::LogisticGlm | Preset::PoissonGlm | Preset::GaussianGlm => {
                let family = match self {
                    Preset::LogisticGlm => Family::Logistic,
                    Preset::PoissonGlm => Family::Poisson,
                    _ => Family::Gaussian,
                };
                ModelSpec::Glm(GlmSpec::example(family, d))
            }
            Preset::Circle => ModelSpec::Circle(CircleSpec::thesis()),
            Preset::Mixture => ModelSpec::Mixture(MixtureSpec::heikkila(100.0, rows)),
        })
    }

    /// The dimension: --dim where the preset has a free one (default 2, 30 for
    /// thesis-gaussian), else its own, which --dim may only repeat.
    pub(crate) fn dim(self, dim: Option<usize>) -> anyhow::Result<usize> {
        let fixed = match self {
            Preset::Banana | Preset::TemperedBanana | Preset::Gaussian => {
                return Ok(dim.unwrap_or(2));
            }
            Preset::LogisticGlm | Preset::PoissonGlm | Preset::GaussianGlm => {
                return match dim.unwrap_or(3) {
                    d if d < 2 => Err(anyhow::anyhow!(
                        "a GLM preset has an intercept and a feature at least: --dim 2 or more, not {d}"
                    )),
                    d => Ok(d),
                };
            }
            Preset::ThesisGaussian => return Ok(dim.unwrap_or(30)),
            Preset::NarrowBanana
            | Preset::CorrelatedGaussian
            | Preset::Circle
            | Preset::Mixture => 2,
        };
        match dim {
            None => Ok(fixed),
            Some(d) if d == fixed => Ok(d),
            Some(d) => {
                let name = self.to_possible_value().map(|v| v.get_name().to_string());
                Err(anyhow::anyhow!(
                    "the {} preset is {fixed}-dimensional, not {d}",
                    name.unwrap_or_default()
                ))
            }
        }
    }

    /// The thesis's rows for this preset at dimension `d` (Räisä 2020, Table 5.1;
    /// Heikkilä et al. 2019 for the mixture).
    pub(crate) fn rows(self, d: usize) -> usize {
        match self {
            Preset::Banana | Preset::TemperedBanana if d == 10 => 200_000,
            Preset::ThesisGaussian | Preset::CorrelatedGaussian => 200_000,
            Preset::NarrowBanana => 150_000,
            Preset::Mixture => 1_000_000,
            _ => 100_000,
        }
    }

    /// The thesis's full-data DP penalty settings for this preset at dimension `d`, where it
    /// ran one: with the random walk, or with OCU and the guided walk (its "OCU+GWMH" runs,
    /// used here for either).
    pub(crate) fn thesis_penalty(self, d: usize, proposal: ProposalKind) -> Option<ThesisPenalty> {
        let (walk, one_component) = match (self, d) {
            (Preset::Banana, 2) => ((0.1, 0.008, 2.0), (0.1, 0.008, 1.8)),
            (Preset::Banana, 10) => ((0.1, 0.0015, 2.0), (0.1, 0.0015, 3.0)),
            (Preset::TemperedBanana, 2) => ((0.2, 0.035, 5.0), (0.2, 0.04, 3.5)),
            (Preset::TemperedBanana, 10) => ((0.18, 0.02, 3.0), (0.1, 0.04, 3.0)),
            (Preset::ThesisGaussian, 30) => ((0.06, 8.4e-4, 3.0), (0.2, 8.4e-4, 3.0)),
            (Preset::NarrowBanana, _) => ((0.2, 0.0015, 5.5), (0.1, 0.0015, 8.5)),
            (Preset::CorrelatedGaussian, _) => ((0.07, 1.5e-4, 50.0), (0.1, 2e-4, 45.0)),
            (Preset::Circle, _) => ((4.0, 0.2, 0.002), (4.0, 0.3, 0.002)),
            _ => return None,
        };
        Some(match proposal {
            ProposalKind::Rw => walk,
            ProposalKind::Ocu | ProposalKind::Gwmh => one_component,
        })
    }
}
