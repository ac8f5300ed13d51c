package embedded

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/testenv"
)

// childEnv names the data dir and port of a kfake the test binary runs as
// a child process, to be killed with SIGKILL.
const childEnv = "HERALD_EMBEDDED_KAFKA_CHILD"

// TestEmbeddedKafkaChildProcess is not a test: run with childEnv set, it is
// the embedded cluster the crash test kills.
func TestEmbeddedKafkaChildProcess(t *testing.T) {
	spec := os.Getenv(childEnv)
	if spec == "" {
		t.Skip("the crash test's child process")
	}
	var dir string
	var port int
	fmt.Sscanf(spec, "%s %d", &dir, &port)
	k, err := StartKafka(dir, port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer k.Close()
	select {}
}

// TestARestartAfterSIGKILLEndsTheOpenTransactionWithAnAbortMarker covers
// defect 5: a transaction open when kfake is SIGKILLed has no marker after
// the restart, so a read_committed reader (a stage's restore, a catch-up)
// never reaches the partition's end. StartKafka writes the marker: the
// reader reaches the end, sees the committed records and not the open
// transaction's, and the next start writes nothing more.
func TestARestartAfterSIGKILLEndsTheOpenTransactionWithAnAbortMarker(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	port := testenv.FreePort(t)
	child := exec.Command(os.Args[0], "-test.run=^TestEmbeddedKafkaChildProcess$")
	child.Env = append(os.Environ(), childEnv+"="+dir+" "+strconv.Itoa(port))
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	brokers := []string{fmt.Sprintf("127.0.0.1:%d", port)}

	const topic = "t"
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) { // a guard: the child starts
		if err := adm.Ping(ctx); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the child kfake never answered: %v", err)
		}
	}
	if _, err := kadm.NewClient(adm).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	p, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("w"+TransactionalSuffix()), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for txn, commit := range []bool{true, false} {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			rec := &kgo.Record{Key: []byte(fmt.Sprintf("%d-%d", txn, i))}
			if err := p.ProduceSync(ctx, rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if commit {
			if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The second transaction is open: kill the cluster under it.
	child.Process.Kill()
	child.Wait()
	p.Close()
	adm.Close()

	for start, wantMarkers := range []int{1, 0} {
		k, err := StartKafka(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := k.AbortedOnStart(); got != wantMarkers {
			t.Errorf("start %d after the crash wrote %d abort markers, want %d", start+1, got, wantMarkers)
		}
		keys, reached := readCommittedToEnd(t, k.Brokers(), topic)
		k.Close()
		if !reached {
			t.Fatalf("start %d after the crash: a read_committed reader never reached the partition's end (it read %v)", start+1, keys)
		}
		if fmt.Sprint(keys) != "[0-0 0-1 0-2]" {
			t.Fatalf("start %d after the crash: read_committed read %v, want the committed [0-0 0-1 0-2]", start+1, keys)
		}
	}
}

// readCommittedToEnd reads partition 0 of topic read_committed, markers
// included, until a record at the high watermark's last offset arrives (as
// a stage's restore does), and returns the data records' keys and whether
// it got there. Nothing arriving for 10 s ends the read: a guard, the
// partition is written by no one.
func readCommittedToEnd(t *testing.T, brokers []string, topic string) ([]string, bool) {
	t.Helper()
	ctx := context.Background()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords()}, ClientOpts()...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topic, 0)
	var keys []string
	for {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if fs.NumRecords() == 0 {
			return keys, false
		}
		reached := false
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				keys = append(keys, string(r.Key))
			}
			reached = reached || r.Offset >= end.Offset-1
		})
		if reached {
			return keys, true
		}
	}
}
