//! A latent positive definite matrix as the samplers move it: S = LLᵀ with L lower
//! triangular, its entries row by row and its diagonal as logarithms, so every point is
//! positive definite. Under a flat prior on S the density carries the Jacobian
//! 2ⁿ Π L_ii^(n−i+1) (Muirhead 1982, Thm 2.1.9; 1-based i), and the log diagonal one more
//! L_ii each: (n − i + 1) ln L_ii in all, 0-based.
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

/// ln of the flat prior's Jacobian and the log diagonal's, from the coordinates `x`
/// starts with, up to a constant.
pub fn log_jacobian(x: &[f64], n: usize) -> f64 {
    let mut k = 0;
    (0..n)
        .map(|i| {
            k += i;
            let v = (n - i + 1) as f64 * x[k];
            k += 1;
            v
        })
        .sum()
}

/// Writes into `out` the gradient in the coordinates of a density whose gradient in S is
/// `g` (symmetric: dℓ = tr(G dS)), with the Jacobian's: 2GL on the lower triangle, times
/// L_ii on the log diagonal.
pub fn gradient(g: &DMatrix<f64>, l: &DMatrix<f64>, out: &mut [f64]) {
    let n = l.nrows();
    let d_l = (g * l) * 2.0;
    let mut k = 0;
    for i in 0..n {
        for j in 0..=i {
            out[k] = if i == j {
                d_l[(i, i)] * l[(i, i)] + (n - i + 1) as f64
            } else {
                d_l[(i, j)]
            };
            k += 1;
        }
    }
}
