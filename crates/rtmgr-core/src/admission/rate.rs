//! Request rate limits per user (rtkit's bursts: at most N actions per burst
//! of S seconds, then refusals until the burst ends). Pure: the time comes in.

/// One user's current burst.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Burst {
    start_ns: u64,
    count: u32,
}

/// A request over the limit: when the next one will be accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateRefusal {
    pub limit: u32,
    pub burst_ns: u64,
    pub retry_after_ns: u64,
}

impl Burst {
    /// Count one request at `now_ns`; Err when the burst already holds `limit`.
    pub fn take(&mut self, now_ns: u64, limit: u32, burst_ns: u64) -> Result<(), RateRefusal> {
        if self.count == 0 || now_ns.saturating_sub(self.start_ns) >= burst_ns {
            self.start_ns = now_ns;
            self.count = 0;
        }
        if self.count >= limit {
            return Err(RateRefusal {
                limit,
                burst_ns,
                retry_after_ns: (self.start_ns + burst_ns).saturating_sub(now_ns),
            });
        }
        self.count += 1;
        Ok(())
    }

    /// Whether the burst is over (its record can be dropped).
    pub fn expired(&self, now_ns: u64, burst_ns: u64) -> bool {
        now_ns.saturating_sub(self.start_ns) >= burst_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_per_burst_then_a_new_burst() {
        let mut b = Burst::default();
        for i in 0..3 {
            assert!(b.take(i, 3, 100).is_ok());
        }
        let r = b.take(10, 3, 100).unwrap_err();
        assert_eq!(r.retry_after_ns, 90);
        assert!(!b.expired(50, 100));
        assert!(b.take(100, 3, 100).is_ok(), "a new burst starts");
        assert!(b.expired(200, 100));
    }
}
