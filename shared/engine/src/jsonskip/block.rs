//! A string's bytes 64 at a time, as bit masks (bit k: the block's byte k).
//!
//! On x86-64 every mask is 16 byte compares and one `pmovmskb` per 16
//! bytes: SSE2, which every x86-64 has, through `safe_arch`'s safe
//! wrappers (no `unsafe` here). Elsewhere, and in the tests that hold the
//! two to each other, [`portable`] computes the same masks a byte at a
//! time.

/// Bytes looked at together.
pub(crate) const BLOCK: usize = 64;

/// What ends or interrupts a run of plain string bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plain {
    pub quote: u64,
    pub backslash: u64,
    /// A byte below 0x20, which a JSON string may not hold.
    pub control: u64,
}

/// The letters that most often follow a backslash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Letters {
    /// `n`, `t` or `u` (with a block's quotes and backslashes, most of
    /// what is escaped).
    pub common: u64,
    /// `u`, which takes four hex digits after it.
    pub u: u64,
}

/// The bytes of a block escaped by a backslash, given its backslashes and
/// whether its first byte is escaped by a run of backslashes ending the
/// block before (`carry`, 0 or 1; updated for the next block). In a run of
/// backslashes each second one is escaped; the byte after an odd-length
/// run is. The branch-free form is simdjson's (`find_escaped_branchless`).
pub fn escaped(backslash: u64, carry: &mut u64) -> u64 {
    const EVEN: u64 = 0x5555_5555_5555_5555;
    // A backslash escaped by the previous block's starts nothing.
    let backslash = backslash & !*carry;
    let follows = (backslash << 1) | *carry;
    // Runs that start on an odd bit, then every run: adding a run's start
    // to the run carries past its end.
    let odd_starts = backslash & !EVEN & !follows;
    let (even_runs, overflow) = odd_starts.overflowing_add(backslash);
    *carry = u64::from(overflow);
    (EVEN ^ (even_runs << 1)) & follows
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
mod sse2 {
    use super::{BLOCK, Letters, Plain};
    use safe_arch::{
        cmp_eq_mask_i8_m128i as eq, load_unaligned_m128i, m128i, min_u8_m128i, move_mask_i8_m128i,
        set_splat_i8_m128i,
    };

    fn splat(c: u8) -> m128i {
        set_splat_i8_m128i(c as i8)
    }

    /// The block's four vectors, each with its place in the masks.
    fn vectors(block: &[u8; BLOCK]) -> impl Iterator<Item = (u32, m128i)> + '_ {
        let (sixteens, _) = block.as_chunks::<16>();
        sixteens
            .iter()
            .zip((0..).step_by(16))
            .map(|(sixteen, at)| (at, load_unaligned_m128i(sixteen)))
    }

    fn bits(hits: m128i, at: u32) -> u64 {
        u64::from(move_mask_i8_m128i(hits) as u16) << at
    }

    pub fn plain(block: &[u8; BLOCK]) -> Plain {
        let (quote, backslash, below_space) = (splat(b'"'), splat(b'\\'), splat(0x1f));
        let mut m = Plain {
            quote: 0,
            backslash: 0,
            control: 0,
        };
        for (at, v) in vectors(block) {
            m.quote |= bits(eq(v, quote), at);
            m.backslash |= bits(eq(v, backslash), at);
            // A byte of 0x1F or less is its own minimum with 0x1F.
            m.control |= bits(eq(min_u8_m128i(v, below_space), v), at);
        }
        m
    }

    pub fn letters(block: &[u8; BLOCK]) -> Letters {
        let (n, t, u) = (splat(b'n'), splat(b't'), splat(b'u'));
        let mut m = Letters { common: 0, u: 0 };
        for (at, v) in vectors(block) {
            let is_u = eq(v, u);
            m.common |= bits(is_u | eq(v, n) | eq(v, t), at);
            m.u |= bits(is_u, at);
        }
        m
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub use sse2::{letters, plain};

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
pub use portable::{letters, plain};

/// The masks a byte at a time.
#[cfg(any(test, not(all(target_arch = "x86_64", target_feature = "sse2"))))]
pub mod portable {
    use super::{BLOCK, Letters, Plain};

    /// Bit `bit` of each byte of `flags`, as a mask.
    fn plane(flags: &[u8; BLOCK], bit: u32) -> u64 {
        let mut mask = 0u64;
        let (eights, _) = flags.as_chunks::<8>();
        for (k, &eight) in eights.iter().enumerate() {
            let word = u64::from_le_bytes(eight);
            let ones = (word >> bit) & 0x0101_0101_0101_0101;
            // Byte j (0 or 1) of `ones` to bit j of the top byte.
            mask |= (ones.wrapping_mul(0x0102_0408_1020_4080) >> 56) << (8 * k);
        }
        mask
    }

    fn flags(block: &[u8; BLOCK], flag: impl Fn(u8) -> u8) -> [u8; BLOCK] {
        let mut flags = [0u8; BLOCK];
        for (f, &c) in flags.iter_mut().zip(block) {
            *f = flag(c);
        }
        flags
    }

    pub fn plain(block: &[u8; BLOCK]) -> Plain {
        let flags = flags(block, |c| {
            u8::from(c == b'"') | (u8::from(c == b'\\') << 1) | (u8::from(c < 0x20) << 2)
        });
        Plain {
            quote: plane(&flags, 0),
            backslash: plane(&flags, 1),
            control: plane(&flags, 2),
        }
    }

    pub fn letters(block: &[u8; BLOCK]) -> Letters {
        let flags = flags(block, |c| {
            u8::from(b"ntu".contains(&c)) | (u8::from(c == b'u') << 1)
        });
        Letters {
            common: plane(&flags, 0),
            u: plane(&flags, 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_masks_are_the_portable_ones() {
        // Every byte value at every position, among plain bytes and among
        // special ones.
        for fill in [b'a', b'"', b'\\', b'u', 0x01, 0x80, 0xff] {
            for at in 0..BLOCK {
                for c in 0..=255u8 {
                    let mut block = [fill; BLOCK];
                    block[at] = c;
                    block[(at * 7 + 3) % BLOCK] = b'n';
                    assert_eq!(plain(&block), portable::plain(&block), "{c:#x} at {at}");
                    assert_eq!(letters(&block), portable::letters(&block), "{c:#x} at {at}");
                }
            }
        }
    }

    /// Escaped bytes the slow way: after an unescaped backslash.
    fn escaped_one_by_one(block: &[u8], mut carry: bool) -> (u64, bool) {
        let mut mask = 0;
        for (k, &c) in block.iter().enumerate() {
            if carry {
                mask |= 1 << k;
                carry = false;
            } else {
                carry = c == b'\\';
            }
        }
        (mask, carry)
    }

    #[test]
    fn escaped_bytes_are_those_after_an_unescaped_backslash() {
        // Runs of every length at every offset, with and without a carry,
        // and a pseudo-random mix of backslashes.
        let mut blocks = Vec::new();
        for len in 1..=BLOCK {
            for at in 0..=BLOCK - len {
                let mut block = [b'a'; BLOCK];
                block[at..at + len].fill(b'\\');
                blocks.push(block);
            }
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            let mut block = [b'a'; BLOCK];
            for c in &mut block {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if !x.is_multiple_of(3) {
                    *c = b'\\';
                }
            }
            blocks.push(block);
        }
        for block in blocks {
            for carry_in in [false, true] {
                let mut carry = u64::from(carry_in);
                let got = escaped(plain(&block).backslash, &mut carry);
                let want = escaped_one_by_one(&block, carry_in);
                assert_eq!(
                    (got, carry == 1),
                    want,
                    "{:?} {carry_in}",
                    block.escape_ascii()
                );
            }
        }
    }
}
