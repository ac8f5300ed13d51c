package fallback

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// Forwarder is the stateless stage that re-keys the outcomes or the
// receipts of the chained types onto herald.fallback by notification id,
// and writes its watermarks there (see "Watermarks" in the package doc).
type Forwarder struct {
	Runner *stage.Runner
	kind   string
	source string // the topic it reads
	target string // herald.fallback
	group  string
	probes *probes
	every  time.Duration
	inst   stage.Instance
	log    *slog.Logger
}

// newForwarder builds the forwarder of kind, reading the topic input.
func newForwarder(o Options, kind, input string) (*Forwarder, error) {
	inst := o.Instance
	inst.Group = o.Group + "-" + kind
	// Control records reach the task, so its position passes a
	// transaction's commit marker: a caught-up partition is read to its
	// last stable offset, and the group's committed offset gets there.
	inst.ClientOpts = append(slices.Clip(inst.ClientOpts), kgo.KeepControlRecords())
	cfg := inst.Config("fallback-" + kind)
	cfg.Input = o.Catalog.Name(input)
	target := o.Catalog.Name(topics.Fallback)
	cfg.Outputs = []string{target}
	cfg.Partitioner = Partitioner(o.Catalog)
	cfg.DeadLetterTopic = o.Catalog.Name(topics.DeadLetters)
	log := o.Logger.With("stage", "fallback-"+kind)
	f := &Forwarder{kind: kind, source: cfg.Input, target: target, group: inst.Group, probes: &probes{byPart: map[int32]Probe{}},
		every: o.MarkInterval, inst: o.Instance, log: log}
	cfg.NewTask = func(p int32) stage.Task {
		return &forwardTask{types: o.Types, topic: target, kind: kind, partition: p, probes: f.probes, log: log, pos: -1, pendingPos: -1}
	}
	var err error
	if f.Runner, err = stage.New(cfg); err != nil {
		return nil, err
	}
	return f, nil
}

// Ready reports whether the forwarder's runner is ready.
func (f *Forwarder) Ready() bool { return f.Runner.Ready() }

// Run runs the forwarder and its probe until ctx is done or the runner
// fails.
func (f *Forwarder) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); f.probe(ctx) }()
	defer wg.Wait()
	defer cancel()
	return f.Runner.Run(ctx)
}

// probes are a forwarder's latest probe of each partition of its topic,
// and herald.fallback's partition count, shared by its tasks.
type probes struct {
	mu       sync.Mutex
	byPart   map[int32]Probe
	fallback int32
}

func (ps *probes) get(p int32) (Probe, int32, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	pr, ok := ps.byPart[p]
	return pr, ps.fallback, ok && ps.fallback > 0
}

// probe reads, every MarkInterval, how far each partition of the
// forwarder's topic is committed (Probe), for the tasks to write their
// marks once they have forwarded that far. An error is logged and the
// next round tries again: marks wait meanwhile, and steps with them.
func (f *Forwarder) probe(ctx context.Context) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(f.inst.Brokers...)}, f.inst.ClientOpts...)...)
	if err != nil {
		f.log.Error("the watermark probe has no client; no watermarks will be written", "err", err)
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	tick := time.NewTicker(f.every)
	defer tick.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := f.probeOnce(ctx, adm)
		if ctx.Err() != nil {
			return
		}
		if err != nil && !failing {
			f.log.Warn("watermark probe failed; its marks wait until it succeeds", "err", err)
		} else if err == nil && failing {
			f.log.Info("watermark probe succeeds again")
		}
		failing = err != nil
	}
}

// probeOnce reads the clock, then the source's last stable offsets, then
// its start offsets and the group's committed offsets, and herald.fallback's
// partition count; a partition with an error in any is left as it was.
func (f *Forwarder) probeOnce(ctx context.Context, adm *kadm.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	at := time.Now().UnixMilli() // before the request: see Probe
	ends, err := adm.ListCommittedOffsets(ctx, f.source)
	if err != nil {
		return fmt.Errorf("fallback: last stable offsets of %s: %w", f.source, err)
	}
	starts, err := adm.ListStartOffsets(ctx, f.source)
	if err != nil {
		return fmt.Errorf("fallback: start offsets of %s: %w", f.source, err)
	}
	committed, err := adm.FetchOffsetsForTopics(ctx, f.group, f.source)
	if err != nil {
		return fmt.Errorf("fallback: offsets of group %s: %w", f.group, err)
	}
	td, err := adm.ListTopics(ctx, f.target)
	if err != nil {
		return fmt.Errorf("fallback: partitions of %s: %w", f.target, err)
	}
	d, ok := td[f.target]
	if !ok || d.Err != nil || len(d.Partitions) == 0 {
		return fmt.Errorf("fallback: partitions of %s: not found", f.target)
	}
	n := int32(0)
	for p := range ends[f.source] {
		if p >= 0 {
			n++
		}
	}
	var failed []int32
	f.probes.mu.Lock()
	defer f.probes.mu.Unlock()
	f.probes.fallback = int32(len(d.Partitions))
	for p, end := range ends[f.source] {
		if p < 0 {
			continue
		}
		start, ok := starts.Lookup(f.source, p)
		c, cok := committed.Lookup(f.source, p)
		if end.Err != nil || !ok || start.Err != nil || (cok && c.Err != nil) {
			failed = append(failed, p)
			continue
		}
		pr := Probe{At: at, Start: start.Offset, End: end.Offset, Committed: -1, Partitions: n}
		if cok {
			pr.Committed = c.At
		}
		f.probes.byPart[p] = pr
	}
	if len(failed) > 0 {
		return fmt.Errorf("fallback: offsets of %s partitions %v: not listed", f.source, failed)
	}
	return nil
}

// Partitioner is the catalog's partitioner, except that a forwarder's
// watermark on herald.fallback goes to the partition it names (each is
// written to every partition).
func Partitioner(c *topics.Catalog) kgo.Partitioner {
	return markPartitioner{base: c.Partitioner(), topic: c.Name(topics.Fallback)}
}

type markPartitioner struct {
	base  kgo.Partitioner
	topic string
}

func (m markPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	tp := m.base.ForTopic(topic)
	if topic != m.topic {
		return tp
	}
	return markTopicPartitioner{tp}
}

type markTopicPartitioner struct{ kgo.TopicPartitioner }

func (m markTopicPartitioner) Partition(r *kgo.Record, n int) int {
	if header(r) == schemas.FallbackWatermarkV1 {
		return int(r.Partition)
	}
	return m.TopicPartitioner.Partition(r, n)
}

// forwardTask forwards one partition of herald.outcomes or
// herald.receipts, and writes its watermarks.
type forwardTask struct {
	types     map[string]bool
	topic     string
	kind      string
	partition int32
	probes    *probes
	log       *slog.Logger
	// pos is the offset after the last record read, control records
	// included (-1: none read in this session); marked the time of the
	// last mark written. pending*: the open transaction's.
	pos, pendingPos       int64
	marked, pendingMarked int64
}

var _ stage.Task = (*forwardTask)(nil)

func (f *forwardTask) Restore(*kgo.Record) error { return nil }

func (f *forwardTask) Commit() { f.pos, f.marked = f.pendingPos, f.pendingMarked }

func (f *forwardTask) Abort() { f.pendingPos, f.pendingMarked = f.pos, f.marked }

// Tick writes the mark of the latest probe, to every partition of
// herald.fallback, once the task has forwarded as far as the probe read
// (Markable): in the transaction that commits the offsets of what it
// forwarded, or after the one that did.
func (f *forwardTask) Tick(out *stage.Out) {
	pr, parts, ok := f.probes.get(f.partition)
	if !ok || pr.At <= f.pendingMarked || !Markable(pr, f.pendingPos) {
		return
	}
	b, err := schemas.Encode(&schemas.FallbackWatermark{Marks: []schemas.FallbackMark{{Kind: f.kind, Partition: f.partition,
		Partitions: pr.Partitions, At: pr.At}}})
	if err != nil { // it cannot fail: a struct of strings and numbers
		f.log.Error("encode a watermark", "err", err)
		return
	}
	key := []byte(markKeyOf(f.kind, f.partition))
	for p := range parts {
		out.Emit(&kgo.Record{Topic: f.topic, Partition: p, Key: key, Value: b, Timestamp: time.UnixMilli(pr.At),
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.FallbackWatermarkV1)}}})
	}
	f.pendingMarked = pr.At
}

// Process forwards an outcome or a receipt of a chained type, with its
// record time; anything else (a control record, another type's, an
// undecodable record) is skipped. Every record moves the position.
func (f *forwardTask) Process(r *kgo.Record, out *stage.Out) error {
	f.pendingPos = r.Offset + 1
	var nid, typ string
	switch header(r) {
	case schemas.OutcomeV1:
		var o schemas.Outcome
		if err := schemas.Decode(r.Value, &o); err != nil {
			f.log.Warn("skip an undecodable outcome", "partition", r.Partition, "offset", r.Offset, "err", err)
			return nil
		}
		nid, typ = o.NotificationID, o.Type
		if typ == "" {
			return nil
		}
	case schemas.ReceiptV1:
		var rc schemas.Receipt
		if err := schemas.Decode(r.Value, &rc); err != nil {
			f.log.Warn("skip an undecodable receipt", "partition", r.Partition, "offset", r.Offset, "err", err)
			return nil
		}
		if rc.Kind != schemas.ReceiptDisplayed && rc.Kind != schemas.ReceiptOpened {
			return nil
		}
		nid, typ = rc.NotificationID, rc.Type
	default:
		return nil
	}
	if nid == "" || (typ != "" && !f.types[typ]) {
		return nil
	}
	value := make([]byte, len(r.Value))
	copy(value, r.Value)
	out.Emit(&kgo.Record{Topic: f.topic, Key: []byte(nid), Value: value, Timestamp: r.Timestamp,
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(header(r))}}})
	return nil
}
