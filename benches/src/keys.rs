//! Keys as etcd benchmark makes them (a zig-zag varint of the key number at the start of a
//! zero-filled key of `--key-size` bytes), the check that `--key-size` holds `--key-space-size`,
//! and random bytes from fastrand's PRNG (fast, and one per client task: no shared state).

use prost::encoding::{encode_varint, encoded_len_varint};

pub use fastrand::Rng;

/// `n` as Go's `binary.PutVarint` writes it: zig-zag, then prost's (and Go's) unsigned varint.
fn zig_zag(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

/// The bytes Go's `binary.PutVarint` writes for `n`.
pub fn varint_len(n: i64) -> usize {
    encoded_len_varint(zig_zag(n))
}

/// A key of `size` bytes: `n` as a varint, zero-filled to `size` (etcd benchmark's keys). The
/// caller checks that `size` holds the largest `n`; a key too short is truncated, not a panic.
pub fn varint_key(n: u64, size: usize) -> Vec<u8> {
    let mut key = Vec::with_capacity(size.max(10));
    encode_varint(zig_zag(n as i64), &mut key);
    key.resize(size, 0);
    key
}

pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut out = vec![0; n];
    fastrand::fill(&mut out);
    out
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
    fn keys_are_go_varints_zero_filled() {
        // Go: binary.PutVarint(buf, 0) = [0]; 1 = [2]; -1 = [1]; 63 = [126]; 64 = [128 1].
        for (n, size, key) in [
            (0, 1, &[0u8][..]),
            (1, 1, &[2][..]),
            (-1i64 as u64, 1, &[1][..]),
            (63, 1, &[126][..]),
            (64, 2, &[128, 1][..]),
            (64, 8, &[128, 1, 0, 0, 0, 0, 0, 0][..]),
            (64, 1, &[128][..]),
        ] {
            assert_eq!(varint_key(n, size), key, "{n} in {size} bytes");
        }
        assert_eq!((varint_len(i64::MAX), varint_len(-1)), (10, 1));
    }

    #[test]
    fn key_space_fits_key_size() {
        assert!(check_key_space(8, 1).is_ok());
        assert!(check_key_space(1, 64).is_ok());
        assert!(check_key_space(1, 65).is_err());
        assert!(check_key_space(8, 0).is_err());
    }
}
