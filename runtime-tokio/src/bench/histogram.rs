//! A fixed-size latency histogram in microseconds: exact below 2,048 µs, then 1,024 buckets per
//! power of two (≈ 0.1 % resolution) up to 2^32 µs (71 minutes). Recording is an index
//! computation and an increment: no allocation after construction, so it can sit on the load
//! generator's hot path.

/// Values below this are counted exactly.
const LINEAR: u64 = 2_048;
/// Buckets per power of two above `LINEAR`.
const SUB_BUCKETS: u64 = 1_024;
/// log2 of `LINEAR`.
const LINEAR_BITS: u32 = 11;
/// Largest power of two tracked (values above are clamped into the last bucket).
const MAX_BITS: u32 = 32;
const BUCKETS: usize = (LINEAR + (MAX_BITS - LINEAR_BITS + 1) as u64 * SUB_BUCKETS) as usize;

/// Counts of latencies, in microseconds.
#[derive(Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { counts: vec![0; BUCKETS], total: 0, max: 0 }
    }
}

impl Histogram {
    /// Counts one value.
    pub fn record(&mut self, micros: u64) {
        self.counts[index(micros)] += 1;
        self.total += 1;
        self.max = self.max.max(micros);
    }

    /// Number of values recorded.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// The value at quantile `q` (0..=1), in milliseconds; 0 when empty. Reports the upper edge
    /// of the bucket, so it never understates a latency.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return upper_edge(i).min(self.max) as f64 / 1_000.0;
            }
        }
        self.max as f64 / 1_000.0
    }

    /// The largest value recorded, in milliseconds.
    pub fn max_ms(&self) -> f64 {
        self.max as f64 / 1_000.0
    }
}

fn index(micros: u64) -> usize {
    let value = micros.min((1 << (MAX_BITS + 1)) - 1);
    if value < LINEAR {
        return value as usize;
    }
    let bits = 63 - value.leading_zeros(); // ≥ LINEAR_BITS
    let shift = bits - (LINEAR_BITS - 1);
    let sub = (value >> shift) - SUB_BUCKETS; // 0..SUB_BUCKETS
    (LINEAR + u64::from(bits - LINEAR_BITS) * SUB_BUCKETS + sub) as usize
}

/// The largest value that falls into bucket `i`.
fn upper_edge(i: usize) -> u64 {
    let i = i as u64;
    if i < LINEAR {
        return i;
    }
    let bits = (i - LINEAR) / SUB_BUCKETS + u64::from(LINEAR_BITS);
    let sub = (i - LINEAR) % SUB_BUCKETS;
    let shift = bits - u64::from(LINEAR_BITS - 1);
    ((SUB_BUCKETS + sub + 1) << shift) - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_values_in_order() {
        let mut last = 0;
        for v in [0, 1, 2_047, 2_048, 2_049, 4_095, 4_096, 1_000_000, 1 << 32, u64::MAX] {
            let i = index(v);
            assert!(i >= last, "index is monotonic at {v}");
            assert!(i < BUCKETS);
            if v < 1 << 33 {
                assert!(upper_edge(i) >= v, "upper edge of {v}");
                assert!(upper_edge(i) as f64 <= v as f64 * 1.001 + 1.0, "resolution at {v}");
            }
            last = i;
        }
    }

    #[test]
    fn quantiles() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile_ms(0.5), 0.0);
        for v in 1..=1_000 {
            h.record(v * 10);
        }
        assert_eq!(h.len(), 1_000);
        let p50 = h.quantile_ms(0.5);
        assert!((4.99..=5.01).contains(&p50), "{p50}");
        let p99 = h.quantile_ms(0.99);
        assert!((9.89..=9.91).contains(&p99), "{p99}");
        assert_eq!(h.quantile_ms(1.0), 10.0);
        assert_eq!(h.max_ms(), 10.0);
    }
}
