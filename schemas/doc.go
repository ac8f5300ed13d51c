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
