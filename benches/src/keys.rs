//! Keys as etcd benchmark makes them (a zig-zag varint of the key number at the start of a
//! zero-filled key of `--key-size` bytes), the check that `--key-size` holds `--key-space-size`,
//! and a small fast PRNG.

use std::time::{SystemTime, UNIX_EPOCH};

/// Writes `n` as Go's `binary.PutVarint` does (zig-zag, then 7 bits a byte, low bits first) into
/// the front of `buf`. Returns the bytes written, or `None` when `buf` is too short.
pub fn put_varint(buf: &mut [u8], n: i64) -> Option<usize> {
    let mut ux = (n as u64) << 1;
    if n < 0 {
        ux = !ux;
    }
    let mut i = 0;
    while ux >= 0x80 {
        *buf.get_mut(i)? = (ux as u8) | 0x80;
        ux >>= 7;
        i += 1;
    }
    *buf.get_mut(i)? = ux as u8;
    Some(i + 1)
}

/// The bytes `put_varint` needs for `n`.
pub fn varint_len(n: i64) -> usize {
    let mut buf = [0u8; 10];
    put_varint(&mut buf, n).unwrap_or(10)
}

/// A key of `size` bytes: `n` as a varint, zero-filled to `size` (etcd benchmark's keys).
/// The caller checks that `size` holds the largest `n` ([`varint_len`]); a key too short is
/// truncated rather than panicking.
pub fn varint_key(n: u64, size: usize) -> Vec<u8> {
    let mut key = vec![0u8; size.max(10)];
    let _ = put_varint(&mut key, n as i64);
    key.truncate(size);
    key
}

/// xorshift64*: a fast, small, non-cryptographic PRNG, one per client task.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded from the clock and `salt` (the client number), so clients differ.
    pub fn seeded(salt: u64) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9E37_79B9_7F4A_7C15);
        Self::new(nanos ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// A generator with a fixed seed.
    pub fn new(seed: u64) -> Self {
        // splitmix64 once, so that small seeds give well-mixed states; never zero.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Self(if z == 0 { 1 } else { z })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n.max(1) as u128) >> 64) as u64
    }

    /// A float in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(n + 8);
        while out.len() < n {
            out.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        out.truncate(n);
        out
    }
}

/// Checks that keys of `key_size` bytes hold every key number below `key_space_size`.
pub fn check_key_space(key_size: usize, key_space_size: u64) -> Result<(), String> {
    if key_space_size == 0 {
        return Err(format!("expected positive --key-space-size, got ({key_space_size})"));
    }
    let need = varint_len(key_space_size.saturating_sub(1) as i64);
    if key_size < need {
        return Err(format!(
            "--key-size {key_size} is too small for --key-space-size {key_space_size} (keys need {need} bytes)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_match_go() {
        // Go: binary.PutVarint(buf, 0) = [0]; 1 = [2]; -1 = [1]; 63 = [126]; 64 = [128 1].
        let mut buf = [0u8; 10];
        assert_eq!(put_varint(&mut buf, 0), Some(1));
        assert_eq!(buf[0], 0);
        assert_eq!(put_varint(&mut buf, 1), Some(1));
        assert_eq!(buf[0], 2);
        assert_eq!(put_varint(&mut buf, -1), Some(1));
        assert_eq!(buf[0], 1);
        assert_eq!(put_varint(&mut buf, 64), Some(2));
        assert_eq!(&buf[..2], &[128, 1]);
        assert_eq!(varint_len(i64::MAX), 10);
        assert_eq!(put_varint(&mut [0u8; 1], 64), None);
    }

    #[test]
    fn keys_are_zero_filled() {
        assert_eq!(varint_key(64, 8), vec![128, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(varint_key(1, 1), vec![2]);
    }

    #[test]
    fn key_space_fits_key_size() {
        assert!(check_key_space(8, 1).is_ok());
        assert!(check_key_space(1, 64).is_ok());
        assert!(check_key_space(1, 65).is_err());
        assert!(check_key_space(8, 0).is_err());
    }

    #[test]
    fn rng_stays_in_bounds() {
        let mut rng = Rng::new(7);
        for _ in 0..10_000 {
            assert!(rng.below(10) < 10);
            let u = rng.unit();
            assert!((0.0..1.0).contains(&u));
        }
        assert_eq!(rng.bytes(13).len(), 13);
    }
}
