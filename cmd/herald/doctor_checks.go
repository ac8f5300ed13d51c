package main

import (
	"fmt"
	"github.com/heraldhq/herald/internal/txnhold"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/topics"
)

// The checks of herald doctor are functions of what it read from the
// cluster (a clusterView, a list of open transactions, group lags): each
// returns one finding, tested without a broker (doctor_checks_test.go).

// level is how a finding stands: ok, warn (works, but not as production
// should run) or fail (herald's guarantees or progress are at risk now).
type level int

const (
	levelOK level = iota
	levelWarn
	levelFail
)

func (l level) String() string {
	if l == levelFail {
		return "FAIL"
	} else if l == levelWarn {
		return "warn"
	}
	return "ok"
}

// finding is one line of herald doctor's answer.
type finding struct {
	level level
	check string // what was checked ("replication")
	msg   string // what was found and, unless ok, what to do
}

func (f finding) String() string { return fmt.Sprintf("%-4s  %s: %s", f.level, f.check, f.msg) }

// issue is one thing wrong found by a check, with its level.
type issue struct {
	level level
	msg   string
}

// summarize makes a check's finding from its issues: the worst level, the
// first issue of that level and how many more there are; okMsg when none.
func summarize(check, okMsg string, issues []issue) finding {
	if len(issues) == 0 {
		return finding{levelOK, check, okMsg}
	}
	sort.SliceStable(issues, func(i, j int) bool { return issues[i].level > issues[j].level })
	msg := issues[0].msg
	if n := len(issues) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more)", n)
	}
	return finding{issues[0].level, check, msg}
}

// clusterView is what herald doctor read of the cluster.
type clusterView struct {
	brokers []int32
	// brokerConfigs are each broker's effective configs (defaults included).
	brokerConfigs map[int32]map[string]string
	// topics are the catalog's topics that exist, and Kafka's internal
	// __transaction_state and __consumer_offsets if they exist.
	topics map[string]topicView
	// drift is the catalog's Verify of the cluster.
	drift []topics.Drift
}

type topicView struct {
	partitions []partitionView
	// configs are the topic's effective configs (defaults included).
	configs map[string]string
}

type partitionView struct {
	id       int32
	leader   int32
	replicas int
	isr      int
}

func (t topicView) replication() int {
	if len(t.partitions) == 0 {
		return 0
	}
	return t.partitions[0].replicas
}

const (
	txnStateTopic = "__transaction_state"
	offsetsTopic  = "__consumer_offsets"
)

// brokerConfig is the value of a broker config, the same on every broker,
// or the values by broker when they differ.
func (v clusterView) brokerConfig(key string) (string, bool) {
	vals := map[string][]int32{}
	for _, id := range v.brokers {
		vals[v.brokerConfigs[id][key]] = append(vals[v.brokerConfigs[id][key]], id)
	}
	if len(vals) == 1 {
		for val := range vals {
			return val, true
		}
	}
	var parts []string
	for val, ids := range vals {
		parts = append(parts, fmt.Sprintf("%q on broker(s) %v", val, ids))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", "), false
}

func checkBrokers(v clusterView) finding {
	if len(v.brokers) == 0 {
		return finding{levelFail, "brokers", "no broker answered: check --brokers and the cluster"}
	}
	ids := slices.Clone(v.brokers)
	slices.Sort(ids)
	return finding{levelOK, "brokers", fmt.Sprintf("%d answer (ids %v)", len(ids), ids)}
}

// checkTopics reports topics missing from the cluster and partition counts
// that differ from the catalog's.
func checkTopics(cat *topics.Catalog, v clusterView) finding {
	var issues []issue
	for _, d := range v.drift {
		if d.Field == "topic" {
			issues = append(issues, issue{levelFail, d.Topic + " is missing: create herald's topics (herald topics create, with this deployment's flags)"})
		} else if d.Field == "partitions" {
			issues = append(issues, issue{levelFail, fmt.Sprintf("%s has %s partitions, the catalog %s: co-partitioned topics must have equal counts and a live topic's count must never change; run with this deployment's --partitions, or recreate the topics", d.Topic, d.Got, d.Want)})
		}
	}
	return summarize("topics", fmt.Sprintf("all %d topics of the catalog exist with %d partitions", len(cat.Topics()), cat.Options().Partitions), issues)
}

// checkReplication reports replication factors that differ from the
// catalog's, partitions without a leader and replicas out of sync.
func checkReplication(cat *topics.Catalog, v clusterView) finding {
	var issues []issue
	want := int(cat.Options().Replication)
	for _, d := range v.drift {
		if d.Field == "replication" {
			issues = append(issues, issue{levelFail, fmt.Sprintf("%s has replication factor %s, the catalog %s: reassign its partitions (kafka-reassign-partitions) to %s replicas", d.Topic, d.Got, d.Want, d.Want)})
		}
	}
	if want > len(v.brokers) && len(v.brokers) > 0 {
		issues = append(issues, issue{levelWarn, fmt.Sprintf("only %d broker(s) answer and the catalog's replication factor %d needs %d: a broker is down, or the cluster is too small", len(v.brokers), want, want)})
	}
	for _, name := range cat.Names() {
		t, ok := v.topics[name]
		if !ok {
			continue // missing: checkTopics
		}
		minISR, _ := strconv.Atoi(t.configs["min.insync.replicas"])
		for _, p := range t.partitions {
			if p.leader < 0 {
				issues = append(issues, issue{levelFail, fmt.Sprintf("%s/%d has no leader (offline): bring its replicas' brokers back", name, p.id)})
			} else if p.isr < minISR {
				issues = append(issues, issue{levelFail, fmt.Sprintf("%s/%d has %d replica(s) in sync, fewer than its min.insync.replicas %d: every write to it fails (NOT_ENOUGH_REPLICAS); bring its replicas' brokers back", name, p.id, p.isr, minISR)})
			} else if p.isr < p.replicas {
				issues = append(issues, issue{levelWarn, fmt.Sprintf("%s/%d has %d of %d replicas in sync: a broker is down or lagging", name, p.id, p.isr, p.replicas)})
			}
		}
	}
	if want < 3 && len(v.brokers) >= 3 {
		issues = append(issues, issue{levelWarn, fmt.Sprintf("the catalog's replication factor is %d on a cluster of %d brokers: production runs 3 (--replication 3)", want, len(v.brokers))})
	}
	okMsg := fmt.Sprintf("every topic has %d replicas, every partition a leader and its replicas in sync", want)
	if want == 1 && len(v.brokers) == 1 {
		okMsg += " (one broker: a copy each; production runs 3 brokers and replication 3)"
	}
	return summarize("replication", okMsg, issues)
}

// checkMinISR reports each herald topic's min.insync.replicas against its
// replication factor: above it nothing can be written; equal to it (above
// 1), one broker down stops every write; 1 with more replicas, an
// acknowledged write may rest on one copy.
func checkMinISR(cat *topics.Catalog, v clusterView) finding {
	var issues []issue
	for _, name := range cat.Names() {
		t, ok := v.topics[name]
		if !ok {
			continue
		}
		r := t.replication()
		m, err := strconv.Atoi(t.configs["min.insync.replicas"])
		if err != nil {
			issues = append(issues, issue{levelWarn, fmt.Sprintf("%s: min.insync.replicas %q is not a number", name, t.configs["min.insync.replicas"])})
			continue
		}
		fix := fmt.Sprintf("kafka-configs --alter --entity-type topics --entity-name %s --add-config min.insync.replicas=%d", name, max(r-1, 1))
		if m > r {
			issues = append(issues, issue{levelFail, fmt.Sprintf("%s has min.insync.replicas %d above its replication %d: no transaction can write to it; %s", name, m, r, fix)})
		} else if m == r && r > 1 {
			issues = append(issues, issue{levelWarn, fmt.Sprintf("%s has min.insync.replicas %d equal to its replication: one broker down stops every write to it; %s", name, m, fix)})
		} else if m < 2 && r > 2 {
			issues = append(issues, issue{levelWarn, fmt.Sprintf("%s has min.insync.replicas %d with %d replicas: an acknowledged write may rest on one copy; %s", name, m, r, fix)})
		}
	}
	return summarize("min.insync.replicas", "every topic's min.insync.replicas fits its replication factor", issues)
}

// checkTxnLog reports the transaction state log's replication and min ISR
// (broker configs, and the topic as it was created).
func checkTxnLog(v clusterView) finding {
	var issues []issue
	rfCfg, same := v.brokerConfig("transaction.state.log.replication.factor")
	if !same {
		issues = append(issues, issue{levelWarn, "transaction.state.log.replication.factor differs between brokers: " + rfCfg})
	}
	isrCfg, same := v.brokerConfig("transaction.state.log.min.isr")
	if !same {
		issues = append(issues, issue{levelWarn, "transaction.state.log.min.isr differs between brokers: " + isrCfg})
	}
	minISR, _ := strconv.Atoi(isrCfg)
	rf, _ := strconv.Atoi(rfCfg)
	t, exists := v.topics[txnStateTopic]
	if exists {
		rf = t.replication()
		if m, err := strconv.Atoi(t.configs["min.insync.replicas"]); err == nil {
			minISR = m
		}
		for _, p := range t.partitions {
			if p.leader < 0 {
				issues = append(issues, issue{levelFail, fmt.Sprintf("%s/%d has no leader: transactions whose coordinator it is cannot begin or end; bring its replicas' brokers back", txnStateTopic, p.id)})
			}
		}
	}
	if minISR > rf && rf > 0 {
		issues = append(issues, issue{levelFail, fmt.Sprintf("its min ISR %d is above its replication %d: no transaction can complete; set transaction.state.log.min.isr to at most %d", minISR, rf, rf)})
	}
	if len(v.brokers) >= 3 && (rf < 3 || minISR < 2) {
		issues = append(issues, issue{levelWarn, fmt.Sprintf("replication %d, min ISR %d on a cluster of %d brokers: production runs 3 / 2 (transaction.state.log.replication.factor, transaction.state.log.min.isr; an existing %s keeps its replication until reassigned)", rf, minISR, len(v.brokers), txnStateTopic)})
	}
	where := "configured (the topic is made at the first transaction)"
	if exists {
		where = "in " + txnStateTopic
	}
	return summarize("transaction state log", fmt.Sprintf("replication %d, min ISR %d %s", rf, minISR, where), issues)
}

// checkOffsetsTopic reports the replication of the group offsets topic,
// where every stage's input offsets are committed.
func checkOffsetsTopic(v clusterView) finding {
	rfCfg, _ := v.brokerConfig("offsets.topic.replication.factor")
	rf, _ := strconv.Atoi(rfCfg)
	if t, ok := v.topics[offsetsTopic]; ok {
		rf = t.replication()
	}
	if len(v.brokers) >= 3 && rf < 3 {
		return finding{levelWarn, "offsets topic", fmt.Sprintf("%s has replication %d on a cluster of %d brokers: production runs 3 (offsets.topic.replication.factor; an existing topic keeps its replication until reassigned)", offsetsTopic, rf, len(v.brokers))}
	}
	return finding{levelOK, "offsets topic", fmt.Sprintf("%s has replication %d", offsetsTopic, rf)}
}

// checkUnclean reports unclean leader election enabled on a broker or a
// herald topic: an out-of-sync replica may then become leader and drop
// committed records, transactions' markers included.
func checkUnclean(cat *topics.Catalog, v clusterView) finding {
	var issues []issue
	for _, id := range v.brokers {
		if v.brokerConfigs[id]["unclean.leader.election.enable"] == "true" {
			issues = append(issues, issue{levelFail, fmt.Sprintf("broker %d has unclean.leader.election.enable=true: an out-of-sync replica may become leader and lose committed records; set it to false", id)})
		}
	}
	for _, name := range cat.Names() {
		if t, ok := v.topics[name]; ok && t.configs["unclean.leader.election.enable"] == "true" {
			issues = append(issues, issue{levelFail, fmt.Sprintf("%s has unclean.leader.election.enable=true: an out-of-sync replica may become leader and lose committed records; kafka-configs --alter --entity-type topics --entity-name %s --delete-config unclean.leader.election.enable", name, name)})
		}
	}
	return summarize("unclean leader election", "off on every broker and herald topic", issues)
}

// checkConfigDrift reports topic configs that differ from the catalog's.
func checkConfigDrift(v clusterView) finding {
	var issues []issue
	for _, d := range v.drift {
		if d.Field != "topic" && d.Field != "partitions" && d.Field != "replication" {
			issues = append(issues, issue{levelFail, fmt.Sprintf("%s has %s=%q, the catalog wants %q: herald topics create --fix-configs sets it back", d.Topic, d.Field, d.Got, d.Want)})
		}
	}
	return summarize("topic configs", "every config the catalog sets matches", issues)
}

// openTxn is a transaction open on a herald partition: its last stable
// offset is below its high watermark because of it.
type openTxn = txnhold.Open

// checkHanging reports herald partitions whose last stable offset is held
// below the high watermark by a transaction open past its limit (KIP-664:
// read_committed readers stall there and the log cleaner cannot pass it).
func checkHanging(txns []openTxn, now time.Time, hangingAfter, maxTimeout time.Duration) finding {
	hung, open := txnhold.Hanging(txns, now, hangingAfter, maxTimeout)
	var issues []issue
	for _, t := range hung {
		issues = append(issues, issue{levelFail, fmt.Sprintf("%s, open %v, past its limit %v: the last stable offset is stuck at %d below %d, so read_committed readers and compaction wait; abort it: herald doctor --abort-hanging",
			t, t.Age(now).Round(time.Second), t.HangingLimit(hangingAfter, maxTimeout), t.LSO, t.HWM)})
	}
	okMsg := "every herald partition's last stable offset is at its high watermark"
	if len(open) > 0 {
		oldest := open[0]
		for _, t := range open[1:] {
			if t.Age(now) > oldest.Age(now) {
				oldest = t
			}
		}
		okMsg = fmt.Sprintf("%d transaction(s) open, none past its limit (the oldest, %s, open %v of %v)", len(open), oldest,
			oldest.Age(now).Round(time.Second), oldest.HangingLimit(hangingAfter, maxTimeout))
	}
	return summarize("hanging transactions", okMsg, issues)
}

// groupLag is one consumer group reading herald topics.
type groupLag struct {
	group   string
	state   string
	members int
	lag     int64
}

// checkLag reports each stage group's lag: above maxLag, or a group with
// lag and no member, is a warning.
func checkLag(groups []groupLag, maxLag int64) finding {
	if len(groups) == 0 {
		return finding{levelWarn, "consumer lag", "no consumer group has committed offsets on herald's topics: no stage has run against them yet"}
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].group < groups[j].group })
	var issues []issue
	var all []string
	for _, g := range groups {
		all = append(all, fmt.Sprintf("%s %d", g.group, g.lag))
		if g.members == 0 && g.lag > 0 {
			issues = append(issues, issue{levelWarn, fmt.Sprintf("%s is %d records behind with no member running: start its stage", g.group, g.lag)})
		} else if g.lag > maxLag {
			issues = append(issues, issue{levelWarn, fmt.Sprintf("%s is %d records behind (above --max-lag %d): add instances or look at its logs", g.group, g.lag, maxLag)})
		}
	}
	f := summarize("consumer lag", "records behind: "+strings.Join(all, ", "), issues)
	if f.level != levelOK {
		f.msg += "; records behind: " + strings.Join(all, ", ")
	}
	return f
}

// checkAuditLag reports how far the audit record in ClickHouse is behind
// each topic the audit writer copies: behind[topic] is the offsets between
// the highest one stored and the last stable offset, summed over the
// topic's partitions (transaction markers count too: a partition the
// writer has caught up with is typically one marker behind).
func checkAuditLag(behind map[string]int64, maxLag int64) finding {
	names := make([]string, 0, len(behind))
	for n := range behind {
		names = append(names, n)
	}
	sort.Strings(names)
	var issues []issue
	var all []string
	for _, n := range names {
		all = append(all, fmt.Sprintf("%s %d", n, behind[n]))
		if behind[n] > maxLag {
			issues = append(issues, issue{levelWarn, fmt.Sprintf("%s is %d offsets ahead of ClickHouse (above --max-lag %d): is the audit writer running? (its herald_audit_restarts_total, its logs)", n, behind[n], maxLag)})
		}
	}
	f := summarize("audit writer lag", "offsets not yet in ClickHouse: "+strings.Join(all, ", "), issues)
	if f.level != levelOK {
		f.msg += "; offsets not yet in ClickHouse: " + strings.Join(all, ", ")
	}
	return f
}
