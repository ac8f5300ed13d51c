// Package reply owns herald's request–reply on Kafka: how a caller that
// waits for a stage's decision (an API instance answering Prefer: wait, an
// idempotency key or explain) names where the answer goes, and how a stage
// writes it there.
//
// A request record that wants an answer carries the header
// herald-reply-to, the decimal number of a partition of herald.replies
// that its API instance reads (and only that partition). The stage that
// decides writes a copy of its decision record to that partition, in the
// same transaction as the decision itself: a reply is visible to a
// read_committed reader exactly when the decision is, so an instance never
// answers a decision that was aborted, and never misses one that
// committed while it was listening. The dedupe stage copies the header
// onto the accepted notification, so the route stage can answer too.
//
// Cost: a reply is one record per decision that a caller waits for; a
// send that does not wait writes none, and no instance reads another
// instance's partition. Several instances may share a partition (more
// instances than partitions, or a hash collision): each ignores answers to
// requests it did not make, so sharing costs reads, never correctness.
//
// Hazard: a reply is an answer, not a record of what happened. herald.replies
// is kept briefly (an hour) and never audited; the decision on
// herald.decisions stays the record.
package reply

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Header names the partition of herald.replies that wants the answers to
// a request record.
const Header = "herald-reply-to"

// Partition returns the reply partition a record asks for among n
// partitions of herald.replies, and whether it asks for one. A header that
// is not a partition number below n asks for none: a stage never fails its
// transaction (and stalls its partition) producing to a partition that
// does not exist because of what a producer wrote.
func Partition(r *kgo.Record, n int32) (int32, bool) {
	p, ok := FromHeaders(r.Headers)
	return p, ok && p < n
}

// FromHeaders returns the partition the headers name, unchecked.
func FromHeaders(hs []kgo.RecordHeader) (int32, bool) {
	for i := range hs {
		if hs[i].Key != Header {
			continue
		}
		p, err := strconv.ParseInt(string(hs[i].Value), 10, 32)
		if err != nil || p < 0 {
			return 0, false
		}
		return int32(p), true
	}
	return 0, false
}

// AppendHeader returns hs (copied, never changed in place) with the header
// asking for answers on partition p.
func AppendHeader(hs []kgo.RecordHeader, p int32) []kgo.RecordHeader {
	out := make([]kgo.RecordHeader, len(hs), len(hs)+1)
	copy(out, hs)
	return append(out, kgo.RecordHeader{Key: Header, Value: strconv.AppendInt(nil, int64(p), 10)})
}

// Fill makes into the reply to decision: the decision's key, value,
// headers and time, on topic's partition p. into is the caller's (a stage
// carving records from a slab passes one of its own); the reply shares the
// decision's bytes, so they must live as long as both records.
func Fill(into, decision *kgo.Record, topic string, p int32) *kgo.Record {
	*into = kgo.Record{Topic: topic, Partition: p, Key: decision.Key, Value: decision.Value,
		Headers: decision.Headers, Timestamp: decision.Timestamp}
	return into
}

// Of is Fill into a new record.
func Of(decision *kgo.Record, topic string, p int32) *kgo.Record {
	return Fill(new(kgo.Record), decision, topic, p)
}

// For returns the partition of herald.replies an instance reads: its hash
// among n partitions (FNV-1a of the instance id), so instances with
// stable ids keep their partition across restarts.
func For(instanceID string, n int) int32 {
	if n <= 0 {
		return 0
	}
	h := uint32(2166136261)
	for i := 0; i < len(instanceID); i++ {
		h ^= uint32(instanceID[i])
		h *= 16777619
	}
	return int32(h % uint32(n))
}

// ExplainHeader marks a request record as an explain (a dry run): the
// dedupe stage decides it over its seen-set, as it would the same request
// at that place in the partition, answers the decision on the reply
// partition and changes nothing: no decision on herald.decisions, no seen
// entry, no accepted notification, and its time does not move the
// partition's stream time. Every other reader of herald.requests (the
// audit writer, replay) skips it. Because the stage reads a partition in
// order, an explain sees every request appended before it: an API that
// has written a send, then an explain of the same request, is answered
// with the send's effect (read-your-writes).
//
// Hazard: a dedupe stage of a herald before this header existed decides an
// explain as a request and sends it. Upgrade the dedupe stages before the
// API instances.
const ExplainHeader = "herald-explain"

// ExplainRoute is ExplainHeader's value on an explain that also asks for
// the route stage's answer: the dedupe stage, when it would accept the
// request, emits the accepted notification as an explain to the route
// stage, which decides it over its state (rate counters, digests,
// deferrals, devices, preferences) as it would now, answers the
// notification's decision on the same reply partition and changes
// nothing (no decision, no state change, no delivery command, no timer).
const ExplainRoute = "route"

// ExplainsRoute reports whether an explain asks for the route stage's
// answer too.
func ExplainsRoute(r *kgo.Record) bool {
	for i := range r.Headers {
		if r.Headers[i].Key == ExplainHeader {
			return string(r.Headers[i].Value) == ExplainRoute
		}
	}
	return false
}

// ExplainRouteHeader is the header of an explain that asks for the route
// stage's answer.
func ExplainRouteHeader() kgo.RecordHeader {
	return kgo.RecordHeader{Key: ExplainHeader, Value: []byte(ExplainRoute)}
}

// IsExplain reports whether a record is an explain.
func IsExplain(r *kgo.Record) bool {
	for i := range r.Headers {
		if r.Headers[i].Key == ExplainHeader {
			return true
		}
	}
	return false
}
