package bench

import (
	"fmt"
	"hash/fnv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/processors/dedupe"
	"github.com/heraldhq/herald/schemas"
)

// TaskBackend is the name of the row that runs herald's decision function
// alone.
const TaskBackend = "herald/task"

// RunTask feeds the stream, already encoded, through the dedupe stage's
// tasks in this goroutine, one task per partition as the stage would, and
// commits after every batch of txn records: herald's decision work
// (decoding, both seen-set scopes, encoding every output record) without
// Kafka. It bounds what the stage could do if broker round trips were
// free, and shows how much of a herald/kafka row is CPU in the stage.
// Requests, decisions and accepted notifications are in format f.
func RunTask(s *Stream, policy dedupe.Policy, partitions int32, txn int, f schemas.Format) (Row, error) {
	if partitions < 1 || txn < 1 {
		return Row{}, fmt.Errorf("bench: task: partitions (%d) and transaction size (%d) must be positive", partitions, txn)
	}
	if err := s.CheckPolicy(policy); err != nil {
		return Row{}, err
	}
	tp := dedupe.Topics{Requests: "requests", Decisions: "decisions", Seen: "seen", Accepted: "accepted"}
	recs := make([]*kgo.Record, len(s.Requests))
	offsets := make([]int64, partitions)
	now := time.Now()
	values, err := encodeRequests(s, f)
	if err != nil {
		return Row{}, fmt.Errorf("bench: task: %w", err)
	}
	for i, r := range s.Requests {
		v := values[i]
		h := fnv.New32a()
		h.Write([]byte(r.NotificationID))
		p := int32(h.Sum32() % uint32(partitions))
		recs[i] = &kgo.Record{Topic: tp.Requests, Partition: p, Offset: offsets[p], Key: []byte(r.NotificationID), Value: v, Timestamp: s.Time(i, now)}
		offsets[p]++
	}
	tasks := make([]*dedupe.Task, partitions)
	for p := range tasks {
		tasks[p] = dedupe.NewTask(policy, tp, int32(p))
		tasks[p].RecordFormat = f
	}

	accepted, decisions, outputs, tombstones := 0, 0, 0, 0
	meter := cpuMeter{} // this process: the tasks run on this goroutine
	start := meter.start()
	for off := 0; off < len(recs); off += txn {
		var out stage.Out
		for _, rec := range recs[off:min(off+txn, len(recs))] {
			if err := tasks[rec.Partition].Process(rec, &out); err != nil {
				return Row{}, fmt.Errorf("bench: task: process %d@%d: %w", rec.Partition, rec.Offset, err)
			}
		}
		for _, t := range tasks {
			t.Tick(&out) // as the runtime does after a batch: the seen-set's bucket records
		}
		for _, r := range out.Records() {
			switch r.Topic {
			case tp.Decisions:
				decisions++
			case tp.Accepted:
				accepted++
			case tp.Seen:
				if r.Value == nil {
					tombstones++
				}
			}
		}
		outputs += out.Len()
		for _, t := range tasks {
			t.Commit() // after the count: from here the tasks reuse the outputs' memory
		}
	}
	sp := meter.end(start)
	return Row{
		Backend:   TaskBackend,
		Variant:   fmt.Sprintf("dedupe tasks only, no Kafka, batches of %d, records %s", txn, f),
		Records:   len(recs),
		Accepted:  accepted,
		Decisions: decisions,
		Elapsed:   sp.elapsed,
		CPU:       sp.cpu,
		Note: fmt.Sprintf("1 goroutine; %d output records (%.2f per request, %.2f of them tombstones) encoded, not sent",
			outputs, float64(outputs)/float64(len(recs)), float64(tombstones)/float64(len(recs))),
	}, nil
}
