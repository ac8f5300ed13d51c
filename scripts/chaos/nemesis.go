package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/heraldhq/herald/sinks/emulate"
	"github.com/heraldhq/herald/topics"
)

// Fault kinds.
const (
	faultRoleKill     = "SIGKILL and restart of a role"
	faultRolePause    = "SIGSTOP of a role past its session and transaction timeouts"
	faultBrokerKill   = "hard bounce (SIGKILL) of a broker"
	faultBrokerBounce = "clean bounce (SIGTERM) of a broker"
	faultBrokerPause  = "SIGSTOP of a broker past the request timeout"
	faultClickHouse   = "SIGKILL of the ClickHouse server"
	faultReset        = "provider: reset after the request was read"
	faultProvider5xx  = "provider: 5xx"
	fault429          = "provider: 429 with Retry-After"
	faultSlow         = "provider: answer slower than the call timeout"
	faultLatency      = "latency above the request timeout between one role and the brokers (toxiproxy)"
	faultCut          = "a cut between one role and the brokers (toxiproxy: data dropped, then the connections closed)"
)

// scripted is an emulator whose answers the nemesis scripts.
type scripted interface{ AddRule(emulate.Rule) }

// nemesis injects one fault at a time, chosen from the seed, and logs
// each with its time. One at a time keeps at most one broker down (two of
// the three would lose the KRaft quorum).
type nemesis struct {
	roles     []*role
	cl        *cluster
	adm       *kadm.Client
	cat       *topics.Catalog
	chKill    func() error // SIGKILL and restart the ClickHouse server
	providers map[string]scripted
	// proxied are the roles whose broker connections go through
	// toxiproxy, by name.
	proxied map[string]*proxied
	// runID is in every transactional id of the run's roles.
	runID   string
	brokers bool // broker faults enabled
	// brokerGap spaces broker faults: a JVM restart costs most of a core
	// for tens of seconds on this machine.
	brokerGap time.Duration
	// killEvery spaces the SIGKILLs of roles, a stream of their own
	// (each role kind in turn), so each kind is killed killsPerKind
	// times within the run whatever the other faults take.
	killEvery time.Duration
	logf      func(format string, args ...any)

	mu     sync.Mutex
	round  []string // role kinds still to kill this round
	held   map[*role]bool
	counts map[string]int
	byRole map[string]int
	failed []string
}

func (n *nemesis) count(kind, target string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if kind != "" {
		n.counts[kind]++
	}
	if target != "" {
		n.byRole[target]++
	}
}

func (n *nemesis) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	n.logf("nemesis: %s", msg)
	n.mu.Lock()
	n.failed = append(n.failed, msg)
	n.mu.Unlock()
}

// run injects faults until ctx ends: broker faults one at a time, spaced
// by brokerGap (never two brokers down: two of the three would lose the
// KRaft quorum), and, meanwhile, the other faults one at a time, each
// stream with its own generator from the seed.
func (n *nemesis) run(ctx context.Context, seed uint64) {
	done := make(chan struct{})
	if n.brokers {
		go func() {
			defer close(done)
			rng := rand.New(rand.NewPCG(seed, 0xb0b))
			kinds := []string{faultBrokerKill, faultBrokerBounce, faultBrokerPause}
			for sleep(ctx, n.brokerGap/2+time.Duration(rng.Int64N(int64(n.brokerGap/2)))) {
				n.inject(ctx, rng, kinds[rng.IntN(len(kinds))])
			}
		}()
	} else {
		close(done)
	}
	kills := make(chan struct{})
	go func() {
		defer close(kills)
		rng := rand.New(rand.NewPCG(seed, 0x4b11))
		for sleep(ctx, n.killEvery/2+time.Duration(rng.Int64N(int64(n.killEvery)))) {
			n.inject(ctx, rng, faultRoleKill)
		}
	}()
	rng := rand.New(rand.NewPCG(seed, 0xfa17))
	kinds := []string{faultRolePause, faultClickHouse, faultReset, faultProvider5xx, fault429, faultSlow}
	if len(n.proxied) > 0 {
		kinds = append(kinds, faultLatency, faultCut)
	}
	for sleep(ctx, time.Duration(300+rng.IntN(700))*time.Millisecond) {
		n.inject(ctx, rng, kinds[rng.IntN(len(kinds))])
	}
	<-done
	<-kills
}

func (n *nemesis) inject(ctx context.Context, rng *rand.Rand, kind string) {
	switch kind {
	case faultRoleKill:
		r := n.nextRole(rng)
		defer n.hold(r, false)
		n.logf("nemesis: %s: %s", kind, r.name)
		r.kill()
		sleep(context.Background(), time.Duration(300+rng.IntN(1200))*time.Millisecond)
		if err := r.start(); err != nil {
			n.fail("restart %s: %v", r.name, err)
		}
		n.count(kind, "SIGKILL "+r.kind)
	case faultRolePause:
		r := n.hold(n.roles[rng.IntN(len(n.roles))], true)
		if r == nil {
			return // being killed: the next fault
		}
		defer n.hold(r, false)
		d := time.Duration(12000+rng.IntN(6000)) * time.Millisecond
		n.logf("nemesis: %s: %s for %v", kind, r.name, d)
		if err := r.signal(syscall.SIGSTOP); err != nil {
			n.fail("SIGSTOP %s: %v", r.name, err)
			return
		}
		sleep(context.Background(), d)
		if err := r.signal(syscall.SIGCONT); err != nil {
			n.fail("SIGCONT %s: %v", r.name, err)
		}
		n.count(kind, "SIGSTOP "+r.kind)
	case faultBrokerKill, faultBrokerBounce, faultBrokerPause:
		node, why := n.pickBroker(ctx, rng)
		n.logf("nemesis: %s: node %d (%s)", kind, node, why)
		id := strconv.Itoa(node)
		var err error
		switch kind {
		case faultBrokerKill:
			if err = n.cl.run("kill", id); err == nil {
				sleep(context.Background(), 3*time.Second)
				err = n.cl.run("start", id)
			}
		case faultBrokerBounce:
			if err = n.cl.run("stop", id); err == nil {
				err = n.cl.run("start", id)
			}
		case faultBrokerPause:
			if err = n.cl.run("pause", id); err == nil {
				sleep(context.Background(), time.Duration(35000+rng.IntN(10000))*time.Millisecond)
				err = n.cl.run("resume", id)
			}
		}
		if err != nil {
			n.fail("%s node %d: %v", kind, node, err)
			return
		}
		n.logf("nemesis: node %d is back", node)
		n.count(kind, fmt.Sprintf("broker %d", node))
	case faultLatency, faultCut:
		names := make([]string, 0, len(n.proxied))
		for name := range n.proxied {
			names = append(names, name)
		}
		sort.Strings(names)
		set := n.proxied[names[rng.IntN(len(names))]]
		d := time.Duration(12000+rng.IntN(8000)) * time.Millisecond
		var toxic, what string
		if kind == faultLatency {
			// Each way: a round trip of 12-20 s, past the clients'
			// 10 s request timeout and the 10 s transaction timeout.
			lat := 6000 + rng.IntN(4000)
			toxic = fmt.Sprintf(`"type":"latency","attributes":{"latency":%d,"jitter":500}`, lat)
			what = fmt.Sprintf("%d ms each way", lat)
		} else {
			toxic = `"type":"timeout","attributes":{"timeout":0}`
			what = "every byte dropped"
		}
		n.logf("nemesis: %s: %s, %s, for %v", kind, set.role, what, d)
		if err := set.add(toxic); err != nil {
			set.clear()
			n.fail("%s %s: %v", kind, set.role, err)
			return
		}
		sleep(context.Background(), d)
		set.clear()
		n.logf("nemesis: %s: %s reaches the brokers again", kind, set.role)
		n.count(kind, "toxiproxy "+set.role)
	case faultClickHouse:
		n.logf("nemesis: %s", kind)
		if err := n.chKill(); err != nil {
			n.fail("ClickHouse restart: %v", err)
			return
		}
		n.count(kind, "")
	case faultReset, faultProvider5xx, fault429, faultSlow:
		names := make([]string, 0, len(n.providers))
		for name := range n.providers {
			names = append(names, name)
		}
		sort.Strings(names)
		name := names[rng.IntN(len(names))]
		times := 3 + rng.IntN(10)
		rule := emulate.Rule{Times: times}
		switch kind {
		case faultReset:
			rule.Reset = true
		case faultProvider5xx:
			rule.Status = 503
			if name == "apns" {
				rule.Reason = "ServiceUnavailable"
			}
		case fault429:
			rule.Status, rule.RetryAfter = 429, 2*time.Second
			if name == "apns" {
				rule.Reason = "TooManyRequests"
			}
		case faultSlow:
			// Past the sinks' --call-timeout.
			rule.Status, rule.Delay = 200, callTimeout+2*time.Second
			times = 1 + rng.IntN(3)
			rule.Times = times
		}
		n.logf("nemesis: %s: the next %d calls to %s", kind, times, name)
		n.providers[name].AddRule(rule)
		n.count(kind, "provider "+name)
	}
}

// hold marks r as held by a fault (on) or free (off); on returns nil
// when r is already held: a role being killed is not also paused, nor a
// paused one killed (the zombie must wake as itself to be fenced).
func (n *nemesis) hold(r *role, on bool) *role {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !on {
		delete(n.held, r)
		return r
	}
	if n.held[r] {
		return nil
	}
	n.held[r] = true
	return r
}

// nextRole chooses the role to kill, and holds it (hold): the role
// kinds in turn, in an order shuffled every round (each kind as often as
// the others), an instance of the kind at random among those not held by
// another fault; it waits while every instance of the kind is held.
func (n *nemesis) nextRole(rng *rand.Rand) *role {
	for {
		if r := n.tryNextRole(rng); r != nil {
			return r
		}
		time.Sleep(time.Second)
	}
}

func (n *nemesis) tryNextRole(rng *rand.Rand) *role {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.round) == 0 {
		seen := map[string]bool{}
		for _, r := range n.roles {
			if !seen[r.kind] {
				seen[r.kind] = true
				n.round = append(n.round, r.kind)
			}
		}
		rng.Shuffle(len(n.round), func(i, j int) { n.round[i], n.round[j] = n.round[j], n.round[i] })
	}
	kind := n.round[0]
	var of []*role
	for _, r := range n.roles {
		if r.kind == kind && !n.held[r] {
			of = append(of, r)
		}
	}
	if len(of) == 0 {
		return nil
	}
	n.round = n.round[1:]
	r := of[rng.IntN(len(of))]
	n.held[r] = true
	return r
}

// pickBroker chooses a node: a third of the time the leader of a
// herald.seen or herald.accepted partition, a third the transaction
// coordinator of a running stage (of a transactional id of the run's
// roles that the cluster lists), else any.
func (n *nemesis) pickBroker(ctx context.Context, rng *rand.Rand) (int, string) {
	if n.adm == nil {
		return 1 + rng.IntN(3), "at random"
	}
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	switch rng.IntN(3) {
	case 0:
		short := []string{topics.Seen, topics.Accepted}[rng.IntN(2)]
		md, err := n.adm.Metadata(c, n.cat.Name(short))
		if err == nil {
			for _, t := range md.Topics {
				ps := t.Partitions.Sorted()
				if len(ps) > 0 {
					p := ps[rng.IntN(len(ps))]
					if p.Leader >= 1 && p.Leader <= 3 {
						return int(p.Leader), fmt.Sprintf("leader of %s/%d", t.Topic, p.Partition)
					}
				}
			}
		}
	case 1:
		listed, err := n.adm.ListTransactions(c, nil, nil)
		if err == nil {
			var ids []string
			listed.Each(func(l kadm.ListedTransaction) {
				if strings.Contains(l.TxnID, n.runID) {
					ids = append(ids, l.TxnID)
				}
			})
			sort.Strings(ids)
			if len(ids) > 0 {
				id := ids[rng.IntN(len(ids))]
				co := n.adm.FindTxnCoordinators(c, id)[id]
				if co.Err == nil && co.NodeID >= 1 && co.NodeID <= 3 {
					n.count("", "a broker fault aimed at a transaction coordinator")
					return int(co.NodeID), "transaction coordinator of " + id
				}
			}
		}
	}
	return 1 + rng.IntN(3), "at random"
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// killEvery is the mean gap between two role SIGKILLs that kills each
// role kind perKind times within d: the kinds go in turn, the gaps are
// uniform in [gap/2, 3gap/2), and a kill takes up to 1.5 s; one round
// more than needed is budgeted so the randomness does not fall short.
func killEvery(d time.Duration, perKind int, roles []*role) time.Duration {
	kinds := map[string]bool{}
	for _, r := range roles {
		kinds[r.kind] = true
	}
	kills := (perKind + 1) * len(kinds)
	if kills == 0 || perKind <= 0 {
		return d
	}
	gap := d/time.Duration(kills) - 1500*time.Millisecond
	if gap < time.Second {
		gap = time.Second
	}
	return gap
}
