// Package schemas owns the record of every herald topic: the Go types, their
// versions, their keys, and the JSON Schema files that producers in other
// languages validate against (schemas/jsonschema/*.json, generated from the
// Go types and checked by a test).
//
// Wire format. Every value is one JSON object whose "schema" field names the
// record and its major version ("herald.request/v1"). Decoders reject an
// unknown record or major version with an error and ignore unknown fields, so
// a minor version adds optional fields and never renames or removes one. A
// tombstone (nil value) on a compacted topic deletes the key.
//
// Codec. The records on the dedupe stage's path (Request, Decision,
// SeenEntry, Accepted: the types marked easyjson:json in records.go) are
// encoded and decoded by code that github.com/mailru/easyjson generates
// (records_easyjson.go; `go generate ./schemas` after changing one of
// them), the others by encoding/json. Decided by measurement (BENCHMARKS.md,
// "Record encoding"): reflection-based encoding/json was most of the
// stage's per-request time and allocations. The wire format does not
// change: the generated code writes the same JSON objects, field for field
// (it escapes  and  as  and  where encoding/json writes the
// short forms, which any JSON reader reads alike), and reads what
// encoding/json reads (a document encoding/json refuses, json.Valid
// refuses first). Two differences in reading: field names match exactly
// (encoding/json also accepts them in another case, which no herald
// producer writes and the JSON Schema files do not allow), and the strings
// of a decoded Request or SeenEntry share one copy of the input instead of
// one allocation each. A binary encoding (Protocol Buffers) was not
// adopted: every consumer (the API's read model, the audit writer, the
// route stage, replay, other languages) reads JSON, and the measured gain
// of the generated JSON code leaves encoding a small part of the cost.
//
// Times are Unix milliseconds (int64). Decisions use record time, never the
// wall clock, so replaying a topic reproduces them.
//
// Keys. A record's key decides its partition and therefore which stage
// instance sees it:
//   - requests and decisions: the notification id (32 lower-case hex);
//   - accepted notifications and preferences: RecipientKey(tenant, recipient);
//   - devices: DeviceKey(tenant, recipient, device), partitioned by its
//     recipient prefix (see RecipientPrefix) so a user's devices share the
//     partition of the user's accepted notifications;
//   - delivery commands, attempts and outcomes: the delivery id;
//   - seen-set entries: SeenKey(kind, scope), written to the partition of the
//     request that created them (a changelog, co-partitioned with requests).
package schemas
