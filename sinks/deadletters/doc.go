// Package deadletters owns what operators do with herald.deadletters: list
// the dead letters (filtered, with counts by reason), show one (the record,
// its error, the original input, and, with ClickHouse, its notification's
// audit timeline), and redrive a selection back to the stage it failed in,
// exactly once. `herald deadletters` and /v1/deadletters are thin layers
// over it.
//
// # What is on the topic
//
// Three writers put records on herald.deadletters:
//   - a sink (sinks), for a delivery that failed (a permanent provider error,
//     or retries exhausted): the delivery command itself, keyed by delivery
//     id, with headers herald-reason, herald-attempts (the attempt it failed
//     at) and herald-source (sink.<channel>);
//   - a sink, for a delivery command it cannot read: the raw record, with
//     herald-reason and herald-source (topic/partition@offset);
//   - any stage (internal/stage), for an input or a timer's output that can
//     never be written: a stage.DeadLetter naming the input's position, with
//     header herald-dead-letter-stage.
//
// And this package writes its redrive markers there (header
// herald-redriven: the id of the dead letter redriven), see below. A dead
// letter's id is its position on the topic, "<partition>-<offset>": stable,
// unique, and it finds the record directly.
//
// # Why list and show read the topic, not ClickHouse
//
// A redrive needs the whole delivery command (device token, payload), and
// only the topic has it: the audit writer keeps attempts and outcomes in
// ClickHouse for a year, never commands or tokens. So the topic is the set
// of dead letters that can still be redriven (its retention, seven days by
// default), and its redrive markers say which were; listing anything else
// would offer what cannot be done. Dead letters are few, so reading the
// topic whole per call is cheap. The year-long history stays in ClickHouse:
// every failed delivery is an outcome (status failed) and every redrive a
// decision (stage deadletters, outcome redriven: who, why, which dead letter), and
// show adds the notification's audit timeline from there.
//
// # Redrive, exactly once
//
// A delivery's dead letter (the common case) goes back to
// herald.deliveries.<channel>, keyed by
// its delivery id as the route stage wrote it (so the same partition and
// the same sink state), with header sinks.HeaderRedrive naming the attempt
// it failed at. The sink starts a new attempt only while the delivery is
// still final as that failure left it (outcome failed at that attempt);
// any other copy of the redrive finds it pending, parked or final at a later
// attempt and is not sent (a sink decision, outcome duplicate). That is
// the guarantee, and it holds however many times a redrive is written: the
// sink's sent-set and the delivery id hold it
// (TestARedriveDeliversEachDeadLetterOnce, its subtest "a copy of a
// redrive is not sent again", and the sink's
// TestARedriveStartsANewAttemptOnlyWhileTheDeliveryIsFailedWhereItsDeadLetterSays).
//
// On top of that a redrive writes, per dead letter and in one Kafka
// transaction with its command, a marker on herald.deadletters and a
// decision (outcome redriven) on herald.decisions, which the audit writer
// stores; it skips dead letters that have a marker. Redrives share one
// transactional id, so a redrive fences any other one still running or
// crashed mid-transaction (its open transaction is aborted) before it
// reads the markers; then writes in transactions of Batch dead letters. A
// crash therefore leaves each dead letter either redriven with its marker
// and audit, or not at all, and running the redrive again redrives the
// rest (TestASIGKILLedRedriveDeliversEachDeadLetterOnce).
//
// Hazards and bounds:
//   - A command keeps its expiry: a dead letter whose command has expired is
//     skipped (a push sent days late is worse than none); one with no
//     ExpiresAt is redriven and the sink expires it after its MaxAge.
//   - A stage's dead letter (an input whose outputs could never be written,
//     say too large) names its input's position; a redrive reads that input
//     and writes it again, same key, value and headers, to the partition it
//     was read from (header HeaderRedriveInput), with its marker and audit
//     decision, so the stage decides it again once the cause is fixed
//     (TestAStageDeadLetterIsRedrivenByWritingItsInputAgainOnce). The
//     markers make that once per dead letter; past the stage, the ids it
//     derives (notification id, delivery id) meet the same dedupe seen-set
//     and sink sent-set as the first time. An input no longer on its topic
//     (retention, compaction), a timer's lost output and an unreadable
//     command cannot be redriven: a redrive skips them, saying why.
//   - A redrive marker is written after its dead letter, so it outlives it
//     on the topic; the sink forgets a delivery Policy.KeepFinal after its
//     expiry, when its command can no longer be sent either.
//   - Two redrives at once fence each other: the one fenced fails with an
//     error and writes nothing more; run it again.
//   - Every list, show and redrive reads the topic from its start (the API
//     too, per request): cheap while dead letters are few. Read keeps only
//     the letters its filter selects, so memory is bounded by the answer;
//     after a mass failure (a provider down past every retry) narrow the
//     selection (channel, class, time) and expect each call to take the
//     time of reading the topic.
package deadletters
