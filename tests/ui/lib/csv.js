// Reads CSV text as RFC 4180 says (quoted cells, `""` for a quote, CRLF line ends): the rows as arrays of
// cells. Strict: a quote inside an unquoted cell, text after a closing quote or an unclosed quote throws, so a
// test cannot pass on output a spreadsheet would read differently.

export function parseCsv(text) {
  const rows = [];
  let row = [];
  let i = 0;
  if (!text.endsWith('\r\n')) throw new Error('CSV text must end with CRLF');
  while (i < text.length) {
    let cell = '';
    if (text[i] === '"') {
      i += 1;
      for (;;) {
        if (i >= text.length) throw new Error('unclosed quoted cell');
        if (text[i] === '"') {
          if (text[i + 1] === '"') {
            cell += '"';
            i += 2;
          } else {
            i += 1;
            break;
          }
        } else {
          cell += text[i];
          i += 1;
        }
      }
      if (text[i] !== ',' && text[i] !== '\r') throw new Error(`text after a closing quote at ${i}`);
    } else {
      while (i < text.length && text[i] !== ',' && text[i] !== '\r') {
        if (text[i] === '"' || text[i] === '\n') throw new Error(`bare ${JSON.stringify(text[i])} in an unquoted cell at ${i}`);
        cell += text[i];
        i += 1;
      }
    }
    row.push(cell);
    if (text[i] === ',') {
      i += 1;
    } else {
      if (text[i] !== '\r' || text[i + 1] !== '\n') throw new Error(`CR without LF at ${i}`);
      i += 2;
      rows.push(row);
      row = [];
    }
  }
  return rows;
}

/** The first characters after which a spreadsheet reads a cell as a formula (OWASP's list). */
export const DANGEROUS_START = /^[=+\-@\t\r]/;
