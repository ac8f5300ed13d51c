package api

import (
	"encoding/hex"
	"encoding/json"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
)

// sendRecords returns the request and the accepted dedupe decision of
// send i as herald writes them (records v2), shaped like
// `herald bench api`'s sends: one recipient, a key, a title and a body.
func sendRecords(b *testing.B, i int) (req, dec []byte) {
	var id, rid [16]byte
	for k := range 8 {
		id[k], rid[k] = byte(i>>(8*k)), byte(i>>(8*k))^0x5a
	}
	id[15], rid[15] = 1, 2
	nid, reqID := hex.EncodeToString(id[:]), hex.EncodeToString(rid[:])
	r := &schemas.Request{Schema: schemas.RequestV2, RequestID: reqID, Tenant: "bench", Type: "bench.load", Recipient: "u" + strconv.Itoa(i%10000),
		NotificationID: nid, IDSource: "key", Key: json.RawMessage(`{"n":` + strconv.Itoa(i) + `,"run":"r"}`), Title: "t", Body: "b",
		Producer: "load", Source: "api", CreatedAt: int64(i)}
	d := &schemas.Decision{Schema: schemas.DecisionV2, DecisionID: nid[:16] + "-0-" + strconv.Itoa(i), Stage: "dedupe", Outcome: schemas.DecisionAccepted,
		RequestID: reqID, Tenant: "bench", Type: "bench.load", Recipient: r.Recipient, NotificationID: nid, Producer: "load", At: int64(i)}
	var err error
	if req, err = schemas.Encode(r); err != nil {
		b.Fatal(err)
	}
	if dec, err = schemas.Encode(d); err != nil {
		b.Fatal(err)
	}
	return req, dec
}

// BenchmarkReadModelMemory measures what a tracked notification costs the
// API: its read model is filled with n sends (a request and an accepted
// decision each, as the consumer reads them), then bytes/notification is
// the growth of the heap in use after a full collection divided by n, and
// gc-ms the time of one full collection with the read model live (its
// work grows with the pointers on the heap). Reported, never asserted.
//
//	go test -run '^$' -bench ReadModelMemory -benchtime 1x ./api
func BenchmarkReadModelMemory(b *testing.B) {
	const n = 100_000 // the default MaxTracked
	recs := make([][2][]byte, n)
	for i := range recs {
		recs[i][0], recs[i][1] = sendRecords(b, i)
	}
	for range b.N {
		before := testenv.HeapInUse()
		tr := newTracker(n, time.Minute)
		for i := range recs {
			placeSend(b, tr, recs[i][0], recs[i][1], int64(i))
		}
		after := testenv.HeapInUse()
		start := time.Now()
		runtime.GC()
		gc := time.Since(start)
		if len(tr.notes) != n {
			b.Fatalf("%d notes, want %d", len(tr.notes), n)
		}
		b.ReportMetric(float64(after-before)/n, "bytes/notification")
		b.ReportMetric(float64(gc.Microseconds())/1000, "gc-ms")
		runtime.KeepAlive(tr)
	}
}

// BenchmarkReadModelPlace measures the read model's consumer per send: its
// request and its decision placed into a read model holding 100,000
// notifications (the oldest evicted as new ones arrive).
//
//	go test -run '^$' -bench ReadModelPlace -benchmem ./api
func BenchmarkReadModelPlace(b *testing.B) {
	const n = 100_000
	recs := make([][2][]byte, 4*n)
	for i := range recs {
		recs[i][0], recs[i][1] = sendRecords(b, i)
	}
	tr := newTracker(n, time.Minute)
	for i := range n {
		placeSend(b, tr, recs[i][0], recs[i][1], int64(i))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		r := &recs[(n+i)%len(recs)]
		placeSend(b, tr, r[0], r[1], int64(i))
	}
}

// placeSend places a send's request and decision as the consumer does.
func placeSend(b *testing.B, tr *tracker, req, dec []byte, at int64) {
	if err := tr.addRequest(req, at); err != nil {
		b.Fatal(err)
	}
	if err := tr.addDecision(dec, true); err != nil {
		b.Fatal(err)
	}
}
