package deadletters

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/topics"
)

// Redrive is one redrive of a selection of dead letters.
type Redrive struct {
	// ClientOpts connect to the brokers (kgo.SeedBrokers and the
	// connection options).
	ClientOpts []kgo.Opt
	Catalog    *topics.Catalog
	Filter     Filter
	// By is who redrives, Reason why: both are audited; both required.
	By, Reason string
	// DryRun reports what would be redriven and writes nothing.
	DryRun bool
	// Batch is how many dead letters one transaction redrives (500 by
	// default).
	Batch int
	// Progress, when set, is told after each committed transaction how
	// many dead letters are redriven so far, of how many.
	Progress func(done, total int)
	// Now is the clock (time.Now by default).
	Now func() time.Time
}

// Skip is a selected dead letter that is not redriven, and why.
type Skip struct {
	Letter *Letter `json:"letter"`
	Why    string  `json:"why"`
}

// Report is what a redrive did (or, for a dry run, would do).
type Report struct {
	// ID is the redrive's id, in its markers and audit decisions.
	ID       string    `json:"id"`
	DryRun   bool      `json:"dryRun"`
	Redriven []*Letter `json:"redriven"`
	Skipped  []Skip    `json:"skipped"`
}

// TransactionalID is the transactional id every redrive of a catalog
// shares, so one fences another (see the package doc).
func TransactionalID(cat *topics.Catalog) string {
	return cat.Options().Prefix + "herald-deadletters-redrive"
}

// Check names the first bad setting.
func (o *Redrive) Check() error {
	if o.Catalog == nil {
		return errors.New("deadletters: Catalog is required")
	}
	if o.By == "" {
		return errors.New("by is required: who redrives")
	}
	if o.Reason == "" {
		return errors.New("reason is required: why the dead letters can be sent now")
	}
	if o.Batch < 0 {
		return fmt.Errorf("batch %d is negative", o.Batch)
	}
	return o.Filter.Check()
}

// Run redrives the dead letters the filter selects that can be redriven.
func (o Redrive) Run(ctx context.Context) (*Report, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	if o.Batch == 0 {
		o.Batch = 500
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	rep := &Report{ID: newRedriveID(o.Now()), DryRun: o.DryRun}
	var cl *kgo.Client
	if !o.DryRun {
		var err error
		cl, err = kgo.NewClient(append(append([]kgo.Opt(nil), o.ClientOpts...),
			kgo.TransactionalID(TransactionalID(o.Catalog)),
			kgo.TransactionTimeout(time.Minute),
			kgo.RecordPartitioner(redrivePartitioner{o.Catalog.Partitioner()}),
		)...)
		if err != nil {
			return nil, fmt.Errorf("deadletters: client: %w", err)
		}
		defer cl.Close()
		// Fence any other redrive (running, or crashed with a transaction
		// open) before reading the markers: what it committed is read,
		// what it had not is aborted.
		if _, _, err := cl.ProducerID(ctx); err != nil {
			return nil, fmt.Errorf("deadletters: fence earlier redrives: %w", err)
		}
	}
	dlTopic := o.Catalog.Name(topics.DeadLetters)
	set, err := Read(ctx, dlTopic, o.Filter, o.ClientOpts...)
	if err != nil {
		return nil, err
	}
	now := o.Now()
	var todo []*Letter
	for _, l := range set.Select(o.Filter) {
		why := skip(l, now)
		if why == "" && l.Kind == KindStage {
			if l.input, err = input(ctx, o.ClientOpts, l.stage.Topic, l.stage.Partition, l.stage.Offset); err != nil {
				return nil, err
			}
			if l.input == nil {
				why = "its input " + l.Source + " is no longer on the topic (past its retention, or compacted)"
			}
		}
		if why != "" {
			rep.Skipped = append(rep.Skipped, Skip{l, why})
			continue
		}
		todo = append(todo, l)
	}
	if o.DryRun {
		rep.Redriven = todo
		return rep, nil
	}
	for start := 0; start < len(todo); start += o.Batch {
		batch := todo[start:min(start+o.Batch, len(todo))]
		if err := o.commit(ctx, cl, rep.ID, dlTopic, batch); err != nil {
			return rep, err
		}
		rep.Redriven = append(rep.Redriven, batch...)
		if o.Progress != nil {
			o.Progress(len(rep.Redriven), len(todo))
		}
	}
	return rep, nil
}

// skip says why l is not redriven ("" if it is).
func skip(l *Letter, now time.Time) string {
	switch {
	case l.Redriven():
		m := l.Redrives[len(l.Redrives)-1]
		return fmt.Sprintf("redriven already, by %s at %s (redrive %s): %s", m.By, m.At.UTC().Format(time.RFC3339), m.Redrive, m.Reason)
	case l.Kind == KindStage && l.stage == nil:
		return "an unreadable stage dead letter cannot be redriven"
	case l.Kind == KindStage && l.stage.Timer:
		return "a timer's output that could never be written is gone: nothing is left to redrive"
	case l.Kind == KindStage:
		return ""
	case l.Kind == KindUnreadable:
		return "an unreadable delivery command cannot be redriven"
	case !slices.Contains(topics.SinkChannels, l.Channel):
		return fmt.Sprintf("channel %q has no sink", l.Channel)
	case l.ExpiresAt != nil && !now.Before(*l.ExpiresAt):
		return "its command expired at " + l.ExpiresAt.Format(time.RFC3339) + ": the sink would not send it"
	}
	return ""
}

// commit redrives one batch in one transaction: each command with its
// marker and its audit decision.
func (o Redrive) commit(ctx context.Context, cl *kgo.Client, id, dlTopic string, batch []*Letter) error {
	if err := cl.BeginTransaction(); err != nil {
		return fmt.Errorf("deadletters: begin: %w", err)
	}
	now := o.Now()
	var mu sync.Mutex
	var perr error
	for _, l := range batch {
		for _, r := range o.records(id, dlTopic, l, now) {
			cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil && perr == nil {
					perr = err
				}
			})
		}
	}
	err := cl.Flush(ctx)
	if err == nil {
		err = perr
	}
	if err != nil {
		abort, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = cl.EndTransaction(abort, kgo.TryAbort)
		return fmt.Errorf("deadletters: redrive: %w", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("deadletters: commit a redrive of %d dead letters: %w", len(batch), err)
	}
	return nil
}

// DecisionStage is the stage of a redrive's audit decisions (outcome
// redriven): not the stage redriven to, so that no stage's counts (the
// dedupe stage's hit rate) include redrives; Channel and Detail say which.
const DecisionStage = "deadletters"

// HeaderRedriveID names, on a redriven command, the redrive that wrote it.
const HeaderRedriveID = "herald-redrive-id"

// records are l's redrive: its command back on its channel's deliveries
// (keyed by delivery id as the route stage wrote it), its marker, and the
// audit decision.
func (o Redrive) records(id, dlTopic string, l *Letter, now time.Time) []*kgo.Record {
	if l.Kind == KindStage {
		return o.stageRecords(id, dlTopic, l, now)
	}
	hs := []kgo.RecordHeader{
		{Key: sinks.HeaderRedrive, Value: []byte(strconv.Itoa(l.Attempts))},
		{Key: HeaderRedriveID, Value: []byte(id)},
	}
	if v, ok := headerOf(l.headers, schemas.HeaderSchema); ok {
		hs = append(hs, kgo.RecordHeader{Key: schemas.HeaderSchema, Value: []byte(v)})
	}
	cmd := &kgo.Record{Topic: o.Catalog.Name(topics.Deliveries(l.Channel)), Key: []byte(l.DeliveryID), Value: l.value, Headers: hs}
	m := Marker{Redrive: id, DeadLetter: l.ID, DeliveryID: l.DeliveryID, By: o.By, Reason: o.Reason, At: now.UTC()}
	mv, _ := json.Marshal(m) // strings and a time: cannot fail
	marker := &kgo.Record{Topic: dlTopic, Key: []byte(l.DeliveryID), Value: mv,
		Headers: []kgo.RecordHeader{{Key: HeaderRedriven, Value: []byte(l.ID)}}}
	p, off := position(l.ID)
	d := &schemas.Decision{Schema: schemas.DecisionV1, DecisionID: "redrive/" + id + "/" + l.ID, Stage: DecisionStage, Outcome: schemas.DecisionRedriven,
		Detail: fmt.Sprintf("dead letter %s of delivery %s (%s at attempt %d: %s) redriven by %s: %s",
			l.ID, l.DeliveryID, l.Class, l.Attempts, l.Reason, o.By, o.Reason),
		RequestID: id, Tenant: l.Tenant, Type: l.Type, Recipient: l.Recipient, NotificationID: l.NotificationID, Producer: o.By,
		Channel: l.Channel, At: now.UnixMilli(), SourceTopic: dlTopic, SourcePartition: p, SourceOffset: off}
	dv, err := schemas.Encode(d)
	if err != nil { // herald's own type with valid fields: cannot fail
		panic(err)
	}
	decision := &kgo.Record{Topic: o.Catalog.Name(topics.Decisions), Key: []byte(l.NotificationID), Value: dv,
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.NameOf(d))}}}
	return []*kgo.Record{cmd, marker, decision}
}

func headerOf(hs []kgo.RecordHeader, key string) (string, bool) {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// position parses a valid dead letter id.
func position(id string) (int32, int64) {
	var p int32
	var off int64
	fmt.Sscanf(id, "%d-%d", &p, &off)
	return p, off
}

func newRedriveID(now time.Time) string {
	var b [6]byte
	rand.Read(b[:])
	return "rd-" + now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

// stageRecords are the redrive of a stage's dead letter: its input written
// again to the partition it was read from (the same key, value and
// headers), its marker, and the audit decision of the stage.
func (o Redrive) stageRecords(id, dlTopic string, l *Letter, now time.Time) []*kgo.Record {
	in := l.input
	hs := append(append([]kgo.RecordHeader(nil), in.Headers...),
		kgo.RecordHeader{Key: HeaderRedriveInput, Value: []byte(l.ID)}, kgo.RecordHeader{Key: HeaderRedriveID, Value: []byte(id)})
	again := &kgo.Record{Topic: in.Topic, Partition: in.Partition, Key: in.Key, Value: in.Value, Headers: hs}
	m := Marker{Redrive: id, DeadLetter: l.ID, By: o.By, Reason: o.Reason, At: now.UTC()}
	mv, _ := json.Marshal(m) // strings and a time: cannot fail
	marker := &kgo.Record{Topic: dlTopic, Key: in.Key, Value: mv, Headers: []kgo.RecordHeader{{Key: HeaderRedriven, Value: []byte(l.ID)}}}
	p, off := position(l.ID)
	d := &schemas.Decision{Schema: schemas.DecisionV1, DecisionID: "redrive/" + id + "/" + l.ID, Stage: DecisionStage, Outcome: schemas.DecisionRedriven,
		Detail:    fmt.Sprintf("dead letter %s of stage %s (%s: %s) redriven by %s: %s; its input %s written again", l.ID, l.Stage, l.Class, l.Reason, o.By, o.Reason, l.Source),
		RequestID: id, Producer: o.By, At: now.UnixMilli(), SourceTopic: dlTopic, SourcePartition: p, SourceOffset: off}
	dv, err := schemas.Encode(d)
	if err != nil { // herald's own type with valid fields: cannot fail
		panic(err)
	}
	decision := &kgo.Record{Topic: o.Catalog.Name(topics.Decisions), Key: in.Key, Value: dv,
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.NameOf(d))}}}
	return []*kgo.Record{again, marker, decision}
}
