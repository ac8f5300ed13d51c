package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// OwnBroker is a real Kafka broker of one test's own, started by
// scripts/kafka/kafka from the shared jars with its own state directory and
// ports, so the test can kill it and start it again without disturbing
// the shared broker other tests use. An outage test needs one.
type OwnBroker struct {
	t      testing.TB
	script string
	dir    string
	port   int
	env    []string
}

// StartOwnBroker starts a broker of t's own and stops it (SIGKILL) when t
// ends. It skips t under -short. The broker takes 10–20 s to start.
func StartOwnBroker(t testing.TB) *OwnBroker {
	t.Helper()
	skipShort(t, "a Kafka broker of the test's own")
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("testenv: own broker: %v", err)
	}
	b := &OwnBroker{
		t:      t,
		script: filepath.Join(root, "scripts", "kafka", "kafka"),
		dir:    t.TempDir(),
		port:   FreePort(t),
	}
	b.env = append(os.Environ(),
		"HERALD_KAFKA_STATE_DIR="+b.dir,
		"HERALD_KAFKA_PORT="+strconv.Itoa(b.port),
		"HERALD_KAFKA_CONTROLLER_PORT="+strconv.Itoa(FreePort(t)),
		"HERALD_KAFKA_HEAP=-Xmx384m -Xms384m",
	)
	t.Cleanup(func() {
		b.Kill()
	})
	b.Start()
	return b
}

// Brokers are the seed brokers of this broker.
func (b *OwnBroker) Brokers() []string {
	return []string{"127.0.0.1:" + strconv.Itoa(b.port)}
}

// Start starts the broker (again, on the same data) and waits until it
// answers.
func (b *OwnBroker) Start() {
	b.t.Helper()
	cmd := exec.Command(b.script, "start")
	cmd.Env = b.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		b.t.Fatalf("testenv: start own broker: %v\n%s", err, out.String())
	}
	if err := pingKafka(b.Brokers()); err != nil {
		b.t.Fatalf("testenv: own broker started but does not answer: %v", err)
	}
}

// Kill SIGKILLs the broker, as a crash would, and waits until it is gone.
// Killing a broker that is not running does nothing.
func (b *OwnBroker) Kill() {
	raw, err := os.ReadFile(filepath.Join(b.dir, "kafka.pid"))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 0 {
		return
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return
	}
	for deadline := time.Now().Add(30 * time.Second); alive(pid) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	os.Remove(filepath.Join(b.dir, "kafka.pid"))
}

// alive reports whether pid runs and is not a zombie waiting to be reaped.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}
