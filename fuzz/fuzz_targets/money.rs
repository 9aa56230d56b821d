//! The money type on arbitrary input: the text before the first NUL byte is parsed as an amount and as a
//! price, the bytes after it give an amount to display and the token counts and prices of a cost. Nothing
//! panics; `parse` ∘ `Display` is the identity on amounts; an amount and a price parsed from the same text
//! agree; a cost is exact (rounded up to the nano-unit), never negative, monotonic in tokens, and saturates at
//! `i64::MAX` instead of wrapping.

#![no_main]

use libfuzzer_sys::arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use svc_budget::{Money, MoneyError, Price, Prices, Usage};

fuzz_target!(|data: &[u8]| {
    let (text, rest) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let text = String::from_utf8_lossy(text);
    let mut u = Unstructured::new(rest);

    let money = Money::parse(&text);
    let price = Price::parse(&text);
    if let Ok(m) = money {
        assert!(m.nanos() >= 0, "`{text}` parsed to a negative amount");
        assert_eq!(Money::parse(&m.to_string()), Ok(m), "`{text}` does not survive display");
        // A price has three more decimals than an amount.
        match m.nanos().checked_mul(1000) {
            Some(picos) => assert_eq!(price, Ok(Price::from_picos(picos)), "`{text}` as a price"),
            None => assert!(matches!(price, Err(MoneyError::TooLarge(_))), "`{text}` as a price: {price:?}"),
        }
    }
    if let Ok(p) = price {
        assert!(p.picos() >= 0, "`{text}` parsed to a negative price");
        if p.picos() % 1000 == 0 {
            assert_eq!(money, Ok(Money::from_nanos(p.picos() / 1000)), "`{text}` as an amount");
        }
    }

    let any = Money::from_nanos(u.arbitrary::<i64>().unwrap_or_default());
    let shown = any.to_string();
    let decimals = shown.split_once('.').map(|(_, d)| d.len());
    assert!(decimals.is_some_and(|d| (2..=9).contains(&d)), "{any:?} displays as `{shown}`");
    if any.nanos() >= 0 {
        assert_eq!(Money::parse(&shown), Ok(any), "`{shown}` does not parse back");
    } else {
        assert!(matches!(Money::parse(&shown), Err(MoneyError::Negative(_))), "`{shown}` parsed");
    }

    // Prices come from `Price::parse`, so they are never negative.
    let mut next_price = || Price::from_picos(u.arbitrary::<i64>().unwrap_or_default() & i64::MAX);
    let input = price.unwrap_or_else(|_| next_price());
    let output = next_price();
    let (write, read) = (next_price(), next_price());
    let mut next_count = || u.arbitrary::<u64>().unwrap_or_default();
    let usage = Usage { prompt_tokens: next_count(), completion_tokens: next_count(), ..Usage::default() };
    let more = Usage {
        prompt_tokens: usage.prompt_tokens.saturating_add(next_count()),
        completion_tokens: usage.completion_tokens.saturating_add(next_count()),
        ..Usage::default()
    };
    // Billed part by part: the parts add up to the total; with every dimension at the input price a bill costs
    // what the plain cost does (each part rounded up on its own: at most four nano-units more); cache counts
    // above the prompt's are held to it, so they never make a call dearer than its prompt at the dearest price.
    let hour = next_count();
    let cached = Usage {
        cache_creation_tokens: next_count(),
        cache_read_tokens: next_count(),
        cache_creation_1h_tokens: hour,
        ..usage
    };
    let flat = cached.bill(&Prices::flat(input, output));
    let plain = usage.cost(input, output);
    assert!(
        flat.total() >= plain && flat.total() <= plain.plus(Money::from_nanos(4)),
        "{cached:?}: {flat:?} vs {plain:?}"
    );
    let prices = Prices {
        cache_write: Some(write),
        cache_read: Some(read),
        cache_write_1h: Some(write),
        ..Prices::flat(input, output)
    };
    let bill = cached.bill(&prices);
    let parts = [bill.input, bill.output, bill.cache_read, bill.cache_write, bill.tools];
    assert_eq!(parts.iter().fold(Money::ZERO, |a, b| a.plus(*b)), bill.total());
    assert!(parts.iter().all(|p| p.nanos() >= 0));
    let dearest = input.max(write).max(read);
    assert!(
        bill.total() <= usage.cost(dearest, output).plus(Money::from_nanos(4)),
        "{cached:?} costs more than its prompt at {dearest:?}"
    );
    let cost = usage.cost(input, output);
    assert_eq!(cost, exact_cost(usage, input, output), "{usage:?} at {input:?} and {output:?}");
    assert!(cost.nanos() >= 0);
    assert!(more.cost(input, output) >= cost, "more tokens cost less: {more:?} vs {usage:?}");
    assert_eq!(usage.total_tokens(), usage.prompt_tokens.saturating_add(usage.completion_tokens));
});

/// The cost computed without any chance of overflow: pico-units in u128 (or more than any `Money`), rounded up
/// to nano-units, saturated at `i64::MAX`.
fn exact_cost(usage: Usage, input: Price, output: Price) -> Money {
    let part = |tokens: u64, price: Price| u128::from(tokens) * u128::from(price.picos().unsigned_abs());
    let nanos = part(usage.prompt_tokens, input)
        .checked_add(part(usage.completion_tokens, output))
        .map(|picos| picos.div_ceil(1000));
    Money::from_nanos(nanos.and_then(|n| i64::try_from(n).ok()).unwrap_or(i64::MAX))
}
