package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// examples holds, for every command path (a command, or a command and its
// verb), the example its -h shows. Every command of commands() has one
// (TestEveryCommandsHelpHasAnExample): add yours with the command.
var examples = map[string]string{
	"api": "herald api --config /etc/herald/herald.yaml --listen :8080 --api-keys /etc/herald/api-keys --metrics-addr :9464\n" +
		"herald api --hash-key \"$NEW_KEY\"    # the sha256 hex for the key file",
	"audit timeline": "herald audit timeline --id 52f364d9288c640b306b566e509104bd\n" +
		"herald audit timeline --recipient user-42 --since 72h --tenant acme\n" +
		"herald audit timeline --dedupe-key order-1001-shipped --type order.shipped\n" +
		"herald audit timeline --clickhouse-addr 127.0.0.1:19000 --recipient u_8831 --since 24h --same-content-window 1h",
	"audit-writer": "herald audit-writer --brokers kafka-1:9092 --clickhouse-addr clickhouse:9000 --migrate --metrics-addr :9464",
	"bench":        "herald bench --brokers 127.0.0.1:39092 --redis 127.0.0.1:36379 --requests 200000 --markdown",
	"bench api": "HERALD_API_KEY=... herald bench api --url http://127.0.0.1:8080 --clients 64 --duration 20s\n" +
		"HERALD_API_KEY=... herald bench api --url http://127.0.0.1:8080 --rate 5000 --prefer wait=10 --json\n" +
		"HERALD_API_KEY=... herald bench api --url http://127.0.0.1:8080,http://127.0.0.1:8081 --clients 64 --sends 60000 --repeat 0.3",
	"clickhouse-server": "herald clickhouse-server --path /var/lib/herald-chdb --tcp-port 39000 --http-port 39123",
	"config check":      "herald config check --config /etc/herald/herald.yaml",
	"dedupe": "herald dedupe --config /etc/herald/herald.yaml --instance-id dedupe-0 --metrics-addr :9464\n" +
		"HERALD_KAFKA_SASL_PASSWORD=... herald dedupe --brokers kafka-1:9093 --kafka-sasl-mechanism SCRAM-SHA-512 --kafka-sasl-user herald --kafka-tls",
	"doctor": "herald doctor --config /etc/herald/herald.yaml --clickhouse-addr clickhouse:9000\n" +
		"herald doctor --brokers kafka-1:9092 --abort-hanging    # asks before aborting each hanging transaction",
	"dev":             "herald dev --state-dir .herald-dev --http-addr 127.0.0.1:8080",
	"emulate apns":    "herald emulate apns --addr 127.0.0.1:2197 --cert-out /tmp/apns-emulator.pem --reset-rate 0.05",
	"emulate fcm":     "herald emulate fcm --addr 127.0.0.1:4010 --credentials-out /tmp/fcm-emulator.json",
	"emulate webhook": "HERALD_SECRET=whsec_... herald emulate webhook --addr 127.0.0.1:4020 --reset-rate 0.05",
	"emulate webpush": "herald emulate webpush --addr 127.0.0.1:4030 --slow-rate 0.01",
	"deadletters list": "herald deadletters list --brokers kafka-1:9092 --channel apns --since 24h\n" +
		"herald deadletters list --class permanent --tenant acme --redriven no --json",
	"deadletters show": "herald deadletters show 3-1042 --brokers kafka-1:9092 --clickhouse-addr clickhouse:9000",
	"deadletters redrive": "herald deadletters redrive --channel apns --error ExpiredProviderToken --since 24h --reason 'APNs key renewed' --dry-run\n" +
		"herald deadletters redrive --id 3-1042,0-17 --reason 'endpoint back up' --by alice",
	"emulate smtp":      "herald emulate smtp --addr 127.0.0.1:2525 --http-addr 127.0.0.1:4040 --reset-rate 0.05 --perm-fail-rate 0.01",
	"decode seen":       "kcat -C -t herald.seen -p 0 -o 41 -c 1 -e -f '%s' | herald decode seen",
	"decode seen-batch": "kcat -C -t herald.seen -p 0 -o 41 -c 1 -e -f '%s' | herald decode seen-batch",
	"decode request":    "kcat -C -t herald.requests -p 3 -o 7 -c 1 -e -f '%s' | herald decode request",
	"decode decision":   "kcat -C -t herald.decisions -p 3 -o 7 -c 1 -e -f '%s' | herald decode decision",
	"decode accepted":   "kcat -C -t herald.accepted -p 0 -o 12 -c 1 -e -f '%s' | herald decode accepted",
	"id":                "herald id --type invoice.paid --recipient user-42 --key '{\"invoice\":\"inv_2201\"}'",
	"migrate":           "herald migrate --clickhouse-addr clickhouse:9000 --database herald --ttl-days 90",
	"probe":             "herald probe http://127.0.0.1:9464/readyz",
	"replay": "herald replay --brokers kafka-1:9092 --clickhouse-addr clickhouse:9000 --from 24h\n" +
		"herald replay --stage route --config /etc/herald/herald.yaml\n" +
		"herald replay --config /etc/herald/herald.yaml --what-if --from 7d --what-if-dedupe-window 1m --what-if-rate-limits 'chat.message=5/1h'\n" +
		"herald replay --config /etc/herald/herald.yaml --what-if --from 2026-11-30 --until 2026-12-01 --what-if-config candidate.yaml --json",
	"fallback": "herald fallback --config /etc/herald/herald.yaml --instance-id fallback-0 --fallback-chains 'invoice.paid=push > email if failed' --metrics-addr :9464",
	"route":    "herald route --config /etc/herald/herald.yaml --instance-id route-0 --rate-limits 'chat.message=5/1h' --metrics-addr :9464",
	"sink": "herald sink --channel apns --config /etc/herald/herald.yaml --apns-key-file /etc/herald/AuthKey.p8 --apns-key-id ABC123 --apns-team-id TEAM42 --apns-topic com.example.app\n" +
		"herald sink --channel feed --brokers kafka-1:9092 --instance-id feed-0\n" +
		"HERALD_EMAIL_SMTP_PASSWORD=... herald sink --channel email --config /etc/herald/herald.yaml --email-smtp-host smtp.example.com --email-smtp-username herald --email-from 'Example <notifications@example.com>' --email-unsubscribe-url 'https://example.com/preferences?user={recipient}'",
	"topics create": "herald topics create --brokers kafka-1:9092 --partitions 12 --replication 3",
	"topics verify": "herald topics verify --config /etc/herald/herald.yaml",
	"topics delete": "herald topics delete --brokers kafka-1:9092 --topic-prefix staging. --confirm staging.",
}

// commandPaths lists the keys of examples: every command path that makes a
// flag set.
func commandPaths() []string {
	out := make([]string, 0, len(examples))
	for p := range examples {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// verbSummaries are the one-line summaries of the verbs: a verb's -h
// says what that verb does, not what its command's verbs do together.
var verbSummaries = map[string]string{
	"audit timeline":      "print every request, decision, attempt and outcome of a notification, recipient or dedupe key in time order, and whether anything reached a device twice",
	"bench api":           "load a running herald api with sends (closed model: --clients; open model: --rate) and report throughput and latency",
	"config check":        "check a configuration file: every bad setting, by name and line, and which commands read each",
	"deadletters list":    "list the dead letters on herald.deadletters (filters: stage, channel, class, error text, tenant, type, time, redriven) and counts by reason",
	"deadletters show":    "show one dead letter: the record, its error, its original input (secrets masked), its redrives, and its notification's audit timeline",
	"deadletters redrive": "send a selection of dead letters back to the stage they failed in, exactly once, audited (--reason why, --by who); --dry-run writes nothing",
	"decode seen":         "print a herald.seen value (Protocol Buffers or JSON) as JSON",
	"decode seen-batch":   "print a herald.seen/v3 value (a record keyed bucket/… or clock) as JSON: its times and its entries",
	"decode request":      "print a herald.requests value (Protocol Buffers or JSON) as JSON",
	"decode decision":     "print a herald.decisions value (Protocol Buffers or JSON) as JSON",
	"decode accepted":     "print a herald.accepted value (Protocol Buffers or JSON) as JSON",
	"emulate apns":        "run a local APNs (HTTP/2 over TLS, Apple's answers, fault injection)",
	"emulate fcm":         "run a local FCM HTTP v1 endpoint and its token endpoint, with fault injection",
	"emulate webhook":     "run a local webhook receiver that verifies Standard Webhooks signatures, with fault injection",
	"emulate webpush":     "run a local Web Push service answering RFC 8030 errors, with fault injection",
	"emulate smtp":        "run a local SMTP server that keeps every message for inspection, with fault injection (4xx, 5xx, a cut after DATA, slow replies)",
	"topics create":       "create every missing herald topic (idempotent) and report drift from the catalog; --fix-configs sets drifted configs back",
	"topics verify":       "report drift of herald's topics from the catalog (missing topics, partitions, configs); exit 1 if there is any",
	"topics delete":       "delete every topic of the catalog that exists, records and all (idempotent); --confirm repeats --topic-prefix",
}

// summaryOf is the one-line summary of the command path: its verb's, or
// its command's.
func summaryOf(path string) string {
	if s, ok := verbSummaries[path]; ok {
		return s
	}
	first, _, _ := strings.Cut(path, " ")
	for _, c := range commands() {
		if c.name == first {
			return c.summary
		}
	}
	return ""
}

// printHelp writes a command's help: usage, summary, example, the verbs
// of a command that also runs without one (bench and bench api), flags.
func printHelp(w io.Writer, path string, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: herald %s [flags]\n\n%s\n\n", path, summaryOf(path))
	if ex := examples[path]; ex != "" {
		fmt.Fprintf(w, "Example:\n  %s\n\n", strings.ReplaceAll(ex, "\n", "\n  "))
	}
	for _, p := range commandPaths() {
		if strings.HasPrefix(p, path+" ") {
			fmt.Fprintf(w, "Run 'herald %s -h' for the flags of herald %s.\n\n", p, p)
		}
	}
	fmt.Fprintln(w, "Flags (each also HERALD_<NAME> in the environment, or '<name>: value' in the --config file; the command line wins, then the environment, then the file):")
	fs.PrintDefaults()
}

// printVerbsHelp writes the help of a command with verbs (topics, audit,
// emulate, config) given -h without a verb: each verb's example. A command
// that also runs without a verb (bench) shows its own help instead.
func printVerbsHelp(w io.Writer, name string) bool {
	var paths []string
	for _, p := range commandPaths() {
		if strings.HasPrefix(p, name+" ") {
			paths = append(paths, p)
		}
	}
	if len(paths) == 0 {
		return false
	}
	verbs := make([]string, len(paths))
	for i, p := range paths {
		verbs[i] = strings.TrimPrefix(p, name+" ")
	}
	fmt.Fprintf(w, "usage: herald %s %s [flags]\n\n%s\n\nExample:\n", name, strings.Join(verbs, "|"), summaryOf(name))
	for _, p := range paths {
		fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(examples[p], "\n", "\n  "))
	}
	fmt.Fprintf(w, "\nRun 'herald %s <verb> -h' for its flags.\n", name)
	return true
}
