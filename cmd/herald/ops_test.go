package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/sinks/apns/emulator"
	"github.com/heraldhq/herald/topics"
)

// roleProc is one herald role run as its own process with --metrics-addr.
type roleProc struct {
	name string
	cmd  *exec.Cmd
	ops  string // http://host:port of /metrics, /livez, /readyz
	log  string
	done chan struct{}
}

func startRole(t *testing.T, bin string, args ...string) *roleProc {
	t.Helper()
	p := &roleProc{name: args[0], ops: fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)), done: make(chan struct{})}
	p.log = filepath.Join(t.TempDir(), p.name+".log")
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	p.cmd = exec.Command(bin, append(args, "--metrics-addr", strings.TrimPrefix(p.ops, "http://"))...)
	p.cmd.Env = append(os.Environ(), "HERALD_LOG_LEVEL=info")
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *roleProc) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// readyz returns /readyz's status and body (0 when nothing answers).
func (p *roleProc) readyz() (int, string) {
	resp, err := http.Get(p.ops + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// await polls until cond holds, failing the test with the role's log when
// the process exits or patience runs out.
func (p *roleProc) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patienceOps)
	for !cond() {
		select {
		case <-p.done:
			t.Fatalf("herald %s exited while waiting for %s:\n%s", p.name, what, p.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("herald %s: no %s after %v:\n%s", p.name, what, patienceOps, p.output())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (p *roleProc) awaitReady(t *testing.T) {
	t.Helper()
	p.await(t, "/readyz 200", func() bool { code, _ := p.readyz(); return code == http.StatusOK })
}

func (p *roleProc) scrape(t *testing.T) testenv.Metrics {
	t.Helper()
	return testenv.Scrape(t, p.ops+"/metrics")
}

// terminate sends SIGTERM and requires exit status 0 within drainBound.
func (p *roleProc) terminate(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(drainBound):
		t.Fatalf("herald %s still running %v after SIGTERM:\n%s", p.name, drainBound, p.output())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("herald %s exited %d after SIGTERM, want 0:\n%s", p.name, code, p.output())
	}
}

const (
	patienceOps = 2 * time.Minute
	// drainBound is the shutdown bound every role keeps: the open
	// transaction (10 s timeout) and in-flight provider calls (10 s call
	// timeout) end well inside it.
	drainBound = 30 * time.Second
)

// startAPNsEmulator starts an APNs emulator keeping up to maxRecords
// pushes, closed when t ends, and writes its CA certificate to a file for
// --apns-ca-file.
func startAPNsEmulator(t *testing.T, maxRecords int) (*emulator.Emulator, string) {
	t.Helper()
	em, err := emulator.Start(emulator.Options{MaxRecords: maxRecords})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	caFile := filepath.Join(t.TempDir(), "apns.pem")
	if err := os.WriteFile(caFile, em.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	return em, caFile
}

// apiKeyFile writes an --api-keys file with one key of tenant.
func apiKeyFile(t *testing.T, tenant, name, key string) string {
	t.Helper()
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte(tenant+":"+name+":"+api.HashKey(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return keys
}

// metricWant is one metric a role must export, moved by the test's traffic
// to at least min (summed over the series matching labels).
type metricWant struct {
	role, name string
	labels     []string
	min        float64
}

// TestEveryRoleExportsItsMetricsAndDrainsOnSIGTERM runs api, dedupe, route,
// the APNs sink and the audit writer as processes on the real broker and
// ClickHouse, each with --metrics-addr: each becomes ready on /readyz,
// exports its metrics (parsed as Prometheus does), which move when one
// notification is sent twice (accepted, then a duplicate) to a registered
// iPhone, and each exits 0 within the bound on SIGTERM.
func TestEveryRoleExportsItsMetricsAndDrainsOnSIGTERM(t *testing.T) {
	brokers := testenv.Kafka(t)
	chAddr, db := testenv.ClickHouseDB(t)
	cat := testenv.Catalog(t, brokers, 2)
	bin := testenv.Herald(t)
	em, caFile := startAPNsEmulator(t, 100)
	keys := apiKeyFile(t, "acme", "ops", "k-ops")
	kafka := []string{"--brokers", strings.Join(brokers, ","), "--topic-prefix", cat.Options().Prefix, "--partitions", "2", "--replication", "1"}
	id := strings.ReplaceAll(cat.Options().Prefix, ".", "")
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))

	apiP := startRole(t, bin, append([]string{"api", "--listen", listen, "--api-keys", keys, "--instance-id", "api-" + id}, kafka...)...)
	apiP.awaitReady(t)
	call := func(method, path, body string) int {
		req, _ := http.NewRequest(method, "http://"+listen+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer k-ops")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return resp.StatusCode
	}
	// Registered before the route stage starts: it reads devices to their
	// end before its first decision.
	call("PUT", "/v1/users/u1/devices/iphone", `{"platform":"ios","token":"0a1b2c3d4e5f"}`)

	roles := map[string]*roleProc{"api": apiP}
	roles["dedupe"] = startRole(t, bin, append([]string{"dedupe", "--instance-id", "dedupe-" + id}, kafka...)...)
	roles["route"] = startRole(t, bin, append([]string{"route", "--instance-id", "route-" + id}, kafka...)...)
	roles["sink"] = startRole(t, bin, append([]string{"sink", "--channel", "apns", "--instance-id", "sink-" + id,
		"--apns-host", em.URL(), "--apns-ca-file", caFile, "--apns-topic", "com.example.ops"}, kafka...)...)
	roles["audit-writer"] = startRole(t, bin, append([]string{"audit-writer", "--clickhouse-addr", chAddr, "--database", db, "--migrate",
		"--flush-interval", "200ms"}, kafka...)...)
	for _, p := range roles {
		p.awaitReady(t)
	}

	wants := []metricWant{
		{"api", "herald_http_request_duration_seconds", []string{"route", "POST /v1/notifications", "status", "202"}, 2},
		{"dedupe", "herald_decisions_total", []string{"stage", "dedupe", "tenant", "acme", "type", "invoice.paid", "outcome", "accepted"}, 1},
		{"dedupe", "herald_decisions_total", []string{"stage", "dedupe", "tenant", "acme", "type", "invoice.paid", "outcome", "duplicate"}, 1},
		{"dedupe", "herald_stage_transactions_total", []string{"stage", "dedupe", "result", "committed"}, 1},
		{"dedupe", "herald_stage_records_total", []string{"stage", "dedupe"}, 2},
		{"dedupe", "herald_stage_transaction_end_seconds", []string{"stage", "dedupe"}, 1},
		{"route", "herald_decisions_total", []string{"stage", "route", "tenant", "acme", "type", "invoice.paid", "outcome", "routed"}, 1},
		{"route", "herald_stage_transactions_total", []string{"stage", "route", "result", "committed"}, 1},
		{"sink", "herald_sink_calls_total", []string{"channel", "apns"}, 1},
		{"sink", "herald_sink_results_total", []string{"channel", "apns", "class", "sent"}, 1},
		{"sink", "herald_sink_outcomes_total", []string{"channel", "apns"}, 1},
		{"sink", "herald_sink_attempts_total", []string{"channel", "apns", "class", "sent"}, 1},
		{"audit-writer", "herald_audit_rows_total", []string{"table", "requests"}, 2},
		{"audit-writer", "herald_audit_rows_total", []string{"table", "decisions"}, 3},
		{"audit-writer", "herald_audit_rows_total", []string{"table", "attempts"}, 1},
		{"audit-writer", "herald_audit_batch_rows", []string{"table", "requests"}, 1},
	}
	t.Run("before any notification the event metrics read zero", func(t *testing.T) {
		for _, w := range wants {
			if got := roles[w.role].scrape(t).Sum(w.name, w.labels...); got != 0 {
				t.Errorf("herald %s: %s%v = %v before any send", w.role, w.name, w.labels, got)
			}
		}
	})

	send := `{"type":"invoice.paid","recipientId":"u1","title":"Paid","body":"Thanks","key":{"invoice":"inv_ops"}}`
	call("POST", "/v1/notifications", send)
	call("POST", "/v1/notifications", send)

	for _, w := range wants {
		t.Run(fmt.Sprintf("herald %s's %s%v moves to %v", w.role, w.name, w.labels, w.min), func(t *testing.T) {
			p := roles[w.role]
			p.await(t, fmt.Sprintf("%s%v ≥ %v", w.name, w.labels, w.min), func() bool { return p.scrape(t).Sum(w.name, w.labels...) >= w.min })
		})
	}
	t.Run("the API counts its single-record writes: the device and the two sends, none in a transaction", func(t *testing.T) {
		// The device was written before the zero check above, so these are
		// checked here rather than from zero. Each is one record, produced
		// without a transaction (a multi-recipient send is one).
		for _, w := range []metricWant{
			{"api", "herald_api_single_records_total", nil, 3},
		} {
			apiP.await(t, fmt.Sprintf("%s%v ≥ %v", w.name, w.labels, w.min), func() bool { return apiP.scrape(t).Sum(w.name, w.labels...) >= w.min })
		}
		if got := apiP.scrape(t).Sum("herald_api_transactions_total", "result", "aborted"); got != 0 {
			t.Errorf("herald_api_transactions_total{result=aborted} = %v, want 0", got)
		}
	})
	t.Run("every role exports the runtime, lag and partition metrics of what it runs", func(t *testing.T) {
		present := []struct {
			role, name string
			labels     []string
		}{
			{"api", "go_goroutines", nil},
			{"dedupe", "process_resident_memory_bytes", nil},
			{"dedupe", "herald_consumer_lag_records", []string{"consumer", "dedupe", "topic", cat.Name(topics.Requests)}},
			{"dedupe", "herald_stage_partitions", []string{"stage", "dedupe"}},
			{"dedupe", "herald_stage_restoring_partitions", []string{"stage", "dedupe"}},
			{"dedupe", "herald_stage_restored_records_total", []string{"stage", "dedupe"}},
			{"route", "herald_consumer_lag_records", []string{"consumer", "route"}},
			{"sink", "herald_consumer_lag_records", []string{"consumer", "sink-apns"}},
			{"sink", "herald_sink_parked_deliveries", []string{"channel", "apns"}},
			{"sink", "herald_sink_parked_oldest_age_seconds", []string{"channel", "apns"}},
			{"sink", "herald_sink_in_flight", []string{"channel", "apns"}},
			{"audit-writer", "herald_consumer_lag_records", []string{"consumer", "audit-writer", "topic", cat.Name(topics.Requests)}},
			{"audit-writer", "herald_audit_restarts_total", nil},
		}
		for _, w := range present {
			if !roles[w.role].scrape(t).Has(w.name, w.labels...) {
				t.Errorf("herald %s exports no %s%v", w.role, w.name, w.labels)
			}
		}
		if v, _ := roles["dedupe"].scrape(t).Value("herald_stage_partitions", "stage", "dedupe"); v != 2 {
			t.Errorf("herald_stage_partitions{stage=dedupe} = %v, want 2", v)
		}
	})
	t.Run("the Grafana dashboard names only metrics the roles export", func(t *testing.T) {
		exported := map[string]bool{}
		for _, p := range roles {
			for name := range p.scrape(t) {
				exported[name] = true
			}
		}
		for name := range dashboardMetrics(t) {
			if !exported[name] {
				t.Errorf("deploy/grafana-herald.json queries %s, which no role exports", name)
			}
		}
	})
	for _, name := range []string{"api", "dedupe", "route", "sink", "audit-writer"} {
		t.Run("herald "+name+" exits 0 within the bound on SIGTERM", func(t *testing.T) {
			roles[name].terminate(t)
		})
	}
}

// TestDedupeIsNotReadyWhileItRestores holds a dedupe instance's restore
// with a transaction left open on its seen-set changelog (the restore reads
// only once every transaction there has ended): /readyz answers 503 and
// the restoring gauge counts the partition while it is held, and 200 once
// the transaction is aborted and the restore has read the committed
// records; SIGTERM then drains it with exit 0.
func TestDedupeIsNotReadyWhileItRestores(t *testing.T) {
	brokers := testenv.Kafka(t)
	cat := testenv.Catalog(t, brokers, 1)
	bin := testenv.Herald(t)
	seen := cat.Name(topics.Seen)
	ctx := context.Background()

	// Three committed changelog records (tombstones restore as deletes).
	committed := testenv.Client(t, brokers, kgo.TransactionalID("ops-commit-"+seen))
	if err := committed.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		committed.Produce(ctx, &kgo.Record{Topic: seen, Partition: 0, Key: fmt.Appendf(nil, "k%d", i)}, nil)
	}
	if err := committed.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := committed.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	holder := testenv.Client(t, brokers, kgo.TransactionalID("ops-hold-"+seen), kgo.TransactionTimeout(90*time.Second))
	if err := holder.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	holder.Produce(ctx, &kgo.Record{Topic: seen, Partition: 0, Key: []byte("held")}, nil)
	if err := holder.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	id := strings.ReplaceAll(cat.Options().Prefix, ".", "")
	p := startRole(t, bin, "dedupe", "--brokers", strings.Join(brokers, ","), "--topic-prefix", cat.Options().Prefix,
		"--partitions", "1", "--replication", "1", "--instance-id", "dedupe-"+id, "--reset-offsets", "earliest")
	p.await(t, "the partition restoring", func() bool {
		code, _ := p.readyz()
		if code == 0 {
			return false
		}
		r, ok := p.scrape(t).Value("herald_stage_restoring_partitions", "stage", "dedupe")
		return ok && r == 1
	})
	t.Run("readyz is 503 naming the stage while the restore is held", func(t *testing.T) {
		code, body := p.readyz()
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "dedupe stage") {
			t.Fatalf("/readyz %d %q during the restore, want 503 naming the dedupe stage", code, body)
		}
		if v, _ := p.scrape(t).Value("herald_stage_restoring_partitions", "stage", "dedupe"); v != 1 {
			t.Fatalf("herald_stage_restoring_partitions = %v during the restore, want 1", v)
		}
	})
	if err := holder.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	p.awaitReady(t)
	t.Run("after the restore readyz is 200, nothing restores, and the committed records were restored", func(t *testing.T) {
		m := p.scrape(t)
		if v, _ := m.Value("herald_stage_restoring_partitions", "stage", "dedupe"); v != 0 {
			t.Errorf("herald_stage_restoring_partitions = %v, want 0", v)
		}
		if v, _ := m.Value("herald_stage_restored_records_total", "stage", "dedupe"); v != 3 {
			t.Errorf("herald_stage_restored_records_total = %v, want 3 (the aborted record is not restored)", v)
		}
		if v, _ := m.Value("herald_stage_partitions", "stage", "dedupe"); v != 1 {
			t.Errorf("herald_stage_partitions = %v, want 1", v)
		}
	})
	t.Run("SIGTERM exits 0 within the bound", func(t *testing.T) { p.terminate(t) })
}
