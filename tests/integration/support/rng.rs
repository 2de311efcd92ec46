//! A small seeded generator for the randomised real-CLI runs (the typing
//! trials, the soak): the same seed repeats the same run, and each run
//! prints its seed.

/// xorshift64*: fast, good enough to pick moments and mixes.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is made 1: xorshift never leaves 0).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }

    /// True `percent` times in a hundred (fractions allowed).
    pub fn percent(&mut self, percent: f64) -> bool {
        (self.next() % 1_000_000) as f64 / 10_000.0 < percent
    }
}

/// A fresh seed (printed by the caller, so a run can be repeated).
pub fn seed() -> u64 {
    uuid::Uuid::new_v4().as_u128() as u64 | 1
}

/// The variable `name` parsed, or `default` when unset or unparsable.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
