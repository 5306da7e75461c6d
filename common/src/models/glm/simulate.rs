//! Simulated rows of a GLM: the labels drawn from the family at each row's predictor, the
//! features by whatever the caller draws (uniform over the box for `Model::simulate`).
use rand::{Rng, RngExt};
use rand_distr::{Distribution, Poisson, StandardNormal};

use super::{Family, Glm, sigmoid};
use crate::data::Columns;

impl Glm {
    /// [`Model::simulate`](crate::models::Model::simulate) with each row's features drawn
    /// by `features` (within their bounds, which the labels' model does not check): the
    /// calibration support draws covariates that do not fill the box, or are not uniform.
    pub fn simulate_with(
        &self,
        theta: &[f64],
        n: usize,
        rng: &mut dyn Rng,
        features: &mut dyn FnMut(&mut [f64], &mut dyn Rng),
    ) -> Columns {
        let p = self.p();
        let mut values = vec![0.0; n * (p + 1)];
        let mut row = vec![0.0; p + 1];
        let [y_lo, y_hi] = self.label;
        for i in 0..n {
            features(&mut row[..p], rng);
            let eta = self.predictor(theta, &row);
            let y = match self.family {
                Family::Gaussian => {
                    let z: f64 = StandardNormal.sample(&mut *rng);
                    eta + self.noise_var.sqrt() * z
                }
                Family::Logistic => f64::from(u8::from(rng.random::<f64>() < sigmoid(eta))),
                // A mean beyond the largest count is clamped there anyway.
                Family::Poisson => Poisson::new(eta.exp().clamp(f64::MIN_POSITIVE, y_hi + 1.0))
                    .expect("a positive finite mean")
                    .sample(&mut *rng),
            };
            row[p] = y.clamp(y_lo, y_hi);
            for (j, v) in row.iter().enumerate() {
                values[j * n + i] = *v;
            }
        }
        Columns::from_column_major(n, p + 1, values).expect("finite simulated data")
    }
}
