//! Which sampler a job runs and with which parameters, and how a variant becomes each
//! party's run plan. A variant is a query the parties answer (`party/src/statistics/`), their
//! accountant entry (`party/src/node.rs::mechanism_of`) and a kernel (`kernels/`).
use fedmcmc_common::barker::CorrectionFit;
use fedmcmc_party::node::{BARKER, FULL_PENALTY, MINIBATCH_PENALTY};
use serde::Serialize;

use crate::federation::{NoiseChoice, PartyInfo, RunPlan};

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
}

/// The rows per step over the whole federation when none is given: the papers' b (Heikkilä
/// et al. 2019; Räisä 2020, Sec. 5).
pub const DEFAULT_BATCH: u64 = 1000;
/// DP Barker's total noise variance when none is given: the C of Räisä 2020, Thm 3.3.
pub const DEFAULT_BARKER_C: f64 = 2.0;

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
    /// Cᵢ = C·nᵢ/n, so the fixed clip equals the pooled one of Thm 3.3).
    Barker {
        batch_size: u64,
        c: f64,
    },
}

impl Variant {
    /// From the command line's choices: a batch size or C given to a variant that takes none
    /// is an error, not ignored. DP Barker's C must have a committed correction fit.
    pub fn new(name: VariantName, batch_size: Option<u64>, c: Option<f64>) -> Result<Self, String> {
        let no_c = |v: &str| match c {
            Some(c) => Err(format!(
                "--barker-c {c} applies to the barker variant, not {v}"
            )),
            None => Ok(()),
        };
        Ok(match name {
            VariantName::Penalty => {
                no_c("penalty")?;
                if let Some(b) = batch_size {
                    return Err(format!(
                        "--batch-size {b} applies to the minibatch-penalty and barker variants; the penalty variant uses every row"
                    ));
                }
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
                Variant::Barker {
                    batch_size: batch_size.unwrap_or(DEFAULT_BATCH),
                    c,
                }
            }
        })
    }

    /// The command-line spelling.
    pub fn name(&self) -> &'static str {
        match self {
            Variant::Penalty => "penalty",
            Variant::MinibatchPenalty { .. } => "minibatch-penalty",
            Variant::Barker { .. } => "barker",
        }
    }

    /// The parties' name for it.
    pub fn party_variant(&self) -> &'static str {
        match self {
            Variant::Penalty => FULL_PENALTY,
            Variant::MinibatchPenalty { .. } => MINIBATCH_PENALTY,
            Variant::Barker { .. } => BARKER,
        }
    }

    /// The method with its parameters and source, for CSV headers and tables.
    pub fn describe(&self) -> String {
        match self {
            Variant::Penalty => "DP penalty, federated (Yıldırım & Ermiş 2019, Alg. 2)".into(),
            Variant::MinibatchPenalty { batch_size } => format!(
                "minibatch DP penalty, federated (Räisä 2020, Sec. 3.4): {batch_size} rows per step"
            ),
            Variant::Barker { batch_size, c } => format!(
                "DP Barker, federated (Heikkilä et al. 2019; Räisä 2020, Alg. 3): {batch_size} rows per step, C = {c}"
            ),
        }
    }

    /// Each party's plan: the batch split by largest remainder in proportion to the rows,
    /// DP Barker's C likewise. A party whose share of the batch is too small for its variant
    /// or larger than its rows is named.
    pub fn plans(
        &self,
        parties: &[PartyInfo],
        chains: u32,
        steps_per_chain: u64,
        clip: f64,
        noise: NoiseChoice,
    ) -> Result<Vec<RunPlan>, String> {
        let base = RunPlan {
            variant: self.party_variant(),
            chains,
            steps_per_chain,
            clip,
            noise,
            batch_size: None,
            barker_variance: None,
        };
        let (batch, min) = match *self {
            Variant::Penalty => return Ok(vec![base; parties.len()]),
            Variant::MinibatchPenalty { batch_size } => (batch_size, 2),
            Variant::Barker { batch_size, .. } => (batch_size, 16),
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
                        ..base
                    },
                    _ => RunPlan {
                        batch_size: Some(b),
                        ..base
                    },
                })
            })
            .collect()
    }
}

/// `total` split in proportion to `weights` by largest remainder (ties to the earlier
/// party), so the parts sum to `total` exactly.
fn split(total: u64, weights: &[u64]) -> Vec<u64> {
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
        assert!(Variant::new(VariantName::Penalty, Some(10), None).is_err());
        assert!(Variant::new(VariantName::MinibatchPenalty, None, Some(2.0)).is_err());
        assert!(
            Variant::new(VariantName::Barker, None, Some(1.5))
                .unwrap_err()
                .contains("no correction")
        );
        assert_eq!(
            Variant::new(VariantName::Barker, None, None).unwrap(),
            Variant::Barker {
                batch_size: DEFAULT_BATCH,
                c: DEFAULT_BARKER_C
            }
        );
    }
}
