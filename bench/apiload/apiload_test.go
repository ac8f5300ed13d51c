package apiload

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// sent is what a test server saw of one send.
type sent struct {
	auth, prefer, contentType string
	raw                       string
	body                      struct {
		Type        string `json:"type"`
		RecipientID string `json:"recipientId"`
		Title       string `json:"title"`
		Body        string `json:"body"`
		Key         struct {
			Run string `json:"run"`
			N   int    `json:"n"`
		} `json:"key"`
		DedupeKey string `json:"dedupeKey"`
	}
}

// recorder is an HTTP server (on loopback, through net/http) that keeps
// every send it is given and answers with status(n), after delay.
type recorder struct {
	mu     sync.Mutex
	sends  []sent
	status func(n int) int
	delay  time.Duration
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var s sent
	s.auth, s.prefer, s.contentType = r.Header.Get("Authorization"), r.Header.Get("Prefer"), r.Header.Get("Content-Type")
	b, _ := io.ReadAll(r.Body)
	if r.Method != http.MethodPost || r.URL.Path != "/v1/notifications" || json.Unmarshal(b, &s.body) != nil {
		http.Error(w, "not a send: "+r.Method+" "+r.URL.Path+" "+string(b), http.StatusBadRequest)
		return
	}
	s.raw = string(b)
	time.Sleep(rec.delay)
	rec.mu.Lock()
	rec.sends = append(rec.sends, s)
	rec.mu.Unlock()
	code := http.StatusAccepted
	if rec.status != nil {
		code = rec.status(s.body.Key.N)
	}
	w.WriteHeader(code)
	io.WriteString(w, `{"requestId":"r"}`)
}

func serve(t *testing.T, rec *recorder) string {
	t.Helper()
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestEverySendIsADistinctNotification(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"closed-model clients each send their next when answered", Options{Clients: 4, Duration: 300 * time.Millisecond}},
		{"open-model sends go out on schedule", Options{Rate: 400, Duration: 300 * time.Millisecond, Prefer: "wait=10"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			o := tc.o
			o.URL, o.APIKey, o.Run, o.Recipients = serve(t, rec), "k-1", `run "7"`, 3
			r, err := Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if r.Requests == 0 || r.Requests != len(rec.sends) || r.StatusCodes["202"] != r.Requests || len(r.StatusCodes) != 1 {
				t.Fatalf("report: %d sends, codes %v; the server saw %d", r.Requests, r.StatusCodes, len(rec.sends))
			}
			seen := map[int]bool{}
			for _, s := range rec.sends {
				b := s.body
				if s.auth != "Bearer k-1" || s.contentType != "application/json" || s.prefer != o.Prefer {
					t.Fatalf("headers: Authorization %q, Content-Type %q, Prefer %q", s.auth, s.contentType, s.prefer)
				}
				if b.Type != "bench.load" || b.Key.Run != `run "7"` || b.Title == "" || b.Body == "" {
					t.Fatalf("body: %+v", b)
				}
				if want := "u" + string(rune('0'+b.Key.N%3)); b.RecipientID != want {
					t.Fatalf("send %d went to %q, want %q (recipients cycle)", b.Key.N, b.RecipientID, want)
				}
				if seen[b.Key.N] {
					t.Fatalf("send %d was made twice", b.Key.N)
				}
				seen[b.Key.N] = true
			}
			for n := range len(rec.sends) {
				if !seen[n] {
					t.Fatalf("sends are not numbered 0…%d: %d is missing", len(rec.sends)-1, n)
				}
			}
			if o.Rate > 0 && r.Requests != o.Rate*3/10 {
				t.Fatalf("%d sends at %d/s for %s, want %d", r.Requests, o.Rate, o.Duration, o.Rate*3/10)
			}
			if r.Answered2xxPerSecond <= 0 || r.Latency.P50 <= 0 || r.Latency.P50 > r.Latency.P99 || r.Latency.P99 > r.Latency.Max {
				t.Fatalf("report: %+v", r)
			}
		})
	}
}

func TestAnOpenModelSendsLatencyCountsItsWaitForAConnection(t *testing.T) {
	// One connection, 20 ms a send, a send due every 10 ms: the 30th send
	// falls due at 290 ms but cannot start before 29 × 20 = 580 ms. Timed
	// from when it went out, every send would take about 20 ms.
	rec := &recorder{delay: 20 * time.Millisecond}
	r, err := Run(context.Background(), Options{URL: serve(t, rec), Rate: 100, MaxInFlight: 1, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 30 || r.StatusCodes["202"] != 30 {
		t.Fatalf("report: %+v", r)
	}
	if r.Latency.Max < 290*time.Millisecond {
		t.Fatalf("the last send's latency is %s; it waited at least 290 ms for the connection after it fell due", r.Latency.Max)
	}
}

func TestAnswersAreCountedByStatusAndFailuresAsErrors(t *testing.T) {
	t.Run("each status code is counted and only 2xx answers make the rate", func(t *testing.T) {
		rec := &recorder{status: func(n int) int {
			if n%2 == 1 {
				return http.StatusTooManyRequests
			}
			return http.StatusAccepted
		}}
		r, err := Run(context.Background(), Options{URL: serve(t, rec), Rate: 200, Duration: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if r.StatusCodes["202"] != 20 || r.StatusCodes["429"] != 20 || r.Requests != 40 {
			t.Fatalf("codes %v of %d sends, want 20 × 202 and 20 × 429", r.StatusCodes, r.Requests)
		}
		if limit := 20 / r.Elapsed.Seconds(); r.Answered2xxPerSecond > limit*1.0001 {
			t.Fatalf("%.0f answered 2xx a second counts more than the 20 sends answered 202 over %s", r.Answered2xxPerSecond, r.Elapsed)
		}
	})
	t.Run("sends nobody answers are errors, named", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // nothing listens there now
		r, err := Run(context.Background(), Options{URL: "http://" + addr, Clients: 2, Duration: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if r.Requests == 0 || r.StatusCodes["error"] != r.Requests || r.Answered2xxPerSecond != 0 {
			t.Fatalf("report: %+v", r)
		}
		if len(r.Errors) == 0 || !strings.Contains(r.Errors[0], "refused") || !strings.Contains(r.String(), "error: ") {
			t.Fatalf("errors %q; in words: %s", r.Errors, r)
		}
	})
}

func TestLatencyPercentilesAreByNearestRank(t *testing.T) {
	g := &generator{all: worker{codes: map[string]int{"202": 100}}}
	for i := 100; i >= 1; i-- {
		g.all.latencies = append(g.all.latencies, time.Duration(i)*time.Millisecond)
	}
	g.first, g.all.last = time.Unix(0, 0), time.Unix(2, 0)
	r := g.report()
	want := Latency{P50: 50 * time.Millisecond, P90: 90 * time.Millisecond, P99: 99 * time.Millisecond, Max: 100 * time.Millisecond, Mean: 50500 * time.Microsecond}
	if r.Latency != want || r.Answered2xxPerSecond != 50 || r.Requests != 100 {
		t.Fatalf("got %+v, %.1f/s; want %+v, 50/s", r.Latency, r.Answered2xxPerSecond, want)
	}
	if s := r.String(); !strings.Contains(s, "100 sends in 2.0 s: 50 answered 2xx a second; latency p50 50.0 ms, p90 90.0 ms, p99 99.0 ms, max 100.0 ms; 202: 100") {
		t.Fatalf("in words: %s", s)
	}
}

func TestBadOptionsAreRefusedNamingTheField(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"a run without a URL", Options{Clients: 1, Duration: time.Second}, "--url: the API's base URL is required"},
		{"a URL that is not http", Options{URL: "127.0.0.1:8080", Clients: 1, Duration: time.Second}, `url: "127.0.0.1:8080" is not an http://`},
		{"both models at once", Options{URL: "http://x", Clients: 1, Rate: 1, Duration: time.Second}, "--clients, --rate: set exactly one"},
		{"neither model", Options{URL: "http://x", Duration: time.Second}, "--clients, --rate: set exactly one"},
		{"a negative rate", Options{URL: "http://x", Rate: -1, Duration: time.Second}, "must not be negative"},
		{"neither a duration nor a number of sends", Options{URL: "http://x", Clients: 1}, "--duration, --sends: set at least one"},
		{"a negative number of sends", Options{URL: "http://x", Clients: 1, Sends: -1}, "--duration, --sends: must not be negative"},
		{"one of several URLs that is not http", Options{URL: "http://a,b:1", Clients: 1, Duration: time.Second}, `url: "b:1" is not an http://`},
		{"every send a repeat", Options{URL: "http://x", Clients: 1, Duration: time.Second, Repeat: 1}, "--repeat: must be at least 0 and below 1"},
		{"a negative repeat share", Options{URL: "http://x", Clients: 1, Duration: time.Second, Repeat: -0.1}, "--repeat: must be at least 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestARunOfSendsEndsAfterThatMany(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"closed-model clients stop at the count, with no duration", Options{Clients: 3, Sends: 25}},
		{"the open model's schedule stops at the count before its duration", Options{Rate: 500, Sends: 25, Duration: time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			o := tc.o
			o.URL = serve(t, rec)
			r, err := Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if r.Requests != 25 || len(rec.sends) != 25 || r.StatusCodes["202"] != 25 {
				t.Fatalf("report %+v; the server saw %d sends; want 25", r, len(rec.sends))
			}
		})
	}
}

func TestSeveralURLsShareTheSendsInTurn(t *testing.T) {
	recs := []*recorder{{}, {}, {}}
	urls := make([]string, len(recs))
	for i, rec := range recs {
		urls[i] = serve(t, rec)
	}
	r, err := Run(context.Background(), Options{URL: strings.Join(urls, ","), Clients: 1, Sends: 30})
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 30 || r.StatusCodes["202"] != 30 {
		t.Fatalf("report %+v", r)
	}
	for i, rec := range recs {
		if len(rec.sends) != 10 {
			t.Fatalf("server %d saw %d sends, want 10 of the 30", i, len(rec.sends))
		}
		for _, s := range rec.sends {
			if s.body.Key.N%len(recs) != i {
				t.Fatalf("send %d went to server %d, want %d", s.body.Key.N, i, s.body.Key.N%len(recs))
			}
		}
	}
}

func TestRepeatsResendAnEarlierSendsBodyWithItsDedupeKey(t *testing.T) {
	for _, tc := range []struct {
		name   string
		repeat float64
	}{
		{"with no repeats no send carries a dedupeKey", 0},
		{"a third of the sends repeat an earlier one", 0.3},
		{"most sends repeat an earlier one", 0.9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			const sends = 3000
			r, err := Run(context.Background(), Options{URL: serve(t, rec), Run: "r", Clients: 8, Sends: sends, Repeat: tc.repeat, Recipients: 7})
			if err != nil {
				t.Fatal(err)
			}
			if r.Requests != sends {
				t.Fatalf("report %+v", r)
			}
			bodies := map[string]string{} // dedupeKey → the body that first carried it
			repeats := 0
			for _, s := range rec.sends {
				b := s.body
				if tc.repeat == 0 && b.DedupeKey != "" {
					t.Fatalf("a run without repeats sent a dedupeKey: %s", s.raw)
				}
				if tc.repeat == 0 {
					continue
				}
				if want := fmt.Sprintf("r/%d", b.Key.N); b.DedupeKey != want {
					t.Fatalf("send of key %d carries dedupeKey %q, want %q: %s", b.Key.N, b.DedupeKey, want, s.raw)
				}
				if first, ok := bodies[b.DedupeKey]; ok {
					repeats++
					if first != s.raw {
						t.Fatalf("a repeat differs from its original:\n%s\n%s", first, s.raw)
					}
				}
				bodies[b.DedupeKey] = s.raw
			}
			// Each send's number is its position in the run: n is a repeat
			// exactly when Original(n) < n, and the server saw every
			// original once.
			want := 0
			for n := range sends {
				if o := Original(n, tc.repeat); o < n {
					want++
				} else if o != n {
					t.Fatalf("Original(%d) = %d, after it", n, o)
				}
			}
			if tc.repeat > 0 && repeats != want {
				t.Fatalf("the server saw %d repeats, Original makes %d", repeats, want)
			}
			if share := float64(want) / sends; share < tc.repeat-0.05 || share > tc.repeat+0.05 {
				t.Fatalf("%.3f of the sends repeat, want about %.2f", share, tc.repeat)
			}
		})
	}
}

func TestARepeatNamesAnOriginalAmongTheSendsBeforeIt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		repeat float64
	}{
		{"a small share", 0.1},
		{"the issue's share", 0.3},
		{"nearly every send", 0.99},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if Original(0, tc.repeat) != 0 {
				t.Fatal("the first send must be an original: nothing precedes it")
			}
			for n := 1; n < 20000; n++ {
				o := Original(n, tc.repeat)
				if o > n || o < 0 {
					t.Fatalf("Original(%d) = %d, not at or before it", n, o)
				}
				if Original(o, tc.repeat) != o {
					t.Fatalf("Original(%d) = %d, itself a repeat", n, o)
				}
				if o < n && tc.repeat < 0.5 && n-o > 20*RepeatWithin {
					t.Fatalf("Original(%d) = %d reaches too far back", n, o)
				}
			}
		})
	}
}
