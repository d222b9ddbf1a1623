//! The one dot product of the system's vectors: the embedded store's exact scores, the
//! packer's cosines of unit vectors, `bib_embed::cosine`, and the benchmarks' exact ground
//! truth all add their products in the same order, so they agree to the bit.

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
}
