// Package bench owns herald's side-by-side dedupe benchmark (`herald bench`):
// one request stream, generated once and deterministically from a seed, is
// decided by
//
//   - herald's dedupe stage on a Kafka cluster, exactly-once transactions on
//     (processors/dedupe, in process, on a fresh uniquely named topic set), timed
//     from the moment the stage owns its partitions until every input offset is
//     committed, once per transaction size; its topics get Kafka's default
//     segment size (1 GiB, KafkaOptions.SegmentBytes) whatever the broker's,
//     since a test broker's small segments measure its log cleaner;
//   - optionally (KafkaOptions.Ceiling, `--ceiling`) a bare exactly-once copy
//     loop on the same topics, no herald code: what the broker carries,
//     beside what the stage decides;
//   - the seed design: a PostgreSQL `sends` table with a unique key on the
//     dedupe scope and `insert … on conflict do nothing returning id`, one
//     statement per round trip and in pgx batches (one implicit transaction per
//     batch);
//   - Redis `SET key val NX PX window`, one command per round trip and
//     pipelined.
//
// By default every record is stamped with the time it is produced: a run
// lasts seconds and the stage's windows an hour, so nothing expires and
// the stage's seen-set only grows, as in its first hour. With
// StreamOptions.Step (`--stream-step`) the requests are stamped that far
// apart in the past, and a stream longer than the windows measures the
// stage as it runs after days: expiring keys and writing their tombstones
// (the herald rows' notes count them).
//
// Every backend must accept exactly the stream's distinct notifications; Run
// checks each count and fails loudly on a disagreement. With Config.Rounds
// (`--rounds`) every backend is measured that many times, in turn, and each
// row is the median round with the range of all of them: on a shared host
// one run of the same stage has measured anywhere from 52k to 89k
// requests/s (BENCHMARKS.md), more than most changes being measured.
// Each row also reports the CPU time spent per record in its timed part
// (the "cpu µs/rec" column, see cpu.go): this process's (herald's stage,
// or the PostgreSQL and Redis clients), plus the server's when it listens
// on this machine (the broker; PostgreSQL with its backends; Redis). CPU
// time per record moves far less than records/s on a shared host, and
// the cores divided by the sum of the two is what the machine can carry
// when the backend and its clients share it.
// Results are rows of a plain aligned table or of a Markdown table for
// BENCHMARKS.md.
//
// What each number includes is spelled out on [Row] and on each backend's
// options; the short of it: herald's rows include everything the stage does
// per request (decode, both seen-set scopes, the decision, seen-set and
// accepted records, the transaction commit with the input offsets) but not
// producing the stream into Kafka, which has its own row.
//
// # The front door: scripts/bench-api
//
// The HTTP API is measured by scripts/bench-api with the load generator of
// bench/apiload (`herald bench api`: closed model --clients or open model
// --rate; --sends for a fixed number of sends; --repeat for a share of
// sends repeating an earlier send's dedupeKey and body; --url a,b,c for
// several API instances in turn). Beside herald it can run the seed design
// as a Go service, bench/seedsvc (a baseline, no part of herald: one
// PostgreSQL transaction per send, unique sent-set insert … on conflict do
// nothing returning id plus an outbox row), served by
// scripts/bench-api.d/seedsvc:
//
//	scripts/bench-api --compare                  # herald, then the seed design with synchronous_commit on, then off:
//	                                             # 64 clients, 60,000 sends, 30 % repeats; sends/s, p50, p99,
//	                                             # CPU µs per send of every process and the broker's share
//	scripts/bench-api --api-instances "1 2 3" --rate 2000 --duration 30s
//	                                             # N API instances at one total rate: sends/s, broker CPU per send,
//	                                             # each instance's CPU per send and resident memory
//
// The script's header says what each row includes.
package bench
