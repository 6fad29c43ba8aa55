//! The least-squares fit behind every table's per-item figures (c1, c2, c3 of the watch table,
//! per key and per version of the storage table): `y ≈ c·x` with no intercept, each row weighed
//! by its relative error.

/// Least squares of `y ≈ c·x` (no intercept) over `(x, y)` points, each point's residual
/// weighted by `1 / max(|y|, floor)`: the fit minimizes relative error, so a 1k-watch row counts
/// as much as a 10M-watch one. `None` when the points do not determine the `N` coefficients.
pub fn fit<const N: usize>(points: &[([f64; N], f64)], floor: f64) -> Option<[f64; N]> {
    if points.len() < N || N == 0 {
        return None;
    }
    // Columns scaled to a maximum of 1, so that conditioning is judged on shape, not units.
    let mut scale = [0f64; N];
    for (x, _) in points {
        for (s, v) in scale.iter_mut().zip(x) {
            *s = s.max(v.abs());
        }
    }
    if scale.contains(&0.0) {
        return None;
    }
    // The augmented normal equations, N rows of N + 1.
    let mut a = vec![vec![0f64; N + 1]; N];
    for (x, y) in points {
        let w = 1.0 / y.abs().max(floor);
        let xs: Vec<f64> = x.iter().zip(&scale).map(|(v, s)| v / s * w).collect();
        for (i, row) in a.iter_mut().enumerate() {
            for (j, cell) in row.iter_mut().take(N).enumerate() {
                *cell += xs[i] * xs[j];
            }
            row[N] += xs[i] * y * w;
        }
    }
    let trace: f64 = (0..N).map(|i| a[i][i]).sum();
    // Gaussian elimination with partial pivoting.
    for col in 0..N {
        let pivot = (col..N).max_by(|&p, &q| a[p][col].abs().total_cmp(&a[q][col].abs()))?;
        a.swap(col, pivot);
        if a[col][col].abs() <= trace * 1e-10 {
            return None;
        }
        let pivot_row = a[col].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot_row[col];
                for (x, p) in row.iter_mut().zip(&pivot_row).skip(col) {
                    *x -= f * p;
                }
            }
        }
    }
    let mut c = [0f64; N];
    for (i, ci) in c.iter_mut().enumerate() {
        *ci = a[i][N] / a[i][i] / scale[i];
    }
    Some(c)
}

/// `base + c·terms`, the coefficients taken as at least 0.
pub fn predict(base: f64, c: &[f64; 3], terms: &[f64; 3]) -> f64 {
    base + c.iter().zip(terms).map(|(c, t)| c.max(0.0) * t).sum::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memtable::{quick_rows, row, small_rows, ETCD_ROWS};

    #[test]
    fn fit_recovers_exact_coefficients() {
        let c = [21e3, 2.5e3, 80.0];
        let pts: Vec<_> = ETCD_ROWS.iter().map(|r| (r.terms(), predict(0.0, &c, &r.terms()))).collect();
        let got = fit(&pts, 1e6).expect("determined");
        for (g, w) in got.iter().zip(c) {
            assert!((g - w).abs() / w < 1e-6, "{got:?}");
        }
        // The small rows alone determine all three.
        let pts: Vec<_> = small_rows().iter().map(|r| (r.terms(), predict(0.0, &c, &r.terms()))).collect();
        let got = fit(&pts, 1e6).expect("determined");
        assert!((got[2] - 80.0).abs() < 1e-3, "{got:?}");
    }

    #[test]
    fn fit_needs_independent_rows() {
        // One watch per stream everywhere: streams and watches always equal.
        let rows = [row(1000, 1, 1), row(2000, 1, 1), row(1000, 10, 1), row(5000, 50, 1)];
        let pts: Vec<_> = rows.iter().map(|r| (r.terms(), 1e6 * r.clients as f64)).collect();
        assert_eq!(fit(&pts, 1e6), None);
        assert_eq!(fit(&pts[..2], 1e6), None);
    }

    #[test]
    fn fit_weighs_rows_by_relative_error() {
        // Noise of +10 % on a small row moves c1 by about that much, not by a big row's scale.
        let c = [20e3, 3e3, 100.0];
        let mut pts: Vec<_> =
            quick_rows().iter().map(|r| (r.terms(), predict(0.0, &c, &r.terms()))).collect();
        pts[0].1 *= 1.1;
        let got = fit(&pts, 1e6).expect("determined");
        assert!((got[0] - c[0]).abs() / c[0] < 0.2, "{got:?}");
    }
}
