//! How many tokens a text is estimated to be, the one rule every estimate of svc counts by.
//!
//! The rule: **about four ASCII bytes make a token, and every other character is a token of its own**
//! ([`text_tokens`]). Real tokenizers average three to five ASCII characters a token on prose and code, and
//! rarely split a character into more than two. Where the gateway must not under-count (a reservation, a
//! charge in place of a missing count), it counts twice that ([`conservative`]); where it must not cut a
//! well-behaved stream short, it counts once and leaves a margin (see the gateway's stream stage).
//!
//! Counted in one pass over UTF-8 bytes ([`Counter`]), also as JSON is written into it ([`json_value_tokens`]),
//! so no string is made. What this file does not do: decide which strings count (`generated.rs`) or what a
//! count is used for.

use serde_json::Value;

/// The estimate of `text`'s tokens: ⌈ASCII bytes / 4⌉ plus one per other character.
pub fn text_tokens(text: &str) -> u64 {
    let mut c = Counter::default();
    c.count(text.as_bytes());
    c.tokens()
}

/// Twice [`text_tokens`]: a count that real tokenizers stay under, for reservations and charges.
pub fn conservative(text: &str) -> u64 {
    text_tokens(text).saturating_mul(2)
}

/// Counts the bytes [`text_tokens`] counts, as JSON is written into it.
#[derive(Default)]
pub(crate) struct Counter {
    ascii: u64,
    other: u64,
}

impl Counter {
    /// Counts the characters of UTF-8 `bytes`, in one pass: a character that is not ASCII starts with a byte of
    /// the form 11xxxxxx and goes on with bytes of the form 10xxxxxx. Counted in byte-wide sums of at most 255
    /// bytes, which the compiler turns into vector instructions (16 bytes a step, where `u64` sums took one).
    #[inline]
    pub(crate) fn count(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(255) {
            let (mut high, mut lead) = (0u8, 0u8);
            for &b in chunk {
                high = high.wrapping_add(b >> 7);
                lead = lead.wrapping_add(u8::from(b >= 0xC0));
            }
            self.ascii += (chunk.len() - usize::from(high)) as u64;
            self.other += u64::from(lead);
        }
    }

    /// Takes back `n` ASCII characters counted (whitespace that is not written again).
    pub(crate) fn uncount_ascii(&mut self, n: u64) {
        self.ascii = self.ascii.saturating_sub(n);
    }

    /// [`text_tokens`] of what was counted.
    pub(crate) fn tokens(&self) -> u64 {
        self.ascii.div_ceil(4).saturating_add(self.other)
    }
}

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.count(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// [`text_tokens`] of `v`'s JSON text, counted as it is written (no string is made).
pub(crate) fn json_value_tokens(v: &Value) -> u64 {
    let mut c = Counter::default();
    // Writing to a counter cannot fail.
    let _ = serde_json::to_writer(&mut c, v);
    c.tokens()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_the_documented_rule() {
        assert_eq!(text_tokens(""), 0);
        assert_eq!(text_tokens("abcd"), 1);
        assert_eq!(text_tokens("abcde"), 2);
        assert_eq!(text_tokens("héllo"), 2, "four ASCII bytes and one other character");
        assert_eq!(text_tokens("日本語"), 3);
        assert_eq!(conservative("abcde"), 4);
        // Past the 255 bytes of one byte-wide sum, and characters of two, three and four bytes.
        let long = "aé日😀".repeat(200);
        let chars =
            long.chars().filter(char::is_ascii).count().div_ceil(4) + long.chars().filter(|c| !c.is_ascii()).count();
        assert_eq!(text_tokens(&long), chars as u64);
    }
}
