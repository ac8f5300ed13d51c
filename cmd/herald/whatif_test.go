package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

func TestWhatIfTakesItsCandidateFromPrefixedFlagsAndAFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "candidate.yaml")
	if err := os.WriteFile(file, []byte("brokers: kafka-9:9092 # another command's setting: ignored\n"+
		"dedupe-window: 2m\ndigests: {like: 1h}\nrate-limits: none\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--dedupe-window", "1h", "--rate-limits", "chat=5/1h", "--urgent-types", "otp"}
	cases := []struct {
		name string
		args []string
		env  map[string]string
		file string
		want string // the candidate, as whatif.Policy.String says it
	}{
		{"an unset candidate setting is as in force", []string{"--what-if-dedupe-window", "1m"}, nil, "",
			"dedupe window 1m0s, idempotency TTL 24h0m0s, rate limits chat=5/1h0m0s, no digests, urgent types otp"},
		{"none empties a list", []string{"--what-if-rate-limits", "none", "--what-if-urgent-types", "none"}, nil, "",
			"dedupe window 1h0m0s, idempotency TTL 24h0m0s, no rate limits, no digests, no urgent types"},
		{"per-type windows and the TTL are candidate settings too", []string{"--what-if-type-windows", "invoice=10m", "--what-if-idempotency-ttl", "1h"}, nil, "",
			"dedupe window 1h0m0s (invoice=10m0s), idempotency TTL 1h0m0s, rate limits chat=5/1h0m0s, no digests, urgent types otp"},
		{"the environment sets a candidate setting", nil, map[string]string{"HERALD_WHAT_IF_DEDUPE_WINDOW": "5m"}, "",
			"dedupe window 5m0s, idempotency TTL 24h0m0s, rate limits chat=5/1h0m0s, no digests, urgent types otp"},
		{"a file gives policy settings without the prefix and ignores the others", nil, nil, file,
			"dedupe window 2m0s, idempotency TTL 24h0m0s, no rate limits, digests like=1h0m0s, urgent types otp"},
		{"a prefixed flag wins over the file", []string{"--what-if-dedupe-window", "30s"}, nil, file,
			"dedupe window 30s, idempotency TTL 24h0m0s, no rate limits, digests like=1h0m0s, urgent types otp"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			fs := newFlagSet("replay")
			var pf policyFlags
			pf.register(fs)
			var rf routeFlags
			rf.register(fs)
			var wf whatIfFlags
			wf.register(fs)
			if err := parseFlags(fs, append(append([]string{}, base...), c.args...)); err != nil {
				t.Fatal(err)
			}
			var cf *configFile
			if c.file != "" {
				var err error
				if cf, err = loadConfigFile(c.file); err != nil {
					t.Fatal(err)
				}
			}
			p, err := wf.candidate(fs, cf)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.String(); got != c.want {
				t.Fatalf("candidate %q, want %q", got, c.want)
			}
			if !wf.changed() && c.file == "" {
				t.Fatal("changed() is false with a candidate setting given")
			}
		})
	}
}

func TestWhatIfRefusesBadSettingsNamingThem(t *testing.T) {
	dir := t.TempDir()
	misspelt := filepath.Join(dir, "misspelt.yaml")
	if err := os.WriteFile(misspelt, []byte("dedupe-window: 1m\ndedupe-windw: 2m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("digests: {like: soon}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"a candidate window of zero", []string{"--what-if", "--what-if-dedupe-window", "0s"}, "--what-if-dedupe-window must be positive, got 0s"},
		{"a candidate window that is no duration", []string{"--what-if", "--what-if-dedupe-window", "soon"}, `--what-if-dedupe-window = "soon" is not a valid duration`},
		{"a candidate rate limit that is no limit", []string{"--what-if", "--what-if-rate-limits", "chat=many"}, `--what-if-rate-limits chat: "many" is not max/window`},
		{"--what-if without a candidate", []string{"--what-if", "--from", "24h"}, "--what-if needs a candidate policy"},
		{"a candidate without --what-if", []string{"--what-if-dedupe-window", "1m"}, "apply only with --what-if"},
		{"--what-if with --stage", []string{"--what-if", "--stage", "route", "--what-if-dedupe-window", "1m"}, "leave out --stage"},
		{"an end before the start", []string{"--what-if", "--what-if-dedupe-window", "1m", "--from", "2026-12-01", "--until", "2026-11-30"}, "--until (2026-11-30T00:00:00Z) must be after --from"},
		{"a misspelt key in the candidate file", []string{"--what-if", "--what-if-config", misspelt}, `line 2: "dedupe-windw" is not a setting of any herald command (did you mean dedupe-window?)`},
		{"a bad value in the candidate file", []string{"--what-if", "--what-if-config", bad}, `bad.yaml line 1: digests like: "soon": the window is not a positive duration`},
		{"a negative number of samples", []string{"--what-if", "--what-if-dedupe-window", "1m", "--samples", "-1"}, "--samples must be at least 0"},
	}
	for _, c := range cases {
		t.Run(c.name+" is refused", func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(t.Context(), append([]string{"replay", "--brokers", "127.0.0.1:1"}, c.args...), &out, &errb)
			if code != 2 || !strings.Contains(errb.String(), c.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errb.String(), c.want)
			}
		})
	}
}

func TestWhatIfCommandOnTheRealBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 1)
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Minute)
	cl := testenv.Client(t, brokers, kgo.RecordPartitioner(cat.Partitioner()))
	var recs []*kgo.Record
	add := func(topic, key string, v schemas.Record, at time.Time) {
		b, err := schemas.Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: cat.Name(topic), Key: []byte(key), Value: b, Timestamp: at,
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(v.SchemaName())}}})
	}
	// u1's phone, and quiet hours from an hour before the requests to an
	// hour after them.
	add(topics.Devices, schemas.DeviceKey("acme", "u1", "phone"), &schemas.Device{Schema: schemas.DeviceV1, Tenant: "acme", Recipient: "u1",
		DeviceID: "phone", Platform: "ios", Token: "tok", Enabled: true}, base.Add(-2*time.Hour))
	add(topics.Preferences, schemas.RecipientKey("acme", "u1"), &schemas.Preferences{Schema: schemas.PreferencesV1, Tenant: "acme", Recipient: "u1",
		QuietHours: &schemas.QuietHours{Start: base.Add(-time.Hour).UTC().Format("15:04"), End: base.Add(time.Hour).UTC().Format("15:04"), TimeZone: "UTC"}},
		base.Add(-2*time.Hour))
	request := func(key string, at time.Duration) {
		r := schemas.Request{Schema: schemas.RequestV1, RequestID: identity.NewRandomID(), Tenant: "acme", Type: "chat", Recipient: "u1",
			Title: "hello", Body: "b", Channels: []string{"apns"}, DedupeKey: key, IDSource: "dedupe_key",
			NotificationID: identity.DedupeID("acme", "chat", "u1", key), CreatedAt: base.Add(at).UnixMilli()}
		add(topics.Requests, r.NotificationID, &r, base.Add(at))
	}
	request("a", 0)
	request("a", 5*time.Minute) // a repeat 5 minutes later
	request("b", 10*time.Minute)
	if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	args := []string{"replay", "--brokers", strings.Join(brokers, ","), "--topic-prefix", cat.Options().Prefix, "--clickhouse-addr", "",
		"--what-if", "--dedupe-window", "10m", "--urgent-types", "chat", "--what-if-dedupe-window", "1m", "--what-if-urgent-types", "none"}

	t.Run("the report says in words what would change", func(t *testing.T) {
		var out, errb bytes.Buffer
		if code := run(t.Context(), args, &out, &errb); code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errb.String())
		}
		for _, want := range []string{
			"3 of 3 request(s) would be decided differently.",
			"chat: 3 request(s), 3 changed; dedup hit rate 33.3% then, 0.0% now\n",
			"  2  accepted, routed → accepted, deferred: would now be deferred by quiet hours",
			"  1  duplicate → accepted, deferred: a repeat caught then would be let through now",
			"herald audit timeline --id",
		} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("the report lacks %q:\n%s", want, out.String())
			}
		}
	})
	t.Run("--json prints the same report as JSON", func(t *testing.T) {
		var out, errb bytes.Buffer
		if code := run(t.Context(), append(args, "--json", "--samples", "1"), &out, &errb); code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errb.String())
		}
		var rep struct {
			Requests, Changed int
			Types             []struct {
				Type                    string
				HitRateThen, HitRateNow float64
			}
			Samples []struct{ NotificationID string }
		}
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
		if rep.Requests != 3 || rep.Changed != 3 || len(rep.Types) != 1 || rep.Types[0].HitRateNow != 0 || len(rep.Samples) != 1 ||
			rep.Samples[0].NotificationID != identity.DedupeID("acme", "chat", "u1", "a") {
			t.Fatalf("report %+v, want 3 requests, 3 changed, one type, one sample of key a", rep)
		}
	})
	t.Run("nothing is written to any topic", func(t *testing.T) {
		adm := kadm.NewClient(testenv.Client(t, brokers))
		written := []string{cat.Name(topics.Decisions), cat.Name(topics.Accepted), cat.Name(topics.Seen), cat.Name(topics.Route)}
		for _, ch := range topics.Channels {
			written = append(written, cat.Name(topics.Deliveries(ch)))
		}
		ends, err := adm.ListEndOffsets(t.Context(), written...)
		if err != nil {
			t.Fatal(err)
		}
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset != 0 {
				t.Errorf("%s/%d ends at %d, want 0", o.Topic, o.Partition, o.Offset)
			}
		})
	})
}
