package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sideshow/apns2"

	"github.com/heraldhq/herald/internal/backoff"
	"github.com/heraldhq/herald/internal/ops"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/apns"
	"github.com/heraldhq/herald/sinks/email"
	"github.com/heraldhq/herald/sinks/feed"
	"github.com/heraldhq/herald/sinks/webhook"
)

// sinkFlags are the runtime's flags, shared by every channel.
type sinkFlags struct {
	instance, group, reset          string
	rebalanceTimeout                time.Duration
	batch, maxInFlight, maxAttempts int
	interval, txnTimeout, callTO    time.Duration
	linger                          time.Duration
	backoffMin, backoffMax, maxAge  time.Duration
	recordFormat                    *string
}

func (s *sinkFlags) register(fs *flag.FlagSet) {
	host, _ := os.Hostname()
	fs.StringVar(&s.instance, "instance-id", host, "this instance's name, stable across restarts (its transactional id)")
	fs.StringVar(&s.group, "group", "", "consumer group of the channel's sinks (default herald-sink-<channel>)")
	fs.IntVar(&s.batch, "batch-records", 0, "most delivery commands in one transaction (default twice --max-in-flight)")
	fs.DurationVar(&s.interval, "batch-interval", 100*time.Millisecond, "longest a transaction collects commands")
	fs.DurationVar(&s.txnTimeout, "transaction-timeout", 10*time.Second, "transaction timeout (bounds a crashed instance's hold on readers)")
	fs.DurationVar(&s.linger, "producer-linger", stage.DefaultProducerLinger, "how long the producer lets a batch of outputs fill while a transaction's inputs are processed (the end of every transaction sends at once); 0: none")
	fs.IntVar(&s.maxInFlight, "max-in-flight", 1000, "most provider calls in flight")
	fs.DurationVar(&s.callTO, "call-timeout", 10*time.Second, "longest one provider call may take (keep well below the group's rebalance timeout)")
	fs.IntVar(&s.maxAttempts, "max-attempts", 8, "most calls per delivery; then it fails and is dead-lettered")
	fs.DurationVar(&s.backoffMin, "backoff-min", time.Second, "first retry's longest wait (full jitter; doubles per retry)")
	fs.DurationVar(&s.backoffMax, "backoff-max", 5*time.Minute, "longest wait between retries")
	fs.DurationVar(&s.rebalanceTimeout, "rebalance-timeout", time.Minute,
		"how long the group waits for members to rejoin a rebalance; partitions restore inside it (and provider calls finish before it: keep --call-timeout well below), "+
			"so set it above the longest restore: records in the largest sink state partition × partitions per instance ÷ 4 ÷ the records_per_s logged by \"partition restored\"")
	fs.StringVar(&s.reset, "reset-offsets", "",
		"where a partition with no committed group offset starts: empty refuses to start when the sink state already holds entries "+
			"(the group's offsets were lost); earliest replays the retained deliveries (the sent-set skips the final ones), latest skips to the end. Pass it for one restart, then remove it")
	fs.DurationVar(&s.maxAge, "max-age", 24*time.Hour, "expiry of a delivery command that carries none, after its creation")
	s.recordFormat = formatFlag(fs, "record-format", "how the sink writes its decisions (a delivery not sent again) to herald.decisions: v2 (Protocol Buffers, schemas/recordpb/records.proto) or v1 (JSON, for a rolling upgrade while a reader of an earlier herald that reads only JSON still runs)")
	atLeast(fs, "batch-records", &s.batch, 0)
	positive(fs, "batch-interval", &s.interval)
	positive(fs, "transaction-timeout", &s.txnTimeout)
	positive(fs, "rebalance-timeout", &s.rebalanceTimeout)
	positive(fs, "max-age", &s.maxAge)
	atLeast(fs, "max-in-flight", &s.maxInFlight, 1)
	atLeast(fs, "max-attempts", &s.maxAttempts, 1)
	positive(fs, "call-timeout", &s.callTO)
	addCheck(fs, s.check)
}

// check reports every bad sink runtime setting.
func (s *sinkFlags) check() error {
	var errs []error
	if s.instance == "" {
		errs = append(errs, badField("instance-id", "is empty"))
	}
	if err := stage.CheckResetOffsets(s.reset); err != nil {
		errs = append(errs, badField("reset-offsets", "%v", err))
	}
	if err := checkProducerLinger(s.linger); err != nil {
		errs = append(errs, err)
	}
	if s.backoffMin <= 0 || s.backoffMax < s.backoffMin {
		errs = append(errs, badField("backoff-max", "must be at least --backoff-min, both positive (got %v and %v)", s.backoffMax, s.backoffMin))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", errUsage, errors.Join(errs...))
	}
	return nil
}

func (s *sinkFlags) options(channel string, p sinks.Provider, kf *kafkaFlags) (sinks.Options, error) {
	seeds, kopts, err := kf.connect()
	if err != nil {
		return sinks.Options{}, err
	}
	if err := s.check(); err != nil {
		return sinks.Options{}, err
	}
	return sinks.Options{
		Instance:     stage.Instance{Brokers: seeds, ClientOpts: kopts, Group: s.group, InstanceID: s.instance, MaxBatchRecords: s.batch, BatchInterval: s.interval, TransactionTimeout: s.txnTimeout, RebalanceTimeout: s.rebalanceTimeout, ResetOffsets: s.reset, ProducerLinger: producerLinger(s.linger)},
		Channel:      channel,
		Provider:     p,
		Catalog:      kf.catalog(),
		Policy:       sinks.Policy{MaxAttempts: s.maxAttempts, Backoff: backoff.Policy{Min: s.backoffMin, Max: s.backoffMax}, MaxAge: s.maxAge},
		MaxInFlight:  s.maxInFlight,
		CallTimeout:  s.callTO,
		RecordFormat: schemas.Format(*s.recordFormat),
	}, nil
}

// apnsFlags configure the APNs adapter. Secrets (key and certificate files,
// the certificate's password) are read, never logged.
type apnsFlags struct {
	host, topic, keyFile, keyID, teamID, certFile, certPassword, caFile, pushType string
	priority                                                                      int
}

func (a *apnsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.host, "apns-host", apns2.HostProduction, "APNs base URL (the sandbox: "+apns2.HostDevelopment+"; an emulator's URL)")
	fs.StringVar(&a.topic, "apns-topic", "", "the app's bundle id (apns-topic)")
	fs.StringVar(&a.keyFile, "apns-key-file", "", "token auth: the .p8 signing key file")
	fs.StringVar(&a.keyID, "apns-key-id", "", "token auth: the key id")
	fs.StringVar(&a.teamID, "apns-team-id", "", "token auth: the team id")
	fs.StringVar(&a.certFile, "apns-cert-file", "", "certificate auth: a .p12 or PEM file")
	fs.StringVar(&a.certPassword, "apns-cert-password", "", "certificate auth: the file's password (prefer HERALD_APNS_CERT_PASSWORD)")
	fs.StringVar(&a.caFile, "apns-ca-file", "", "PEM certificates to trust instead of the system's (an emulator's)")
	fs.IntVar(&a.priority, "apns-priority", 10, "apns-priority: 10 (immediate) or 5 (power-saving)")
	fs.StringVar(&a.pushType, "apns-push-type", "alert", "apns-push-type")
	addCheck(fs, a.check)
}

// check reports every bad APNs setting that can be seen without a
// channel: the files named must be readable, the priority 5 or 10, token
// auth complete.
func (a *apnsFlags) check() error {
	var errs []error
	for _, f := range []struct{ name, path string }{{"apns-key-file", a.keyFile}, {"apns-cert-file", a.certFile}, {"apns-ca-file", a.caFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			errs = append(errs, badField(f.name, "cannot be read: %v", err))
		}
	}
	if a.keyFile != "" && (a.keyID == "" || a.teamID == "") {
		errs = append(errs, badField("apns-key-file", "needs --apns-key-id and --apns-team-id (token auth)"))
	}
	if a.priority != 5 && a.priority != 10 {
		errs = append(errs, badField("apns-priority", "must be 10 or 5, got %d", a.priority))
	}
	return errors.Join(errs...)
}

func (a *apnsFlags) provider() (*apns.Provider, error) {
	cfg := apns.Config{
		Host: a.host, Topic: a.topic, KeyFile: a.keyFile, KeyID: a.keyID, TeamID: a.teamID,
		CertFile: a.certFile, CertPassword: a.certPassword, Priority: a.priority, PushType: a.pushType,
	}
	if a.caFile != "" {
		var err error
		if cfg.RootCAs, err = readCAFile("apns-ca-file", a.caFile); err != nil {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	return apns.New(cfg)
}

// runSink implements `herald sink --channel apns|fcm|webpush|feed|email|webhook`:
// one instance of a channel's sink (for webhook, also the fan-out from
// herald.outcomes and the endpoints table: sinks/webhook).
func runSink(ctx context.Context, args []string, _ io.Writer) error {
	fs := newFlagSet("sink")
	var kf kafkaFlags
	kf.register(fs)
	var sf sinkFlags
	sf.register(fs)
	var af apnsFlags
	af.register(fs)
	var ff fcmFlags
	ff.register(fs)
	var wf webpushFlags
	wf.register(fs)
	var ef emailFlags
	ef.register(fs)
	channel := fs.String("channel", "", "the channel to deliver: "+strings.Join(sinkChannels, ", "))
	addCheck(fs, func() error {
		if *channel == "" || slices.Contains(sinkChannels, *channel) { // required when the sink runs, not in a shared file
			return nil
		}
		return badField("channel", "%q has no sink (%s)", *channel, strings.Join(sinkChannels, ", "))
	})
	allowPrivate := fs.Bool("webhook-allow-private", false, "webhook channel: let endpoints be called at private, loopback and link-local addresses (development and tests only; refused by default, checked on every connection)")
	var of opsFlags
	of.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var p sinks.Provider
	switch *channel {
	case "apns":
		ap, err := af.provider()
		if err != nil {
			return providerError("apns", "--apns-key-file, --apns-key-id, --apns-team-id, --apns-topic or --apns-cert-file", err)
		}
		p = ap
	case "fcm":
		fp, err := ff.provider(ctx)
		if err != nil {
			return providerError("fcm", "--fcm-credentials-file or --fcm-project", err)
		}
		defer fp.CloseIdleConnections()
		p = fp
	case "webpush":
		wp, err := wf.provider()
		if err != nil {
			return providerError("webpush", "--webpush-vapid-public-key, --webpush-vapid-private-key or --webpush-subscriber", err)
		}
		defer wp.CloseIdleConnections()
		p = wp
	case "feed":
		p = feed.New(kf.catalog())
	case email.Channel:
		ep, err := ef.provider()
		if err != nil {
			return providerError("email", "--email-smtp-host, --email-from, --email-tls, --email-smtp-username, --email-templates or --email-unsubscribe-url", err)
		}
		defer ep.Close()
		p = ep
	case webhook.Channel:
		return runWebhookSink(ctx, &sf, &kf, &of, *allowPrivate)
	case "":
		return fmt.Errorf("%w: --channel (HERALD_CHANNEL) is required: %s", errUsage, strings.Join(sinkChannels, ", "))
	}
	o, err := sf.options(*channel, p, &kf)
	if err != nil {
		return err
	}
	r, err := sinks.New(o)
	if err != nil {
		return err
	}
	stop, err := of.serve(ops.Check{Name: "sink (assigned and restored)", Ready: r.Ready, Warnings: r.Warnings})
	if err != nil {
		return err
	}
	defer stop()
	return r.Run(ctx)
}

// sinkChannels are the channels runSink has a sink for.
var sinkChannels = []string{"apns", "fcm", "webpush", "feed", email.Channel, webhook.Channel}

// providerError is a channel's adapter refusing its settings: a usage
// error that says which flags configure it (the adapters' own errors name
// their settings, not the flags).
func providerError(channel, flags string, err error) error {
	if errors.Is(err, errUsage) {
		return err
	}
	return fmt.Errorf("%w: --channel %s: %v (check %s)", errUsage, channel, err, flags)
}

// runWebhookSink runs the webhook channel: the endpoints table, the
// fan-out (group herald-webhook-fanout) and the sink.
func runWebhookSink(ctx context.Context, sf *sinkFlags, kf *kafkaFlags, of *opsFlags, allowPrivate bool) error {
	o, err := sf.options(webhook.Channel, nil, kf)
	if err != nil {
		return err
	}
	r, err := webhook.NewChannel(webhook.ChannelOptions{Sink: o, AllowPrivate: allowPrivate})
	if err != nil {
		return err
	}
	defer r.Provider.CloseIdleConnections()
	stop, err := of.serve(ops.Check{Name: "webhook sink (endpoints loaded; fan-out, decisions forwarder, completion stage and sink assigned and restored)", Ready: r.Ready})
	if err != nil {
		return err
	}
	defer stop()
	return r.Run(ctx, o.Brokers, nil, nil)
}
