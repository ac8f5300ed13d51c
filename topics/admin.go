package topics

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Drift is one difference between the catalog and the cluster.
type Drift struct {
	Topic string
	// Field is "topic" (missing), "partitions", "replication" or a config name.
	Field string
	Want  string
	Got   string
}

func (d Drift) String() string {
	if d.Field == "topic" {
		return fmt.Sprintf("%s: missing", d.Topic)
	}
	return fmt.Sprintf("%s: %s is %q, catalog wants %q", d.Topic, d.Field, d.Got, d.Want)
}

// Create makes every missing topic of the catalog and leaves existing ones
// alone; it is safe to run any number of times, also concurrently. It
// returns the names it created, once each is ready (AwaitReady, for at
// most 30 s). Run Verify afterwards to see drift in topics that already
// existed.
func (c *Catalog) Create(ctx context.Context, adm *kadm.Client) ([]string, error) {
	var created []string
	for _, t := range c.Topics() {
		cfg := make(map[string]*string, len(t.Configs))
		for k, v := range t.Configs {
			cfg[k] = &v
		}
		resp, err := adm.CreateTopic(ctx, t.Partitions, t.Replication, cfg, t.Name)
		if err == nil {
			err = resp.Err
		}
		switch {
		case err == nil:
			created = append(created, t.Name)
		case errors.Is(err, kerr.TopicAlreadyExists):
		default:
			return created, fmt.Errorf("topics: create %s: %w", t.Name, err)
		}
	}
	// Wait for the created topics only: one that existed may differ from
	// the catalog (Verify reports it) and would never be ready here.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return created, AwaitReady(ctx, adm, c.opts.Partitions, created...)
}

// AwaitReady waits until the brokers' metadata shows every named topic
// with the given number of partitions, each with a leader: a topic just
// created is not at once in every broker's metadata, nor its partitions
// led, and a client that produces or checks it (Verify, a stage's start)
// in that moment sees it missing. It polls every 50 ms until ctx ends; the error
// then names each topic not ready and why.
func AwaitReady(ctx context.Context, adm *kadm.Client, partitions int32, names ...string) error {
	for {
		notReady := notReady(ctx, adm, partitions, names)
		if len(notReady) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics: not ready: %s: %w", strings.Join(notReady, "; "), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// notReady says, for each named topic whose metadata does not yet show
// the given number of partitions, each with a leader, which and why.
func notReady(ctx context.Context, adm *kadm.Client, partitions int32, names []string) []string {
	if len(names) == 0 {
		return nil
	}
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return []string{"list topics: " + err.Error()}
	}
	var out []string
	for _, name := range names {
		d, ok := details[name]
		switch {
		case !ok:
			out = append(out, name+" is not in metadata")
			continue
		case d.Err != nil:
			out = append(out, name+": "+d.Err.Error())
			continue
		case int32(len(d.Partitions)) != partitions:
			out = append(out, fmt.Sprintf("%s has %d of %d partitions in metadata", name, len(d.Partitions), partitions))
			continue
		}
		for _, p := range d.Partitions.Sorted() {
			if p.Err != nil {
				out = append(out, fmt.Sprintf("%s partition %d: %v", name, p.Partition, p.Err))
				break
			}
			if p.Leader < 0 {
				out = append(out, fmt.Sprintf("%s partition %d has no leader", name, p.Partition))
				break
			}
		}
	}
	return out
}

// Verify compares the cluster with the catalog: missing topics, partition
// counts, replication factors and every config the catalog sets. It returns
// the drift found, sorted; an empty result means the cluster matches.
func (c *Catalog) Verify(ctx context.Context, adm *kadm.Client) ([]Drift, error) {
	ts := c.Topics()
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Name
	}
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("topics: list: %w", err)
	}
	var present []string
	var drift []Drift
	for _, t := range ts {
		d, ok := details[t.Name]
		if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			drift = append(drift, Drift{Topic: t.Name, Field: "topic", Want: "present", Got: "missing"})
			continue
		}
		if d.Err != nil {
			return nil, fmt.Errorf("topics: describe %s: %w", t.Name, d.Err)
		}
		present = append(present, t.Name)
		if got := int32(len(d.Partitions)); got != t.Partitions {
			drift = append(drift, Drift{t.Name, "partitions", fmt.Sprint(t.Partitions), fmt.Sprint(got)})
		}
		if got := d.Partitions.NumReplicas(); got != int(t.Replication) {
			drift = append(drift, Drift{t.Name, "replication", fmt.Sprint(t.Replication), fmt.Sprint(got)})
		}
	}
	if len(present) > 0 {
		configs, err := describeConfigs(ctx, adm, present)
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			rc, ok := configs[t.Name]
			if !ok {
				continue // missing topic, reported above
			}
			got := map[string]string{}
			for _, cfg := range rc.Configs {
				if cfg.Value != nil {
					got[cfg.Key] = *cfg.Value
				}
			}
			for k, want := range t.Configs {
				if g, ok := got[k]; !ok || g != want {
					drift = append(drift, Drift{t.Name, k, want, g})
				}
			}
		}
	}
	sort.Slice(drift, func(i, j int) bool {
		if drift[i].Topic != drift[j].Topic {
			return drift[i].Topic < drift[j].Topic
		}
		return drift[i].Field < drift[j].Field
	})
	return drift, nil
}

// unknownPatience bounds how long describeConfigs asks again about a
// topic the metadata lists but the broker asked does not know yet.
const unknownPatience = 15 * time.Second

// describeConfigs describes the named topics' configs, which the
// metadata lists. A broker learns of a topic just created a moment after
// the metadata answer that listed it (on a cluster just started, seconds
// after): it answers UNKNOWN_TOPIC_OR_PARTITION. Those topics are asked
// about again, every 200 ms for up to unknownPatience (or until ctx
// ends); any other error, or a topic still unknown then, is returned
// naming the topic.
func describeConfigs(ctx context.Context, adm *kadm.Client, names []string) (map[string]kadm.ResourceConfig, error) {
	out := make(map[string]kadm.ResourceConfig, len(names))
	deadline := time.Now().Add(unknownPatience)
	for {
		configs, err := adm.DescribeTopicConfigs(ctx, names...)
		if err != nil {
			return nil, fmt.Errorf("topics: describe configs: %w", err)
		}
		var unknown []string
		for _, name := range names {
			rc, err := configs.On(name, nil)
			switch {
			case err != nil:
				unknown = append(unknown, name) // not in the answer
			case errors.Is(rc.Err, kerr.UnknownTopicOrPartition):
				unknown = append(unknown, name)
			case rc.Err != nil:
				return nil, fmt.Errorf("topics: describe configs of %s: %w", name, rc.Err)
			default:
				out[name] = rc
			}
		}
		if len(unknown) == 0 {
			return out, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("topics: describe configs of %s: %w (for %v after the metadata listed it)",
				strings.Join(unknown, ", "), kerr.UnknownTopicOrPartition, unknownPatience)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("topics: describe configs of %s: %w (%w)", strings.Join(unknown, ", "), kerr.UnknownTopicOrPartition, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
		names = unknown
	}
}

// FixConfigs sets every drifted config back to the catalog's value with
// incremental alters. It cannot fix partitions or replication (that needs
// an operator's decision) and returns those drifts untouched.
func (c *Catalog) FixConfigs(ctx context.Context, adm *kadm.Client, drift []Drift) (unfixed []Drift, err error) {
	var alters = map[string][]kadm.AlterConfig{}
	for _, d := range drift {
		switch d.Field {
		case "topic", "partitions", "replication":
			unfixed = append(unfixed, d)
		default:
			v := d.Want
			alters[d.Topic] = append(alters[d.Topic], kadm.AlterConfig{Op: kadm.SetConfig, Name: d.Field, Value: &v})
		}
	}
	for topic, as := range alters {
		resp, err := adm.AlterTopicConfigs(ctx, as, topic)
		if err != nil {
			return unfixed, fmt.Errorf("topics: alter configs of %s: %w", topic, err)
		}
		for _, r := range resp {
			if r.Err != nil {
				return unfixed, fmt.Errorf("topics: alter configs of %s: %w", topic, r.Err)
			}
		}
	}
	return unfixed, nil
}

// Delete deletes every topic of the catalog that exists, with all its
// records, and returns the names it deleted; topics already gone are
// skipped, so it is safe to run again after a partial failure. It deletes
// nothing outside the catalog: only the catalog's names, under its prefix.
//
// Hazard: deleting a live deployment's topics loses its requests, seen-set
// and audit trail still in Kafka. Callers ask for confirmation (`herald
// topics delete --confirm <prefix>`); benchmarks delete their own.
func (c *Catalog) Delete(ctx context.Context, adm *kadm.Client) ([]string, error) {
	resp, err := adm.DeleteTopics(ctx, c.Names()...)
	if err != nil {
		return nil, fmt.Errorf("topics: delete %s*: %w", c.opts.Prefix, err)
	}
	var deleted []string
	for _, r := range resp {
		switch {
		case r.Err == nil:
			deleted = append(deleted, r.Topic)
		case errors.Is(r.Err, kerr.UnknownTopicOrPartition):
		default:
			err = errors.Join(err, fmt.Errorf("topics: delete %s: %w", r.Topic, r.Err))
		}
	}
	sort.Strings(deleted)
	return deleted, err
}
