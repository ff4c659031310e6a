//! Small statistics helpers: quantiles, medians, min/max.

/// The `q`-quantile (0..=1) of `values` by the nearest-rank method; `None` if empty.
/// NaNs are ignored.
///
/// ```
/// use kopf_bench::stats::quantile;
/// let v = [5.0, 1.0, 3.0, 2.0, 4.0];
/// assert_eq!(quantile(&v, 0.5), Some(3.0));
/// assert_eq!(quantile(&v, 1.0), Some(5.0));
/// assert_eq!(quantile(&v, 0.0), Some(1.0));
/// assert_eq!(quantile(&[], 0.5), None);
/// ```
#[must_use]
pub fn quantile(values: &[f64], q: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(quantile_sorted(&v, q))
}

/// The `q`-quantile of an already sorted, non-empty slice (nearest rank).
///
/// ```
/// assert_eq!(kopf_bench::stats::quantile_sorted(&[1.0, 2.0, 3.0, 4.0], 0.99), 4.0);
/// ```
#[must_use]
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    // Nearest rank: ceil(q * n), at least 1. The product is small and positive.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as usize).max(1);
    sorted[rank.min(n) - 1]
}

/// Median, minimum and maximum of `values` (NaNs ignored); `None` if empty. The median of an
/// even count is the mean of the two middle values.
///
/// ```
/// use kopf_bench::stats::{Summary, summarize};
/// let s = summarize(&[4.0, 1.0, 3.0, 2.0]).unwrap();
/// assert_eq!(s, Summary { median: 2.5, min: 1.0, max: 4.0, count: 4 });
/// ```
#[must_use]
pub fn summarize(values: &[f64]) -> Option<Summary> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        f64::midpoint(v[n / 2 - 1], v[n / 2])
    };
    Some(Summary {
        median,
        min: v[0],
        max: v[n - 1],
        count: n,
    })
}

/// What [`summarize`] returns.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// The median.
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
    /// How many values were summarised.
    pub count: usize,
}
