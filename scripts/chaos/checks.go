package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/heraldhq/herald/internal/txnhold"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks/apns/emulator"
	fcmemulator "github.com/heraldhq/herald/sinks/fcm/emulator"
	whemulator "github.com/heraldhq/herald/sinks/webhook/emulator"
	wpemulator "github.com/heraldhq/herald/sinks/webpush/emulator"
	"github.com/heraldhq/herald/topics"
)

// check is one figure of the result: its value and whether it holds.
type check struct {
	name   string
	figure string
	ok     bool
	detail []string
}

type results struct {
	seed     uint64
	duration time.Duration
	rate     float64
	faults   map[string]int
	byRole   map[string]int
	// chExits are the ClickHouse server's exits the nemesis did not cause.
	chExits         []string
	load            *load
	checks          []check
	crashes         []string
	nemesisFailures []string
	counts          []string // figures that are counts, not checks
}

func (r *results) add(name string, bad int, figure string, detail []string) {
	if len(detail) > 5 {
		detail = append(detail[:5], fmt.Sprintf("… and %d more", len(detail)-5))
	}
	r.checks = append(r.checks, check{name: name, figure: figure, ok: bad == 0, detail: detail})
}

func (r *results) count(format string, args ...any) {
	r.counts = append(r.counts, fmt.Sprintf(format, args...))
}

func (r *results) ok() bool {
	for _, c := range r.checks {
		if !c.ok {
			return false
		}
	}
	return len(r.crashes) == 0 && len(r.nemesisFailures) == 0
}

// pending counts what the drain still waits for: acknowledged
// notifications without a dedupe decision, accepted ones without a route
// decision, queued deliveries without an outcome.
func pending(v *view, acked map[string]int) int {
	decided, routed := map[string]bool{}, map[string]bool{}
	var queued []string
	for _, d := range v.decisions {
		switch d.Stage {
		case "dedupe":
			decided[d.NotificationID] = true
			decided[d.OriginalNotificationID] = true
		case "route":
			routed[d.NotificationID] = true
			for _, dl := range d.Deliveries {
				if dl.State == schemas.DeliveryQueued {
					queued = append(queued, dl.DeliveryID)
				}
			}
		}
	}
	n := 0
	for id := range acked {
		if !decided[id] {
			n++
		}
	}
	for _, d := range v.decisions {
		if d.Stage == "dedupe" && d.Outcome == schemas.DecisionAccepted && !routed[d.NotificationID] {
			n++
		}
	}
	done, hooked := map[string]bool{}, map[string]bool{}
	for _, o := range v.outcomes {
		done[o.DeliveryID] = true
		if o.Channel == "webhook" {
			hooked[o.NotificationID] = true
		}
	}
	// send.completed, to the webhook endpoint, for every accepted one.
	for _, d := range v.decisions {
		if d.Stage == "dedupe" && d.Outcome == schemas.DecisionAccepted && !hooked[d.NotificationID] {
			n++
		}
	}
	for _, id := range queued {
		if !done[id] {
			n++
		}
	}
	return n
}

// checkDecisions: every notification a 202 named decided, none accepted
// twice, no source position decided twice, every accepted one routed.
func (r *results) checkDecisions(v *view, acked map[string]int) {
	decided := map[string]bool{}
	accepted := map[string]int{}
	routed := map[string]int{}
	byPos := map[string]map[pos]int{"dedupe": {}, "route": {}}
	outcomes := map[string]int{}
	for _, d := range v.decisions {
		if m, ok := byPos[d.Stage]; ok {
			m[pos{d.SourceTopic, d.SourcePartition, d.SourceOffset}]++
		}
		switch d.Stage {
		case "dedupe":
			decided[d.NotificationID] = true
			decided[d.OriginalNotificationID] = true
			outcomes[d.Outcome]++
			if d.Outcome == schemas.DecisionAccepted {
				accepted[d.NotificationID]++
			}
		case "route":
			routed[d.NotificationID]++
		}
	}
	var undecided, twice, unrouted, posTwice []string
	for id := range acked {
		if !decided[id] {
			undecided = append(undecided, id)
		}
	}
	for id, n := range accepted {
		if n > 1 {
			twice = append(twice, fmt.Sprintf("%s accepted %d times", id, n))
		}
		if routed[id] == 0 {
			unrouted = append(unrouted, id)
		}
	}
	for stage, m := range byPos {
		for p, n := range m {
			if n > 1 {
				posTwice = append(posTwice, fmt.Sprintf("%s decided %s/%d@%d %d times", stage, p.topic, p.partition, p.offset, n))
			}
		}
	}
	r.count("notifications named by a 202: %d; dedupe outcomes %v", len(acked), outcomes)
	r.add("every notification a 202 named is decided", len(undecided), fmt.Sprintf("undecided = %d of %d", len(undecided), len(acked)), undecided)
	r.add("no notification accepted twice", len(twice), fmt.Sprintf("accepted twice = %d of %d accepted", len(twice), len(accepted)), twice)
	r.add("no source position decided twice (dedupe, route)", len(posTwice), fmt.Sprintf("positions decided twice = %d", len(posTwice)), posTwice)
	r.add("every accepted notification routed", len(unrouted), fmt.Sprintf("unrouted = %d", len(unrouted)), unrouted)
}

// checkDeliveries: every queued delivery reached its device or has an
// outcome saying why not; no device got a notification twice without an
// ambiguous attempt on record.
func (r *results) checkDeliveries(v *view, apnsEm *emulator.Emulator, fcmEm *fcmemulator.Emulator) {
	type copyKey struct{ channel, token, notification string }
	ok200 := map[string]int{}
	copies := map[copyKey]int{}
	deliveriesOf := map[copyKey]map[string]bool{}
	answers := map[string]int{}
	note := func(ch, token, notif, delivery, answer string) {
		answers[ch+" "+answer]++
		// "slow" is a 200 sent after the delay: the caller may still be
		// there to read it (a sink SIGSTOPped meanwhile reads it late).
		if answer == "200" || answer == "slow" {
			ok200[delivery]++
		}
		// A copy the device may have got: a 200, an answer sent after the
		// caller gave up, or a reset after the request was read.
		if answer == "200" || answer == "slow" || answer == "reset" {
			k := copyKey{ch, token, notif}
			copies[k]++
			if deliveriesOf[k] == nil {
				deliveriesOf[k] = map[string]bool{}
			}
			deliveriesOf[k][delivery] = true
		}
	}
	for _, p := range apnsEm.Received() {
		note("apns", p.Token, p.NotificationID, p.DeliveryID, p.Answer)
	}
	for _, m := range fcmEm.Received() {
		note("fcm", m.Token, m.NotificationID, m.DeliveryID, m.Answer)
	}
	outcome := map[string]string{}
	outcomeCount := map[string]int{}
	statuses := map[string]int{}
	for _, o := range v.outcomes {
		outcome[o.DeliveryID] = o.Status
		outcomeCount[o.DeliveryID]++
		statuses[o.Channel+" "+o.Status]++
	}
	ambiguous := map[string]int{}
	results := map[string]int{}
	for _, a := range v.attempts {
		results[a.Result]++
		if a.Result == schemas.AttemptAmbiguous {
			ambiguous[a.DeliveryID]++
		}
	}
	var lost, outcomeTwice []string
	queued := map[string]int{}
	for _, d := range v.decisions {
		if d.Stage != "route" {
			continue
		}
		for _, dl := range d.Deliveries {
			if dl.State != schemas.DeliveryQueued {
				continue
			}
			queued[dl.Channel]++
			st, has := outcome[dl.DeliveryID]
			switch {
			case !has:
				lost = append(lost, fmt.Sprintf("%s delivery %s (notification %s): no outcome", dl.Channel, dl.DeliveryID, d.NotificationID))
			case st != schemas.OutcomeDelivered:
				// audited: the outcome says why not
			case (dl.Channel == "apns" || dl.Channel == "fcm") && ok200[dl.DeliveryID] == 0:
				lost = append(lost, fmt.Sprintf("%s delivery %s (notification %s): outcome delivered, no 200 at the emulator", dl.Channel, dl.DeliveryID, d.NotificationID))
			}
		}
	}
	for id, n := range outcomeCount {
		if n > 1 {
			outcomeTwice = append(outcomeTwice, fmt.Sprintf("delivery %s: %d outcomes", id, n))
		}
	}
	var unaudited []string
	audited := 0
	for k, n := range copies {
		if n < 2 {
			continue
		}
		amb := false
		for d := range deliveriesOf[k] {
			if ambiguous[d] > 0 {
				amb = true
			}
		}
		if amb {
			audited++
		} else {
			unaudited = append(unaudited, fmt.Sprintf("%s device %s got notification %s %d times (deliveries %v), no ambiguous attempt", k.channel, k.token, k.notification, n, keys(deliveriesOf[k])))
		}
	}
	nAmb := 0
	for _, n := range ambiguous {
		nAmb += n
	}
	r.count("queued deliveries: %v; outcomes: %v", queued, statuses)
	r.count("provider answers: %v", answers)
	r.count("attempts: %v (ambiguous %d)", results, nAmb)
	r.count("devices that may have got a copy twice, with an ambiguous attempt on record: %d", audited)
	r.add("every queued delivery reached its device or has an outcome saying why not", len(lost), fmt.Sprintf("lost = %d", len(lost)), lost)
	r.add("no device got a copy twice without an ambiguous attempt", len(unaudited), fmt.Sprintf("unaudited duplicates = %d", len(unaudited)), unaudited)
	r.add("one outcome per delivery", len(outcomeTwice), fmt.Sprintf("deliveries with two outcomes = %d", len(outcomeTwice)), outcomeTwice)
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// checkObserver: the reader that ran through the faults saw only
// committed records, and each delivery command once.
func (r *results) checkObserver(live, final *view) {
	var aborted []string
	for p := range live.positions {
		if !final.positions[p] {
			aborted = append(aborted, fmt.Sprintf("%s/%d@%d", p.topic, p.partition, p.offset))
		}
	}
	var twice []string
	for id, n := range live.commands {
		if n > 1 {
			twice = append(twice, fmt.Sprintf("delivery command %s read %d times", id, n))
		}
	}
	for id, n := range final.commands {
		if n > 1 {
			twice = append(twice, fmt.Sprintf("delivery command %s committed %d times", id, n))
		}
	}
	r.count("the read_committed reader through the faults read %d records; the committed log holds %d", len(live.positions), len(final.positions))
	r.add("the read_committed reader saw no aborted record", len(aborted), fmt.Sprintf("aborted reads = %d", len(aborted)), aborted)
	r.add("each delivery command once", len(twice), fmt.Sprintf("delivery commands twice = %d of %d", len(twice), len(final.commands)), twice)
}

// checkHanging: the last stable offset equals the high watermark on every
// herald partition (asked up to three times, 10 s apart: a transaction
// of a running role may be open at any one moment; internal/txnhold names
// the holder), and no transaction of this run's roles is open past its
// timeout (ListTransactions, DescribeTransactions).
func (r *results) checkHanging(ctx context.Context, adm *kadm.Client, cat *topics.Catalog, runID string) {
	var held []string
	for try := 0; try < 3; try++ {
		if try > 0 {
			sleep(ctx, 10*time.Second)
		}
		held = held[:0]
		open, err := txnhold.Find(ctx, adm, cat.Names())
		if err != nil {
			held = append(held, err.Error())
			continue
		}
		for _, t := range open {
			held = append(held, fmt.Sprintf("%s: last stable offset %d, high watermark %d, open %v", t, t.LSO, t.HWM, t.Age(time.Now()).Round(time.Second)))
		}
		if len(held) == 0 {
			break
		}
	}
	r.add("no hanging transaction: last stable offset = high watermark on every herald partition", len(held), fmt.Sprintf("partitions held = %d", len(held)), held)

	var late []string
	listed, err := adm.ListTransactions(ctx, nil, []string{"Ongoing"})
	if err != nil {
		late = append(late, "list transactions: "+err.Error())
	} else {
		var ids []string
		listed.Each(func(l kadm.ListedTransaction) {
			if strings.Contains(l.TxnID, runID) {
				ids = append(ids, l.TxnID)
			}
		})
		if len(ids) > 0 {
			desc, err := adm.DescribeTransactions(ctx, ids...)
			if err != nil {
				late = append(late, "describe transactions: "+err.Error())
			}
			desc.Each(func(d kadm.DescribedTransaction) {
				age := time.Since(time.UnixMilli(d.StartTimestamp))
				if d.State == "Ongoing" && age > time.Duration(d.TimeoutMillis)*time.Millisecond {
					late = append(late, fmt.Sprintf("%s open %v, timeout %v", d.TxnID, age.Round(time.Second), time.Duration(d.TimeoutMillis)*time.Millisecond))
				}
			})
		}
	}
	r.add("no transaction of the run's roles open past its timeout", len(late), fmt.Sprintf("past their timeout = %d", len(late)), late)
}

// checkClickHouse: every record of the audited topics in ClickHouse once
// by Kafka position, and the roll-ups equal to the topics' counts.
func (r *results) checkClickHouse(ctx context.Context, conn driver.Conn, db string, v *view, patience time.Duration, logf func(string, ...any)) {
	tables := []struct{ table, topic, rollup, sum string }{
		{"requests", topics.Requests, "requests_hourly", "requests"},
		{"decisions", topics.Decisions, "decisions_hourly", "decisions"},
		{"attempts", topics.Attempts, "attempts_hourly", "attempts"},
		{"outcomes", topics.Outcomes, "outcomes_hourly", "deliveries"},
	}
	deadline := time.Now().Add(patience)
	for _, t := range tables {
		want := uint64(v.byTopic[t.topic])
		var rows, distinct, rolled uint64
		for {
			err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count(), uniqExact(kafka_topic, kafka_partition, kafka_offset) FROM `%s`.%s", db, t.table)).Scan(&rows, &distinct)
			if err == nil && distinct >= want {
				break
			}
			if time.Now().After(deadline) {
				logf("ClickHouse: %s holds %d of %d records (%v)", t.table, distinct, want, err)
				break
			}
			sleep(ctx, 2*time.Second)
		}
		if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT sum(%s) FROM `%s`.%s", t.sum, db, t.rollup)).Scan(&rolled); err != nil {
			r.add("ClickHouse "+t.rollup, 1, err.Error(), nil)
			continue
		}
		bad := 0
		if rows != want || distinct != want {
			bad++
		}
		r.add(fmt.Sprintf("ClickHouse holds every %s once", t.table[:len(t.table)-1]), bad,
			fmt.Sprintf("topic %d, rows %d, distinct positions %d", want, rows, distinct), nil)
		bad = 0
		if rolled != want {
			bad = 1
		}
		r.add(fmt.Sprintf("%s equals the topic", t.rollup), bad, fmt.Sprintf("%s %d, topic %d", t.sum, rolled, want), nil)
	}
}

func (r *results) print(w io.Writer) {
	l := r.load
	fmt.Fprintf(w, "\nchaos: seed %d, %v of faults, %.0f sends/s\n\n", r.seed, r.duration, r.rate)
	fmt.Fprintf(w, "| fault | count |\n|---|---|\n")
	kinds := make([]string, 0, len(r.faults))
	total := 0
	for k, n := range r.faults {
		kinds = append(kinds, k)
		total += n
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(w, "| %s | %d |\n", k, r.faults[k])
	}
	fmt.Fprintf(w, "| **all (%d kinds)** | **%d** |\n\n", len(kinds), total)
	roles := make([]string, 0, len(r.byRole))
	for k, n := range r.byRole {
		roles = append(roles, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(roles)
	fmt.Fprintf(w, "faults by target: %s\n\n", strings.Join(roles, ", "))
	fmt.Fprintf(w, "issue 33's bar (not a check): %s\n\n", r.bar(total, len(kinds)))
	fmt.Fprintf(w, "sends %d (repeats with the same idempotency key %d, with an earlier dedupe key %d, multi-recipient %d, device-targeted %d); answered 202 %d; failed after the client's retries %d; skipped (%d in flight) %d\n",
		l.sends.Load(), l.repeats.Load(), l.dedupeRepeats.Load(), l.multi.Load(), l.deviceTargets.Load(), l.answered.Load(), l.failed.Load(), maxInFlight, l.skipped.Load())
	for _, e := range l.errs {
		fmt.Fprintf(w, "  send error: %s\n", e)
	}
	for _, c := range r.counts {
		fmt.Fprintln(w, c)
	}
	fmt.Fprintf(w, "\n| check | figure | holds |\n|---|---|---|\n")
	for _, c := range r.checks {
		fmt.Fprintf(w, "| %s | %s | %s |\n", c.name, c.figure, map[bool]string{true: "yes", false: "**NO**"}[c.ok])
	}
	for _, c := range r.checks {
		for _, d := range c.detail {
			fmt.Fprintf(w, "  %s: %s\n", c.name, d)
		}
	}
	fmt.Fprintf(w, "| no role exited by itself | %d exits | %s |\n", len(r.crashes), map[bool]string{true: "yes", false: "**NO**"}[len(r.crashes) == 0])
	for _, c := range r.crashes {
		fmt.Fprintf(w, "  %s\n", c)
	}
	fmt.Fprintf(w, "ClickHouse server exits the nemesis did not cause (the test's chDB, restarted; not a check): %d\n", len(r.chExits))
	for _, e := range r.chExits {
		fmt.Fprintf(w, "  %s\n", e)
	}
	for _, f := range r.nemesisFailures {
		fmt.Fprintf(w, "  nemesis failure: %s\n", f)
	}
	fmt.Fprintf(w, "\nresult: %s\n", map[bool]string{true: "GREEN", false: "RED"}[r.ok()])
}

// bar says how the run measures against issue 33's bar: at least 300 s
// of faults, 60 faults of 7 kinds, 50,000 sends, 5 SIGKILLs of each role
// kind.
func (r *results) bar(faults, kinds int) string {
	fewest, kinds9 := -1, 0
	for k, n := range r.byRole {
		if strings.HasPrefix(k, "SIGKILL ") {
			kinds9++
			if fewest < 0 || n < fewest {
				fewest = n
			}
		}
	}
	sends := r.load.sends.Load()
	met := r.duration >= 300*time.Second && faults >= 60 && kinds >= 7 && sends >= 50000 && fewest >= 5
	return fmt.Sprintf("%v of faults (≥ 300 s), %d faults (≥ 60) of %d kinds (≥ 7), %d sends (≥ 50,000), fewest SIGKILLs of a role kind %d of %d kinds (≥ 5): %s",
		r.duration, faults, kinds, sends, fewest, kinds9, map[bool]string{true: "met", false: "not met"}[met])
}

// checkWebPush: a Web Push request carries neither delivery nor
// notification id (the payload is encrypted), so the check is per
// subscription: at least as many 201s as delivered outcomes of the
// device, and no more copies than those plus the device's ambiguous
// attempts.
func (r *results) checkWebPush(v *view, em *wpemulator.Emulator) {
	ok2xx, copies := map[string]int{}, map[string]int{}
	answers := map[string]int{}
	for _, p := range em.Received() {
		answers[p.Answer]++
		if strings.HasPrefix(p.Answer, "2") || p.Answer == "slow" {
			ok2xx[p.Subscription]++
		}
		if strings.HasPrefix(p.Answer, "2") || p.Answer == "slow" || p.Answer == "reset" {
			copies[p.Subscription]++
		}
	}
	delivered, ambiguous := map[string]int{}, map[string]int{}
	for _, o := range v.outcomes {
		if o.Channel == "webpush" && o.Status == schemas.OutcomeDelivered {
			delivered[o.Recipient]++
		}
	}
	for _, a := range v.attempts {
		if a.Channel == "webpush" && a.Result == schemas.AttemptAmbiguous {
			ambiguous[a.Recipient]++
		}
	}
	var lost, dup []string
	for sub, n := range delivered {
		if ok2xx[sub] < n {
			lost = append(lost, fmt.Sprintf("webpush subscription %s: %d delivered outcomes, %d 2xx answers", sub, n, ok2xx[sub]))
		}
	}
	for sub, n := range copies {
		if n > delivered[sub]+ambiguous[sub] {
			dup = append(dup, fmt.Sprintf("webpush subscription %s: %d copies, %d delivered outcomes, %d ambiguous attempts", sub, n, delivered[sub], ambiguous[sub]))
		}
	}
	r.count("webpush answers: %v", answers)
	r.add("webpush: every delivered outcome has its 2xx at the push service (per subscription)", len(lost), fmt.Sprintf("lost = %d", len(lost)), lost)
	r.add("webpush: no copy beyond the delivered ones but for ambiguous attempts (per subscription)", len(dup), fmt.Sprintf("unaudited duplicates = %d", len(dup)), dup)
}

// checkWebhook: one send.completed per accepted notification at the
// endpoint (a 200), verified, unless the webhook delivery's outcome says
// why not; a second copy only with an ambiguous webhook attempt.
func (r *results) checkWebhook(v *view, em *whemulator.Emulator) {
	ok200, copies := map[string]int{}, map[string]int{}
	unverified := 0
	answers := map[string]int{}
	for _, m := range em.Received() {
		answers[m.Answer]++
		if !m.Verified {
			unverified++
		}
		if m.Type != "send.completed" {
			continue
		}
		if m.Answer == "200" || m.Answer == "204" || m.Answer == "slow" {
			ok200[m.NotificationID]++
		}
		if strings.HasPrefix(m.Answer, "2") || m.Answer == "slow" || m.Answer == "reset" {
			copies[m.NotificationID]++
		}
	}
	notDelivered := map[string]string{}
	for _, o := range v.outcomes {
		if o.Channel == "webhook" && o.Status != schemas.OutcomeDelivered {
			notDelivered[o.NotificationID] = o.Status
		}
	}
	ambiguous := map[string]int{}
	for _, a := range v.attempts {
		if a.Channel == "webhook" && a.Result == schemas.AttemptAmbiguous {
			ambiguous[a.NotificationID]++
		}
	}
	var lost, dup []string
	for _, d := range v.decisions {
		if d.Stage != "dedupe" || d.Outcome != schemas.DecisionAccepted {
			continue
		}
		if ok200[d.NotificationID] == 0 && notDelivered[d.NotificationID] == "" {
			lost = append(lost, fmt.Sprintf("notification %s: no send.completed answered 2xx at the endpoint, no webhook outcome saying why", d.NotificationID))
		}
	}
	for id, n := range copies {
		if n > 1+ambiguous[id] {
			dup = append(dup, fmt.Sprintf("notification %s: send.completed %d times, %d ambiguous webhook attempts", id, n, ambiguous[id]))
		}
	}
	r.count("webhook answers: %v; unverified signatures %d", answers, unverified)
	r.add("webhook: every accepted notification's send.completed reached the endpoint", len(lost), fmt.Sprintf("lost = %d", len(lost)), lost)
	r.add("webhook: no second send.completed without an ambiguous attempt", len(dup), fmt.Sprintf("unaudited duplicates = %d", len(dup)), dup)
	r.add("webhook: every message's signature verified", unverified, fmt.Sprintf("unverified = %d", unverified), nil)
}
