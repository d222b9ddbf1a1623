//! The one dot product of the system's vectors: the embedded store's exact scores, the
//! packer's cosines of unit vectors, `bib_embed::cosine`, and the benchmarks' exact ground
//! truth all add their products in the same order, so they agree to the bit.
//!
//! [`quantized`] holds 8-bit copies for scans where a quarter of the bytes matters more
//! than the last digits (the store's first pass, the packer's units).

pub mod quantized;

/// Dot product of two vectors (0 when their lengths differ), summed in eight lanes — which
/// the compiler turns into SIMD, where one running sum is a chain of dependent additions —
/// then the lanes in order, then the tail.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    let mut lanes = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            lanes[k] += x[k] * y[k];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// `v` scaled to length 1; all zeros when its length is 0 or not finite.
pub fn unit(v: &[f32]) -> Vec<f32> {
    let n: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n == 0.0 || !n.is_finite() {
        return vec![0.0; v.len()];
    }
    v.iter().map(|x| x / n).collect()
}

/// The cosine of `q − m` and `u − m`, from dot products: `qu` = q·u, `qm` = q·m, `mu` = m·u,
/// `mm` = m·m, `qq` = q·q, `uu` = u·u. Scores against a set centered on its mean `m` without
/// writing a centered copy of any vector. 0 when either difference is (nearly) zero.
pub fn centered_cosine(qu: f32, qm: f32, mu: f32, mm: f32, qq: f32, uu: f32) -> f32 {
    let q_len = (qq - 2.0 * qm + mm).max(0.0).sqrt();
    let u_len = (uu - 2.0 * mu + mm).max(0.0).sqrt();
    let denominator = q_len * u_len;
    if denominator > 1e-6 {
        (qu - qm - mu + mm) / denominator
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_the_plain_sum() {
        let a: Vec<f32> = (0..21).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..21).map(|i| (i as f32 * 0.11).cos()).collect();
        let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - plain).abs() < 1e-5);
        assert_eq!(dot(&a, &b[..20]), 0.0);
        assert_eq!(dot(&[], &[]), 0.0);
    }

    #[test]
    fn centered_cosine_is_the_cosine_of_the_differences() {
        let q = [0.3f32, -0.5, 0.8, 0.1];
        let u = [0.6f32, 0.2, -0.1, 0.4];
        let m = [0.1f32, 0.1, 0.2, -0.05];
        let qc: Vec<f32> = q.iter().zip(&m).map(|(a, b)| a - b).collect();
        let uc: Vec<f32> = u.iter().zip(&m).map(|(a, b)| a - b).collect();
        let want = dot(&qc, &uc) / (dot(&qc, &qc).sqrt() * dot(&uc, &uc).sqrt());
        let got = centered_cosine(
            dot(&q, &u),
            dot(&q, &m),
            dot(&m, &u),
            dot(&m, &m),
            dot(&q, &q),
            dot(&u, &u),
        );
        assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        // a vector equal to the mean has no direction left
        assert_eq!(centered_cosine(0.5, 0.5, 0.5, 0.5, 1.0, 0.5), 0.0);
    }

    #[test]
    fn unit_has_length_one_or_is_zero() {
        let u = unit(&[3.0, 4.0]);
        assert!((dot(&u, &u) - 1.0).abs() < 1e-6 && (u[0] - 0.6).abs() < 1e-6);
        assert_eq!(unit(&[0.0, 0.0]), vec![0.0, 0.0]);
        assert_eq!(unit(&[f32::INFINITY, 1.0]), vec![0.0, 0.0]);
    }
}
