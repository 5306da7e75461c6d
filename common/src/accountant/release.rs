//! One release of a composition: its mechanism, noise multiplier and count, checked, and
//! parsed from the command line's `mechanism=…,noise-multiplier=…,count=…` spelling.
use std::collections::BTreeMap;
use std::str::FromStr;

use serde::Serialize;

use super::composition::CompositionError;
use super::{check_count, check_noise_multiplier};

/// How one release samples the data before its Gaussian noise (sensitivity 1 under the
/// chosen neighbour relation; see [`pld::Mechanism`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "mechanism")]
pub enum MechanismKind {
    /// The whole data set.
    Gaussian,
    /// Each row independently with probability `sampling_rate` ∈ (0, 1].
    PoissonGaussian { sampling_rate: f64 },
    /// `batch` rows drawn without replacement from `population` (1 ≤ batch ≤ population).
    BatchGaussian { batch: u64, population: u64 },
    /// One DP Barker iteration on `batch` rows drawn without replacement from `population`,
    /// its noise fixed by Räisä 2020, Thm 3.3 (total variance 2 at per-row bound √b/n, or any
    /// scaling of both): the noise multiplier plays no part in its accounting.
    DpBarker { batch: u64, population: u64 },
}

impl MechanismKind {
    /// The command-line spelling.
    pub fn name(&self) -> &'static str {
        match self {
            MechanismKind::Gaussian => "gaussian",
            MechanismKind::PoissonGaussian { .. } => "poisson-gaussian",
            MechanismKind::BatchGaussian { .. } => "batch-gaussian",
            MechanismKind::DpBarker { .. } => "dp-barker",
        }
    }

    /// From a name and exactly the parameters that mechanism takes.
    pub fn from_parts(
        name: &str,
        sampling_rate: Option<f64>,
        batch: Option<u64>,
        population: Option<u64>,
    ) -> Result<Self, CompositionError> {
        let bad = |what: &str| Err(CompositionError::InvalidRelease(what.to_owned()));
        let kind = match (name, sampling_rate, batch, population) {
            ("gaussian", None, None, None) => MechanismKind::Gaussian,
            ("poisson-gaussian", Some(sampling_rate), None, None) => {
                MechanismKind::PoissonGaussian { sampling_rate }
            }
            ("batch-gaussian", None, Some(batch), Some(population)) => {
                MechanismKind::BatchGaussian { batch, population }
            }
            ("dp-barker", None, Some(batch), Some(population)) => {
                MechanismKind::DpBarker { batch, population }
            }
            ("gaussian", ..) => return bad("gaussian takes no sampling rate, batch or population"),
            ("poisson-gaussian", ..) => {
                return bad("poisson-gaussian needs a sampling rate and no batch or population");
            }
            ("batch-gaussian" | "dp-barker", ..) => {
                return bad(&format!(
                    "{name} needs a batch and a population and no sampling rate"
                ));
            }
            _ => {
                return Err(CompositionError::InvalidRelease(format!(
                    "unknown mechanism '{name}', expected 'gaussian', 'poisson-gaussian', \
                     'batch-gaussian' or 'dp-barker'"
                )));
            }
        };
        kind.validate()?;
        Ok(kind)
    }

    pub(super) fn validate(&self) -> Result<(), CompositionError> {
        match *self {
            MechanismKind::Gaussian => Ok(()),
            MechanismKind::PoissonGaussian { sampling_rate: q } if !(q > 0.0 && q <= 1.0) => {
                Err(CompositionError::InvalidSamplingRate(q))
            }
            MechanismKind::BatchGaussian { batch, population }
            | MechanismKind::DpBarker { batch, population }
                if batch == 0 || batch > population =>
            {
                Err(CompositionError::InvalidBatch { batch, population })
            }
            _ => Ok(()),
        }
    }
}

/// `count` releases of one mechanism with noise multiplier s (noise std / the L2 sensitivity
/// of one release under the composition's neighbour relation). Counts may be fractional for
/// every accountant but the PLD.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Release {
    #[serde(flatten)]
    pub mechanism: MechanismKind,
    pub noise_multiplier: f64,
    pub count: f64,
}

impl Release {
    pub fn validate(&self) -> Result<(), CompositionError> {
        self.mechanism.validate()?;
        check_noise_multiplier(self.noise_multiplier)?;
        check_count(self.count)?;
        Ok(())
    }
}

/// One field of a release spec parsed as `T`, if present.
fn spec_field<T: FromStr>(
    fields: &mut BTreeMap<&str, &str>,
    key: &str,
) -> Result<Option<T>, CompositionError> {
    fields
        .remove(key)
        .map(|v| {
            v.parse().map_err(|_| {
                CompositionError::InvalidRelease(format!(
                    "release field '{key}' has the invalid value '{v}'"
                ))
            })
        })
        .transpose()
}

fn spec_required<T: FromStr>(
    fields: &mut BTreeMap<&str, &str>,
    key: &str,
) -> Result<T, CompositionError> {
    spec_field(fields, key)?.ok_or_else(|| {
        CompositionError::InvalidRelease(format!("a release needs the field '{key}'"))
    })
}

impl FromStr for Release {
    type Err = CompositionError;

    /// `mechanism=…,noise-multiplier=…,count=…[,sampling-rate=…][,batch=…,population=…]`.
    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let mut fields = BTreeMap::new();
        for part in spec.split(',') {
            let (key, value) = part.split_once('=').ok_or_else(|| {
                CompositionError::InvalidRelease(format!("release field '{part}' is not key=value"))
            })?;
            if fields.insert(key.trim(), value.trim()).is_some() {
                return Err(CompositionError::InvalidRelease(format!(
                    "release field '{}' is given twice",
                    key.trim()
                )));
            }
        }
        let name: String = spec_required(&mut fields, "mechanism")?;
        let noise_multiplier = spec_required(&mut fields, "noise-multiplier")?;
        let count = spec_required(&mut fields, "count")?;
        let mechanism = MechanismKind::from_parts(
            &name,
            spec_field(&mut fields, "sampling-rate")?,
            spec_field(&mut fields, "batch")?,
            spec_field(&mut fields, "population")?,
        )?;
        if let Some(key) = fields.keys().next() {
            return Err(CompositionError::InvalidRelease(format!(
                "unknown release field '{key}', expected mechanism, noise-multiplier, count, \
                 sampling-rate, batch or population"
            )));
        }
        let release = Release {
            mechanism,
            noise_multiplier,
            count,
        };
        release.validate()?;
        Ok(release)
    }
}
