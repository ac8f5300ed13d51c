// Package chdb owns herald's embedded ClickHouse: it loads the chDB engine
// (libchdb.so from the npm package @chdb/lib-linux-x64-gnu) without cgo,
// through purego, and runs it as a real ClickHouse server on loopback, with
// the native and HTTP protocols. herald dev uses it as its ClickHouse, and the
// test suite talks to it as to any ClickHouse server.
//
// libchdb exposes the clickhouse-local command line as query_stable_v2(argc,
// argv). Serve calls it with --path, --listen_host=127.0.0.1 and the two
// ports, and a query that starts the listeners and then never ends; the
// server lives as long as that query runs. Serve blocks one OS thread for the
// lifetime of the server and allows one server per process, so it is meant to
// run in a dedicated process: `herald clickhouse-server`, which Spawn starts
// as a child.
//
// The server has no password and listens on 127.0.0.1 only. Its `default`
// database uses the Overlay engine; herald creates its own (Atomic) database.
//
// Hazard (measured with 26.7.3-stable.1, TestABadHandshakeEndsTheServer):
// a connection that fails its handshake — a wrong password, or a first
// packet that is not the native protocol's Hello (another protocol on the
// port) — terminates the whole server process: the exception escapes the
// TCP handler of clickhouse-local's server and ends in std::terminate. So a
// client with wrong credentials takes `herald dev`'s ClickHouse down, and in
// the test suite one test that sends a bad handshake to the shared server
// fails every ClickHouse test after it. Tests of wrong credentials or
// protocols start a server of their own (Spawn). Production uses a real
// ClickHouse server, which answers such a client with an error.
package chdb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Version is the npm version of @chdb/lib-linux-x64-gnu herald pins. Its
// `latest` tag points at an older build; always install this exact version.
const Version = "26.7.3-stable.1"

// ListenHost is the only address the server listens on. The server has no
// password, so it must never listen anywhere else.
const ListenHost = "127.0.0.1"

// Lib is a loaded libchdb.
type Lib struct {
	path string

	// queryStableV2 is
	//   struct local_result_v2 *query_stable_v2(int argc, char **argv);
	queryStableV2 func(argc int32, argv **byte) *localResultV2
	// freeResultV2 is
	//   void free_result_v2(struct local_result_v2 *result);
	freeResultV2 func(r *localResultV2)
}

// localResultV2 mirrors struct local_result_v2 of chdb.h (x86-64 and arm64
// layout: pointers and size_t are 8 bytes).
type localResultV2 struct {
	buf          *byte
	len          uintptr
	vec          unsafe.Pointer // std::vector<char>*, owned by libchdb
	elapsed      float64
	rowsRead     uint64
	bytesRead    uint64
	errorMessage *byte
}

// serving guards the one server libchdb can run per process.
var serving atomic.Bool

// Open loads libchdb.so from libPath (see FindLib) and resolves the symbols
// Serve needs. Loading maps about 550 MB of code; it is shared by the page
// cache, not copied.
func Open(libPath string) (*Lib, error) {
	if _, err := os.Stat(libPath); err != nil {
		return nil, fmt.Errorf("chdb: open %s: %w", libPath, err)
	}
	h, err := purego.Dlopen(libPath, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("chdb: dlopen %s: %w", libPath, err)
	}
	l := &Lib{path: libPath}
	for _, sym := range []struct {
		fptr any
		name string
	}{
		{&l.queryStableV2, "query_stable_v2"},
		{&l.freeResultV2, "free_result_v2"},
	} {
		// RegisterLibFunc panics on a missing symbol; check first so an
		// incompatible build is an error, not a crash.
		if _, err := purego.Dlsym(h, sym.name); err != nil {
			return nil, fmt.Errorf("chdb: %s has no symbol %s (is it libchdb %s?): %w", libPath, sym.name, Version, err)
		}
		purego.RegisterLibFunc(sym.fptr, h, sym.name)
	}
	return l, nil
}

// Path is the file the library was loaded from.
func (l *Lib) Path() string { return l.path }

// ServeOptions configures one chDB server. Serve uses Path, TCPPort,
// HTTPPort, LogLevel, MaxMemoryMB and StopTimeout; Spawn passes those on to
// the child and uses the rest itself.
type ServeOptions struct {
	// Path is the data directory (databases, tables, parts). Created if
	// missing. Required.
	Path string
	// TCPPort is the native protocol port on 127.0.0.1 (clickhouse-go's
	// default protocol). Required.
	TCPPort int
	// HTTPPort is the HTTP interface port on 127.0.0.1; it also answers
	// GET /ping with "Ok.". Required.
	HTTPPort int
	// LogLevel, if set, makes ClickHouse log to stderr at this level: one of
	// none, fatal, critical, error, warning, notice, information, debug,
	// trace, test. Unset, ClickHouse prints only the errors that end its
	// command line (on every stop: its keep-alive query, cancelled).
	LogLevel string
	// MaxMemoryMB caps the memory of the whole server (ClickHouse's
	// max_server_memory_usage); a query that would pass it fails with
	// MEMORY_LIMIT_EXCEEDED. 0 keeps ClickHouse's default, 90% of the RAM.
	// Memory the engine has used is not given back, so on a shared machine
	// set it.
	MaxMemoryMB int
	// StopTimeout bounds a graceful stop: Serve's wait for the engine to
	// shut down after ctx is cancelled, and Process.Stop's wait between
	// SIGTERM and SIGKILL. Default 15s.
	StopTimeout time.Duration

	// LibPath is passed to the child as --lib (Spawn only). Unset, the child
	// runs FindLib itself.
	LibPath string
	// StartTimeout bounds Spawn's wait for GET /ping to answer "Ok."
	// (Spawn only). Default 60s.
	StartTimeout time.Duration
	// PortWait is how long Spawn waits for taken ports to be freed (Spawn
	// only): a server whose parent just crashed is still shutting down and
	// owns the data directory until it exits. 0 fails at once.
	PortWait time.Duration
	// Stderr, if set, receives the child's stdout and stderr (Spawn only).
	// Spawn keeps the tail for its errors either way.
	Stderr io.Writer
}

// LogLevels are the values ServeOptions.LogLevel accepts.
var LogLevels = []string{"none", "fatal", "critical", "error", "warning", "notice", "information", "debug", "trace", "test"}

const (
	defaultStopTimeout  = 15 * time.Second
	defaultStartTimeout = 60 * time.Second
)

func (o ServeOptions) stopTimeout() time.Duration {
	if o.StopTimeout > 0 {
		return o.StopTimeout
	}
	return defaultStopTimeout
}

func (o ServeOptions) startTimeout() time.Duration {
	if o.StartTimeout > 0 {
		return o.StartTimeout
	}
	return defaultStartTimeout
}

// Validate checks the options Serve and Spawn share.
func (o ServeOptions) Validate() error {
	if o.Path == "" {
		return errors.New("chdb: ServeOptions.Path (data directory) is required")
	}
	for _, p := range []struct {
		name string
		port int
	}{{"TCPPort", o.TCPPort}, {"HTTPPort", o.HTTPPort}} {
		if err := CheckPort(p.port); err != nil {
			return fmt.Errorf("chdb: ServeOptions.%s: %w", p.name, err)
		}
	}
	if o.TCPPort == o.HTTPPort {
		return fmt.Errorf("chdb: TCP and HTTP port are both %d", o.TCPPort)
	}
	if o.MaxMemoryMB < 0 {
		return fmt.Errorf("chdb: ServeOptions.MaxMemoryMB %d: want 0 (no cap) or more", o.MaxMemoryMB)
	}
	if err := CheckLogLevel(o.LogLevel); err != nil {
		return fmt.Errorf("chdb: log level: %w", err)
	}
	return nil
}

// CheckPort reports whether p is a port Serve can listen on: 1 to 65535
// (0 would leave the server's address unknown).
func CheckPort(p int) error {
	if p <= 0 || p > 65535 {
		return fmt.Errorf("must be a port from 1 to 65535, got %d", p)
	}
	return nil
}

// CheckLogLevel reports whether l is a LogLevel, or "" (errors only).
func CheckLogLevel(l string) error {
	if l != "" && !slices.Contains(LogLevels, l) {
		return fmt.Errorf("%q is not one of %s", l, strings.Join(LogLevels, ", "))
	}
	return nil
}

// foreverQuery keeps the server alive: one thread reads an endless table one
// row per block and sleeps a second on each row, so it returns nothing, uses
// no CPU to speak of and notices KILL QUERY within a second. The sleep must
// sit in WHERE: as an unused column under count() it is pruned, and the
// query then counts system.numbers flat out on every core.
const foreverQuery = "SELECT count() FROM system.numbers WHERE sleepEachRow(1) = 0 SETTINGS max_block_size = 1, max_threads = 1"

// argv is the clickhouse-local command line Serve runs.
func (o ServeOptions) argv(queryID string) []string {
	args := []string{
		"clickhouse",
		"--path=" + o.Path,
		"--listen_host=" + ListenHost,
		"--tcp_port=" + strconv.Itoa(o.TCPPort),
		"--http_port=" + strconv.Itoa(o.HTTPPort),
		"--query_id=" + queryID,
	}
	if o.LogLevel != "" {
		args = append(args, "--logger.console=1", "--log-level="+o.LogLevel)
	}
	args = append(args, "--query=SYSTEM START LISTEN TCP; SYSTEM START LISTEN HTTP; "+foreverQuery)
	// After "--" come overrides of server configuration keys.
	if o.MaxMemoryMB > 0 {
		args = append(args, "--", "--max_server_memory_usage="+strconv.FormatInt(int64(o.MaxMemoryMB)<<20, 10))
	}
	return args
}

// Serve runs a ClickHouse server on 127.0.0.1:o.TCPPort (native protocol)
// and 127.0.0.1:o.HTTPPort (HTTP) with its data in o.Path, and blocks.
//
// It returns an error when the server fails to start or stops on its own
// (ClickHouse prints the reason to stderr). When ctx is cancelled it stops the
// server gracefully, by killing the query that keeps it alive through the
// HTTP interface, and returns nil once the engine has shut down. If the
// engine does not shut down within o.StopTimeout it returns an error and one
// OS thread stays blocked in libchdb: the caller should then exit the process,
// which is what `herald clickhouse-server` does in either case.
//
// libchdb runs one server per process; a second concurrent Serve fails.
func (l *Lib) Serve(ctx context.Context, o ServeOptions) error {
	if err := o.Validate(); err != nil {
		return err
	}
	path, err := filepath.Abs(o.Path)
	if err != nil {
		return fmt.Errorf("chdb: data directory %s: %w", o.Path, err)
	}
	o.Path = path
	if err := os.MkdirAll(o.Path, 0o750); err != nil {
		return fmt.Errorf("chdb: data directory: %w", err)
	}
	// ClickHouse reports a busy port too, but only on stderr; say it plainly.
	for _, port := range []int{o.TCPPort, o.HTTPPort} {
		if err := portFree(port); err != nil {
			return err
		}
	}
	if !serving.CompareAndSwap(false, true) {
		return errors.New("chdb: a server is already running in this process (libchdb runs one per process)")
	}
	// serving stays true even after a stop: the engine's global state is not
	// meant to be started twice in one process.

	queryID := fmt.Sprintf("herald-chdb-serve-%d-%d", os.Getpid(), time.Now().UnixNano())
	argv := o.argv(queryID)
	log := slog.With("path", o.Path, "tcp", hostPort(o.TCPPort), "http", hostPort(o.HTTPPort))

	done := make(chan error, 1)
	go func() {
		// The call does not return while the server runs; this goroutine's
		// thread belongs to libchdb until then.
		runtime.LockOSThread()
		done <- l.run(argv)
	}()

	started := time.Now()
	readyCtx, cancelReady := context.WithCancel(ctx)
	defer cancelReady()
	go func() {
		if waitPing(readyCtx, o.HTTPPort) == nil {
			log.Info("chdb: server listening", "version_pin", Version, "startup", time.Since(started).Round(time.Millisecond))
		}
	}()

	select {
	case err := <-done:
		return fmt.Errorf("chdb: server on %s stopped by itself: %w", hostPort(o.TCPPort), err)
	case <-ctx.Done():
	}
	log.Info("chdb: stopping server (ClickHouse reports its keep-alive query as cancelled)")
	return stop(o.HTTPPort, queryID, o.stopTimeout(), done)
}

// run calls query_stable_v2 and turns what it returns into an error.
func (l *Lib) run(args []string) error {
	cargs := make([]*byte, len(args)+1) // NULL-terminated, as argv is
	for i, a := range args {
		b := make([]byte, len(a)+1)
		copy(b, a)
		cargs[i] = &b[0]
	}
	r := l.queryStableV2(int32(len(args)), &cargs[0])
	runtime.KeepAlive(cargs)
	if r == nil {
		return errors.New("query_stable_v2 returned no result (see stderr)")
	}
	defer l.freeResultV2(r)
	if msg := cString(r.errorMessage); msg != "" {
		return errors.New(msg)
	}
	return errors.New("the engine returned (its error is on stderr)")
}

// stop kills the never-ending query and waits for the engine to return.
// Until the server listens and runs that query the kill finds nothing, so it
// is sent again every 250ms until it lands or the deadline passes.
//
// The engine then waits for its open connections, up to ClickHouse's
// shutdown_wait_unfinished (5s); if a client still holds one, it exits the
// process itself with status 1 ("Will shutdown forcefully").
func stop(httpPort int, queryID string, timeout time.Duration, done <-chan error) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	killed := false
	var lastErr error
	for {
		if !killed {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			lastErr = killQuery(ctx, httpPort, queryID)
			cancel()
			killed = lastErr == nil
		}
		select {
		case <-done:
			return nil
		case <-deadline.C:
			if killed {
				lastErr = errors.New("query killed, engine still shutting down")
			}
			return fmt.Errorf("chdb: server did not stop within %s (%v); exit the process to stop it", timeout, lastErr)
		case <-tick.C:
		}
	}
}

// killQuery asks the server, over its HTTP interface, to cancel queryID. It
// fails if the server does not list the query as being killed.
func killQuery(ctx context.Context, httpPort int, queryID string) error {
	q := "KILL QUERY WHERE query_id = '" + queryID + "' FORMAT TSV"
	u := "http://" + hostPort(httpPort) + "/?query=" + url.QueryEscape(q)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return err
	}
	resp, err := controlClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// Read it all: hanging up early breaks the server's pipe and logs an error.
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return fmt.Errorf("KILL QUERY: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("KILL QUERY: HTTP %s: %s", resp.Status, bytes.TrimSpace(body))
	}
	if !bytes.Contains(body, []byte(queryID)) {
		return errors.New("KILL QUERY: the keep-alive query is not running yet")
	}
	return nil
}

// controlClient sends Ping and KILL QUERY. It keeps no idle connections:
// the engine waits for open connections when it shuts down, so a pooled
// keep-alive connection would hold every stop up.
var controlClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// Ping reports whether GET http://127.0.0.1:httpPort/ping answers "Ok.".
func Ping(ctx context.Context, httpPort int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+hostPort(httpPort)+"/ping", nil)
	if err != nil {
		return err
	}
	resp, err := controlClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256))
	if err != nil {
		return fmt.Errorf("ping %s: %w", hostPort(httpPort), err)
	}
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "Ok." {
		return fmt.Errorf("ping %s: HTTP %s %q", hostPort(httpPort), resp.Status, body)
	}
	return nil
}

// waitPing polls Ping until it answers or ctx ends.
func waitPing(ctx context.Context, httpPort int) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := Ping(pctx, httpPort)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func portFree(port int) error {
	ln, err := net.Listen("tcp", hostPort(port))
	if err != nil {
		return fmt.Errorf("chdb: port %d on %s is not free (another server running? try `scripts/clickhouse/clickhouse status`): %w", port, ListenHost, err)
	}
	return ln.Close()
}

func hostPort(port int) string { return net.JoinHostPort(ListenHost, strconv.Itoa(port)) }

// cString copies a NUL-terminated C string.
func cString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}
