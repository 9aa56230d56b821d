//! What a call costs, part by part, as the provider bills it: plain input, output (reasoning included), prompt
//! cache reads, prompt cache writes (5-minute and 1-hour), and server-side tool uses, with the long-context
//! tier (every token of a call whose input passes the tier's threshold at the tier's prices, as Anthropic and
//! Google bill it).
//!
//! Each part is rounded up to the next nano-unit on its own, and the total is their sum, so a spend record's
//! parts always add up to its cost. Everything saturates; nothing here reads a clock or does IO.

use crate::money::{Money, Price, Usage};

/// Pico-units per nano-unit.
const PICOS_PER_NANO: i128 = 1_000;

/// The prices of a long-context tier: used for every token of a call whose input passes `above_tokens`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LongContext {
    /// The input size past which the tier applies (200,000 for Anthropic's and Google's).
    pub above_tokens: u64,
    /// Per input token.
    pub input: Price,
    /// Per output token (`None`: the base output price).
    pub output: Option<Price>,
    /// Per cache-read token (`None`: the tier's input price scaled as the base cache-read price is).
    pub cache_read: Option<Price>,
    /// Per cache-write token (`None`: likewise from the base cache-write price).
    pub cache_write: Option<Price>,
}

/// Everything a deployment charges for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Prices {
    /// Per input token.
    pub input: Price,
    /// Per output token.
    pub output: Price,
    /// Per token read from the prompt cache (`None`: the input price).
    pub cache_read: Option<Price>,
    /// Per token written to the prompt cache for 5 minutes (`None`: the input price).
    pub cache_write: Option<Price>,
    /// Per token written to the prompt cache for an hour (`None`: the 5-minute price).
    pub cache_write_1h: Option<Price>,
    /// The long-context tier, when the model has one.
    pub long: Option<LongContext>,
    /// Per server-side tool use (a web search).
    pub per_tool_use: Money,
}

/// A call's cost, part by part, each rounded up to the next nano-unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cost {
    /// Input tokens neither read from nor written to the prompt cache.
    pub input: Money,
    /// Output tokens.
    pub output: Money,
    /// Input tokens read from the prompt cache.
    pub cache_read: Money,
    /// Input tokens written to the prompt cache (both lifetimes).
    pub cache_write: Money,
    /// Server-side tool uses.
    pub tools: Money,
}

impl Cost {
    /// The sum of the parts.
    pub fn total(&self) -> Money {
        self.input.plus(self.output).plus(self.cache_read).plus(self.cache_write).plus(self.tools)
    }

    /// The parts rescaled to add up to `total` (never negative), in their own proportions: what a charge that
    /// is not the bill itself (a reservation, a capped estimate) holds of each part. The rounding rest goes to
    /// the largest part; a bill of nothing puts all of `total` on input.
    pub fn scaled_to(&self, total: Money) -> Cost {
        let total = i128::from(total.at_least_zero().nanos());
        let parts =
            [self.input, self.output, self.cache_read, self.cache_write, self.tools].map(|m| i128::from(m.nanos()));
        let sum: i128 = parts.iter().sum();
        let mut shares = if sum <= 0 { [total, 0, 0, 0, 0] } else { parts.map(|p| p.saturating_mul(total) / sum) };
        let rest = total - shares.iter().sum::<i128>();
        let largest = (0..5).max_by_key(|&i| shares[i]).unwrap_or(0);
        shares[largest] += rest;
        let m = Money::from_nanos_i128;
        Cost {
            input: m(shares[0]),
            output: m(shares[1]),
            cache_read: m(shares[2]),
            cache_write: m(shares[3]),
            tools: m(shares[4]),
        }
    }
}

/// `tokens` × `price`, rounded up to the next nano-unit.
fn priced(tokens: u64, price: Price) -> Money {
    let picos = i128::from(tokens).saturating_mul(i128::from(price.picos())).max(0);
    Money::from_nanos_i128(picos / PICOS_PER_NANO + i128::from(picos % PICOS_PER_NANO != 0))
}

/// `tier` × `base` / `reference`: a price of the tier derived as the base price relates to the base input price
/// (Anthropic's tier doubles input, and cache prices follow input).
fn scaled(base: Price, reference: Price, tier: Price) -> Price {
    if reference.picos() == 0 {
        return tier;
    }
    let picos = i128::from(base.picos()).saturating_mul(i128::from(tier.picos())) / i128::from(reference.picos());
    Price::from_picos(i64::try_from(picos).unwrap_or(i64::MAX))
}

impl Prices {
    /// Input and output at these prices, nothing else priced apart.
    pub fn flat(input: Price, output: Price) -> Prices {
        Prices { input, output, ..Prices::default() }
    }

    /// The per-token prices that apply to a call with `prompt_tokens` of input: the long-context tier's past
    /// its threshold, else the base ones. `(input, output, cache_read, cache_write_5m, cache_write_1h)`.
    fn for_input(&self, prompt_tokens: u64) -> (Price, Price, Price, Price, Price) {
        let read = self.cache_read.unwrap_or(self.input);
        let write = self.cache_write.unwrap_or(self.input);
        let write_1h = self.cache_write_1h.unwrap_or(write);
        match self.long.filter(|l| prompt_tokens > l.above_tokens) {
            None => (self.input, self.output, read, write, write_1h),
            Some(l) => (
                l.input,
                l.output.unwrap_or(self.output),
                l.cache_read.unwrap_or_else(|| scaled(read, self.input, l.input)),
                l.cache_write.unwrap_or_else(|| scaled(write, self.input, l.input)),
                scaled(write_1h, self.input, l.input),
            ),
        }
    }

    /// The dearest prices a call with up to `prompt_tokens` of input can be billed per input token (plain, or
    /// written to the prompt cache: for an hour only when `hour_cache`) and per output token: what a bound on
    /// its cost must use.
    pub fn dearest(&self, prompt_tokens: u64, hour_cache: bool) -> (Price, Price) {
        let (input, output, read, write, write_1h) = self.for_input(prompt_tokens);
        let written = if hour_cache { write.max(write_1h) } else { write };
        (input.max(read).max(written), output)
    }
}

impl Usage {
    /// What this usage costs at `prices`, part by part. Cache writes and reads are parts of the input tokens
    /// (as the gateway reads every provider's usage); counts that say more than the input are held to it.
    pub fn bill(&self, prices: &Prices) -> Cost {
        let (input, output, read_price, write_price, write_1h_price) = prices.for_input(self.prompt_tokens);
        let written = self.cache_creation_tokens.min(self.prompt_tokens);
        let written_1h = self.cache_creation_1h_tokens.min(written);
        let read = self.cache_read_tokens.min(self.prompt_tokens - written);
        let plain = self.prompt_tokens - written - read;
        let tools = i128::from(prices.per_tool_use.nanos()).saturating_mul(i128::from(self.tool_uses));
        Cost {
            input: priced(plain, input),
            output: priced(self.completion_tokens, output),
            cache_read: priced(read, read_price),
            cache_write: priced(written - written_1h, write_price).plus(priced(written_1h, write_1h_price)),
            tools: Money::from_nanos_i128(tools),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Price {
        Price::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Claude's prices: input 3, output 15, cache read 0.30, 5-minute writes 3.75, 1-hour writes 6 per million;
    /// past 200k of input: input 6, output 22.50.
    fn claude() -> Prices {
        Prices {
            input: p("0.000003"),
            output: p("0.000015"),
            cache_read: Some(p("0.0000003")),
            cache_write: Some(p("0.00000375")),
            cache_write_1h: Some(p("0.000006")),
            long: Some(LongContext {
                above_tokens: 200_000,
                input: p("0.000006"),
                output: Some(p("0.0000225")),
                cache_read: None,
                cache_write: None,
            }),
            per_tool_use: Money::from_nanos(10_000_000),
        }
    }

    fn usage(prompt: u64, completion: u64) -> Usage {
        Usage { prompt_tokens: prompt, completion_tokens: completion, ..Usage::default() }
    }

    #[test]
    fn every_part_is_priced_as_billed() {
        let u = Usage {
            cache_creation_tokens: 3_000,
            cache_creation_1h_tokens: 1_000,
            cache_read_tokens: 10_000,
            tool_uses: 2,
            ..usage(20_000, 500)
        };
        let c = u.bill(&claude());
        // 7,000 plain × 3e-6, 500 × 15e-6, 10,000 × 0.3e-6, 2,000 × 3.75e-6 + 1,000 × 6e-6, 2 × 0.01.
        assert_eq!(c.input, Money::from_nanos(21_000_000));
        assert_eq!(c.output, Money::from_nanos(7_500_000));
        assert_eq!(c.cache_read, Money::from_nanos(3_000_000));
        assert_eq!(c.cache_write, Money::from_nanos(13_500_000));
        assert_eq!(c.tools, Money::from_nanos(20_000_000));
        assert_eq!(c.total(), Money::from_nanos(65_000_000));
    }

    #[test]
    fn past_the_threshold_every_token_is_at_the_tier() {
        let at = usage(200_000, 1_000).bill(&claude());
        assert_eq!((at.input, at.output), (Money::from_nanos(600_000_000), Money::from_nanos(15_000_000)));
        let past = Usage { cache_read_tokens: 1, ..usage(200_001, 1_000) }.bill(&claude());
        assert_eq!(past.input, Money::from_nanos(1_200_000_000));
        assert_eq!(past.output, Money::from_nanos(22_500_000));
        // The cache-read price follows input into the tier: 0.3 × 2 per million.
        assert_eq!(past.cache_read, Money::from_nanos(600));
        assert_eq!(claude().dearest(200_001, true), (p("0.000012"), p("0.0000225")), "a 1-hour write, long");
        assert_eq!(claude().dearest(1_000, false), (p("0.00000375"), p("0.000015")), "a 5-minute write");
    }

    #[test]
    fn parts_round_up_on_their_own_and_add_up() {
        // A tenth of a nano-unit a token.
        let prices = Prices::flat(p("0.0000000001"), p("0.0000000001"));
        let c = usage(1, 1).bill(&prices);
        assert_eq!((c.input, c.output, c.total()), (Money::from_nanos(1), Money::from_nanos(1), Money::from_nanos(2)));
        let c = usage(u64::MAX, u64::MAX).bill(&claude());
        assert!(c.total() >= c.input, "saturates, never wraps");
    }

    #[test]
    fn a_cost_rescaled_keeps_its_proportions_and_adds_up() {
        let m = Money::from_nanos;
        let c = Cost { input: m(300), output: m(100), cache_read: m(0), cache_write: m(0), tools: m(0) };
        let half = c.scaled_to(m(200));
        assert_eq!((half.input, half.output, half.total()), (m(150), m(50), m(200)));
        let odd = c.scaled_to(m(7));
        assert_eq!((odd.input, odd.output, odd.total()), (m(6), m(1), m(7)), "the rest on the largest part");
        assert_eq!(Cost::default().scaled_to(m(5)).input, m(5));
        assert_eq!(c.scaled_to(m(-5)).total(), Money::ZERO);
    }

    #[test]
    fn counts_that_say_more_than_the_input_are_held_to_it() {
        let u =
            Usage { cache_creation_tokens: 50, cache_creation_1h_tokens: 80, cache_read_tokens: 90, ..usage(100, 0) };
        let c = u.bill(&claude());
        // 50 written (all 1 h), 50 read, nothing plain.
        assert_eq!(c.input, Money::ZERO);
        assert_eq!(c.cache_write, priced(50, p("0.000006")));
        assert_eq!(c.cache_read, priced(50, p("0.0000003")));
    }
}
