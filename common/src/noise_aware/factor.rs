//! A latent positive definite matrix as the samplers move it: S = LLᵀ with L lower
//! triangular, its entries row by row and its diagonal as logarithms, so every point is
//! positive definite. Under a flat prior on S the density carries the Jacobian
//! 2ⁿ Π L_ii^(n−i+1) (Muirhead 1982, Thm 2.1.9; 1-based i), and the log diagonal one more
//! L_ii each: (n − i + 1) ln L_ii in all, 0-based. A prior ∝ det(S)^k = Π L_ii^(2k) adds
//! 2k ln L_ii.
use nalgebra::DMatrix;

/// Appends `l`'s coordinates to `x`.
pub fn push(x: &mut Vec<f64>, l: &DMatrix<f64>) {
    for i in 0..l.nrows() {
        for j in 0..=i {
            x.push(if i == j { l[(i, i)].ln() } else { l[(i, j)] });
        }
    }
}

/// The n×n factor whose coordinates `x` starts with.
pub fn read(x: &[f64], n: usize) -> DMatrix<f64> {
    let mut l = DMatrix::zeros(n, n);
    let mut k = 0;
    for i in 0..n {
        for j in 0..=i {
            l[(i, j)] = if i == j { x[k].exp() } else { x[k] };
            k += 1;
        }
    }
    l
}

/// The power of L_ii in the density under a prior ∝ det(S)^`det_power`, 0-based i.
fn diagonal_power(n: usize, i: usize, det_power: f64) -> f64 {
    (n - i + 1) as f64 + 2.0 * det_power
}

/// ln of the prior ∝ det(S)^`det_power` (0: flat) with its Jacobian and the log diagonal's,
/// from the coordinates `x` starts with, up to a constant.
pub fn log_jacobian(x: &[f64], n: usize, det_power: f64) -> f64 {
    let mut k = 0;
    (0..n)
        .map(|i| {
            k += i;
            let v = diagonal_power(n, i, det_power) * x[k];
            k += 1;
            v
        })
        .sum()
}

/// Writes into `out` the gradient in the coordinates of a density whose gradient in S is
/// `g` (symmetric: dℓ = tr(G dS)), with [`log_jacobian`]'s: 2GL on the lower triangle,
/// times L_ii on the log diagonal.
pub fn gradient(g: &DMatrix<f64>, l: &DMatrix<f64>, det_power: f64, out: &mut [f64]) {
    let n = l.nrows();
    let d_l = (g * l) * 2.0;
    let mut k = 0;
    for i in 0..n {
        for j in 0..=i {
            out[k] = if i == j {
                d_l[(i, i)] * l[(i, i)] + diagonal_power(n, i, det_power)
            } else {
                d_l[(i, j)]
            };
            k += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The power of det S adds k·ln det(LLᵀ) to the log density and its gradient's
    /// log-diagonal entries (the only coordinates det S depends on) 2k each.
    #[test]
    fn a_power_of_the_determinant_adds_its_log() {
        let n = 3;
        let x = [0.3, 0.5, -0.2, 1.1, -0.7, 0.4];
        let l = read(&x, n);
        let ln_det = (&l * l.transpose()).determinant().ln();
        let k = 1.5;
        let added = log_jacobian(&x, n, k) - log_jacobian(&x, n, 0.0);
        assert!(
            (added - k * ln_det).abs() < 1e-12,
            "{added} vs {}",
            k * ln_det
        );
        let zero = DMatrix::zeros(n, n);
        let (mut with, mut without) = (vec![0.0; 6], vec![0.0; 6]);
        gradient(&zero, &l, k, &mut with);
        gradient(&zero, &l, 0.0, &mut without);
        let diagonal = [0, 2, 5];
        for (i, (a, b)) in with.iter().zip(&without).enumerate() {
            let expected = if diagonal.contains(&i) { 2.0 * k } else { 0.0 };
            assert!((a - b - expected).abs() < 1e-12, "coordinate {i}");
        }
    }
}
