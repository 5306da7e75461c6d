//! The closed runs' charges as the accountant composes them, folded so that the number of
//! release groups, and with it the cost of every budget question (admission, Describe's
//! figures, a close's answer), stays bounded however many cheap runs a caller closes. Unfolded,
//! 200 one-release minibatch runs each at its own noise were 200 groups that every accountant
//! call composed through the numerical PLD: seconds per OpenRun, Describe and CloseRun.
//!
//! Every fold is exact or conservative, never an under-count:
//! - Plain Gaussian releases merge exactly: k₁ releases at multiplier s₁ and k₂ at s₂ compose
//!   as one Gaussian with precision k₁/s₁² + k₂/s₂² (their privacy-loss distributions are
//!   Gaussian and add, Räisä 2020, Thm 4.3; Rényi divergences and zCDP's ρ add alike), so as
//!   k₁ + k₂ releases at the s giving that precision. That s is lowered by a few ulps, more
//!   than the rounding of the (compensated) sum, so the merge never rounds toward less loss.
//! - Batch Gaussian releases (minibatch runs) keep their groups while one population has at
//!   most [`MAX_BATCH_GROUPS`] (exactly the composition the ledger records). Beyond that,
//!   groups in one cell of a grid over batch and multiplier merge into one group at the
//!   largest batch and the least noise among them, the grid coarsening until at most that
//!   many cells remain. A release at (batch fraction γ, s) is dominated by one at (γ′ ≥ γ,
//!   s′ ≤ s): the accountants' pair for it, (1 − γ)N(0, s²) + γN(1, s²) against N(0, s²),
//!   is the pair at (γ′, s′) post-processed by one kernel (add N(0, s² − s′²), then with
//!   probability 1 − γ/γ′ replace the output with a fresh N(0, s²) draw), and post-processing
//!   never increases a divergence. That pair is realised by a batch sum of one differing row,
//!   so each accountant's bound at (γ′, s′) covers it. The cost is over-counting, only for a
//!   caller who spread more groups than that.
//! - DP Barker releases merge exactly by batch and population: their noise is fixed by the
//!   batch (Räisä 2020, Thm 3.3), so the multiplier a run recorded plays no part in their
//!   accounting and runs at one batch are one group. They have no privacy-loss distribution,
//!   so only the Rényi accountant composes them, about a millisecond per group; the groups are
//!   bounded because a party opens a run at a new batch only while a population has fewer
//!   than [`MAX_BARKER_GROUPS`] ([`crate::runs::Runs::new_barker_batch_refused`]).
use std::collections::BTreeMap;

use fedmcmc_common::accountant::{MechanismKind, Release};

use crate::runs::Charge;

/// Most groups of batch Gaussian releases per population that closed runs compose as.
pub(crate) const MAX_BATCH_GROUPS: usize = 8;

/// Most distinct DP Barker batches per population, closed and open runs together.
pub(crate) const MAX_BARKER_GROUPS: usize = 32;

/// Grid cells per octave of batch and of multiplier, finest first; at 0 every group of a
/// population is one cell.
const GRID: [f64; 5] = [16.0, 4.0, 1.0, 0.25, 0.0];

/// One group of batch releases: its batch, multiplier and count.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Batch {
    batch: u64,
    noise_multiplier: f64,
    count: u64,
}

/// The closed runs' charges folded (see the module's comment): other releases first, then
/// the merged Gaussian group, then the batch groups by population. A function of the charges
/// alone, so a node gives the same groups whether they were folded as runs closed or read
/// back at start.
pub(crate) fn folded(charges: &[Charge]) -> Vec<Release> {
    let mut out = Vec::new();
    let mut gaussian = Precision::default();
    let mut batches: BTreeMap<u64, Vec<Batch>> = BTreeMap::new();
    let mut barker: BTreeMap<(u64, u64), Release> = BTreeMap::new();
    for c in charges.iter().filter(|c| c.releases > 0) {
        match c.mechanism {
            MechanismKind::Gaussian => gaussian.add(c.releases, c.noise_multiplier),
            MechanismKind::BatchGaussian { batch, population } => {
                batches.entry(population).or_default().push(Batch {
                    batch,
                    noise_multiplier: c.noise_multiplier,
                    count: c.releases,
                })
            }
            MechanismKind::DpBarker { batch, population } => {
                barker
                    .entry((population, batch))
                    .or_insert(Release {
                        mechanism: c.mechanism,
                        noise_multiplier: c.noise_multiplier,
                        count: 0.0,
                    })
                    .count += c.releases as f64
            }
            mechanism => out.push(Release {
                mechanism,
                noise_multiplier: c.noise_multiplier,
                count: c.releases as f64,
            }),
        }
    }
    out.extend(barker.into_values());
    out.extend(gaussian.release());
    for (population, groups) in batches {
        out.extend(fold_batches(groups).into_iter().map(|g| Release {
            mechanism: MechanismKind::BatchGaussian {
                batch: g.batch,
                population,
            },
            noise_multiplier: g.noise_multiplier,
            count: g.count as f64,
        }));
    }
    out
}

/// Releases and their total precision Σ kᵢ/sᵢ², summed with Neumaier's compensation so that
/// its rounding stays a few ulps however many groups are added.
#[derive(Default)]
struct Precision {
    count: u64,
    sum: f64,
    compensation: f64,
}

impl Precision {
    fn add(&mut self, count: u64, s: f64) {
        self.count += count;
        let x = count as f64 / (s * s);
        let t = self.sum + x;
        self.compensation += if self.sum.abs() >= x.abs() {
            (self.sum - t) + x
        } else {
            (x - t) + self.sum
        };
        self.sum = t;
    }

    /// All the releases at the multiplier of their total precision, lowered by 8 ulps (the
    /// sum, the division and the root round by less).
    fn release(&self) -> Option<Release> {
        (self.count > 0).then(|| {
            let precision = self.sum + self.compensation;
            let s = (self.count as f64 / precision).sqrt() * (1.0 - 8.0 * f64::EPSILON);
            Release {
                mechanism: MechanismKind::Gaussian,
                noise_multiplier: s,
                count: self.count as f64,
            }
        })
    }
}

/// One population's batch groups: as they are while at most [`MAX_BATCH_GROUPS`], else merged
/// by the finest [`GRID`] that leaves at most that many.
fn fold_batches(groups: Vec<Batch>) -> Vec<Batch> {
    if groups.len() <= MAX_BATCH_GROUPS {
        return groups;
    }
    GRID.iter()
        .map(|&per_octave| {
            let cell = |x: f64| (x.log2() * per_octave).floor() as i64;
            let mut cells: BTreeMap<(i64, i64), Batch> = BTreeMap::new();
            for g in &groups {
                let key = (cell(g.batch as f64), cell(g.noise_multiplier));
                cells
                    .entry(key)
                    .and_modify(|m| {
                        m.batch = m.batch.max(g.batch);
                        m.noise_multiplier = m.noise_multiplier.min(g.noise_multiplier);
                        m.count += g.count;
                    })
                    .or_insert(*g);
            }
            cells.into_values().collect::<Vec<_>>()
        })
        .find(|cells| cells.len() <= MAX_BATCH_GROUPS)
        .expect("the last grid has one cell")
}

#[cfg(test)]
mod tests {
    use fedmcmc_common::accountant::{Choice, Composition, Method};
    use fedmcmc_common::neighbours::Neighbours;
    use rand::{RngExt, SeedableRng};

    use super::*;
    use crate::budget::Budget;
    use crate::config::BudgetConfig;

    const POPULATION: u64 = 2000;

    fn charge(mechanism: MechanismKind, noise_multiplier: f64, releases: u64) -> Charge {
        Charge {
            variant: String::new(),
            mechanism,
            noise_multiplier,
            releases,
        }
    }

    fn batch(batch: u64) -> MechanismKind {
        MechanismKind::BatchGaussian {
            batch,
            population: POPULATION,
        }
    }

    /// ε at δ = 1e-6 of `releases` under `accountant`, as the party composes them.
    fn epsilon(accountant: Choice, releases: Vec<Release>) -> f64 {
        let budget = Budget::new(BudgetConfig {
            epsilon: 10.0,
            delta: 1e-6,
            accountant,
        })
        .unwrap();
        budget.epsilon_of(&Composition::new(releases, Neighbours::Substitute).unwrap())
    }

    /// The charges unfolded, as the node composed them before folding.
    fn unfolded(charges: &[Charge]) -> Vec<Release> {
        charges
            .iter()
            .map(|c| Release {
                mechanism: c.mechanism,
                noise_multiplier: c.noise_multiplier,
                count: c.releases as f64,
            })
            .collect()
    }

    /// 300 Gaussian groups at random multipliers and counts fold into one whose ε (the exact
    /// analytic curve) is never below theirs and within 1e-12 of it.
    #[test]
    fn gaussian_groups_merge_exactly() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for case in 0..20 {
            let charges: Vec<_> = (0..300)
                .map(|_| {
                    let s = 10f64.powf(rng.random_range(1.0..4.0));
                    charge(MechanismKind::Gaussian, s, rng.random_range(1..1000))
                })
                .collect();
            let folded = folded(&charges);
            assert_eq!(folded.len(), 1);
            let (exact, merged) = (
                epsilon(Choice::Best, unfolded(&charges)),
                epsilon(Choice::Best, folded),
            );
            assert!(
                merged >= exact && merged <= exact * (1.0 + 1e-12),
                "case {case}: {merged} against {exact}"
            );
        }
    }

    /// Up to the cap, batch groups are the ledger's own: the same ε to the bit.
    #[test]
    fn few_batch_groups_are_kept() {
        let charges: Vec<_> = (0..MAX_BATCH_GROUPS)
            .map(|i| charge(batch(50 + 10 * i as u64), 1.0 + i as f64 / 10.0, 3))
            .collect();
        assert_eq!(folded(&charges), unfolded(&charges));
    }

    /// Many one-release minibatch runs, each at its own noise and some at their own batch,
    /// and a few Gaussian ones: at most the cap of batch groups, and ε never below the
    /// unfolded composition's, under the Rényi accountant (60 groups) and under `best` (the
    /// PLD too; 14 groups, which a debug build composes in seconds).
    #[test]
    fn many_batch_groups_fold_conservatively() {
        for (accountant, runs) in [(Choice::Only(Method::Rdp), 60), (Choice::Best, 14)] {
            let mut charges: Vec<_> = (0..runs)
                .map(|i| charge(batch(100 + 20 * (i % 3)), 1.0 + i as f64 / 100.0, 1))
                .collect();
            charges
                .extend([(30.0, 5), (45.0, 2)].map(|(s, k)| charge(MechanismKind::Gaussian, s, k)));
            let folded = folded(&charges);
            assert!(folded.len() <= MAX_BATCH_GROUPS + 1, "{folded:?}");
            let count = |r: &[Release]| r.iter().map(|r| r.count).sum::<f64>();
            assert_eq!(count(&folded), count(&unfolded(&charges)));
            let (exact, bound) = (
                epsilon(accountant, unfolded(&charges)),
                epsilon(accountant, folded),
            );
            assert!(bound >= exact, "{accountant}: {bound} against {exact}");
            // Conservative, not absurd: the groups' noise spans 1.0 to 1.6.
            assert!(
                bound <= 2.0 * exact,
                "{accountant}: {bound} against {exact}"
            );
        }
    }

    /// DP Barker runs at one batch are one group whatever multiplier each recorded (it plays
    /// no part in their accounting), with the same ε as the unfolded charges.
    #[test]
    fn barker_charges_merge_by_batch() {
        let barker = |batch| MechanismKind::DpBarker {
            batch,
            population: POPULATION,
        };
        let charges: Vec<_> = [(100, 1.0, 3), (100, 2.5, 4), (200, 1.0, 2), (100, 7.0, 1)]
            .map(|(b, s, k)| charge(barker(b), s, k))
            .into();
        let folded = folded(&charges);
        let groups: Vec<_> = folded.iter().map(|r| (r.mechanism, r.count)).collect();
        assert_eq!(groups, [(barker(100), 8.0), (barker(200), 2.0)]);
        let rdp = Choice::Only(Method::Rdp);
        let (exact, merged) = (epsilon(rdp, unfolded(&charges)), epsilon(rdp, folded));
        assert!(
            (merged - exact).abs() <= 1e-12 * exact,
            "{merged} against {exact}"
        );
    }

    /// However widely a caller spreads batches and noise, the groups stay within the cap.
    #[test]
    fn any_spread_is_capped() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        let charges: Vec<_> = (0..5000)
            .map(|_| {
                let s = 10f64.powf(rng.random_range(-9.0..12.0));
                charge(batch(rng.random_range(2..=POPULATION)), s, 1)
            })
            .collect();
        let folded = folded(&charges);
        assert!(folded.len() <= MAX_BATCH_GROUPS, "{}", folded.len());
        assert_eq!(folded.iter().map(|r| r.count).sum::<f64>(), 5000.0);
    }
}
