package sinks

import (
	"context"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

type nopProvider struct{}

func (nopProvider) Send(context.Context, *schemas.DeliveryCommand) Result {
	return Result{Class: Success}
}

func sinkOptions() Options {
	return Options{
		Instance: stage.Instance{InstanceID: "sink-0", Brokers: []string{"127.0.0.1:1"}, Metrics: metrics.NewRegistry()},
		Channel:  "apns",
		Provider: nopProvider{},
		Catalog:  topics.New(topics.Options{}),
	}
}

func TestASinksUnsetOptionsTakeTheirDefaultsAndSetOnesAreKept(t *testing.T) {
	t.Run("unset options take the defaults", func(t *testing.T) {
		for _, v := range []int{0, -1} {
			o := sinkOptions()
			o.MaxInFlight, o.CallTimeout, o.MaxBatchRecords = v, time.Duration(v), v
			o.Policy = Policy{MaxAttempts: v, Backoff: o.Policy.Backoff, MaxAge: time.Duration(v), KeepFinal: time.Duration(v)}
			o.Policy.Backoff.Min, o.Policy.Backoff.Max = time.Duration(v), time.Duration(v)
			o.Metrics = nil
			if err := o.defaults(); err != nil {
				t.Fatal(err)
			}
			if o.Group != "herald-sink-apns" || o.MaxInFlight != 1000 || o.CallTimeout != 10*time.Second || o.MaxBatchRecords != 2000 ||
				o.Now == nil || o.Logger == nil || o.Metrics != metrics.Default {
				t.Fatalf("options %+v after defaults of %d", o, v)
			}
			p := o.Policy
			if p.MaxAttempts != 8 || p.Backoff.Min != time.Second || p.Backoff.Max != 5*time.Minute || p.MaxAge != 24*time.Hour || p.KeepFinal != time.Hour {
				t.Fatalf("policy %+v after defaults of %d", p, v)
			}
		}
	})
	t.Run("a batch defaults to twice the calls in flight", func(t *testing.T) {
		o := sinkOptions()
		o.MaxInFlight = 7
		if err := o.defaults(); err != nil {
			t.Fatal(err)
		}
		if o.MaxBatchRecords != 14 {
			t.Fatalf("MaxBatchRecords %d, want 14", o.MaxBatchRecords)
		}
	})
	t.Run("set options are kept", func(t *testing.T) {
		o := sinkOptions()
		reg := o.Metrics
		o.Group, o.MaxInFlight, o.CallTimeout, o.MaxBatchRecords = "g", 1, time.Millisecond, 3
		o.Policy = Policy{MaxAttempts: 2, MaxAge: time.Minute, KeepFinal: time.Second}
		o.Policy.Backoff.Min, o.Policy.Backoff.Max = time.Millisecond, 2*time.Millisecond
		if err := o.defaults(); err != nil {
			t.Fatal(err)
		}
		p := o.Policy
		if o.Group != "g" || o.MaxInFlight != 1 || o.CallTimeout != time.Millisecond || o.MaxBatchRecords != 3 ||
			p.MaxAttempts != 2 || p.Backoff.Min != time.Millisecond || p.Backoff.Max != 2*time.Millisecond || p.MaxAge != time.Minute || p.KeepFinal != time.Second ||
			o.Metrics != reg {
			t.Fatalf("set options replaced: %+v", o)
		}
	})
	t.Run("a sink without channel, provider, catalog or instance id is refused", func(t *testing.T) {
		for name, unset := range map[string]func(*Options){
			"Channel": func(o *Options) { o.Channel = "" }, "Provider": func(o *Options) { o.Provider = nil },
			"Catalog": func(o *Options) { o.Catalog = nil }, "InstanceID": func(o *Options) { o.InstanceID = "" },
		} {
			o := sinkOptions()
			unset(&o)
			if _, err := New(o); err == nil {
				t.Fatalf("a sink without %s accepted", name)
			}
			if err := Run(context.Background(), o); err == nil {
				t.Fatalf("a sink without %s ran", name)
			}
		}
	})
}

func TestASinkRunsAsAStageOfItsChannelWithOneTransactionalIDPerInstance(t *testing.T) {
	o := sinkOptions()
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	c := o.stageConfig(newRuntime(o))
	tp := TopicsOf(o.Catalog, "apns")
	if c.Name != "sink-apns" || c.Group != "herald-sink-apns" || c.TransactionalID != "herald-sink-apns-sink-0" || c.GroupInstanceID != "sink-0" {
		t.Fatalf("stage %s group %s txn id %s instance %s", c.Name, c.Group, c.TransactionalID, c.GroupInstanceID)
	}
	if c.Input != tp.Deliveries || len(c.Changelogs) != 1 || c.Changelogs[0] != tp.State || c.DeadLetterTopic != tp.DeadLetters {
		t.Fatalf("input %s changelogs %v dead letters %s, want %s %s %s", c.Input, c.Changelogs, c.DeadLetterTopic, tp.Deliveries, tp.State, tp.DeadLetters)
	}
	if c.MaxBatchRecords != 2000 || c.AfterCommit == nil || c.NewTask == nil || c.Partitioner == nil {
		t.Fatalf("config %+v", c)
	}
}
