package api

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldhq/herald/internal/metrics"
)

// batchRecords is the record count in the header of a Kafka record batch
// (magic 2: at byte 57).
func batchRecords(b []byte) int {
	if len(b) < 61 {
		return 0
	}
	return int(binary.BigEndian.Uint32(b[57:61]))
}

// Under overload every group-commit transaction collected the most
// records it may (5,000); on a CPU-starved cluster (scripts/chaos) one
// that size could not commit within the timeout, failed every write in
// it, and their retries filled the next one to the same size: for
// minutes no send committed. Here the cluster (kfake) times out every
// transaction of more than 8 records, and 100 clients each retry their
// write: a transaction after a failed one collects fewer records, so
// every write commits.
func TestGroupCommitShrinksAfterATransactionThatCouldNotCommit(t *testing.T) {
	const most = 8
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "requests"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var mu sync.Mutex
	inTxn := map[string]int{} // records produced in the open transaction, by transactional id
	c.ControlKey(int16(kmsg.EndTxn), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		delete(inTxn, kreq.(*kmsg.EndTxnRequest).TransactionalID)
		mu.Unlock()
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		if req.TransactionID == nil {
			return nil, nil, false
		}
		n := 0
		for _, tp := range req.Topics {
			for _, p := range tp.Partitions {
				n += batchRecords(p.Records)
			}
		}
		mu.Lock()
		inTxn[*req.TransactionID] += n
		tooMany := inTxn[*req.TransactionID] > most
		mu.Unlock()
		if !tooMany {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, tp := range req.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = tp.Topic
			for _, p := range tp.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = kerr.RequestTimedOut.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})

	var clients atomic.Int64
	newClient := func() (*kgo.Client, error) {
		return kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...),
			kgo.TransactionalID(fmt.Sprintf("api-test-%d", clients.Add(1))), kgo.TransactionTimeout(10*time.Second),
			kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond }))
	}
	w := newWriter(newClient, 5000, 300*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.run(ctx)

	const writers, attempts = 100, 30
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			for range attempts {
				if err = w.write(ctx, []*kgo.Record{{Topic: "requests", Value: []byte(fmt.Sprint(i))}}); err == nil {
					return
				}
			}
			errs <- fmt.Errorf("write %d failed %d times, the last: %w", i, attempts, err)
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if len(all) > 0 {
		t.Fatalf("%d of %d writes never committed; the first: %v", len(all), writers, errors.Join(all[0]))
	}
}
