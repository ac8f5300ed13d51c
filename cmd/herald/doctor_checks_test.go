package main

import (
	"github.com/heraldhq/herald/internal/txnhold"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/topics"
)

// cluster3 is a view of a three-broker cluster configured as production
// runs it, with every topic of cat at replication 3, min ISR 2.
func cluster3(cat *topics.Catalog) clusterView {
	v := clusterView{brokers: []int32{1, 2, 3}, brokerConfigs: map[int32]map[string]string{}, topics: map[string]topicView{}}
	for _, id := range v.brokers {
		v.brokerConfigs[id] = map[string]string{"transaction.state.log.replication.factor": "3", "transaction.state.log.min.isr": "2",
			"offsets.topic.replication.factor": "3", "unclean.leader.election.enable": "false", "transaction.max.timeout.ms": "900000"}
	}
	replicated := func() topicView {
		return topicView{partitions: []partitionView{{0, 1, 3, 3}, {1, 2, 3, 3}}, configs: map[string]string{"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}}
	}
	for _, n := range append(cat.Names(), txnStateTopic, offsetsTopic) {
		v.topics[n] = replicated()
	}
	return v
}

func TestEachDoctorCheckOfTheClusterView(t *testing.T) {
	cat := topics.New(topics.Options{Partitions: 2, Replication: 3})
	seen := cat.Name(topics.Seen)
	cases := []struct {
		name   string
		change func(v *clusterView)
		check  func(clusterView) finding
		level  level
		want   string
	}{
		{"a production cluster has min.insync.replicas 2 of 3 replicas", nil, func(v clusterView) finding { return checkMinISR(cat, v) }, levelOK, "fits"},
		{"min.insync.replicas above the replication fails: nothing can be written", func(v *clusterView) { v.topics[seen].configs["min.insync.replicas"] = "4" },
			func(v clusterView) finding { return checkMinISR(cat, v) }, levelFail, seen + " has min.insync.replicas 4 above its replication 3"},
		{"min.insync.replicas equal to the replication warns: one broker down stops writes", func(v *clusterView) { v.topics[seen].configs["min.insync.replicas"] = "3" },
			func(v clusterView) finding { return checkMinISR(cat, v) }, levelWarn, "one broker down stops every write"},
		{"min.insync.replicas 1 of 3 warns: an acknowledged write may rest on one copy", func(v *clusterView) { v.topics[seen].configs["min.insync.replicas"] = "1" },
			func(v clusterView) finding { return checkMinISR(cat, v) }, levelWarn, "may rest on one copy"},
		{"a partition without a leader fails", func(v *clusterView) { v.topics[seen].partitions[1].leader = -1 },
			func(v clusterView) finding { return checkReplication(cat, v) }, levelFail, seen + "/1 has no leader"},
		{"a replica out of sync warns", func(v *clusterView) { v.topics[seen].partitions[0].isr = 2 },
			func(v clusterView) finding { return checkReplication(cat, v) }, levelWarn, seen + "/0 has 2 of 3 replicas in sync"},
		{"a replication drifted from the catalog fails", func(v *clusterView) {
			v.drift = append(v.drift, topics.Drift{Topic: seen, Field: "replication", Want: "3", Got: "1"})
		}, func(v clusterView) finding { return checkReplication(cat, v) }, levelFail, seen + " has replication factor 1, the catalog 3"},
		{"fewer brokers answering than the catalog's replication warns", func(v *clusterView) { v.brokers = v.brokers[:2] },
			func(v clusterView) finding { return checkReplication(cat, v) }, levelWarn, "only 2 broker(s) answer and the catalog's replication factor 3 needs 3"},
		{"fewer replicas in sync than min.insync.replicas fails: writes fail", func(v *clusterView) { v.topics[seen].partitions[0].isr = 1 },
			func(v clusterView) finding { return checkReplication(cat, v) }, levelFail, seen + "/0 has 1 replica(s) in sync, fewer than its min.insync.replicas 2"},
		{"the transaction state log at 3 / 2 is ok", nil, checkTxnLog, levelOK, "replication 3, min ISR 2 in __transaction_state"},
		{"a transaction state log min ISR above its replication fails", func(v *clusterView) { v.topics[txnStateTopic].configs["min.insync.replicas"] = "4" },
			checkTxnLog, levelFail, "no transaction can complete"},
		{"a transaction state log of replication 1 on three brokers warns", func(v *clusterView) {
			v.topics[txnStateTopic] = topicView{partitions: []partitionView{{0, 1, 1, 1}}, configs: map[string]string{"min.insync.replicas": "1"}}
		}, checkTxnLog, levelWarn, "replication 1, min ISR 1 on a cluster of 3 brokers: production runs 3 / 2"},
		{"brokers that disagree on the transaction state log's settings warn", func(v *clusterView) { v.brokerConfigs[2]["transaction.state.log.min.isr"] = "1" },
			checkTxnLog, levelWarn, "differs between brokers"},
		{"an offsets topic of replication 1 on three brokers warns", func(v *clusterView) {
			v.topics[offsetsTopic] = topicView{partitions: []partitionView{{0, 1, 1, 1}}}
		}, checkOffsetsTopic, levelWarn, "__consumer_offsets has replication 1"},
		{"unclean leader election on a broker fails", func(v *clusterView) { v.brokerConfigs[3]["unclean.leader.election.enable"] = "true" },
			func(v clusterView) finding { return checkUnclean(cat, v) }, levelFail, "broker 3 has unclean.leader.election.enable=true"},
		{"unclean leader election on a herald topic fails", func(v *clusterView) { v.topics[seen].configs["unclean.leader.election.enable"] = "true" },
			func(v clusterView) finding { return checkUnclean(cat, v) }, levelFail, seen + " has unclean.leader.election.enable=true"},
		{"a missing topic fails", func(v *clusterView) { v.drift = append(v.drift, topics.Drift{Topic: seen, Field: "topic"}) },
			func(v clusterView) finding { return checkTopics(cat, v) }, levelFail, seen + " is missing"},
		{"a drifted config fails and names the fix", func(v *clusterView) {
			v.drift = append(v.drift, topics.Drift{Topic: seen, Field: "cleanup.policy", Want: "compact", Got: "delete"})
		}, checkConfigDrift, levelFail, `cleanup.policy="delete", the catalog wants "compact": herald topics create --fix-configs`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := cluster3(cat)
			if tc.change != nil {
				tc.change(&v)
			}
			f := tc.check(v)
			if f.level != tc.level || !strings.Contains(f.msg, tc.want) {
				t.Fatalf("got %q, want level %s with %q", f, tc.level, tc.want)
			}
		})
	}
}

func TestATransactionIsHangingOncePastItsLimit(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	known := openTxn{Topic: "herald.seen", Partition: 3, TxnID: "dedupe-0", State: "Ongoing", CoordinatorKnows: true,
		Started: now.Add(-30 * time.Second), Timeout: 10 * time.Second, LastWrite: now.Add(-time.Second)}
	unknown := openTxn{Topic: "herald.seen", Partition: 4, LastWrite: now.Add(-20 * time.Minute)}
	young := known
	young.Started = now.Add(-5 * time.Second)
	cases := []struct {
		name         string
		txn          openTxn
		hangingAfter time.Duration
		hanging      bool
	}{
		{"one its coordinator knows is hanging past its own timeout, counted from its start", known, 0, true},
		{"one within its own timeout is open", young, 0, false},
		{"--hanging-after replaces its timeout", known, time.Minute, false},
		{"one no coordinator knows is hanging past the brokers' longest timeout, counted from its last write", unknown, 0, true},
		{"and open before it", unknown, time.Hour, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hung, open := txnhold.Hanging([]openTxn{tc.txn}, now, tc.hangingAfter, 15*time.Minute)
			if (len(hung) == 1) != tc.hanging || len(hung)+len(open) != 1 {
				t.Fatalf("hanging %d, open %d; want hanging %v", len(hung), len(open), tc.hanging)
			}
			f := checkHanging([]openTxn{tc.txn}, now, tc.hangingAfter, 15*time.Minute)
			if (f.level == levelFail) != tc.hanging {
				t.Fatalf("finding %q, want hanging %v", f, tc.hanging)
			}
		})
	}
}

func TestConsumerLagWarnsOfAGroupBehindOrWithoutMembers(t *testing.T) {
	cases := []struct {
		name   string
		groups []groupLag
		level  level
		want   string
	}{
		{"groups within the bound are ok and listed", []groupLag{{"herald-route", "Stable", 2, 5}, {"herald-dedupe", "Stable", 1, 0}}, levelOK, "records behind: herald-dedupe 0, herald-route 5"},
		{"a group above --max-lag warns", []groupLag{{"herald-route", "Stable", 2, 5000}}, levelWarn, "herald-route is 5000 records behind (above --max-lag 1000)"},
		{"a group with lag and no member warns", []groupLag{{"herald-sink-apns", "Empty", 0, 3}}, levelWarn, "no member running"},
		{"no group at all warns", nil, levelWarn, "no stage has run"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := checkLag(tc.groups, 1000)
			if f.level != tc.level || !strings.Contains(f.msg, tc.want) {
				t.Fatalf("got %q, want level %s with %q", f, tc.level, tc.want)
			}
		})
	}
}

func TestAuditWriterLagWarnsAboveTheBound(t *testing.T) {
	if f := checkAuditLag(map[string]int64{"herald.decisions": 3, "herald.attempts": 0}, 1000); f.level != levelOK ||
		f.msg != "offsets not yet in ClickHouse: herald.attempts 0, herald.decisions 3" {
		t.Fatalf("within the bound: %q", f)
	}
	if f := checkAuditLag(map[string]int64{"herald.decisions": 5000}, 1000); f.level != levelWarn || !strings.Contains(f.msg, "herald.decisions is 5000 offsets ahead of ClickHouse") {
		t.Fatalf("above the bound: %q", f)
	}
}
