package dedupe

import (
	"context"
	"errors"

	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

// Options configure one instance of the dedupe stage: the runtime's
// (stage.Instance; Group is "herald-dedupe" by default), its topics and its
// policy.
type Options struct {
	stage.Instance
	Catalog *topics.Catalog
	Policy  Policy
	// SeenJSON writes herald.seen entries as JSON (herald.seen/v1) instead
	// of Protocol Buffers (herald.seen/v2). The stage reads both whatever
	// this says; it is for a rolling upgrade from a herald that reads only
	// JSON, until no instance of one runs (see "Seen entries" in package
	// schemas).
	SeenJSON bool
	// SeenPerKey writes herald.seen in the per-key layout (herald.seen/v2,
	// or v1 with SeenJSON) instead of bucket records (herald.seen/v3, see
	// batch.go), for a rolling upgrade from a herald that reads no v3, until
	// no instance of one runs. The stage reads every layout whatever this
	// says.
	SeenPerKey bool
	// RecordFormat is how the stage writes its decisions and accepted
	// notifications: schemas.FormatBinary (the zero value: herald.decision/v2
	// and herald.accepted/v2, Protocol Buffers) or schemas.FormatJSON (v1,
	// for a rolling upgrade while a reader of an earlier herald that reads
	// only JSON still runs; see "Binary records" in package schemas).
	RecordFormat schemas.Format
}

// TopicsOf returns the dedupe stage's topics in a catalog.
func TopicsOf(c *topics.Catalog) Topics {
	return Topics{
		Requests:  c.Name(topics.Requests),
		Decisions: c.Name(topics.Decisions),
		Seen:      c.Name(topics.Seen),
		Accepted:  c.Name(topics.Accepted),
		Replies:   c.Name(topics.Replies),
		// Every catalog topic has the catalog's partitions.
		ReplyPartitions: c.Options().Partitions,
	}
}

// New builds the stage runner.
func New(o Options) (*stage.Runner, error) {
	if o.Catalog == nil || o.InstanceID == "" {
		return nil, errors.New("dedupe: Catalog and InstanceID are required")
	}
	if o.Group == "" {
		o.Group = "herald-dedupe"
	}
	o.Policy = o.Policy.OrDefault()
	t := TopicsOf(o.Catalog)
	if o.Metrics == nil {
		o.Metrics = metrics.Default
	}
	decisions := metrics.NewDecisions(o.Metrics, "dedupe")
	cfg := o.Config("dedupe")
	cfg.Input, cfg.Changelogs, cfg.Outputs = t.Requests, []string{t.Seen}, []string{t.Decisions, t.Accepted, t.Replies}
	cfg.NewTask = func(p int32) stage.Task {
		task := NewTask(o.Policy, t, p)
		task.decisions = decisions.Tally()
		task.SeenJSON = o.SeenJSON
		task.SeenPerKey = o.SeenPerKey
		task.RecordFormat = o.RecordFormat
		return task
	}
	cfg.Partitioner = o.Catalog.Partitioner()
	cfg.DeadLetterTopic = o.Catalog.Name(topics.DeadLetters)
	return stage.New(cfg)
}

// Run runs one instance until ctx is done.
func Run(ctx context.Context, o Options) error {
	r, err := New(o)
	if err != nil {
		return err
	}
	return r.Run(ctx)
}
