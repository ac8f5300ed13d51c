package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/heraldhq/herald/internal/kafkacompress"
	"github.com/heraldhq/herald/topics"
)

// kafkaFlags are the flags every command that talks to Kafka shares: the
// brokers, the topic catalog, and how to connect (SASL, TLS). The SASL
// password is best given as HERALD_KAFKA_SASL_PASSWORD; it is never logged.
type kafkaFlags struct {
	brokers string
	// saslMechanism is empty (no SASL), PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	saslMechanism, saslUser, saslPassword string
	tls                                   tlsFlags
	prefix                                string
	partitions                            int
	replication                           int
	// feedRetention is herald.feed's retention (topics.Options.FeedRetentionMs).
	feedRetention time.Duration
	// compression is the producers' codec (kafkacompress.Names), for
	// batches of at least compressionMin bytes of records.
	compression    string
	compressionMin int
}

func (k *kafkaFlags) register(fs *flag.FlagSet) {
	d := topics.DefaultOptions()
	fs.StringVar(&k.brokers, "brokers", "127.0.0.1:9092", "Kafka bootstrap brokers, comma separated")
	fs.StringVar(&k.prefix, "topic-prefix", d.Prefix, "prefix of every herald topic name")
	fs.IntVar(&k.partitions, "partitions", int(d.Partitions), "partitions of every herald topic (co-partitioned: keep equal, never change on a live cluster)")
	fs.IntVar(&k.replication, "replication", int(d.Replication), "replication factor of every herald topic")
	fs.DurationVar(&k.feedRetention, "feed-retention", time.Duration(d.FeedRetentionMs)*time.Millisecond,
		"how long in-app feed items are kept (herald.feed's retention.ms; the API serves none older)")
	fs.StringVar(&k.saslMechanism, "kafka-sasl-mechanism", "", "SASL mechanism to authenticate to Kafka with: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: none)")
	fs.StringVar(&k.saslUser, "kafka-sasl-user", "", "SASL user name")
	fs.StringVar(&k.saslPassword, "kafka-sasl-password", "", "SASL password (prefer the environment: HERALD_KAFKA_SASL_PASSWORD)")
	fs.StringVar(&k.compression, "kafka-compression", kafkacompress.Default,
		"codec of the record batches herald's producers write: "+strings.Join(kafkacompress.Names, ", "))
	fs.IntVar(&k.compressionMin, "kafka-compression-min-bytes", kafkacompress.DefaultMinBytes,
		"smallest batch (bytes of records) the producers compress; smaller ones are written uncompressed, sparing the broker a decompression each (0: compress every batch)")
	k.tls.register(fs, "kafka", "Kafka")
	atLeast(fs, "partitions", &k.partitions, 1)
	atLeast(fs, "replication", &k.replication, 1)
	atLeast(fs, "kafka-compression-min-bytes", &k.compressionMin, 0)
	positive(fs, "feed-retention", &k.feedRetention)
	addCheck(fs, k.check)
}

// check reports every bad Kafka setting.
func (k *kafkaFlags) check() error {
	var errs []error
	if len(k.seedList()) == 0 {
		errs = append(errs, badField("brokers", "is empty"))
	}
	for _, b := range k.seedList() {
		if _, _, err := net.SplitHostPort(b); err != nil {
			b += ":9092" // franz-go's default port
		}
		if err := checkHostPort(b, false); err != nil {
			errs = append(errs, badField("brokers", "%v", err))
		}
	}
	if _, err := k.sasl(); err != nil {
		errs = append(errs, err)
	}
	if _, err := kafkacompress.Codec(k.compression); err != nil {
		errs = append(errs, badField("kafka-compression", "%q is not one of %s", k.compression, strings.Join(kafkacompress.Names, ", ")))
	}
	return errors.Join(errs...)
}

// sasl returns the SASL mechanism, nil when there is none.
func (k *kafkaFlags) sasl() (sasl.Mechanism, error) {
	if k.saslMechanism == "" {
		if k.saslUser != "" || k.saslPassword != "" {
			return nil, badField("kafka-sasl-mechanism", "is required with --kafka-sasl-user or --kafka-sasl-password (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)")
		}
		return nil, nil
	}
	var errs []error
	if k.saslUser == "" {
		errs = append(errs, badField("kafka-sasl-user", "is required with --kafka-sasl-mechanism %s", k.saslMechanism))
	}
	if k.saslPassword == "" {
		errs = append(errs, badField("kafka-sasl-password", "is required with --kafka-sasl-mechanism %s (HERALD_KAFKA_SASL_PASSWORD)", k.saslMechanism))
	}
	var m sasl.Mechanism
	switch a := (scram.Auth{User: k.saslUser, Pass: k.saslPassword}); strings.ToUpper(k.saslMechanism) {
	case "PLAIN":
		m = plain.Auth{User: k.saslUser, Pass: k.saslPassword}.AsMechanism()
	case "SCRAM-SHA-256":
		m = a.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		m = a.AsSha512Mechanism()
	default:
		errs = append(errs, badField("kafka-sasl-mechanism", "%q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", k.saslMechanism))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return m, nil
}

// clientOpts are the options of every Kafka client of a role (SASL, TLS,
// the producers' compression): the roles pass them as their
// Options.ClientOpts. It logs how Kafka is reached, without secrets.
func (k *kafkaFlags) clientOpts() ([]kgo.Opt, error) {
	compress, err := kafkacompress.OptAbove(k.compression, k.compressionMin)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, badField("kafka-compression", "%v", err))
	}
	opts := []kgo.Opt{compress}
	m, err := k.sasl()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	cfg, err := k.tls.config()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if cfg != nil {
		// franz-go clones cfg per dial and sets ServerName to the broker's host when empty.
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	sec := k.tls.describe()
	if m != nil {
		sec += ", SASL " + m.Name() + " as " + k.saslUser
	}
	slog.Info("kafka connection", "brokers", k.brokers, "security", sec, "compression", k.compression, "compression_min_bytes", k.compressionMin)
	return opts, nil
}

func (k *kafkaFlags) catalog() *topics.Catalog {
	return topics.New(topics.Options{Prefix: k.prefix, Partitions: int32(k.partitions), Replication: int16(k.replication),
		FeedRetentionMs: k.feedRetention.Milliseconds()})
}

func (k *kafkaFlags) seedList() []string {
	var out []string
	for _, b := range strings.Split(k.brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// seeds returns the brokers, checked (check).
func (k *kafkaFlags) seeds() ([]string, error) {
	if err := k.check(); err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	return k.seedList(), nil
}

// connect returns the brokers and the connection options (clientOpts) a
// role passes to its Kafka clients (Options.Brokers, Options.ClientOpts).
func (k *kafkaFlags) connect() ([]string, []kgo.Opt, error) {
	seeds, err := k.seeds()
	if err != nil {
		return nil, nil, err
	}
	opts, err := k.clientOpts()
	if err != nil {
		return nil, nil, err
	}
	return seeds, opts, nil
}

// client returns a client of the brokers with the connection options
// (clientOpts) and opts.
func (k *kafkaFlags) client(opts ...kgo.Opt) (*kgo.Client, error) {
	seeds, conn, err := k.connect()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, conn...), opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return cl, nil
}
