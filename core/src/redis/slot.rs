//! Redis Cluster key slots: CRC16 (XMODEM) of the key, or of its hash tag, modulo 16384.

/// The Redis Cluster slot of `key`: of the part between the first `{` and the next `}` when that part
/// is not empty (the hash tag), else of the whole key.
pub fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(bytes);
    crc16(tagged) % 16384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::key_slot;

    #[test]
    fn slots_match_the_cluster_specification() {
        // Examples from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(key_slot("123456789"), 12739);
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(
            key_slot("{user1000}.following"),
            key_slot("{user1000}.followers")
        );
        assert_eq!(key_slot("foo{}{bar}"), key_slot("foo{}{bar}"));
        assert_ne!(
            key_slot("foo{}{bar}"),
            key_slot("bar"),
            "an empty tag hashes the whole key"
        );
        assert_eq!(key_slot("foo{{bar}}zap"), key_slot("{bar"));
    }
}
