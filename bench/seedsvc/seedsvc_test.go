package seedsvc

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/sdk"
)

const testKey = "k-seed"

// start serves a seed-design Server on a fresh schema of the test
// PostgreSQL, dropped when the test ends.
func start(t *testing.T, stmt Statement, syncCommit string) (url string, pool *pgxpool.Pool, srv *Server, schema string) {
	t.Helper()
	dsn := testenv.Postgres(t)
	ctx := context.Background()
	pool, err := Connect(ctx, dsn, syncCommit, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema = "seedsvc_test_" + randomID()[:12]
	if err := Setup(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Drop(context.Background(), pool, schema); err != nil {
			t.Error(err)
		}
	})
	keys, err := ParseKeys("acme:bench:" + fmt.Sprintf("%x", sha256.Sum256([]byte(testKey))) + "\n")
	if err != nil {
		t.Fatal(err)
	}
	srv, err = New(Config{Pool: pool, Schema: schema, Keys: keys, Statement: stmt})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return hs.URL, pool, srv, schema
}

// post sends body and returns the status code and the decoded answer.
func post(t *testing.T, url, key, body string, header ...string) (int, sdk.SendResult) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/notifications", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var res sdk.SendResult
	if resp.StatusCode == http.StatusAccepted {
		if err := json.Unmarshal(b, &res); err != nil {
			t.Fatalf("the answer is not a send result: %v: %s", err, b)
		}
	}
	return resp.StatusCode, res
}

func count(t *testing.T, pool *pgxpool.Pool, schema, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+schema+"."+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestASendIsAcceptedOnceAndItsRepeatsAreDuplicates(t *testing.T) {
	for _, stmt := range []Statement{StatementTx, StatementCTE} {
		t.Run("with statement "+string(stmt), func(t *testing.T) {
			url, pool, srv, schema := start(t, stmt, "on")
			body := func(recipient, extra string) string {
				return `{"type":"bench.load","recipientId":"` + recipient + `","title":"t","body":"b"` + extra + `}`
			}
			steps := []struct {
				name, body string
				header     []string
				want       string
				of         int // the step whose send this repeats; -1: none
			}{
				{"a first send with a dedupeKey is accepted", body("u1", `,"dedupeKey":"d1"`), nil, statusAccepted, -1},
				{"the same dedupeKey again is a duplicate", body("u1", `,"dedupeKey":"d1"`), nil, statusDuplicate, 0},
				{"the same dedupeKey to another recipient is accepted", body("u2", `,"dedupeKey":"d1"`), nil, statusAccepted, -1},
				{"an idempotency key in the header is a scope", body("u1", ""), []string{"Idempotency-Key", "i1"}, statusAccepted, -1},
				{"the same key in the body is its repeat", body("u1", `,"idempotencyKey":"i1"`), nil, statusDuplicate, 3},
				{"a notification key is a scope", body("u1", `,"key":{"n":1}`), nil, statusAccepted, -1},
				{"and its repeat a duplicate", body("u1", `,"key":{"n":1}`), nil, statusDuplicate, 5},
				{"a send with no key is always new", body("u1", ""), nil, statusAccepted, -1},
				{"and so is its repeat", body("u1", ""), nil, statusAccepted, -1},
			}
			ids := make([]string, len(steps))
			for i, st := range steps {
				code, res := post(t, url, testKey, st.body, st.header...)
				if code != http.StatusAccepted || len(res.Notifications) != 1 || res.RequestID == "" {
					t.Fatalf("%s: %d %+v", st.name, code, res)
				}
				n := res.Notifications[0]
				if n.Status != st.want || len(n.ID) != 32 {
					t.Fatalf("%s: answered %+v, want status %s", st.name, n, st.want)
				}
				if st.want == statusDuplicate {
					if len(res.Skipped) != 1 || res.Skipped[0].Reason != statusDuplicate || res.Skipped[0].NotificationID != n.ID {
						t.Fatalf("%s: skipped %+v", st.name, res.Skipped)
					}
					if ids[st.of] != n.ID {
						t.Fatalf("%s: a duplicate's id %s is not its original's %s", st.name, n.ID, ids[st.of])
					}
				}
				ids[i] = n.ID
			}
			if got := srv.Stats(); got != (Stats{Accepted: 6, Duplicates: 3}) {
				t.Fatalf("stats %+v, want 6 accepted and 3 duplicates", got)
			}
			if s, o := count(t, pool, schema, "sends"), count(t, pool, schema, "outbox"); s != 6 || o != 6 {
				t.Fatalf("%d sent-set rows and %d outbox rows, want 6 of each: one per accepted send", s, o)
			}
		})
	}
}

func TestConcurrentRepeatsAreAcceptedExactlyOnce(t *testing.T) {
	for _, tc := range []struct {
		stmt       Statement
		syncCommit string
	}{{StatementTx, "on"}, {StatementTx, "off"}, {StatementCTE, "off"}} {
		t.Run(fmt.Sprintf("with statement %s and synchronous_commit %s", tc.stmt, tc.syncCommit), func(t *testing.T) {
			url, pool, srv, schema := start(t, tc.stmt, tc.syncCommit)
			var setting string
			if err := pool.QueryRow(context.Background(), "SHOW synchronous_commit").Scan(&setting); err != nil || setting != tc.syncCommit {
				t.Fatalf("the pool's synchronous_commit is %q (%v), want %q", setting, err, tc.syncCommit)
			}
			const sends, keys = 200, 20
			var wg sync.WaitGroup
			codes := make([]int, sends)
			for i := range sends {
				wg.Go(func() {
					codes[i], _ = post(t, url, testKey, fmt.Sprintf(`{"type":"t","recipientId":"u","title":"t","body":"b","dedupeKey":"k%d"}`, i%keys))
				})
			}
			wg.Wait()
			for i, c := range codes {
				if c != http.StatusAccepted {
					t.Fatalf("send %d answered %d", i, c)
				}
			}
			if got := srv.Stats(); got != (Stats{Accepted: keys, Duplicates: sends - keys}) {
				t.Fatalf("stats %+v, want %d accepted", got, keys)
			}
			if o := count(t, pool, schema, "outbox"); o != keys {
				t.Fatalf("%d outbox rows, want %d", o, keys)
			}
		})
	}
}

func TestBadSendsAreRefused(t *testing.T) {
	url, pool, _, schema := start(t, StatementTx, "on")
	for _, tc := range []struct {
		name, key, body string
		want            int
	}{
		{"a send with an unknown key is unauthorized", "nope", `{"type":"t","recipientId":"u","title":"t","body":"b"}`, http.StatusUnauthorized},
		{"a body that is not JSON is a bad request", testKey, `{"type":`, http.StatusBadRequest},
		{"a send without a title is unprocessable", testKey, `{"type":"t","recipientId":"u","body":"b"}`, http.StatusUnprocessableEntity},
		{"a send without a recipient is unprocessable", testKey, `{"type":"t","title":"t","body":"b"}`, http.StatusUnprocessableEntity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, _ := post(t, url, tc.key, tc.body); code != tc.want {
				t.Fatalf("answered %d, want %d", code, tc.want)
			}
		})
	}
	if s := count(t, pool, schema, "sends"); s != 0 {
		t.Fatalf("refused sends left %d sent-set rows", s)
	}
}

func TestSettingsAreCheckedBeforeConnecting(t *testing.T) {
	for _, tc := range []struct {
		name, syncCommit string
		conns            int
		want             string
	}{
		{"synchronous_commit must be on or off", "local", 1, "want on or off"},
		{"a pool needs a connection", "on", 0, "want at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Connect(context.Background(), "postgres://127.0.0.1:1/x", tc.syncCommit, tc.conns)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := ParseKeys("acme:x:nothex\n"); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("a bad key line: err %v", err)
	}
}
