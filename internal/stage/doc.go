// Package stage owns the one loop every herald stage runs: join a consumer
// group, restore each assigned partition's state from its changelog topics,
// consume a batch read_committed, hand each record to the partition's Task,
// and commit the task's outputs, changelog records and the input offsets in
// one Kafka transaction; fire timers; drain on revoke and on shutdown.
//
// A stage is a Task per input partition: a function of (state, record) →
// (outputs, state changes) with no Kafka in it, so it is tested and replayed
// without a broker. The runtime owns everything else. Tasks of different
// partitions restore concurrently: they must not share mutable state.
//
// What the runtime does, each shown by a test on the real broker
// (stage_test.go, hardening_test.go):
//   - A restarted instance continues from its committed state: outputs of
//     committed transactions are neither repeated nor lost.
//   - Before reading, Run refuses a changelog whose partition count differs
//     from the input's, naming both topics and counts.
//   - Run fences a crashed predecessor with the same TransactionalID before
//     the first poll (it asks for the producer id, which aborts the
//     predecessor's open transaction), so its pending offsets become stable
//     at once, not after its transaction timeout.
//   - A member its group has dropped (a zombie woken from a pause past its
//     session timeout) cannot commit, even a transaction with no input
//     (timers, a sink's results round): such a transaction commits the
//     group's last committed offsets once more, so the coordinator checks
//     the member's id and generation and refuses a stale one
//     (zombie_internal_test.go, on kfake; the nemesis suite, scripts/chaos,
//     on a real cluster). Before the group's first commit it has no offsets
//     to send and is not fenced this way.
//   - Restore waits, per partition, until the group's offsets are stable
//     and then until the changelog's last stable offset reaches the high
//     watermark it had then, and reads up to it. Kafka writes a
//     transaction's markers to each partition separately after EndTxn
//     returns and does not order them across partitions: stable offsets do
//     not mean the changelog's marker is written. The end of a changelog is
//     known exactly (control records are read), never guessed from idle
//     polls.
//   - Partitions restore in parallel (RestoreParallelism), inside the
//     assignment; Ready is false, and Restoring true, until every assigned
//     partition has restored. A restore's broker requests retry retriable
//     errors (a leader election) rather than fail the stage, and a restore
//     ends when Run is told to stop, so shutdown never waits for it.
//   - A partition with no committed group offset whose changelog holds
//     committed state (the group's offsets were lost: expired after
//     offsets.retention.minutes with no member, or deleted) stops the
//     stage with an error unless ResetOffsets says where to start
//     ("earliest" or "latest"); replaying the input from the start would
//     decide it again against state that has moved on.
//   - A transaction closes when the fetch is drained or the batch is full:
//     a lone record is committed at once, however long BatchInterval (which
//     only bounds how long an idle poll waits, so timers fire at least that
//     often). With a MinTransactionInterval, a batch keeps polling until
//     that long after the previous batch began, so input arriving
//     meanwhile shares one transaction (interval_test.go).
//   - A transaction begins with its batch's first 1,000 outputs, which go to
//     the producer while the rest of the batch is processed (its
//     goroutines encode, compress and send them on the other core), each
//     batch lingering up to ProducerLinger to fill; the transaction's end
//     flushes at once, so it never waits for a linger (linger_test.go). A
//     task that fails after that aborts the transaction at once, so no
//     read_committed reader of the outputs waits for its timeout
//     (transient_test.go, on kfake and the real broker).
//   - An input record whose output can never be written (MESSAGE_TOO_LARGE,
//     INVALID_RECORD and the like) is written to DeadLetterTopic as a
//     DeadLetter (reason and position, not the payload) in a transaction
//     with its offset, without being processed; its state changes are
//     dropped and the partition moves on. A batch that fails that way is
//     aborted and reprocessed one record per transaction until the culprit
//     is found, since the broker fails a whole produce batch for one record.
//     Other produce errors abort the batch, which is retried from the
//     committed offsets after a bounded, jittered exponential backoff
//     (internal/backoff).
//   - A broker that cannot be reached, a transaction whose flush, begin or
//     end fails, or a restore that fails does not stop Run: the session
//     (client, group membership, tasks) is closed and a new one started
//     after a backoff, exactly as a restarted process would start: it
//     fences the transaction the old session left open, rejoins, and
//     restores its partitions from the changelogs. Ready is false until
//     then, and also whenever no broker answers a metadata request.
//     A task's error marked Transient (the route stage's device table
//     out of reach) restarts the session the same way (transient_test.go).
//     Only refusals (above), any other task error, and the broker denying
//     this instance (authorization, SASL, a fenced static member) stop Run
//     (session_test.go on kfake; the outage test in cmd/herald on a
//     real broker SIGKILLed and restarted under load).
//   - A partition of a topic the stage writes whose last stable offset has
//     stood below its high watermark for longer than TransactionTimeout (a
//     hanging transaction, KIP-664: read_committed readers and the log
//     cleaner wait there) is counted by herald_stage_hanging_partitions and
//     named by Warnings, which /readyz lists without making the role
//     unready (hanging_internal_test.go; herald doctor names the producer
//     and aborts it).
//
// Hazards and their bounds:
//   - State changes made while processing a batch are pending until the
//     transaction commits. A task must keep them apart from its committed
//     state and apply them on Commit or drop them on Abort: after an abort the
//     session rewinds the input to the last committed offsets and the same
//     records are processed again against the committed state.
//   - The records a task emits belong to the runtime until it calls the
//     task's Commit or Abort, which it does only after the transaction's
//     flush (the producer holds none of them then) and after taking what
//     it needs of an unwritable output; from then on the task may reuse
//     their memory, as the dedupe task does (reuse_test.go). A runtime
//     change that reads an output later, or pipelines a transaction's
//     flush with the next batch, must move Commit and Abort with it.
//   - Rebalances are blocked while a batch is processed (BlockRebalanceOnPoll)
//     and allowed between transactions, so a revoke never interrupts a batch:
//     the batch commits or aborts first. Keep batches short (MaxBatchRecords)
//     so a rebalance is never held longer than the group's rebalance timeout.
//   - Restore runs inside the assignment callback: a member restoring when
//     the next rebalance begins rejoins only when its restore ends, and
//     partitions it already owned pause meanwhile. Size RebalanceTimeout
//     above the longest restore (see Config.RebalanceTimeout).
//   - Restore waits for transactions open on a changelog and for pending
//     offset commits. A crashed instance's transaction is ended at once
//     when an instance with the same TransactionalID restarts (keep it
//     stable per instance), otherwise by TransactionTimeout: that bounds
//     the wait.
//   - Lost offsets are recognised by committed data or commit markers in
//     the changelog. A changelog whose every record, tombstone and marker
//     has been compacted away looks empty; that takes a partition idle for
//     longer than the changelog's delete.retention.ms and an empty group
//     for longer than offsets.retention.minutes, by which time the input's
//     retention has removed most of what a replay would re-decide.
//   - A timer's output (from Tick) that can never be written is replaced,
//     in the retried transaction, by a DeadLetter marked Timer, matched by
//     its topic and key (a task emits the same timer again after an abort).
//     The broker fails a whole partition's produce batch for one bad
//     record, so every output sharing the partition reports the error: the
//     largest is blamed first (the errors are about size; for one that is
//     not, an innocent output may be dead-lettered first), and an input is
//     never blamed for a timer's output (batch_test.go). The state change
//     of the timer commits with the dead letter: its output is gone, not
//     retried. A stage without a DeadLetterTopic retries with backoff and
//     logs the error, so it stalls until the cause is fixed.
//   - Changelog records must be written to the input record's partition
//     (set Record.Partition and use a partitioner that honours it for
//     changelog topics, such as topics.Catalog.Partitioner).
package stage
