//! Commit-latency statistics: exact count, mean and maximum, plus p50/p99 from a fixed-memory
//! HdrHistogram (two significant digits: every reported quantile is within 1% of a recorded value).
//!
//! The `hdrhistogram` crate is used rather than a hand-written log-linear histogram: it is the
//! well-known structure with well-tested quantile arithmetic, and with fixed bounds its memory is
//! fixed (about 26 KiB per sink). Values above [`MAX_TRACKED_US`] are counted in the top bucket; the
//! maximum stays exact because it is tracked beside the histogram.

use hdrhistogram::Histogram;

/// The largest latency the histogram tells apart (24 hours, in microseconds). Larger values are
/// counted as this value for quantiles; [`LatencyStats::max`] stays exact.
pub const MAX_TRACKED_US: u64 = 24 * 60 * 60 * 1_000_000;

/// Significant decimal digits kept by the histogram (relative error at most 1%).
pub const SIGNIFICANT_DIGITS: u8 = 2;

/// Latency samples in microseconds, summarised in fixed memory.
#[derive(Debug, Clone)]
pub struct LatencyStats {
    count: u64,
    sum: u128,
    max: u64,
    // Always `Some`: the bounds are constants that `hdrhistogram` accepts (a unit test checks it).
    // An `Option` keeps construction free of panics without an `expect`.
    histogram: Option<Histogram<u64>>,
}

impl Default for LatencyStats {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyStats {
    /// Empty statistics.
    pub fn new() -> Self {
        Self {
            count: 0,
            sum: 0,
            max: 0,
            histogram: Histogram::new_with_bounds(1, MAX_TRACKED_US, SIGNIFICANT_DIGITS).ok(),
        }
    }

    /// Adds one sample.
    pub fn record(&mut self, value_us: u64) {
        self.count = self.count.saturating_add(1);
        self.sum = self.sum.saturating_add(u128::from(value_us));
        self.max = self.max.max(value_us);
        if let Some(h) = self.histogram.as_mut() {
            h.saturating_record(value_us.min(MAX_TRACKED_US));
        }
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Exact arithmetic mean; 0.0 without samples.
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            // u128 → f64 keeps 53 significant bits: exact for any realistic sum of latencies.
            self.sum as f64 / self.count as f64
        }
    }

    /// Exact maximum; 0 without samples.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The value at quantile `q` (0.0..=1.0, clamped), within 1% of a recorded value and never
    /// above the maximum; 0 without samples.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let q = if q.is_nan() { 0.5 } else { q.clamp(0.0, 1.0) };
        match &self.histogram {
            Some(h) => h.value_at_quantile(q).min(self.max),
            None => self.max,
        }
    }

    /// Median.
    pub fn p50(&self) -> u64 {
        self.quantile(0.50)
    }

    /// 99th percentile.
    pub fn p99(&self) -> u64 {
        self.quantile(0.99)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_constant_bounds_are_accepted() {
        assert!(LatencyStats::new().histogram.is_some());
    }

    #[test]
    fn empty_stats_are_zero() {
        let s = LatencyStats::new();
        assert_eq!((s.count(), s.max(), s.p50(), s.p99()), (0, 0, 0, 0));
        assert_eq!(s.mean(), 0.0);
    }

    #[test]
    fn known_distribution() {
        let mut s = LatencyStats::new();
        for v in 1..=1000u64 {
            s.record(v * 100);
        }
        assert_eq!(s.count(), 1000);
        assert_eq!(s.max(), 100_000);
        assert!((s.mean() - 50_050.0).abs() < 1e-9);
        let p50 = s.p50() as f64;
        let p99 = s.p99() as f64;
        assert!((p50 - 50_000.0).abs() / 50_000.0 <= 0.01, "p50 {p50}");
        assert!((p99 - 99_000.0).abs() / 99_000.0 <= 0.01, "p99 {p99}");
    }

    #[test]
    fn zero_and_huge_values() {
        let mut s = LatencyStats::new();
        s.record(0);
        assert_eq!(s.p99(), 0);
        s.record(u64::MAX);
        assert_eq!(s.max(), u64::MAX);
        assert!(s.p99() >= MAX_TRACKED_US - MAX_TRACKED_US / 100);
        assert_eq!(s.quantile(0.0), 0);
        assert_eq!(s.quantile(f64::NAN), 0);
    }

    proptest! {
        #[test]
        fn quantiles_are_within_one_percent_of_the_exact_order_statistic(
            mut values in proptest::collection::vec(0u64..10_000_000_000, 1..400),
            q in 0.0f64..=1.0,
        ) {
            let mut s = LatencyStats::new();
            for v in &values {
                s.record(*v);
            }
            values.sort_unstable();
            // HdrHistogram's rank: the smallest value with at least ceil(q * n) samples at or below.
            let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
            let exact = values[rank - 1] as f64;
            let got = s.quantile(q) as f64;
            prop_assert!((got - exact).abs() <= exact * 0.01 + 1.0, "q={q} exact={exact} got={got}");
            prop_assert!(s.quantile(q) <= s.max());
        }
    }
}
