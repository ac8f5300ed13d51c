package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// role is one herald role run as its own process (herald <args>
// --metrics-addr ...), restarted with the same arguments (the same
// instance id: the same transactional id) after a kill.
type role struct {
	name, kind string
	bin        string
	args       []string
	ops        string // http://127.0.0.1:port of /readyz and /metrics
	logPath    string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	paused  bool
	starts  int
	crashes []string // exits the nemesis did not cause
	killing bool
}

func newRole(dir, bin, name, kind string, args ...string) (*role, error) {
	return &role{name: name, kind: kind, bin: bin, args: args, logPath: filepath.Join(dir, name+".log")}, nil
}

// start launches the process (appending to its log).
func (r *role) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	// A fresh ops port at every start, below the ephemeral range (a port
	// freed by freePort can be taken by an outgoing connection at once).
	port, err := listenPort()
	if err != nil {
		f.Close()
		return err
	}
	r.ops = fmt.Sprintf("http://127.0.0.1:%d", port)
	r.starts++
	fmt.Fprintf(f, "=== chaos: start %d at %s\n", r.starts, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(r.bin, append(append([]string(nil), r.args...), "--metrics-addr", strings.TrimPrefix(r.ops, "http://"))...)
	cmd.Env = append(os.Environ(), "HERALD_LOG_LEVEL=warn")
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group (a ^C to the driver reaches the driver only,
	// which stops every role itself) and SIGKILL when the driver dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", r.name, err)
	}
	f.Close()
	done := make(chan struct{})
	r.cmd, r.done, r.paused, r.killing = cmd, done, false, false
	go func() {
		err := cmd.Wait()
		r.mu.Lock()
		if !r.killing && r.cmd == cmd {
			r.crashes = append(r.crashes, fmt.Sprintf("%s exited by itself at %s: %v", r.name, time.Now().UTC().Format(time.TimeOnly), err))
		}
		r.mu.Unlock()
		close(done)
	}()
	return nil
}

// kill SIGKILLs the process (continuing it first if paused) and waits.
func (r *role) kill() {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.killing = true
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// signal sends SIGSTOP or SIGCONT.
func (r *role) signal(sig syscall.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return fmt.Errorf("%s not running", r.name)
	}
	r.paused = sig == syscall.SIGSTOP
	return r.cmd.Process.Signal(sig)
}

// stop ends the process for good: SIGCONT, SIGTERM, SIGKILL after 20 s.
func (r *role) stop() {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.killing = true
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// pid is the running process's id (0 when none).
func (r *role) pid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil || r.cmd.Process == nil {
		return 0
	}
	return r.cmd.Process.Pid
}

func (r *role) exited() bool {
	r.mu.Lock()
	done := r.done
	r.mu.Unlock()
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// ready tells whether /readyz answers 200.
func (r *role) ready() bool {
	r.mu.Lock()
	ops := r.ops
	r.mu.Unlock()
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(ops + "/readyz")
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// awaitReady waits until /readyz answers 200, the process exits, or
// patience runs out.
func (r *role) awaitReady(ctx context.Context, patience time.Duration) error {
	deadline := time.Now().Add(patience)
	for !r.ready() {
		if r.exited() {
			return fmt.Errorf("%s exited before it was ready; its log: %s\n%s", r.name, r.logPath, tail(r.logPath, 3000))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v; its log: %s\n%s", r.name, patience, r.logPath, tail(r.logPath, 3000))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
	return nil
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// listenPort picks a free port in [20000, 32000), below Linux's
// ephemeral range (32768-60999), for a process to listen on.
func listenPort() (int, error) {
	for range 100 {
		port := 20000 + rand.IntN(12000)
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			ln.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free port in [20000, 32000)")
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// cluster drives scripts/kafka/kafka cluster.
type cluster struct {
	script string
	log    string
	mu     sync.Mutex
}

func (c *cluster) run(args ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(f, "=== chaos: kafka cluster %s at %s\n", strings.Join(args, " "), time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(c.script, append([]string{"cluster"}, args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kafka cluster %s: %w (see %s)", strings.Join(args, " "), err, c.log)
	}
	return nil
}
