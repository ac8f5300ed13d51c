package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/topics"
)

// ChannelOptions configure the webhook channel of one process: the endpoints table,
// then, once it has caught up, the fan-out and the sink.
type ChannelOptions struct {
	// Sink configures the sink (its Channel and Provider are set here).
	Sink sinks.Options
	// FanOut configures the fan-out (its Brokers, Catalog, Table,
	// InstanceID, ResetOffsets and ClientOpts default to the sink's).
	FanOut FanOutOptions
	// Client is the adapter's HTTP client (Config.Client).
	Client *http.Client
	// AllowPrivate lets the adapter call private, loopback and link-local
	// addresses (Config.AllowPrivate).
	AllowPrivate bool
	// MaxOpen bounds how long the completion stage keeps a notification
	// whose deliveries have not all ended (CompletionOptions.MaxOpen).
	MaxOpen time.Duration
}

// Runners are the stages of a webhook channel, for readiness checks: the
// fan-out, the decisions forwarder and the completion stage
// (send.completed, completion.go), and the sink.
type Runners struct {
	Table      *Table
	FanOut     *stage.Runner
	Forwarder  *stage.Runner
	Completion *stage.Runner
	Sink       *sinks.Sink
	Provider   *Provider
}

// NewChannel builds the table, the adapter and the stages; the forwarder
// and the completion stage take the fan-out's settings, in groups of
// their own (herald-webhook-decisions, herald-webhook-completion).
func NewChannel(o ChannelOptions) (*Runners, error) {
	if o.Sink.Catalog == nil {
		return nil, errors.New("webhook: the sink's Catalog is required")
	}
	cat := o.Sink.Catalog
	r := &Runners{Table: NewTable(cat.Name(topics.Webhooks))}
	p, err := New(Config{Endpoints: r.Table, Topic: cat.Name(topics.Webhooks), Client: o.Client, AllowPrivate: o.AllowPrivate})
	if err != nil {
		return nil, err
	}
	r.Provider = p
	o.Sink.Channel, o.Sink.Provider = Channel, p
	if r.Sink, err = sinks.New(o.Sink); err != nil {
		return nil, err
	}
	f := o.FanOut
	f.Table = r.Table
	if f.Brokers == nil {
		f.Brokers = o.Sink.Brokers
	}
	if f.Catalog == nil {
		f.Catalog = cat
	}
	if f.InstanceID == "" {
		f.InstanceID = o.Sink.InstanceID
	}
	if f.ResetOffsets == "" {
		f.ResetOffsets = o.Sink.ResetOffsets
	}
	if f.ClientOpts == nil {
		f.ClientOpts = o.Sink.ClientOpts
	}
	if f.Logger == nil {
		f.Logger = o.Sink.Logger
	}
	if f.Metrics == nil {
		f.Metrics = o.Sink.Metrics
	}
	reg := f.Metrics
	if reg == nil {
		reg = metrics.Default
	}
	r.Table.Lag = metrics.ConsumerLag(reg, "webhook-table")
	if r.FanOut, err = NewFanOut(f); err != nil {
		return nil, err
	}
	in := f.Instance
	in.Group = ""
	if r.Forwarder, err = NewForwarder(ForwardOptions{Instance: in, Catalog: f.Catalog, Table: r.Table}); err != nil {
		return nil, err
	}
	if r.Completion, err = NewCompletion(CompletionOptions{Instance: in, Catalog: f.Catalog, Table: r.Table, MaxOpen: o.MaxOpen}); err != nil {
		return nil, err
	}
	return r, nil
}

// Ready reports whether the table has caught up and every stage is
// assigned and restored.
func (r *Runners) Ready() bool {
	select {
	case <-r.Table.Ready():
	default:
		return false
	}
	return r.FanOut.Ready() && r.Forwarder.Ready() && r.Completion.Ready() && r.Sink.Ready()
}

// Run reads the table until it has caught up, then runs the stages and
// the sink until ctx ends or one of them fails. brokers and opts are the
// table's client's.
func (r *Runners) Run(ctx context.Context, brokers []string, opts []kgo.Opt, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 5)
	run := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("webhook: %s: %w", name, err)
				cancel()
			}
		}()
	}
	run("endpoints table", func(ctx context.Context) error {
		return r.Table.Run(ctx, append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...), log)
	})
	if err := r.Table.WaitReady(ctx); err != nil {
		cancel()
		wg.Wait()
		select {
		case e := <-errc:
			return e
		default:
		}
		if parent.Err() != nil {
			return nil // shut down while loading
		}
		return err
	}
	log.Info("webhook endpoints loaded")
	run("fan-out", r.FanOut.Run)
	run("decisions forwarder", r.Forwarder.Run)
	run("completion", r.Completion.Run)
	run("sink", r.Sink.Run)
	wg.Wait()
	select {
	case e := <-errc:
		return e
	default:
		return nil
	}
}
