// Reference implementation of herald's notification id, used by
// differential_test.go: the seed function from DESIGN.md ("Identity"),
// written literally so that the Go implementation is checked against
// JavaScript's own JSON.stringify, key ordering and crypto.
//
// Usage: node canonical.js CASES.jsonl
//
// Each input line is {"t": type, "r": recipient, "k": key}. A key value that
// is an object {"$": "NaN" | "Infinity" | "-Infinity"} stands for that
// number, which JSON cannot spell. Each output line is
// "<id>\t<base64 of the UTF-8 bytes hashed>", in input order.
'use strict';

const crypto = require('crypto');
const fs = require('fs');

function notificationId(type, recipient, key) {
  const sortedKey = {};
  for (const k of Object.keys(key).sort()) sortedKey[k] = key[k];
  const json = JSON.stringify({t: type, r: recipient, k: sortedKey});
  const id = crypto.createHash('sha256').update(json).digest('hex').slice(0, 32);
  return [id, json];
}

const out = [];
for (const line of fs.readFileSync(process.argv[2], 'utf8').split('\n')) {
  if (line === '') continue;
  const c = JSON.parse(line);
  for (const k of Object.keys(c.k)) {
    const v = c.k[k];
    if (v !== null && typeof v === 'object') c.k[k] = Number(v.$);
  }
  const [id, json] = notificationId(c.t, c.r, c.k);
  out.push(id + '\t' + Buffer.from(json, 'utf8').toString('base64'));
}
process.stdout.write(out.join('\n') + '\n');
