package testenv

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Instances are herald processes of one role, by instance id, for the
// crash tests that SIGKILL and restart them: each writes its log to
// logDir/<id>.log (appended across restarts), and one that exits without
// being killed fails the test with the end of its log.
type Instances struct {
	t      testing.TB
	bin    string
	logDir string
	args   func(id string) []string

	mu      sync.Mutex
	running map[string]*proc
}

type proc struct {
	cmd    *exec.Cmd
	killed atomic.Bool
	exited chan struct{} // closed once Wait returned
}

// NewInstances runs bin with args(id) (called at every start, so a start
// may differ from the last) and HERALD_LOG_LEVEL=warn; every instance
// still running when t ends is killed.
func NewInstances(t testing.TB, bin, logDir string, args func(id string) []string) *Instances {
	s := &Instances{t: t, bin: bin, logDir: logDir, args: args, running: map[string]*proc{}}
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for id := range s.running {
			s.kill(id)
		}
	})
	return s
}

// Start starts instance id.
func (s *Instances) Start(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.start(id)
}

func (s *Instances) start(id string) {
	t := s.t
	t.Helper()
	log := filepath.Join(s.logDir, id+".log")
	logf, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(s.bin, s.args(id)...)
	cmd.Env = append(os.Environ(), "HERALD_LOG_LEVEL=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	go func() {
		defer close(p.exited)
		err := cmd.Wait()
		if !p.killed.Load() {
			out, _ := os.ReadFile(log)
			t.Errorf("instance %s exited without being killed: %v; the end of its log:\n%s", id, err, out[max(0, len(out)-4096):])
		}
	}()
	s.running[id] = p
}

func (s *Instances) kill(id string) {
	p := s.running[id]
	p.killed.Store(true)
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	delete(s.running, id)
}

// KillRandomly SIGKILLs a random running instance every 0.4–1.6 s and
// restarts it under the same id after up to 0.3 s; after the joinAfter-th
// kill it also starts instance join (a rebalance). It goes on until it
// has killed at least minKills times and done is closed, and returns how
// many times it killed. rng makes the schedule repeatable.
func (s *Instances) KillRandomly(rng *rand.Rand, minKills, joinAfter int, join string, done <-chan struct{}) int {
	kills := 0
	for finished := false; kills < minKills || !finished; {
		time.Sleep(time.Duration(400+rng.IntN(1200)) * time.Millisecond)
		select {
		case <-done:
			finished = true
		default:
		}
		s.mu.Lock()
		ids := make([]string, 0, len(s.running))
		for id := range s.running {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		id := ids[rng.IntN(len(ids))]
		s.kill(id)
		kills++
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		s.start(id)
		if kills == joinAfter {
			s.start(join)
		}
		s.mu.Unlock()
	}
	return kills
}
