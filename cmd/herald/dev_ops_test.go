package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/internal/chdb"
	"github.com/heraldhq/herald/internal/embedded"
	"github.com/heraldhq/herald/internal/ops"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/topics"
)

// get returns a GET's status and body (0 and the error when nothing answers).
func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestDevAnswersAWrongMethodOnItsOperationsPathsWith405 serves herald dev's
// HTTP handler (the API unstarted, as until Kafka is reached): a method
// other than GET or HEAD on /metrics, /livez, /readyz or /healthz is a 405
// problem with Allow, as on the API's own routes, not the API's 404.
func TestDevAnswersAWrongMethodOnItsOperationsPathsWith405(t *testing.T) {
	apiSrv, err := api.New(api.Config{Brokers: []string{"127.0.0.1:1"}, Catalog: topics.New(topics.Options{}),
		Keys: api.DevKeys(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h := devMux(apiSrv, []ops.Check{{Name: "always", Ready: func() bool { return true }}})
	serve := func(method, path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		return w
	}
	for _, path := range []string{"/metrics", "/livez", "/readyz", "/healthz"} {
		for _, method := range []string{"POST", "PUT", "DELETE", "PATCH"} {
			t.Run(method+" "+path+" is a 405 problem allowing GET and HEAD", func(t *testing.T) {
				// ops.MethodNotAllowed's body is internal/ops's test; here,
				// that the dev server routes the path there, not to the API.
				w := serve(method, path)
				if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD" || w.Header().Get("Content-Type") != "application/problem+json" {
					t.Fatalf("%d, Allow %q, %q: %s; want a 405 problem with Allow: GET, HEAD", w.Code, w.Header().Get("Allow"), w.Header().Get("Content-Type"), w.Body)
				}
			})
		}
		for _, method := range []string{"GET", "HEAD"} {
			t.Run(method+" "+path+" answers 200", func(t *testing.T) {
				if w := serve(method, path); w.Code != http.StatusOK {
					t.Fatalf("%d: %s", w.Code, w.Body)
				}
			})
		}
	}
	t.Run("an unknown path is still the API's 404", func(t *testing.T) {
		if w := serve("POST", "/livez2"); w.Code != http.StatusNotFound || w.Header().Get("Content-Type") != "application/problem+json" {
			t.Fatalf("%d %s: %s, want the API's 404 problem", w.Code, w.Header().Get("Content-Type"), w.Body)
		}
	})
}

// TestDevServesLivezAndReadyzAndIsNotReadyWhileAStageRestores runs herald
// dev as a process. Once up, /livez, /readyz and its alias /healthz answer
// 200. Then the dedupe stage is made to restore one partition again while a
// transaction is open on that partition's seen-set changelog (a consumer
// joins the stage's group, takes partitions, and leaves, so they come back
// to the stage, which restores them only once every transaction there has
// ended): /readyz and /healthz answer 503 naming the dedupe stage while
// /livez stays 200; once the transaction is aborted, /readyz is 200 again.
func TestDevServesLivezAndReadyzAndIsNotReadyWhileAStageRestores(t *testing.T) {
	if testing.Short() {
		t.Skip("starts herald dev with the chDB server; runs in the full suite")
	}
	if _, err := chdb.FindLib(); err != nil {
		t.Fatalf("chDB engine missing (scripts/install installs it): %v", err)
	}
	bin := testenv.Herald(t)
	kafkaPort, httpPort, chTCP, chHTTP := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	dev := startDev(t, bin, t.TempDir(), kafkaPort, httpPort, chTCP, chHTTP)
	brokers := []string{fmt.Sprintf("127.0.0.1:%d", kafkaPort)}
	cat := topics.New(embedded.CatalogOptions(24 * time.Hour))

	t.Run("livez, readyz and healthz answer 200 once it is up", func(t *testing.T) {
		for _, path := range []string{"/livez", "/readyz"} {
			if code, body := get(dev.http + path); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
				t.Errorf("GET %s = %d %q, want 200 ok", path, code, body)
			}
		}
		if code, body := get(dev.http + "/healthz"); code != http.StatusOK || strings.TrimSpace(body) != `{"status":"ok"}` {
			t.Errorf("GET /healthz = %d %q, want 200 {\"status\":\"ok\"}", code, body)
		}
	})

	// A consumer joins the dedupe stage's group (without polling, so it
	// commits nothing) and is given some of its partitions.
	var mu sync.Mutex
	var taken []int32
	joined := make(chan struct{}, 1)
	intruder, err := kgo.NewClient(append(embedded.ClientOpts(), kgo.SeedBrokers(brokers...),
		kgo.ConsumerGroup("herald-dedupe"), kgo.ConsumeTopics(cat.Name(topics.Requests)), kgo.DisableAutoCommit(),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			taken = append(taken, a[cat.Name(topics.Requests)]...)
			t.Logf("%s: the joining consumer is assigned %v", time.Now().Format(time.StampMilli), a)
			if len(taken) > 0 {
				select {
				case joined <- struct{}{}:
				default:
				}
			}
		}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.Close()
	select {
	case <-joined:
	case <-time.After(2 * time.Minute):
		t.Fatal("the joining consumer was given no partition of the dedupe stage's group")
	}
	mu.Lock()
	p := taken[0]
	mu.Unlock()

	// A transaction left open on that partition of the seen-set changelog.
	holder := testenv.Client(t, brokers, append(embedded.ClientOpts(), kgo.TransactionalID("dev-ops-hold"), kgo.TransactionTimeout(5*time.Minute), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	ctx := context.Background()
	if err := holder.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := holder.ProduceSync(ctx, &kgo.Record{Topic: cat.Name(topics.Seen), Partition: p, Key: []byte("held")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: a transaction is open on %s/%d", time.Now().Format(time.StampMilli), cat.Name(topics.Seen), p)
	// The consumer leaves: the partition goes back to the stage, which
	// restores it.
	intruder.Close()
	t.Logf("%s: the joining consumer left the group", time.Now().Format(time.StampMilli))

	await := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				out, _ := os.ReadFile(dev.log)
				t.Fatalf("no %s; herald dev's log:\n%s", what, out)
			}
		}
	}
	await("/readyz 503 while the partition restores", func() bool { code, _ := get(dev.http + "/readyz"); return code == http.StatusServiceUnavailable })
	t.Run("readyz and healthz answer 503 naming the dedupe stage while livez answers 200", func(t *testing.T) {
		for _, path := range []string{"/readyz", "/healthz"} {
			if code, body := get(dev.http + path); code != http.StatusServiceUnavailable || !strings.Contains(body, "dedupe stage") {
				t.Errorf("GET %s = %d %q during the restore, want 503 naming the dedupe stage", path, code, body)
			}
		}
		if code, body := get(dev.http + "/livez"); code != http.StatusOK {
			t.Errorf("GET /livez = %d %q during the restore, want 200", code, body)
		}
	})
	if err := holder.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	await("/readyz 200 after the restore", func() bool { code, _ := get(dev.http + "/readyz"); return code == http.StatusOK })

	dev.cmd.Process.Signal(syscall.SIGTERM)
	if err := dev.cmd.Wait(); err != nil {
		t.Fatalf("herald dev exited with %v on SIGTERM", err)
	}
}
