//! The Threefry-2x32 block cipher (20 rounds), JAX's default PRNG, and the interpreter's
//! representation of a `key<fry>` value: one `f64` whose 64 bits are the key's two `u32` words
//! (high word first), so a key array has the shape of its type, like every other array.

use crate::array::Elem;

/// Threefry's rotation constants, alternating by groups of four rounds.
const ROTATIONS: [[u32; 4]; 2] = [[13, 15, 26, 6], [17, 29, 16, 24]];

/// The key-schedule parity constant.
pub const PARITY: u32 = 0x1BD1_1BDA;

/// Threefry-2x32 of the counter `x` under `key`, as `jax.prng.threefry_2x32` computes it.
pub fn threefry2x32(key: [u32; 2], x: [u32; 2]) -> [u32; 2] {
    let ks = [key[0], key[1], key[0] ^ key[1] ^ PARITY];
    let mut x = [x[0].wrapping_add(ks[0]), x[1].wrapping_add(ks[1])];
    for i in 0..5usize {
        for &r in &ROTATIONS[i % 2] {
            x[0] = x[0].wrapping_add(x[1]);
            x[1] = x[1].rotate_left(r) ^ x[0];
        }
        let step = (i + 1) as u32;
        x[0] = x[0].wrapping_add(ks[(i + 1) % 3]);
        x[1] = x[1].wrapping_add(ks[(i + 2) % 3]).wrapping_add(step);
    }
    x
}

/// The interpreter's element of a key: its two words, high first, in the element's bits.
pub fn pack_key(words: [u32; 2]) -> Elem {
    Elem::from_bits((u64::from(words[0]) << 32) | u64::from(words[1]))
}

/// The two words of a key element.
pub fn unpack_key(key: Elem) -> [u32; 2] {
    let bits = key.bits();
    [(bits >> 32) as u32, bits as u32]
}

/// The counter of element `i` of a random block: JAX's `iota_2x32_shape`, the high and low
/// words of the 64-bit row-major index.
pub fn counter(i: u64) -> [u32; 2] {
    [(i >> 32) as u32, i as u32]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threefry_matches_the_random123_known_answers() {
        // Known-answer vectors of Random123's Threefry-2x32-20 (as in JAX's own tests).
        assert_eq!(threefry2x32([0, 0], [0, 0]), [0x6b20_0159, 0x99ba_4efe]);
        assert_eq!(
            threefry2x32([u32::MAX, u32::MAX], [u32::MAX, u32::MAX]),
            [0x1cb9_96fc, 0xbb00_2be7]
        );
        assert_eq!(
            threefry2x32([0x1319_8a2e, 0x0370_7344], [0x243f_6a88, 0x85a3_08d3]),
            [0xc492_3a9c, 0x483d_f7a0]
        );
    }

    #[test]
    fn keys_pack_their_two_words_exactly() {
        for words in [[0, 0], [1, 2], [u32::MAX, 0x7FF8_0001], [0xFFF0_0000, 1]] {
            assert_eq!(unpack_key(pack_key(words)), words);
        }
    }
}
