//! The segment header (ARTiS §2.2 RT-FIFO across processes): byte offsets of
//! its fields and the geometry (record size, capacity, total size), encoded by
//! the creator and validated when a segment from outside is opened.

use super::{FifoError, HEADER_SIZE, MAGIC, MAX_CAPACITY, MAX_RECORD_SIZE, VERSION};

/// Byte offsets of the header fields (the table in the module doc).
pub(super) mod off {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const HEADER_SIZE: usize = 12;
    pub const RECORD_SIZE: usize = 16;
    pub const CAPACITY: usize = 20;
    pub const TOTAL_SIZE: usize = 24;
    /// End of the immutable part.
    pub const FIXED_END: usize = 32;
    pub const TAIL: usize = 128;
    pub const PRODUCER_PID: usize = 132;
    pub const HEAD: usize = 256;
    pub const CONSUMER_PID: usize = 260;
    /// Not on the `head` line, which the consumer writes on every pop.
    pub const WAITING: usize = 384;
}
/// Validated shape of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub record_size: u32,
    pub capacity: u32,
}

impl Geometry {
    /// Check the arguments of a new segment.
    pub fn new(record_size: u32, capacity: u32) -> Result<Self, FifoError> {
        if record_size == 0 || record_size > MAX_RECORD_SIZE {
            return Err(FifoError::InvalidArgument("record size must be 1..=1 MiB"));
        }
        if capacity == 0 || capacity > MAX_CAPACITY {
            return Err(FifoError::Capacity(capacity));
        }
        Ok(Geometry {
            record_size,
            capacity,
        })
    }

    /// Number of slots (one stays empty so that full ≠ empty).
    pub fn slots(&self) -> u32 {
        self.capacity + 1
    }

    /// Bytes of the whole segment.
    pub fn total_size(&self) -> u64 {
        HEADER_SIZE as u64 + u64::from(self.slots()) * u64::from(self.record_size)
    }

    /// The immutable header prefix for this geometry.
    pub fn encode(&self) -> [u8; off::FIXED_END] {
        let mut b = [0u8; off::FIXED_END];
        b[off::MAGIC..off::MAGIC + 8].copy_from_slice(&MAGIC.to_ne_bytes());
        b[off::VERSION..off::VERSION + 4].copy_from_slice(&VERSION.to_ne_bytes());
        b[off::HEADER_SIZE..off::HEADER_SIZE + 4]
            .copy_from_slice(&(HEADER_SIZE as u32).to_ne_bytes());
        b[off::RECORD_SIZE..off::RECORD_SIZE + 4].copy_from_slice(&self.record_size.to_ne_bytes());
        b[off::CAPACITY..off::CAPACITY + 4].copy_from_slice(&self.capacity.to_ne_bytes());
        b[off::TOTAL_SIZE..off::TOTAL_SIZE + 8].copy_from_slice(&self.total_size().to_ne_bytes());
        b
    }

    /// Validate the immutable header prefix of a segment whose mapping is
    /// `map_len` bytes long. `expect_record_size` 0 accepts any record size.
    pub fn decode(
        b: &[u8; off::FIXED_END],
        map_len: u64,
        expect_record_size: u32,
    ) -> Result<Self, FifoError> {
        let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_ne_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        if map_len < HEADER_SIZE as u64 {
            return Err(FifoError::TooSmall {
                size: map_len,
                need: HEADER_SIZE as u64,
            });
        }
        if u64_at(off::MAGIC) != MAGIC {
            return Err(FifoError::BadMagic);
        }
        let version = u32_at(off::VERSION);
        if version != VERSION {
            return Err(FifoError::Version { found: version });
        }
        let hs = u32_at(off::HEADER_SIZE);
        if hs as usize != HEADER_SIZE {
            return Err(FifoError::HeaderSize { found: hs });
        }
        let record_size = u32_at(off::RECORD_SIZE);
        if expect_record_size != 0 && record_size != expect_record_size {
            return Err(FifoError::RecordSize {
                found: record_size,
                expected: expect_record_size,
            });
        }
        if record_size == 0 || record_size > MAX_RECORD_SIZE {
            return Err(FifoError::Corrupt("record size out of range"));
        }
        let capacity = u32_at(off::CAPACITY);
        let g = Geometry::new(record_size, capacity)?;
        let header = u64_at(off::TOTAL_SIZE);
        if header != g.total_size() {
            return Err(FifoError::Geometry {
                header,
                computed: g.total_size(),
            });
        }
        if map_len < header {
            return Err(FifoError::TooSmall {
                size: map_len,
                need: header,
            });
        }
        Ok(g)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn fifo_header_roundtrip(rs in 1u32..=MAX_RECORD_SIZE, cap in 1u32..=MAX_CAPACITY, extra in 0u64..4096) {
            let g = Geometry::new(rs, cap).unwrap();
            prop_assert_eq!(Geometry::decode(&g.encode(), g.total_size() + extra, rs).unwrap(), g);
            prop_assert_eq!(Geometry::decode(&g.encode(), g.total_size(), 0).unwrap(), g);
        }

        #[test]
        fn fifo_header_any_byte_change_is_rejected(rs in 1u32..=4096, cap in 1u32..=100_000, at in 0usize..32, x in 1u8..=255) {
            let g = Geometry::new(rs, cap).unwrap();
            let mut b = g.encode();
            b[at] ^= x;
            prop_assert!(Geometry::decode(&b, u64::MAX, rs).is_err());
        }

        #[test]
        fn fifo_header_short_mapping_is_rejected(rs in 1u32..=4096, cap in 1u32..=100_000, short in 1u64..100_000) {
            let g = Geometry::new(rs, cap).unwrap();
            let len = g.total_size().saturating_sub(short);
            let is_too_small = matches!(Geometry::decode(&g.encode(), len, rs), Err(FifoError::TooSmall { .. }));
            prop_assert!(is_too_small);
        }

        #[test]
        fn fifo_header_wrong_record_size_is_rejected(rs in 1u32..=4096, other in 1u32..=4096, cap in 1u32..=1000) {
            prop_assume!(rs != other);
            let g = Geometry::new(rs, cap).unwrap();
            let is_rs = matches!(Geometry::decode(&g.encode(), g.total_size(), other), Err(FifoError::RecordSize { .. }));
            prop_assert!(is_rs);
        }

        #[test]
        fn fifo_header_random_bytes_never_accepted_inconsistently(b in proptest::array::uniform32(any::<u8>()), len in any::<u64>()) {
            if let Ok(g) = Geometry::decode(&b, len, 0) {
                prop_assert!(g.total_size() <= len);
                prop_assert_eq!(g.encode(), b);
            }
        }
    }
}
