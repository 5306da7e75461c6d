//! A GLM's declaration as a party.toml or a run.toml gives it: the family, the named columns
//! with their public bounds, the prior, and the checks that build a [`Glm`] from it.
use serde::{Deserialize, Serialize};

use super::{Glm, LN_2PI};
use crate::models::{
    ModelError, check_finite, check_len, check_positive, check_true_theta, default_temperature,
};

/// The family of the label given the linear predictor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    Gaussian,
    Logistic,
    Poisson,
}

impl Family {
    pub(super) fn name(self) -> &'static str {
        match self {
            Family::Gaussian => "gaussian",
            Family::Logistic => "logistic",
            Family::Poisson => "poisson",
        }
    }
}

/// A column of the party's table as the configuration names it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlmColumn {
    pub name: String,
    /// Public bounds [lo, hi]: rows outside are refused at load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounds: Option<[f64; 2]>,
}

impl GlmColumn {
    pub fn new(name: &str, bounds: Option<[f64; 2]>) -> Self {
        GlmColumn {
            name: name.to_string(),
            bounds,
        }
    }
}

/// GLM hyperparameters as written in configuration (`kind = "glm"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlmSpec {
    pub family: Family,
    /// The feature columns, each with its public bounds (required).
    pub features: Vec<GlmColumn>,
    /// The label column: bounds required for the gaussian family (the label's range) and
    /// the poisson family (lo ≥ 0, hi the largest count); the logistic family's are [0, 1]
    /// unless given narrower.
    pub label: GlmColumn,
    /// A leading coefficient for a constant 1 (default true).
    #[serde(default = "default_intercept")]
    pub intercept: bool,
    /// Prior sds: one for every coefficient, or one per coefficient (intercept first).
    /// Absent (empty), the logistic family takes the weakly informative prior of its bounds
    /// (`prior.rs`); the other families require it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prior_sd: Vec<f64>,
    /// Prior means, one per coefficient; zero if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prior_mean: Option<Vec<f64>>,
    /// The gaussian family's known noise sd σ (that family only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise_sd: Option<f64>,
    #[serde(default = "default_temperature")]
    pub temperature: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub true_theta: Option<Vec<f64>>,
}

fn default_intercept() -> bool {
    true
}

/// A table column name that SQL and CSV headers can carry unquoted.
fn check_column_name(name: &str) -> Result<(), ModelError> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(())
    } else {
        Err(ModelError::ColumnName {
            name: name.to_string(),
        })
    }
}

/// The column's bounds, required, finite and with lo < hi.
fn required_bounds(column: &GlmColumn) -> Result<[f64; 2], ModelError> {
    let [lo, hi] = column.bounds.ok_or_else(|| ModelError::MissingBounds {
        column: column.name.clone(),
    })?;
    if lo.is_finite() && hi.is_finite() && lo < hi {
        Ok([lo, hi])
    } else {
        Err(ModelError::Bounds {
            column: column.name.clone(),
            lo,
            hi,
        })
    }
}

impl GlmSpec {
    /// The simulations' GLM of `family` with θ of dimension `dim` ≥ 2: an intercept and
    /// features `feature1 …` within [−2, 2] (the poisson family's within [−1, 1], so that
    /// counts stay moderate), label `label` (gaussian: noise sd 1, label within [−20, 20];
    /// poisson: counts up to 100), true θ = (0.5, 1, −0.5, 0.25, …). The logistic family's
    /// prior is its default, the weakly informative one of its bounds (`prior.rs`: sd 10 for
    /// the intercept, 1.08 for each slope); the others' is sd 10 on every coefficient.
    pub fn example(family: Family, dim: usize) -> Self {
        let width = if family == Family::Poisson { 1.0 } else { 2.0 };
        let features = (1..dim)
            .map(|j| GlmColumn::new(&format!("feature{j}"), Some([-width, width])))
            .collect();
        let (label_bounds, noise_sd) = match family {
            Family::Gaussian => (Some([-20.0, 20.0]), Some(1.0)),
            Family::Logistic => (None, None),
            Family::Poisson => (Some([0.0, 100.0]), None),
        };
        let true_theta = (0..dim)
            .map(|j| match j {
                0 => 0.5,
                _ => (-0.5f64).powi(j as i32 - 1),
            })
            .collect();
        // Empty: the logistic family's default, which follows the bounds and the intercept
        // as a test may change them.
        let prior_sd = match family {
            Family::Logistic => Vec::new(),
            _ => vec![10.0],
        };
        GlmSpec {
            family,
            features,
            label: GlmColumn::new("label", label_bounds),
            intercept: true,
            prior_sd,
            prior_mean: None,
            noise_sd,
            temperature: 1.0,
            true_theta: Some(true_theta),
        }
    }

    /// Coefficients: one per feature, and the intercept's.
    pub fn dim(&self) -> usize {
        self.features.len() + usize::from(self.intercept)
    }

    pub fn build(&self) -> Result<Glm, ModelError> {
        let family = self.family;
        let family_error = |message: &str| ModelError::Family {
            family: family.name(),
            message: message.to_string(),
        };
        if self.features.is_empty() {
            return Err(ModelError::TooFewDimensions {
                model: "glm (features)",
                min: 1,
                got: 0,
            });
        }
        let mut names: Vec<&str> = Vec::with_capacity(self.features.len() + 1);
        for column in self.features.iter().chain([&self.label]) {
            check_column_name(&column.name)?;
            if names.contains(&column.name.as_str()) {
                return Err(ModelError::DuplicateColumn {
                    name: column.name.clone(),
                });
            }
            names.push(&column.name);
        }
        let features = self
            .features
            .iter()
            .map(required_bounds)
            .collect::<Result<Vec<_>, _>>()?;
        let label = match (family, self.label.bounds) {
            (Family::Logistic, None) => [0.0, 1.0],
            _ => required_bounds(&self.label)?,
        };
        match family {
            Family::Logistic if label[0] < 0.0 || label[1] > 1.0 => {
                return Err(family_error("the label's bounds must lie within [0, 1]"));
            }
            Family::Poisson if label[0] < 0.0 => {
                return Err(family_error(
                    "the label is a count: its lower bound must be ≥ 0",
                ));
            }
            _ => {}
        }
        let noise_var = match (family, self.noise_sd) {
            (Family::Gaussian, Some(sd)) => {
                check_positive("noise_sd", sd)?;
                sd * sd
            }
            (Family::Gaussian, None) => return Err(family_error("noise_sd is required")),
            (_, Some(_)) => {
                return Err(family_error("noise_sd applies to the gaussian family only"));
            }
            (_, None) => 1.0,
        };
        let dim = self.dim();
        let prior_sd = match (self.prior_sd.len(), family) {
            (0, Family::Logistic) => super::prior::weakly_informative_sd(self.intercept, &features),
            (0, _) => {
                return Err(family_error(
                    "prior_sd is required (only the logistic family has a default: the weakly informative prior of its bounds)",
                ));
            }
            (1, _) => vec![self.prior_sd[0]; dim],
            _ => self.prior_sd.clone(),
        };
        check_len("prior_sd", dim, prior_sd.len())?;
        for &sd in &prior_sd {
            check_positive("prior_sd", sd)?;
        }
        let prior_mean = self.prior_mean.clone().unwrap_or_else(|| vec![0.0; dim]);
        check_len("prior_mean", dim, prior_mean.len())?;
        check_finite("prior_mean", &prior_mean)?;
        check_positive("temperature", self.temperature)?;
        check_true_theta(&self.true_theta, dim)?;
        let max_abs: Vec<f64> = features
            .iter()
            .map(|[lo, hi]| lo.abs().max(hi.abs()))
            .collect();
        let max_norm = (f64::from(u8::from(self.intercept))
            + max_abs.iter().map(|m| m * m).sum::<f64>())
        .sqrt();
        Ok(Glm {
            family,
            intercept: self.intercept,
            features,
            max_abs,
            max_norm,
            label,
            prior_precision: prior_sd.iter().map(|s| 1.0 / (s * s)).collect(),
            prior_log_norm: -prior_sd.iter().map(|s| 0.5 * LN_2PI + s.ln()).sum::<f64>(),
            prior_mean,
            noise_var,
            temperature: self.temperature,
            spec: self.clone(),
        })
    }
}
