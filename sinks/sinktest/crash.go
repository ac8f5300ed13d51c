package sinktest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// Crash describes a SIGKILL run of one channel's sink: two
// `herald sink --channel <Channel>` processes (with Args for the channel's
// adapter) over Commands, plus Repeats of them after their originals (as a
// replayed route stage would write), SIGKILLed at random up to Kills times
// until every delivery has an outcome.
type Crash struct {
	Channel  string
	Args     []string
	Commands []*schemas.DeliveryCommand
	Repeats  int
	Kills    int
	// Inputs are other records to produce, in order, after the commands
	// (a stage's input: outcomes and decisions for the webhook channel's
	// stages); Await, when set, are the delivery ids whose outcomes end
	// the run in place of the commands'.
	Inputs []*kgo.Record
	Await  []string
}

// Run runs it on the catalog (Partitions partitions, replication 1) and
// returns what the sinks committed. The processes log to the test's temp
// dir, named in failures.
func (c Crash) Run(t *testing.T, brokers []string, cat *topics.Catalog) Audit {
	t.Helper()
	bin := testenv.Herald(t)
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	t.Logf("crash run seed %d", seed)

	// proc is one sink process; exited closes once its only Wait returns.
	type proc struct {
		cmd    *exec.Cmd
		exited chan struct{}
	}
	var mu sync.Mutex
	running := map[string]proc{}
	start := func(id string) {
		logf, err := os.OpenFile(filepath.Join(dir, id+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		args := append([]string{"sink", "--channel", c.Channel, "--brokers", brokers[0], "--topic-prefix", cat.Options().Prefix,
			"--partitions", fmt.Sprint(cat.Options().Partitions), "--replication", "1", "--instance-id", id,
			"--max-in-flight", "20", "--call-timeout", "1s", "--batch-interval", "20ms", "--transaction-timeout", "5s",
			"--max-attempts", "30", "--backoff-min", "20ms", "--backoff-max", "500ms"}, c.Args...)
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := proc{cmd, make(chan struct{})}
		mu.Lock()
		running[id] = p
		mu.Unlock()
		go func() { cmd.Wait(); logf.Close(); close(p.exited) }()
	}
	ids := []string{"s1", "s2"}
	for _, id := range ids {
		start(id)
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range running {
			p.cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range running {
			<-p.exited
		}
	})

	stream := append([]*schemas.DeliveryCommand(nil), c.Commands...)
	for _, j := range rng.Perm(len(c.Commands))[:min(c.Repeats, len(c.Commands))] {
		stream = append(stream, c.Commands[j])
	}
	produced := make(chan error, 1)
	cl := testenv.Client(t, brokers, kgo.RecordPartitioner(cat.Partitioner()))
	go func() {
		for _, cmd := range stream {
			b, err := schemas.Encode(cmd)
			if err != nil {
				produced <- err
				return
			}
			cl.Produce(context.Background(), &kgo.Record{Topic: cat.Name(topics.Deliveries(cmd.Channel)), Key: []byte(cmd.DeliveryID), Value: b}, nil)
		}
		for i, r := range c.Inputs {
			cl.Produce(context.Background(), r, nil)
			if i%5 == 4 { // spread over the kills
				time.Sleep(time.Duration(50+rand.IntN(200)) * time.Millisecond) // the global source: rng is the kill loop's
			}
		}
		produced <- cl.Flush(context.Background())
	}()

	await := map[string]bool{}
	for _, cmd := range c.Commands {
		await[cmd.DeliveryID] = true
	}
	if c.Await != nil {
		clear(await)
		for _, id := range c.Await {
			await[id] = true
		}
	}
	outcomes := func() int {
		seen := map[string]bool{}
		for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Outcomes)) {
			if await[string(r.Key)] {
				seen[string(r.Key)] = true
			}
		}
		return len(seen)
	}
	kills := 0
	deadline := time.Now().Add(8 * time.Minute)
	for n := outcomes(); n < len(await); n = outcomes() {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d deliveries have an outcome after %d kills; logs in %s", n, len(await), kills, dir)
		}
		if kills < c.Kills {
			id := ids[rng.IntN(len(ids))]
			mu.Lock()
			p := running[id]
			mu.Unlock()
			p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.exited
			kills++
			time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
			start(id)
		}
		time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
	}
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d kills", kills)
	return Read(t, brokers, cat)
}

// CheckOnce checks what every crash run must show, given how many times
// each delivery reached the receiver: one delivered outcome, attempts
// numbered 1..n once each, at least one arrival, and more than one only
// if an attempt is audited ambiguous. It returns how many deliveries
// arrived more than once.
func CheckOnce(t *testing.T, a Audit, cmds []*schemas.DeliveryCommand, arrivals map[string]int) (twice int) {
	t.Helper()
	for _, c := range cmds {
		id := c.DeliveryID
		if n := len(a.Outcomes[id]); n != 1 || a.Outcomes[id][0].Status != schemas.OutcomeDelivered {
			t.Errorf("%s: outcomes %+v, want one delivered", id, a.Outcomes[id])
		}
		ambiguous := false
		for n, at := range a.Attempts[id] {
			if at.Attempt != n+1 {
				t.Errorf("%s: attempt record %d is numbered %d", id, n+1, at.Attempt)
			}
			ambiguous = ambiguous || at.Result == schemas.AttemptAmbiguous
		}
		switch got := arrivals[id]; {
		case got == 0:
			t.Errorf("%s never reached the receiver", id)
		case got > 1 && !ambiguous:
			t.Errorf("%s reached the receiver %d times with no ambiguous attempt in the audit", id, got)
		case got > 1:
			twice++
		}
	}
	return twice
}
