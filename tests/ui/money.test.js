// Money as it is (issue 30): the dashboard prints amounts with the precision they have, never rounding a small
// cost to 0.00. `money()` of crates/svc-gateway/ui/js/dom.js, in Node (nothing browser-only runs at its top
// level). The decimal separator is the locale's; these checks read it as a point.

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { money } from '../../crates/svc-gateway/ui/js/dom.js';

const plain = (v) => money(v).replace(/[^\d.,-]/g, '').replace(/,(?=\d{3}\b)/g, '').replace(',', '.');

describe('money', () => {
  it('keeps the decimals an amount has, at least two, at most the store’s nine', () => {
    assert.equal(plain(0.0049), '0.0049');
    assert.equal(plain(0.005), '0.005');
    assert.equal(plain(0.000000123), '0.000000123');
    assert.equal(plain(0), '0.00');
    assert.equal(plain(50), '50.00');
    assert.equal(plain(40.5), '40.50');
    assert.equal(plain(0.1 + 0.2), '0.30', 'float noise past the nano-unit is not money');
    assert.equal(money(null), '—');
  });
});
