// Package sinks owns the one delivery runtime every channel runs on: it
// consumes herald.deliveries.<channel> (read_committed), keeps the channel's
// sent-set, write-ahead intents and parked retries in the compacted topic
// herald.sinkstate.<channel> (co-partitioned with the deliveries, restored on
// assignment by internal/stage), calls the provider through a Provider
// adapter with many calls in flight, classifies every result, and commits
// attempts, outcomes, dead letters and device retirements to Kafka in
// transactions. A provider adapter (sinks/apns, sinks/fcm, sinks/webpush,
// sinks/email, sinks/webhook) only makes one call and classifies its result; everything
// else is here, once. An adapter whose invalidated target is not a device
// (a webhook endpoint) is a Retirer: its records replace the device update. A channel whose delivery is a Kafka write (sinks/feed) is a Writer:
// its records commit in the transaction that consumes the command, with the
// attempt and the outcome, and nothing is called after the commit.
//
// # One delivery, step by step
//
//  1. A command arrives. If its delivery id is in the sink's state (final:
//     the sent-set; pending or parked: already in progress) it is not sent
//     again, and a Decision (stage sink, outcome duplicate) says so on
//     herald.decisions. An expired command ends with outcome expired; one with a future
//     NotBefore is parked.
//  2. Otherwise the intent (state pending, attempt n, the command) is
//     committed in one transaction with the input offsets, BEFORE the call.
//  3. After that commit the runtime calls the provider (stage.Config
//     AfterCommit): up to MaxInFlight calls at once, each bounded by
//     CallTimeout, with the ids of the command only, so every attempt of a
//     delivery carries the same apns-id and collapse id.
//  4. The results are committed in the next transaction, before any more
//     input is read and before the partitions can move: an Attempt record
//     for every call, and the delivery's next state: final (with its
//     Outcome, and a herald.devices update when the provider invalidated
//     the token, and the command on herald.deadletters when it failed), or
//     parked with a not-before time.
//  5. Parked deliveries whose time has come are promoted to a new intent
//     (attempt n+1) in a later transaction: retries wait in the state topic,
//     never in a partition.
//  6. A command redriven from its dead letter (header HeaderRedrive, the
//     attempt n it failed at; sinks/deadletters writes it) starts attempt
//     n+1 with a fresh retry budget (SinkEntry.AttemptBase) only while the
//     delivery is final with outcome failed at attempt n; any other copy of
//     it is a duplicate, not sent. So each dead letter is sent again at
//     most once, however often it is redriven
//     (TestARedriveStartsANewAttemptOnlyWhileTheDeliveryIsFailedWhereItsDeadLetterSays).
//
// # Classification
//
// Every call ends in one class; the adapter's package doc has the table
// from the provider's documented reason codes.
//
//	class       meaning                                              then
//	success     the provider accepted the push                       outcome delivered
//	retryable   nothing reached the provider, or it asked to retry   parked: backoff, Retry-After
//	permanent   it will never succeed (token, payload, auth)          outcome failed (+ dead letter), or
//	                                                                 device_retired for a token error
//	ambiguous   the request was written and no answer came back      parked, like retryable
//
// Retries use internal/backoff (bounded exponential, full jitter) with the
// provider's Retry-After as a floor, and are bounded twice: by MaxAttempts
// (then outcome failed and a dead letter) and by the command's expiry (then
// outcome expired).
//
// # What is guaranteed, and what is not
//
// Inside Kafka the bookkeeping is exactly-once: the intent commits with the
// input offsets, the result (attempt, outcome, state) commits atomically, so
// each attempt number of a delivery has exactly one Attempt record and each
// delivery one Outcome (a second one, expired, only for a repeat of its
// command after the sent-set pruned it, see below; and one more for each
// redrive of its dead letter). Tests:
// TestEachDeliveryOnceUnlessAuditedAmbiguousThroughSIGKILLs (SIGKILLs, the
// emulator's faults, ClickHouse) and TestEachClassificationDoesWhatTheTableSaysOnTheRealBroker.
// The provider call cannot be in a
// transaction. If the sink dies (or its result transaction aborts) after an
// intent committed, the restored state holds that intent without a result:
// the attempt is recorded as ambiguous (classification "interrupted") and the
// delivery is retried with identical ids. So a device may receive a push
// twice only for a delivery with an ambiguous attempt in the audit, and the
// identical apns-id and collapse id let the device show one banner
// (analytics/queries/maybe_shown_twice.sql lists them).
//
// Hazards and their bounds:
//   - The sent-set holds every delivery until Policy.KeepFinal after its
//     expiry (one map entry per delivery id per partition owner; size it as
//     deliveries per MaxAge + KeepFinal), then it is pruned: a repeat of a
//     pruned command is expired, so it gets a second outcome (expired) and
//     is never sent.
//   - A token error retires the device as herald.devices has it (every
//     field kept, Enabled false), and only if it still has the token (or
//     Web Push subscription) the push was sent to; a device removed or
//     registered again with another token is not retired, and the delivery
//     fails (TestATokenErrorRetiresOnlyTheDeviceThatStillHasTheToken). Each
//     instance reads herald.devices (and herald.preferences) whole, with the
//     route stage's route.Table, synced once per transaction that retires:
//     a registration acknowledged before that sync is seen. One written
//     between the sync and the commit (milliseconds) is overwritten by the
//     retirement, as Kafka has no compare-and-set; the device's next
//     registration re-enables it.
//   - Calls run while rebalances are blocked: keep CallTimeout well below
//     the group's rebalance timeout.
package sinks
