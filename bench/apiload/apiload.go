// Package apiload is `herald bench api`: a load generator for herald's
// HTTP API. Every send is a POST /v1/notifications of one notification
// (type "bench.load", recipient u0…u9999 in turn, key
// {"run": Options.Run, "n": i}); by default each is distinct, so no send
// repeats another and the dedupe stage accepts every one. With
// Options.Repeat a share of the sends repeat an earlier one (see
// Options.Repeat): every send then carries a dedupeKey, and a repeat is
// byte for byte the body of the send it repeats, which the dedupe stage
// answers as a duplicate. It runs in one of two models:
//
//   - closed (Options.Clients): that many clients, each sending its next
//     request when its last one is answered. The rate is what the server
//     answers; this is the curve of sends/s against concurrency.
//   - open (Options.Rate): sends fall due on a fixed schedule, Rate a
//     second, whatever the answers, on at most Options.MaxInFlight
//     connections at once. This is latency at a given load.
//
// A run ends after Options.Duration, or after Options.Sends sends,
// whichever comes first. Options.URL may name several servers (comma
// separated): send n goes to the (n mod count)th, so that N instances of
// the API behind no balancer share the load evenly.
//
// In the open model a send's latency runs from when it fell due, not from
// when it went out. A generator that falls behind (a full connection pool,
// or its own share of the CPU) counts its delay against the server it
// measures instead of hiding it: the hazard known as coordinated omission,
// which a closed-loop measurement of a saturated server always has.
//
// The generator costs CPU beside the server it measures when both share a
// host: it builds each body with strconv appends into a buffer of its own
// and keeps its connections alive, so that its share stays small (see
// BENCHMARKS.md for its cost per request against vegeta's); over http://
// each send is written and its answer read by the goroutine that makes it
// (poster), without net/http's client's goroutines per connection.
package apiload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options configures a run. Exactly one of Clients and Rate is set.
type Options struct {
	// URL is the API's base URL, e.g. http://127.0.0.1:8080; sends go to
	// URL + "/v1/notifications". Several base URLs, comma separated, share
	// the sends in turn: send n goes to the (n mod count)th.
	URL string
	// APIKey is sent as "Authorization: Bearer <APIKey>".
	APIKey string
	// Run labels this run's notification keys, so that a second run on the
	// same topics sends new notifications, not repeats.
	Run string
	// Clients is the closed model's number of clients.
	Clients int
	// Rate is the open model's sends a second.
	Rate int
	// MaxInFlight bounds the open model's sends in flight (and its
	// connections); 0 means 1024. A send due while all are busy waits, and
	// its wait counts in its latency.
	MaxInFlight int
	// Duration is how long sends are started; answers to sends in flight
	// at its end are awaited (up to Timeout). 0 means no limit: Sends ends
	// the run.
	Duration time.Duration
	// Sends, when positive, ends the run after that many sends (in the
	// open model, after the first Sends of the schedule), or at Duration,
	// whichever comes first. At least one of Sends and Duration is set.
	Sends int
	// Repeat is the share of sends, in [0, 1), that repeat an earlier
	// send's dedupeKey. With Repeat > 0 every send carries a dedupeKey
	// ("<Run>/<n>", n the number of the first send that carried it). Send
	// n is a repeat when a hash of n falls below Repeat (so the choice is
	// the same in every run and every model); it then repeats one of the
	// RepeatWithin sends before it, also picked by the hash, and sends that
	// send's body byte for byte: the same recipient, key and dedupeKey.
	// A repeat of a repeat is a repeat of the original.
	Repeat float64
	// Prefer, when set, is sent as the Prefer header (e.g. "wait=10": the
	// API answers once the send's decisions are known).
	Prefer string
	// Recipients is how many distinct recipients the sends cycle through;
	// 0 means 10,000.
	Recipients int
	// Timeout bounds each send; 0 means 30 s. A send that runs out counts
	// as an error.
	Timeout time.Duration
}

// check names each bad option by the flag of herald bench api that sets it.
func (o *Options) check() error {
	var errs []error
	if o.URL == "" {
		errs = append(errs, errors.New("--url: the API's base URL is required (e.g. http://127.0.0.1:8080)"))
	} else {
		for _, u := range strings.Split(o.URL, ",") {
			if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
				errs = append(errs, fmt.Errorf("--url: %q is not an http:// or https:// URL", u))
			}
		}
	}
	switch {
	case o.Clients < 0 || o.Rate < 0:
		errs = append(errs, fmt.Errorf("--clients, --rate: must not be negative (got %d, %d)", o.Clients, o.Rate))
	case (o.Clients == 0) == (o.Rate == 0):
		errs = append(errs, errors.New("--clients, --rate: set exactly one: --clients for the closed model, --rate for the open one"))
	}
	if o.Duration < 0 || o.Sends < 0 {
		errs = append(errs, fmt.Errorf("--duration, --sends: must not be negative (got %s, %d)", o.Duration, o.Sends))
	} else if o.Duration == 0 && o.Sends == 0 {
		errs = append(errs, errors.New("--duration, --sends: set at least one: how long, or how many sends"))
	}
	if !(o.Repeat >= 0 && o.Repeat < 1) { // NaN too
		errs = append(errs, fmt.Errorf("--repeat: must be at least 0 and below 1 (got %v)", o.Repeat))
	}
	if o.MaxInFlight < 0 || o.Recipients < 0 || o.Timeout < 0 {
		errs = append(errs, errors.New("--max-sends-in-flight, --recipients, --timeout: must not be negative"))
	}
	return errors.Join(errs...)
}

// Report is a run's outcome.
type Report struct {
	// Requests is the number of sends made (answered or not).
	Requests int `json:"requests"`
	// Elapsed runs from the first send's due time to the last answer.
	Elapsed time.Duration `json:"elapsed_ns"`
	// Answered2xxPerSecond is the sends answered 2xx over Elapsed.
	Answered2xxPerSecond float64 `json:"answered_2xx_per_s"`
	// Latency is over every send, answered or not, in nanoseconds.
	Latency Latency `json:"latency_ns"`
	// StatusCodes counts answers by status code; "error" counts sends
	// without an answer (a refused connection, a timeout).
	StatusCodes map[string]int `json:"status_codes"`
	// Errors holds up to five distinct errors of the sends in "error".
	Errors []string `json:"errors,omitempty"`
}

// Latency holds percentiles by nearest rank, in nanoseconds.
type Latency struct {
	P50  time.Duration `json:"p50"`
	P90  time.Duration `json:"p90"`
	P99  time.Duration `json:"p99"`
	Max  time.Duration `json:"max"`
	Mean time.Duration `json:"mean"`
}

// String is the report in plain words, one line.
func (r Report) String() string {
	codes := make([]string, 0, len(r.StatusCodes))
	for c := range r.StatusCodes {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	for i, c := range codes {
		codes[i] = fmt.Sprintf("%s: %d", c, r.StatusCodes[c])
	}
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) }
	s := fmt.Sprintf("%d sends in %.1f s: %.0f answered 2xx a second; latency p50 %s ms, p90 %s ms, p99 %s ms, max %s ms; %s",
		r.Requests, r.Elapsed.Seconds(), r.Answered2xxPerSecond, ms(r.Latency.P50), ms(r.Latency.P90), ms(r.Latency.P99),
		ms(r.Latency.Max), strings.Join(codes, ", "))
	if len(r.Errors) > 0 {
		s += "; errors: " + strings.Join(r.Errors, "; ")
	}
	return s
}

// Run sends load as o says and reports it. It returns an error only for
// bad options; sends that fail are counted in the report. Cancelling ctx
// ends the run early, with the sends made so far.
func Run(ctx context.Context, o Options) (Report, error) {
	if err := o.check(); err != nil {
		return Report{}, fmt.Errorf("bench api: %w", err)
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = 1024
	}
	if o.Recipients == 0 {
		o.Recipients = 10000
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	conns := o.Clients
	if o.Rate > 0 {
		conns = o.MaxInFlight
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	g := &generator{o: o, client: &http.Client{Transport: tr, Timeout: o.Timeout}, auth: "Bearer " + o.APIKey, all: worker{codes: map[string]int{}}}
	g.prefix, g.middle, g.dedupe = bodyParts(o.Run, o.Repeat > 0)
	headers := []string{"Authorization: " + g.auth, "Content-Type: application/json"}
	if o.Prefer != "" {
		headers = append(headers, "Prefer: "+o.Prefer)
	}
	for _, u := range strings.Split(o.URL, ",") {
		u = strings.TrimSuffix(u, "/") + "/v1/notifications"
		p, err := newPoster(u, headers, o.Timeout)
		if err != nil {
			return Report{}, fmt.Errorf("bench api: --url: %w", err)
		}
		if p != nil {
			defer p.close()
		}
		g.urls, g.posters = append(g.urls, u), append(g.posters, p)
	}
	if o.Rate > 0 {
		g.open(ctx)
	} else {
		g.closed(ctx)
	}
	return g.report(), nil
}

// bodyParts returns the fixed parts of every body: the part before the
// recipient's number, the part between it and the send's number, and,
// with dedupeKeys, the part between the key's number and the dedupeKey's
// (which ends the body: the number, `"}`).
func bodyParts(run string, dedupeKeys bool) (prefix, middle, dedupe string) {
	r, _ := json.Marshal(run) // a string: cannot fail
	prefix, middle = `{"type":"bench.load","recipientId":"u`, `","title":"t","body":"b","key":{"run":`+string(r)+`,"n":`
	if dedupeKeys {
		d, _ := json.Marshal(run + "/")
		dedupe = `},"dedupeKey":` + string(d[:len(d)-1]) // without the closing quote
	}
	return prefix, middle, dedupe
}

// RepeatWithin is how far back a repeat reaches: it repeats one of the
// RepeatWithin sends before it.
const RepeatWithin = 1000

// Original is the number of the send whose body send n makes: n itself,
// or, when n is a repeat (see Options.Repeat), the original its hash picks
// among the RepeatWithin sends before it.
func Original(n int, repeat float64) int {
	for n > 0 {
		h := mix(uint64(n))
		if float64(h>>11)/(1<<53) >= repeat {
			return n
		}
		n -= 1 + int(mix(h)%uint64(min(n, RepeatWithin)))
	}
	return n
}

// mix is splitmix64's finalizer: a well-spread hash of x.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// generator is one run's state. Its workers each keep their tallies and
// merge them into all once, at their end.
type generator struct {
	o              Options
	client         *http.Client
	urls           []string  // send n goes to urls[n % len(urls)]
	posters        []*poster // urls' posters; nil for an https URL (net/http's client)
	auth           string    // the Authorization header's value
	prefix, middle string
	dedupe         string    // "" without dedupeKeys
	first          time.Time // the run's start: the first send's due time

	mu   sync.Mutex
	next int    // the next send's number (closed model)
	all  worker // every worker's tallies, merged
}

// worker is what a sending goroutine keeps to itself: its body buffer and
// the tallies of its sends.
type worker struct {
	body      []byte
	latencies []time.Duration
	codes     map[string]int
	errs      []string
	last      time.Time
}

// closed runs o.Clients clients, each sending its next request when its
// last one is answered, until o.Duration has passed.
func (g *generator) closed(ctx context.Context) {
	g.first = time.Now()
	end := g.first.Add(g.o.Duration)
	g.start(g.o.Clients, func(w *worker) {
		for ctx.Err() == nil && (g.o.Duration == 0 || time.Now().Before(end)) {
			g.mu.Lock()
			n := g.next
			g.next++
			g.mu.Unlock()
			if g.o.Sends > 0 && n >= g.o.Sends {
				return
			}
			g.send(ctx, w, n, time.Now())
		}
	})()
}

// start runs loop in n goroutines, each with a worker of its own, merged
// when its loop returns; the func it returns waits for all of them.
func (g *generator) start(n int, loop func(w *worker)) (wait func()) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &worker{codes: map[string]int{}}
			loop(w)
			g.merge(w)
		}()
	}
	return wg.Wait
}

// open starts sends on a fixed schedule, o.Rate a second, for o.Duration:
// send n falls due at start + n/Rate. At most o.MaxInFlight are in flight;
// a send due while all are busy waits for one, and its wait counts.
func (g *generator) open(ctx context.Context) {
	total := g.o.Sends
	if g.o.Duration > 0 {
		byTime := int(int64(g.o.Rate) * int64(g.o.Duration) / int64(time.Second))
		if total == 0 || byTime < total {
			total = byTime
		}
	}
	due := make(chan int, g.o.MaxInFlight)
	g.first = time.Now()
	wait := g.start(g.o.MaxInFlight, func(w *worker) {
		for n := range due {
			g.send(ctx, w, n, g.dueAt(n))
		}
	})
	// The schedule hands out every send due, then sleeps until the next
	// one falls due, but at least a millisecond: at a high rate a wake-up
	// per send would cost the generator more CPU than the send, and a send
	// handed out up to a millisecond late counts that in its latency.
	timer := time.NewTimer(0)
	defer timer.Stop()
	n := 0
schedule:
	for n < total {
		for n < total && !time.Now().Before(g.dueAt(n)) {
			select {
			case due <- n:
				n++
			case <-ctx.Done():
				break schedule
			}
		}
		if n == total {
			break
		}
		timer.Reset(max(time.Until(g.dueAt(n)), time.Millisecond))
		select {
		case <-timer.C:
		case <-ctx.Done():
			break schedule
		}
	}
	close(due)
	wait()
}

func (g *generator) dueAt(n int) time.Time {
	return g.first.Add(time.Duration(int64(n) * int64(time.Second) / int64(g.o.Rate)))
}

// send makes send n and records its answer and its latency from start.
func (g *generator) send(ctx context.Context, w *worker, n int, start time.Time) {
	m := n
	if g.dedupe != "" {
		m = Original(n, g.o.Repeat)
	}
	w.body = append(w.body[:0], g.prefix...)
	w.body = strconv.AppendInt(w.body, int64(m%g.o.Recipients), 10)
	w.body = append(w.body, g.middle...)
	w.body = strconv.AppendInt(w.body, int64(m), 10)
	if g.dedupe != "" {
		w.body = append(w.body, g.dedupe...)
		w.body = strconv.AppendInt(w.body, int64(m), 10)
		w.body = append(w.body, `"}`...)
	} else {
		w.body = append(w.body, "}}"...)
	}
	code := "error"
	var err error
	if p := g.posters[n%len(g.posters)]; p != nil {
		var status int
		if status, err = p.post(ctx, w.body); err == nil {
			code = strconv.Itoa(status)
		}
	} else {
		code, err = g.sendHTTP(ctx, w, n)
	}
	w.last = time.Now()
	w.latencies = append(w.latencies, w.last.Sub(start))
	w.codes[code]++
	if err != nil {
		w.errs = addError(w.errs, err.Error())
	}
}

// sendHTTP makes send n through net/http's client (https URLs).
func (g *generator) sendHTTP(ctx context.Context, w *worker, n int) (string, error) {
	code := "error"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.urls[n%len(g.urls)], bytes.NewReader(w.body))
	if err == nil {
		req.Header.Set("Authorization", g.auth)
		req.Header.Set("Content-Type", "application/json")
		if g.o.Prefer != "" {
			req.Header.Set("Prefer", g.o.Prefer)
		}
		var resp *http.Response
		if resp, err = g.client.Do(req); err == nil {
			// Read to the end, so the connection is kept for the next send.
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil {
				code = strconv.Itoa(resp.StatusCode)
			}
		}
	}
	return code, err
}

// addError adds e to errs unless errs holds it or five others already.
func addError(errs []string, e string) []string {
	if len(errs) < 5 && !slices.Contains(errs, e) {
		errs = append(errs, e)
	}
	return errs
}

func (g *generator) merge(w *worker) {
	g.mu.Lock()
	defer g.mu.Unlock()
	a := &g.all
	a.latencies = append(a.latencies, w.latencies...)
	for c, k := range w.codes {
		a.codes[c] += k
	}
	for _, e := range w.errs {
		a.errs = addError(a.errs, e)
	}
	if w.last.After(a.last) {
		a.last = w.last
	}
}

func (g *generator) report() Report {
	a := &g.all
	r := Report{Requests: len(a.latencies), StatusCodes: a.codes, Errors: a.errs}
	if r.Requests == 0 {
		return r
	}
	r.Elapsed = a.last.Sub(g.first)
	ok := 0
	for c, k := range a.codes {
		if len(c) == 3 && c[0] == '2' {
			ok += k
		}
	}
	if r.Elapsed > 0 {
		r.Answered2xxPerSecond = float64(ok) / r.Elapsed.Seconds()
	}
	l := a.latencies
	slices.Sort(l)
	rank := func(p float64) time.Duration { // nearest rank: the smallest value with a share p of them at or below it
		return l[max(int(math.Ceil(p*float64(len(l))))-1, 0)]
	}
	var sum time.Duration
	for _, d := range l {
		sum += d
	}
	r.Latency = Latency{P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Max: l[len(l)-1], Mean: sum / time.Duration(len(l))}
	return r
}
