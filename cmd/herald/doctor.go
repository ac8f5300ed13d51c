package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/heraldhq/herald/internal/txnhold"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/auditwriter"
	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/topics"
)

// doctorStdin is where herald doctor --abort-hanging reads its
// confirmations (a test's input in tests).
var doctorStdin io.Reader = os.Stdin

// runDoctor implements `herald doctor`: it checks a running deployment
// against what herald depends on and answers one line per check, ok, warn
// or FAIL with what to do; it exits 1 when a check fails. Checks: the
// brokers, the catalog's topics and partition counts, replication,
// min.insync.replicas, the transaction state log and the offsets topic,
// unclean leader election, topic config drift, hanging transactions, each
// stage group's lag, and, with --clickhouse-addr, the ClickHouse
// migrations. --abort-hanging aborts each hanging transaction after a
// confirmation (or --yes).
func runDoctor(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("doctor")
	var kf kafkaFlags
	kf.register(fs)
	var ch clickhouseFlags
	ch.optional = true
	ch.register(fs)
	f := fs.Lookup("clickhouse-addr")
	f.Usage = "ClickHouse native protocol address (host:port, comma separated for several) whose migration version to check (empty: not checked)"
	f.DefValue = ""
	f.Value.Set("")
	abort := fs.Bool("abort-hanging", false, "abort each hanging transaction, after a confirmation on stdin (or --yes)")
	yes := fs.Bool("yes", false, "with --abort-hanging: abort without asking")
	hangingAfter := fs.Duration("hanging-after", 0, "a transaction open longer than this is hanging (0: its own timeout, or the brokers' transaction.max.timeout.ms when its coordinator does not know it)")
	maxLag := fs.Int64("max-lag", 100_000, "a stage group further behind than this many records is a warning")
	atLeast(fs, "max-lag", maxLag, 0)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *hangingAfter < 0 {
		return fmt.Errorf("%w: %v", errUsage, badField("hanging-after", "must not be negative, got %v", *hangingAfter))
	}
	cl, err := kf.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	cat := kf.catalog()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	view, err := readCluster(ctx, adm, cat)
	if err != nil {
		return err
	}
	maxTimeout := time.Duration(15) * time.Minute
	if v, same := view.brokerConfig("transaction.max.timeout.ms"); same {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
			maxTimeout = time.Duration(ms) * time.Millisecond
		}
	}
	txns, txnErr := openTransactions(ctx, adm, cat, view)
	groups, lagErr := stageLags(ctx, adm, cat)
	now := time.Now()
	findings := []finding{
		checkBrokers(view), checkTopics(cat, view), checkReplication(cat, view), checkMinISR(cat, view),
		checkTxnLog(view), checkOffsetsTopic(view), checkUnclean(cat, view), checkConfigDrift(view),
	}
	if txnErr != nil {
		findings = append(findings, finding{levelFail, "hanging transactions", fmt.Sprintf("could not be checked: %v", txnErr)})
	} else {
		findings = append(findings, checkHanging(txns, now, *hangingAfter, maxTimeout))
	}
	if lagErr != nil {
		findings = append(findings, finding{levelWarn, "consumer lag", fmt.Sprintf("could not be read: %v", lagErr)})
	} else {
		findings = append(findings, checkLag(groups, *maxLag))
	}
	if ch.addr != "" {
		findings = append(findings, checkMigrations(ctx, &ch))
		if behind, err := auditBehind(ctx, adm, &ch, cat); err != nil {
			findings = append(findings, finding{levelWarn, "audit writer lag", fmt.Sprintf("could not be read: %v", err)})
		} else {
			findings = append(findings, checkAuditLag(behind, *maxLag))
		}
	}
	failed, warned := 0, 0
	for _, f := range findings {
		fmt.Fprintln(stdout, f)
		if f.level == levelFail {
			failed++
		} else if f.level == levelWarn {
			warned++
		}
	}
	if *abort && txnErr == nil {
		hung, _ := txnhold.Hanging(txns, now, *hangingAfter, maxTimeout)
		aborted, err := abortHanging(ctx, adm, &kf, hung, *yes, stdout)
		if err != nil {
			return err
		}
		if aborted == len(hung) && len(hung) > 0 {
			failed-- // the hanging transactions' finding is resolved
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d check(s) failed, %d warning(s)", failed, warned)
	}
	fmt.Fprintf(stdout, "doctor: no check failed (%d warning(s))\n", warned)
	return nil
}

// readCluster reads the brokers, their configs, the catalog's topics (and
// Kafka's transaction state and offsets topics) with their effective
// configs, and the catalog's drift.
func readCluster(ctx context.Context, adm *kadm.Client, cat *topics.Catalog) (clusterView, error) {
	v := clusterView{brokerConfigs: map[int32]map[string]string{}, topics: map[string]topicView{}}
	meta, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return v, fmt.Errorf("doctor: brokers: %w", err)
	}
	for _, b := range meta.Brokers {
		v.brokers = append(v.brokers, b.NodeID)
	}
	bc, err := adm.DescribeBrokerConfigs(ctx, v.brokers...)
	if err != nil {
		return v, fmt.Errorf("doctor: broker configs: %w", err)
	}
	for _, rc := range bc {
		id, err := strconv.Atoi(rc.Name)
		if err != nil || rc.Err != nil {
			return v, fmt.Errorf("doctor: configs of broker %s: %v", rc.Name, errors.Join(err, rc.Err))
		}
		v.brokerConfigs[int32(id)] = configMap(rc.Configs)
	}
	names := append(cat.Names(), txnStateTopic, offsetsTopic)
	td, err := adm.ListTopicsWithInternal(ctx, names...)
	if err != nil {
		return v, fmt.Errorf("doctor: topics: %w", err)
	}
	var present []string
	for _, name := range names {
		d, ok := td[name]
		if !ok || d.Err != nil {
			continue
		}
		t := topicView{}
		for _, p := range d.Partitions.Sorted() {
			t.partitions = append(t.partitions, partitionView{id: p.Partition, leader: p.Leader, replicas: len(p.Replicas), isr: len(p.ISR)})
		}
		v.topics[name] = t
		present = append(present, name)
	}
	if len(present) > 0 {
		tc, err := adm.DescribeTopicConfigs(ctx, present...)
		if err != nil {
			return v, fmt.Errorf("doctor: topic configs: %w", err)
		}
		for _, rc := range tc {
			if t, ok := v.topics[rc.Name]; ok && rc.Err == nil {
				t.configs = configMap(rc.Configs)
				v.topics[rc.Name] = t
			}
		}
	}
	if v.drift, err = cat.Verify(ctx, adm); err != nil {
		return v, fmt.Errorf("doctor: %w", err)
	}
	return v, nil
}

func configMap(cs []kadm.Config) map[string]string {
	m := make(map[string]string, len(cs))
	for _, c := range cs {
		m[c.Key] = c.MaybeValue()
	}
	return m
}

// openTransactions finds the herald partitions held by an open
// transaction (internal/txnhold), on the catalog's topics that exist.
func openTransactions(ctx context.Context, adm *kadm.Client, cat *topics.Catalog, v clusterView) ([]openTxn, error) {
	var names []string
	for _, n := range cat.Names() {
		if _, ok := v.topics[n]; ok {
			names = append(names, n)
		}
	}
	return txnhold.Find(ctx, adm, names)
}

// stageLags is the lag of every consumer group that committed offsets on a
// herald topic (every stage's group: dedupe, route, each sink, the webhook
// stages), summed over its herald partitions.
func stageLags(ctx context.Context, adm *kadm.Client, cat *topics.Catalog) ([]groupLag, error) {
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		return nil, err
	}
	if len(listed) == 0 {
		return nil, nil
	}
	lags, err := adm.Lag(ctx, listed.Groups()...)
	if err != nil {
		return nil, err
	}
	herald := map[string]bool{}
	for _, n := range cat.Names() {
		herald[n] = true
	}
	var out []groupLag
	lags.Each(func(l kadm.DescribedGroupLag) {
		if l.Error() != nil {
			return
		}
		g := groupLag{group: l.Group, state: l.State, members: len(l.Members)}
		found := false
		for topic, ps := range l.Lag {
			if !herald[topic] {
				continue
			}
			for _, p := range ps {
				if p.Commit.At < 0 {
					continue
				}
				found = true
				if p.Lag > 0 {
					g.lag += p.Lag
				}
			}
		}
		if found {
			out = append(out, g)
		}
	})
	return out, nil
}

// auditBehind is, per topic the audit writer copies, how many offsets its
// partitions' last stable offsets are past the highest offset ClickHouse
// holds (past the log start where it holds none).
func auditBehind(ctx context.Context, adm *kadm.Client, ch *clickhouseFlags, cat *topics.Catalog) (map[string]int64, error) {
	conn, err := ch.open(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stored, err := auditwriter.Stored(ctx, conn, ch.database, cat)
	if err != nil {
		return nil, err
	}
	var names []string
	for n := range stored {
		names = append(names, n)
	}
	ends, err := adm.ListCommittedOffsets(ctx, names...)
	if err != nil {
		return nil, err
	}
	starts, err := adm.ListStartOffsets(ctx, names...)
	if err != nil {
		return nil, err
	}
	behind := map[string]int64{}
	for _, n := range names {
		behind[n] = 0
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			return
		}
		from := int64(0)
		if s, ok := starts.Lookup(o.Topic, o.Partition); ok && s.Err == nil {
			from = s.Offset
		}
		if last, ok := stored[o.Topic][o.Partition]; ok {
			from = max(from, last+1)
		}
		behind[o.Topic] += max(o.Offset-from, 0)
	})
	return behind, nil
}

// checkMigrations reports ClickHouse migrations not yet applied.
func checkMigrations(ctx context.Context, ch *clickhouseFlags) finding {
	conn, err := ch.open(ctx)
	if err != nil {
		return finding{levelFail, "clickhouse migrations", fmt.Sprintf("ClickHouse at %s does not answer: %v", ch.addr, err)}
	}
	defer conn.Close()
	pending, err := migrations.Pending(ctx, conn, ch.database)
	if err != nil {
		return finding{levelFail, "clickhouse migrations", fmt.Sprintf("could not be read from database %s: %v (herald migrate creates it)", ch.database, err)}
	}
	if len(pending) > 0 {
		names := make([]string, len(pending))
		for i, m := range pending {
			names[i] = fmt.Sprintf("%04d_%s", m.Version, m.Name)
		}
		return finding{levelFail, "clickhouse migrations", fmt.Sprintf("database %s lacks %d migration(s) (%s): run herald migrate", ch.database, len(pending), strings.Join(names, ", "))}
	}
	done, err := migrations.List(ctx, conn, ch.database)
	if err != nil || len(done) == 0 {
		return finding{levelFail, "clickhouse migrations", fmt.Sprintf("database %s: no migration recorded (%v)", ch.database, err)}
	}
	last := done[len(done)-1]
	return finding{levelOK, "clickhouse migrations", fmt.Sprintf("database %s is at %04d_%s, the latest", ch.database, last.Version, last.Name)}
}

// abortHanging aborts each hanging transaction the operator confirms (all
// with yes). One its coordinator knows is fenced: a producer initialised
// with its transactional id makes the coordinator abort it and write the
// abort markers to every partition it touched. One no coordinator knows
// gets an abort marker written to the partition directly (WriteTxnMarkers,
// KIP-664's way). It returns how many it aborted.
//
// Hazard: fencing a transactional id also fences the live producer using
// it, if any (a stage instance that is slow rather than dead): that
// instance's session fails and it restarts, restoring its partitions.
func abortHanging(ctx context.Context, adm *kadm.Client, kf *kafkaFlags, hung []openTxn, yes bool, stdout io.Writer) (int, error) {
	in := bufio.NewReader(doctorStdin)
	aborted := 0
	for _, t := range hung {
		if !yes {
			fmt.Fprintf(stdout, "abort the transaction of %s? [y/N] ", t)
			answer, _ := in.ReadString('\n')
			if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
				fmt.Fprintln(stdout, "not aborted")
				continue
			}
		}
		var err error
		if t.CoordinatorKnows {
			err = fenceTxn(ctx, kf, t.TxnID)
		} else {
			err = writeAbortMarker(ctx, adm, t)
		}
		if err != nil {
			return aborted, fmt.Errorf("doctor: abort %s: %w", t, err)
		}
		if err := awaitReleased(ctx, adm, t); err != nil {
			return aborted, fmt.Errorf("doctor: abort %s: %w", t, err)
		}
		aborted++
		fmt.Fprintf(stdout, "aborted the transaction of %s: its last stable offset moved past %d\n", t, t.LSO)
	}
	return aborted, nil
}

// fenceTxn initialises a producer with the transactional id txnID, which
// makes its coordinator abort the open transaction.
func fenceTxn(ctx context.Context, kf *kafkaFlags, txnID string) error {
	cl, err := kf.client(kgo.TransactionalID(txnID))
	if err != nil {
		return err
	}
	defer cl.Close()
	_, _, err = cl.ProducerID(ctx)
	return err
}

// writeAbortMarker writes an abort marker for t's producer to t's
// partition.
func writeAbortMarker(ctx context.Context, adm *kadm.Client, t openTxn) error {
	set := kadm.TopicsSet{}
	addPartition(set, t.Topic, t.Partition)
	resp, err := adm.WriteTxnMarkers(ctx, kadm.TxnMarkers{ProducerID: t.ProducerID, ProducerEpoch: t.ProducerEpoch,
		CoordinatorEpoch: t.CoordinatorEpoch, Topics: set})
	if err != nil {
		return err
	}
	var errs []error
	resp.EachPartition(func(p kadm.TxnMarkersPartitionResponse) {
		if p.Err != nil {
			errs = append(errs, p.Err)
		}
	})
	return errors.Join(errs...)
}

// awaitReleased waits until t's producer no longer holds t's partition
// open at the same start offset (the abort marker is written).
func awaitReleased(ctx context.Context, adm *kadm.Client, t openTxn) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	set := kadm.TopicsSet{}
	addPartition(set, t.Topic, t.Partition)
	for {
		d, err := adm.DescribeProducers(ctx, set)
		if err != nil && !errors.Is(err, kerr.NotLeaderForPartition) {
			return err
		}
		held := false
		d.EachProducer(func(p kadm.DescribedProducer) {
			held = held || p.ProducerID == t.ProducerID && p.CurrentTxnStartOffset == t.StartOffset
		})
		if err == nil && !held {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the partition is still held: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func addPartition(s kadm.TopicsSet, topic string, p int32) {
	if s[topic] == nil {
		s[topic] = map[int32]struct{}{}
	}
	s[topic][p] = struct{}{}
}
