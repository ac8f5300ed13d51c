package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/kafkacompress"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/processors/dedupe"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// KafkaOptions configure herald's backend: the dedupe stage, in process,
// exactly-once, on a real Kafka cluster.
type KafkaOptions struct {
	Brokers []string
	// Partitions and Replication of the fresh topic set of each run.
	Partitions  int32
	Replication int16
	// TxnRecords lists the most records per transaction to measure, one
	// run (and one row) each, every run on its own fresh topics.
	TxnRecords []int
	// Compression lists the producers' codecs to measure (kafkacompress
	// names), each with every TxnRecords value; empty measures
	// kafkacompress.Default. The stream's producer and the stage use it.
	Compression []string
	// Instances lists how many stage instances (one group, in this
	// process) decide the stream, one run each with every TxnRecords
	// value; empty means one.
	Instances []int
	// BatchInterval is the longest a transaction collects records (the
	// stage's --batch-interval).
	BatchInterval time.Duration
	// Ceiling adds, for each codec and transaction size, a run of a bare
	// exactly-once copy loop on the same topics (copyOnKafka): what the
	// broker carries with no stage work, beside what the stage decides.
	Ceiling bool
	// SegmentBytes, when positive, is set as segment.bytes on every topic
	// of each run (topics.Options.SegmentBytes). herald's catalog leaves
	// segment.bytes to the broker,
	// whose default is 1 GiB; herald's test broker (scripts/kafka) rolls
	// segments at 1 MiB so that tests see compaction, and on it a run
	// measures the broker rolling segments and its log cleaner compacting
	// herald.seen again and again (55 % of the broker's samples in a JFR
	// profile) more than the stage. Zero keeps the broker's default.
	SegmentBytes int64
	Policy       dedupe.Policy
	// Formats lists the record formats to measure, each with every
	// TxnRecords value: the stream's requests and the stage's decisions
	// and accepted notifications are written in it. Empty measures
	// schemas.FormatBinary (v2), the default of herald's writers.
	Formats []schemas.Format
	// Timeout bounds each run: setup, producing, deciding, counting.
	Timeout    time.Duration
	ClientOpts []kgo.Opt
	Logger     *slog.Logger
}

// formats is Formats, or v2 alone when it is empty.
func (o *KafkaOptions) formats() []schemas.Format {
	if len(o.Formats) == 0 {
		return []schemas.Format{schemas.FormatBinary}
	}
	return o.Formats
}

// KafkaBackend is the name of herald's rows.
const KafkaBackend = "herald/kafka"

// instanceIDs names the k stage instances of a run; its group and so
// their transactional ids are unique per run.
func instanceIDs(k int) []string {
	if k == 1 {
		return []string{"bench"}
	}
	ids := make([]string, k)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench-%d", i)
	}
	return ids
}

// RunKafka measures herald's dedupe stage on s once per TxnRecords value.
// Each run creates a topic set with a unique prefix, produces the stream to
// its requests topic (timed apart: the rows named "produce"), runs one stage
// instance in process until the group has committed every input offset,
// counts the committed decisions and accepted notifications, and deletes
// the topics and the group.
func RunKafka(ctx context.Context, s *Stream, o KafkaOptions) ([]Row, error) {
	if len(o.Brokers) == 0 || len(o.TxnRecords) == 0 {
		return nil, errors.New("bench: kafka: brokers and transaction sizes are required")
	}
	if o.Partitions < 1 || o.Replication < 1 {
		return nil, fmt.Errorf("bench: kafka: partitions (%d) and replication (%d) must be positive", o.Partitions, o.Replication)
	}
	o.Policy = o.Policy.OrDefault() // as the stage does (dedupe.New)
	if err := s.CheckPolicy(o.Policy); err != nil {
		return nil, err
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	formats := o.formats()
	values := map[schemas.Format][][]byte{}
	for _, f := range formats {
		v, err := encodeRequests(s, f)
		if err != nil {
			return nil, fmt.Errorf("bench: kafka: %w", err)
		}
		values[f] = v
	}
	adminCl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(o.Brokers...)}, o.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("bench: kafka: admin client: %w", err)
	}
	defer adminCl.Close()
	adm := kadm.NewClient(adminCl)

	var rows []Row
	var produce []time.Duration
	codecs := o.Compression
	if len(codecs) == 0 {
		codecs = []string{kafkacompress.Default}
	}
	instances := o.Instances
	if len(instances) == 0 {
		instances = []int{1}
	}
	for _, k := range instances {
		if k < 1 {
			return nil, fmt.Errorf("bench: kafka: instances must be positive, got %d", k)
		}
	}
	for _, codec := range codecs {
		compress, err := kafkacompress.Opt(codec)
		if err != nil {
			return rows, fmt.Errorf("bench: kafka: %w", err)
		}
		oc := o
		oc.ClientOpts = append(slices.Clip(o.ClientOpts), compress)
		var runs []run
		for _, f := range formats {
			for _, k := range instances {
				for _, txn := range o.TxnRecords {
					runs = append(runs, run{txn: txn, codec: codec, instances: k, format: f})
				}
			}
		}
		if o.Ceiling {
			for _, txn := range o.TxnRecords {
				runs = append(runs, run{txn: txn, codec: codec, instances: 1, format: formats[0], ceiling: true})
			}
		}
		for _, rn := range runs {
			if rn.txn < 1 {
				return rows, fmt.Errorf("bench: kafka: transaction size must be positive, got %d", rn.txn)
			}
			row, took, err := kafkaRun(ctx, adm, s, values[rn.format], rn, oc)
			if took > 0 {
				produce = append(produce, took)
			}
			if row.Backend != "" {
				rows = append(rows, row) // shown even when its counts are wrong
			}
			if err != nil {
				return rows, err
			}
		}
	}
	if len(produce) > 0 {
		var sum time.Duration
		for _, d := range produce {
			sum += d
		}
		rows = append([]Row{{
			Backend: KafkaBackend, Variant: "produce the stream (setup)", Records: len(s.Requests), Accepted: -1, Decisions: -1,
			Elapsed: sum / time.Duration(len(produce)),
			Note:    fmt.Sprintf("setup, not a decision; mean of %d runs", len(produce)),
		}}, rows...)
	}
	return rows, nil
}

// run is what one run measures: the most records per transaction, the
// producers' codec, the records' format and how many stage instances
// share the stream (or the copy loop instead).
type run struct {
	txn       int
	codec     string
	instances int
	format    schemas.Format
	ceiling   bool // the bare copy loop instead of the stage
}

// kafkaRun is one run on a fresh topic set; it returns the row and how long
// producing the stream took.
func kafkaRun(ctx context.Context, adm *kadm.Client, s *Stream, values [][]byte, rn run, o KafkaOptions) (row Row, produced time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	suffix := randomHex(4)
	// Records stamped Step apart reach back Step × len(values); the event
	// topics keep them a day past that, at least the catalog's default.
	retention := max(topics.DefaultOptions().RetentionMs, (time.Duration(len(values))*s.Options.Step + 24*time.Hour).Milliseconds())
	cat := topics.New(topics.Options{Prefix: "herald-bench-" + suffix + ".", Partitions: o.Partitions, Replication: o.Replication,
		SegmentBytes: o.SegmentBytes, RetentionMs: retention})
	group := "herald-bench-" + suffix
	log := o.Logger.With("backend", KafkaBackend, "txn_records", rn.txn, "compression", rn.codec, "instances", rn.instances, "topic_prefix", cat.Options().Prefix)

	defer func() {
		// Clean up even when ctx is done (an interrupted or failed run).
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer ccancel()
		if _, cerr := cat.Delete(cctx, adm); cerr != nil {
			log.Warn("deleting the benchmark topics failed", "err", cerr)
			err = errors.Join(err, cerr)
		}
		// The stages are static members (KIP-345): they do not leave the
		// group on shutdown, so remove them before deleting the group.
		// A failure here shows in DeleteGroup's error.
		_, _ = adm.LeaveGroup(cctx, kadm.LeaveGroup(group).InstanceIDs(instanceIDs(rn.instances)...).Reason("benchmark over"))
		resp, cerr := adm.DeleteGroup(cctx, group)
		if cerr == nil {
			cerr = resp.Err
		}
		if cerr != nil && !errors.Is(cerr, kerr.GroupIDNotFound) {
			log.Warn("deleting the benchmark group failed", "group", group, "err", cerr)
		}
	}()
	// The prefix is new: Create makes every topic and waits until it is
	// ready.
	if _, err := cat.Create(ctx, adm); err != nil {
		return row, 0, fmt.Errorf("bench: kafka: %w", err)
	}

	produced, err = produceStream(ctx, cat, values, s, rn.format, o)
	if err != nil {
		return row, produced, err
	}
	log.Info("stream produced", "records", len(values), "elapsed", produced.Round(time.Millisecond))

	if rn.ceiling {
		row, err = copyOnKafka(ctx, cat, group, len(values), rn, o, log)
		return row, produced, err
	}
	row, err = decideOnKafka(ctx, adm, cat, group, len(values), rn, o, log)
	if err != nil {
		return row, produced, err
	}
	if row.Accepted, row.Decisions, err = countDecisions(ctx, cat, s, o); err != nil {
		return row, produced, err
	}
	var seen, entries, tombstones int
	err = readCommitted(ctx, cat.Name(topics.Seen), o, func(r *kgo.Record) error {
		seen++
		if r.Value == nil {
			tombstones++
		}
		n, err := dedupe.SeenEntries(r)
		entries += n
		return err
	})
	if err != nil {
		return row, produced, err
	}
	per := func(n int) float64 { return float64(n) / float64(len(values)) }
	row.Note += fmt.Sprintf("; seen-set topic %.2f entries per request in %.2f records, %.2f of them tombstones", per(entries), per(seen), per(tombstones))
	return row, produced, nil
}

// encodeRequests encodes every request of s in format f.
func encodeRequests(s *Stream, f schemas.Format) ([][]byte, error) {
	values := make([][]byte, len(s.Requests))
	for i, r := range s.Requests {
		r.Schema = f.RequestSchema()
		v, err := schemas.Encode(r)
		if err != nil {
			return nil, fmt.Errorf("encode request %d: %w", i, err)
		}
		values[i] = v
	}
	return values, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// produceStream writes every request to the requests topic, keyed by
// notification id, with the producer's own clock as record time (or, with
// a Step, the stream's times up to now: see Stream.Time), and returns how
// long it took.
func produceStream(ctx context.Context, cat *topics.Catalog, values [][]byte, s *Stream, f schemas.Format, o KafkaOptions) (time.Duration, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(o.Brokers...),
		kgo.RecordPartitioner(cat.Partitioner()),
		kgo.ProducerLinger(5 * time.Millisecond),
	}, o.ClientOpts...)...)
	if err != nil {
		return 0, fmt.Errorf("bench: kafka: producer: %w", err)
	}
	defer cl.Close()
	topic := cat.Name(topics.Requests)
	header := []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(f.RequestSchema())}}
	recs := make([]*kgo.Record, len(values))
	now := time.Now()
	for i, v := range values {
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(s.Requests[i].NotificationID), Value: v, Headers: header}
		if s.Options.Step > 0 {
			recs[i].Timestamp = s.Time(i, now)
		}
	}
	start := time.Now()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return 0, fmt.Errorf("bench: kafka: produce to %s: %w", topic, err)
	}
	return time.Since(start), nil
}

// decideOnKafka runs rn.instances stage instances until the group's
// committed offsets on the requests topic add up to n, and times it from
// the moment the group is stable with every instance in it and every
// partition assigned.
func decideOnKafka(ctx context.Context, adm *kadm.Client, cat *topics.Catalog, group string, n int, rn run, o KafkaOptions, log *slog.Logger) (Row, error) {
	committedTxns := metrics.Default.Counter("herald_stage_transactions_total", "transactions ended", "stage", "dedupe", "result", "committed")
	abortedTxns := metrics.Default.Counter("herald_stage_transactions_total", "transactions ended", "stage", "dedupe", "result", "aborted")
	txns0, aborts0 := committedTxns.Value(), abortedTxns.Value()

	ids := instanceIDs(rn.instances)
	runners := make([]*stage.Runner, len(ids))
	var err error
	for i, id := range ids {
		runners[i], err = dedupe.New(dedupe.Options{
			Instance:     stage.Instance{Brokers: o.Brokers, Group: group, InstanceID: id, MaxBatchRecords: rn.txn, BatchInterval: o.BatchInterval, ClientOpts: o.ClientOpts, Logger: stageLogger(ctx, log)},
			Catalog:      cat,
			Policy:       o.Policy,
			RecordFormat: rn.format,
		})
		if err != nil {
			return Row{}, fmt.Errorf("bench: kafka: %w", err)
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, len(runners))
	launched := time.Now()
	for _, r := range runners {
		go func() { done <- r.Run(runCtx) }()
	}
	running := len(runners)
	stopStage := func() error {
		stop()
		var errs []error
		for ; running > 0; running-- {
			errs = append(errs, <-done)
		}
		return errors.Join(errs...)
	}
	defer stopStage()

	requests := cat.Name(topics.Requests)
	// poll calls check every 10 ms until it reports done, the stage stops
	// or ctx ends.
	poll := func(what string, check func() (bool, error)) error {
		for {
			ok, err := check()
			if err != nil {
				return err
			}
			if ok {
				return nil
			}
			select {
			case err := <-done:
				running--
				if err == nil {
					err = errors.New("stopped")
				}
				return fmt.Errorf("bench: kafka: the dedupe stage ended before %s: %w", what, err)
			case <-ctx.Done():
				return fmt.Errorf("bench: kafka: waiting for %s: %w", what, ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	err = poll("owning its partitions", func() (bool, error) {
		gs, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			return false, nil // the group may not exist yet; a dead broker ends in ctx's timeout
		}
		g := gs[group]
		return g.Err == nil && g.State == "Stable" && len(g.Members) == len(runners) && len(g.AssignedPartitions()[requests]) == int(o.Partitions), nil
	})
	if err != nil {
		return Row{}, err
	}
	meter := o.meter()
	start := meter.start()
	var last int64
	err = poll("every input offset committed", func() (bool, error) {
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return false, nil
		}
		var sum int64
		offs.Each(func(r kadm.OffsetResponse) {
			if r.Topic == requests && r.Err == nil {
				sum += r.At
			}
		})
		if sum > int64(n) {
			return false, fmt.Errorf("bench: kafka: group %s committed %d offsets, more than the %d records produced", group, sum, n)
		}
		last = sum
		return sum == int64(n), nil
	})
	if err != nil {
		return Row{}, fmt.Errorf("%w (%d of %d offsets committed)", err, last, n)
	}
	sp := meter.end(start)
	elapsed := sp.elapsed
	if err := stopStage(); err != nil {
		return Row{}, fmt.Errorf("bench: kafka: the dedupe stage: %w", err)
	}
	txns, aborts := committedTxns.Value()-txns0, abortedTxns.Value()-aborts0
	note := fmt.Sprintf("%d commits (%.0f rec/txn), replication %d, startup %.2fs untimed",
		txns, float64(n)/float64(max(txns, 1)), o.Replication, start.at.Sub(launched).Seconds())
	if rn.instances > 1 {
		note = fmt.Sprintf("%d instances in one process, ", rn.instances) + note
	}
	if aborts > 0 {
		note += fmt.Sprintf(", %d aborted", aborts)
	}
	log.Info("stream decided", "elapsed", elapsed.Round(time.Millisecond), "transactions", txns, "aborted", aborts)
	return Row{
		Backend:   KafkaBackend,
		Variant:   fmt.Sprintf("dedupe stage, exactly-once, txn ≤ %d, %s, records %s", rn.txn, rn.codec, rn.format),
		Records:   n,
		Elapsed:   elapsed,
		CPU:       sp.cpu,
		ServerCPU: sp.serverCPU,
		Note:      note,
	}, nil
}

// meter measures this process (the stage runs in it) and the first seed
// broker when it runs on this machine.
func (o KafkaOptions) meter() cpuMeter {
	if len(o.Brokers) == 0 {
		return cpuMeter{}
	}
	return newCPUMeter(o.Brokers[0])
}

// countDecisions reads the decisions and accepted topics read_committed and
// returns the accepted count and the number of decisions. It fails when the
// two topics disagree, when a notification was accepted twice, or when the
// outcomes differ from what the stream must give.
func countDecisions(ctx context.Context, cat *topics.Catalog, s *Stream, o KafkaOptions) (accepted, decisions int, err error) {
	outcomes := map[string]int{}
	err = readCommitted(ctx, cat.Name(topics.Decisions), o, func(r *kgo.Record) error {
		var d schemas.Decision
		if err := schemas.Decode(r.Value, &d); err != nil {
			return err
		}
		outcomes[d.Outcome]++
		decisions++
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	ids := map[string]int{}
	err = readCommitted(ctx, cat.Name(topics.Accepted), o, func(r *kgo.Record) error {
		var a schemas.Accepted
		if err := schemas.Decode(r.Value, &a); err != nil {
			return err
		}
		ids[a.NotificationID]++
		accepted++
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	if accepted != outcomes[schemas.DecisionAccepted] || len(ids) != accepted {
		return accepted, decisions, fmt.Errorf("bench: kafka: %d accepted records (%d distinct notifications) but %d accepted decisions",
			accepted, len(ids), outcomes[schemas.DecisionAccepted])
	}
	if want := s.Outcomes(); fmt.Sprint(outcomes) != fmt.Sprint(want) {
		return accepted, decisions, fmt.Errorf("bench: kafka: decision outcomes %v, the stream must give %v", outcomes, want)
	}
	return accepted, decisions, nil
}

// readCommitted feeds every record of topic (one of the run's topics, of
// o.Partitions partitions) that a read_committed consumer sees, up to each
// partition's settled end now (stage.SettledEnd), to f. Not the last
// stable offset: the stage's last transaction may have committed with its
// markers still on the way, and reading to the last stable offset would
// miss it.
func readCommitted(ctx context.Context, topic string, o KafkaOptions, f func(*kgo.Record) error) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(o.Brokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	}, o.ClientOpts...)...)
	if err != nil {
		return fmt.Errorf("bench: kafka: reader of %s: %w", topic, err)
	}
	defer cl.Close()
	want := map[int32]int64{}
	starts := map[int32]kgo.Offset{}
	for p := range o.Partitions {
		end, err := stage.SettledEnd(ctx, cl, topic, p, slog.New(slog.DiscardHandler)) // its log line speaks of a restore
		if err != nil {
			return fmt.Errorf("bench: kafka: end of %s/%d: %w", topic, p, err)
		}
		if end > 0 {
			want[p] = end
			starts[p] = kgo.NewOffset().AtStart()
		}
	}
	if len(want) == 0 {
		return nil
	}
	// The ends are listed first: the reader consumes only the partitions
	// that have records, from their start.
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: starts})
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("bench: kafka: read %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) { ferr = errors.Join(ferr, fmt.Errorf("partition %d: %w", p, err)) })
		if ferr != nil {
			return fmt.Errorf("bench: kafka: read %s: %w", topic, ferr)
		}
		var rerr error
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if rerr != nil || !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				if err := f(r); err != nil {
					rerr = fmt.Errorf("bench: kafka: %s/%d@%d: %w", topic, r.Partition, r.Offset, err)
				}
			}
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
		if rerr != nil {
			return rerr
		}
	}
	return nil
}

// stageLogger is log at warnings and above, unless log is at debug level:
// the stage's per-partition info lines would drown the benchmark's own.
func stageLogger(ctx context.Context, log *slog.Logger) *slog.Logger {
	if log.Enabled(ctx, slog.LevelDebug) {
		return log
	}
	return slog.New(minLevel{log.Handler(), slog.LevelWarn})
}

// minLevel drops records below min.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(as), h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.min}
}
