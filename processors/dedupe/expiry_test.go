package dedupe

import (
	"fmt"
	"testing"
)

// expiring is an entry of the task's partition that expires at at.
func expiring(at int64) seenVal { return seenVal{firstAt: at - 10, expiresAt: at} }

// setCommitted commits key k with v, as a transaction would.
func setCommitted(task *Task, k seenKey, v seenVal) {
	task.setPending(k, pendingVal{val: v})
	task.pendQ.push(expiryItem{key: k, at: v.expiresAt})
	task.Commit()
}

// drain pops every item due at now and names them "kind/id@at".
func drain(task *Task, now int64) string {
	var got []string
	for {
		k, at, _, ok := task.nextDue(now)
		if !ok {
			return fmt.Sprint(got)
		}
		got = append(got, fmt.Sprintf("%d/%d@%d", k.kind, k.id[0], at))
	}
}

func TestExpiriesComeDueInTimeOrderAcrossTheCommittedAndOpenQueues(t *testing.T) {
	task := NewTask(Policy{}, testTopics, 0)
	idem := func(b byte) seenKey { return seenKey{id: [16]byte{b}, kind: kindIdem} }
	dedupe := func(b byte) seenKey { return seenKey{id: [16]byte{b}, kind: kindDedupe} }
	setCommitted(task, idem(1), expiring(30))
	setCommitted(task, dedupe(2), expiring(10))
	setCommitted(task, idem(3), expiring(20))
	setCommitted(task, dedupe(4), expiring(20))
	setCommitted(task, dedupe(5), expiring(50))
	// Open: not committed, queued by key.
	task.setPending(idem(6), pendingVal{val: expiring(15)})
	task.pendQ.push(expiryItem{key: idem(6), at: 15})
	task.setPending(dedupe(7), pendingVal{val: expiring(20)})
	task.pendQ.push(expiryItem{key: dedupe(7), at: 20})
	task.setPending(idem(8), pendingVal{val: expiring(40)})
	task.pendQ.push(expiryItem{key: idem(8), at: 40})

	steps := []struct {
		name string
		now  int64
		want string
	}{
		{"nothing is due before the first expiry", 9, "[]"},
		{"the earliest committed item comes first", 10, "[2/2@10]"},
		{"an open item comes between committed ones", 16, "[1/6@15]"},
		{"at one time, idempotency entries, then dedupe entries, then open ones", 20, "[1/3@20 2/4@20 2/7@20]"},
		{"committed and open queues interleave by time", 45, "[1/1@30 1/8@40]"},
		{"the last committed item", 1000, "[2/5@50]"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if got := drain(task, st.now); got != st.want {
				t.Fatalf("due at %d: %s, want %s", st.now, got, st.want)
			}
		})
	}
}

func TestAnExpiryWhosePositionWasFreedIsSkipped(t *testing.T) {
	task := NewTask(Policy{}, testTopics, 0)
	a := seenKey{id: [16]byte{1}, kind: kindDedupe}
	b := seenKey{id: [16]byte{2}, kind: kindDedupe}
	setCommitted(task, a, expiring(10))
	setCommitted(task, b, expiring(20))
	task.setPending(a, pendingVal{deleted: true})
	task.Commit()
	if got := drain(task, 100); got != "[2/2@20]" {
		t.Fatalf("due: %s, want only key 2's", got)
	}
	if len(task.popped) != 2 {
		t.Fatalf("%d items noted as popped, want both (an abort puts back what it popped)", len(task.popped))
	}
}

func TestAnAbortPutsBackTheExpiriesItPopped(t *testing.T) {
	task := NewTask(Policy{}, testTopics, 0)
	a := seenKey{id: [16]byte{1}, kind: kindIdem}
	setCommitted(task, a, expiring(10))
	open := seenKey{id: [16]byte{2}, kind: kindIdem}
	task.setPending(open, pendingVal{val: expiring(5)})
	task.pendQ.push(expiryItem{key: open, at: 5})
	if got := drain(task, 10); got != "[1/2@5 1/1@10]" {
		t.Fatalf("due: %s", got)
	}
	task.Abort()
	if got := drain(task, 10); got != "[1/1@10]" {
		t.Fatalf("due after the abort: %s, want the committed key's again and not the aborted one's", got)
	}
	task.Commit()
	if got := drain(task, 10); got != "[]" {
		t.Fatalf("due after a commit: %s, want nothing popped twice", got)
	}
}

func TestACommitAppliesChangesInTheOrderTheyWereMade(t *testing.T) {
	task := NewTask(Policy{}, testTopics, 0)
	var keys []seenKey
	for i := range 40 {
		k := seenKey{id: [16]byte{byte(i)}, kind: kindDedupe}
		keys = append(keys, k)
		task.setPending(k, pendingVal{val: expiring(7)})
	}
	task.setPending(keys[3], pendingVal{val: expiring(8)}) // changed again: keeps its place
	task.Commit()
	for i, k := range keys {
		if id, ok := task.table(kindDedupe).keyAt(uint32(i)); !ok || id != k.id {
			t.Fatalf("position %d holds key %d, want %d", i, id[0], i)
		}
	}
	if v, _, _ := task.get(keys[3]); v.expiresAt != 8 {
		t.Fatalf("key 3 expires at %d, want its last change's 8", v.expiresAt)
	}
	if len(task.changes) != 0 || len(task.pending) != 0 || task.pendQ.len() != 0 {
		t.Fatal("the transaction's changes outlive its commit")
	}
}
