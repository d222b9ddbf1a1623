//! The one place summary statistics are computed: means of evaluation metrics (here) and the
//! latency percentiles of the benchmarks (`bib-bench`), so a p50 means the same thing in every
//! report.

/// The arithmetic mean of `xs`, or `None` when there are none.
pub fn mean(xs: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (mut s, mut n) = (0.0, 0usize);
    for x in xs {
        s += x;
        n += 1;
    }
    (n > 0).then(|| s / n as f64)
}

/// The `p`-th percentile (0–100) of `values` (in any order): the value at index
/// `round((n − 1) · p / 100)` of the sorted values, so `0` is the minimum, `50` the median (the
/// upper middle of an even count) and `100` the maximum; `0.0` when there are none.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let i = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[i.min(v.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_percentiles() {
        assert_eq!(mean([]), None);
        assert_eq!(mean([1.0, 2.0, 6.0]), Some(3.0));
        let v = [5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 50.0), 3.0);
        assert_eq!(percentile(&v, 99.0), 5.0);
        assert_eq!(percentile(&v, 100.0), 5.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), 3.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }
}
