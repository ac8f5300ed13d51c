// Package stage owns the one loop every herald stage runs: join a consumer
// group, restore each assigned partition's state from its changelog topics,
// consume a batch read_committed, hand each record to the partition's Task,
// and commit the task's outputs, changelog records and the input offsets in
// one Kafka transaction; fire timers; drain on revoke and on shutdown.
//
// A stage is a Task per input partition: a function of (state, record) →
// (outputs, state changes) with no Kafka in it, so it is tested and replayed
// without a broker. The runtime owns everything else.
//
// Exactly-once, and its hazards:
//   - State changes made while processing a batch are pending until the
//     transaction commits. A task must keep them apart from its committed
//     state and apply them on Commit or drop them on Abort: after an abort the
//     session rewinds the input to the last committed offsets and the same
//     records are processed again against the committed state.
//   - Rebalances are blocked while a batch is processed (BlockRebalanceOnPoll)
//     and allowed between transactions, so a revoke never interrupts a batch:
//     the batch commits or aborts first. Keep batches short (BatchInterval) so
//     a rebalance is never held longer than the group's rebalance timeout.
//   - Restoring reads the changelog read_committed up to its last stable
//     offset. A crashed instance's open transaction holds that offset back
//     until the transaction is fenced (same TransactionalID restarting) or
//     times out (TransactionTimeout): keep TransactionalID stable per
//     instance, and the timeout short.
//   - Changelog records must be written to the input record's partition
//     (set Record.Partition and use a partitioner that honours it for
//     changelog topics, such as topics.Catalog.Partitioner).
package stage
