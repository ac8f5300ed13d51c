package metrics

import (
	"strings"
	"sync"
)

// DecisionLimit is how many distinct tenants, and how many distinct
// notification types, herald_decisions_total labels per process before
// folding the rest into "other": at most 50 × 50 × outcomes series per
// stage.
const DecisionLimit = 50

// Decisions counts one stage's decisions in
// herald_decisions_total{stage, tenant, type, outcome}. A stage counts
// through a Tally per task, so only decisions of committed transactions are
// counted.
type Decisions struct {
	reg            *Registry
	stage          string
	tenants, types *Limit
}

// NewDecisions returns the decision counts of stage.
func NewDecisions(reg *Registry, stage string) *Decisions {
	return &Decisions{reg: reg, stage: stage, tenants: NewLimit(DecisionLimit), types: NewLimit(DecisionLimit)}
}

// add counts n decisions of k. The strings of k are copied before the
// registry or the limits keep them: a task may pass strings that point
// into the input record they were read from (the dedupe task decodes
// requests in place), and keeping one would keep that record's whole fetch
// buffer alive for the life of the process.
func (d *Decisions) add(k decisionKey, n int64) {
	k = decisionKey{strings.Clone(k.tenant), strings.Clone(k.typ), strings.Clone(k.outcome)}
	d.reg.Counter("herald_decisions_total", "decisions of committed transactions, by stage, tenant, type and outcome (tenants and types beyond the first 50 each are \"other\")",
		"stage", d.stage, "tenant", d.tenants.Value(k.tenant), "type", d.types.Value(k.typ), "outcome", k.outcome).Add(n)
}

type decisionKey struct{ tenant, typ, outcome string }

// Tally holds the decisions of one task's open transaction. A nil Tally
// counts nothing.
type Tally struct {
	d       *Decisions
	mu      sync.Mutex
	pending map[decisionKey]int64
}

// Tally returns an empty tally feeding d.
func (d *Decisions) Tally() *Tally { return &Tally{d: d, pending: map[decisionKey]int64{}} }

// Add notes one decision of the open transaction.
func (t *Tally) Add(tenant, typ, outcome string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.pending[decisionKey{tenant, typ, outcome}]++
	t.mu.Unlock()
}

// Commit counts the noted decisions: their transaction committed.
func (t *Tally) Commit() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, n := range t.pending {
		t.d.add(k, n)
	}
	clear(t.pending)
}

// Abort drops the noted decisions: their transaction aborted and its input
// is decided again.
func (t *Tally) Abort() {
	if t == nil {
		return
	}
	t.mu.Lock()
	clear(t.pending)
	t.mu.Unlock()
}
