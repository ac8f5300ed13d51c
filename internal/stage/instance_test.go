package stage

import (
	"testing"
	"time"
)

func TestAnInstanceConfiguresTheRuntimeAsItsOptionsSay(t *testing.T) {
	i := Instance{Brokers: []string{"b:9092"}, Group: "herald-x", InstanceID: "i1", MaxBatchRecords: 7,
		BatchInterval: time.Second, TransactionTimeout: 2 * time.Second, SessionTimeout: 3 * time.Second,
		RebalanceTimeout: 4 * time.Second, ResetOffsets: ResetLatest, RestoreParallelism: 12}
	c := i.Config("x")
	cases := []struct {
		name      string
		got, want any
	}{
		{"the stage's name is the one given", c.Name, "x"},
		{"the brokers are the instance's", c.Brokers[0], "b:9092"},
		{"the group is the instance's", c.Group, "herald-x"},
		{"the transactional id is the group and the instance id", c.TransactionalID, "herald-x-i1"},
		{"the instance id is the static member id", c.GroupInstanceID, "i1"},
		{"the batch bound is the instance's", c.MaxBatchRecords, 7},
		{"the batch interval is the instance's", c.BatchInterval, time.Second},
		{"the transaction timeout is the instance's", c.TransactionTimeout, 2 * time.Second},
		{"the session timeout is the instance's", c.SessionTimeout, 3 * time.Second},
		{"the rebalance timeout is the instance's", c.RebalanceTimeout, 4 * time.Second},
		{"the offset reset is the instance's", c.ResetOffsets, ResetLatest},
		{"the restore parallelism is the instance's", c.RestoreParallelism, 12},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("got %v, want %v", tc.got, tc.want)
			}
		})
	}
}
