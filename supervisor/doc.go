// Package supervisor is watchbot's listen loop: it long-polls an SQS queue (or several, on
// shared worker slots), runs a worker per message or batch through the worker package's
// kinds (a process, an HTTP application, a Lambda runtime), keeps each running message
// leased with a heartbeat, turns the worker's result into an outcome (delete, retry with
// backoff, release, dead-letter) and drains in two bounded phases when asked to stop.
//
// # Who owns what
//
// Most state has one owner goroutine, and everything else sends it a message or reads a
// snapshot. What several goroutines share is guarded by a lock of its own, listed below.
//
//   - The loop goroutine (Supervisor.loop) owns the scheduler: which messages are held, in
//     which group, which run next, how many to receive. The scheduler is changed only
//     through its methods, on the loop's goroutine. The loop alone takes a new delivery of a
//     held message over (job.takeOver) and decides hand-backs, so a hand-back it decided
//     always comes before a redelivery it takes later.
//   - The loop also owns the start gate (startGate, limits.go): before a run starts it takes a
//     permit from the limiter (limits.Limiter.TryStart, which never waits and makes no
//     call), and it gives the permit back when the run's worker has ended; a refused start
//     is tried again when the limiter's Changed fires, and at least once a second. A message
//     the limits hold back stays held, leased, in the scheduler. The limiter's goroutine
//     (limits.Limiter.Run) makes every DynamoDB call of the limits; the runs pass it the
//     pauses workers ask for (Limiter.Pause, which never waits). An operator's pause of the
//     queue (Limiter.FleetPause) closes the gate like a worker's, and once it has held for
//     --limit-wait the loop hands back what is held and not started.
//   - The heartbeat goroutine (leaser.run) owns the renewals under way and when each job is
//     renewed next (job.renewAt, atomic: the loop sets it too, at a new delivery).
//   - A run's goroutine (runner.run) owns its worker and its messages' outcomes, and settles
//     them. With S3 payloads (payload.go) it also fetches each pointer message's object into
//     a file of the run's own before the worker starts, while the heartbeat keeps the message
//     leased and the stop's cut bounds the fetch, and deletes the object only once SQS has
//     deleted its message; a hand-back goroutine settles one message the loop gave it, or
//     releases one received after the stop request.
//   - A job's scheduling and settling fields (job.go) belong to whoever holds the job: the
//     loop while it is held, its run while it runs, its hand-back while it goes back; each
//     handover is a goroutine's start or a channel send.
//   - The acknowledger (acker.run) owns the batches of deletes and visibility changes; each
//     batch's call runs in a goroutine of its pool (runPool), never on acker.run itself.
//
// The locks, and what each guards. Each is held only to read or change what it guards: never
// across a call to SQS, DynamoDB or S3, a log line, a metric, a channel send or a wait. What
// to log or send is collected under the lock and done after it is released.
//
//   - job.mu: a job's delivery (receipt, lease, whether its settle has begun, whether it
//     waits at SQS's in-flight limit for a relay, how to kill its running worker). A relay's
//     receipt replaces the delivery under it (job.relayed), as a new delivery does. A renewal snapshots the receipt, calls SQS without the lock, and
//     applies the answer only if the job still has that receipt and has not begun to settle
//     (job.renewed); a settle marks the job settled and waits for the renewal under way to
//     return (job.beginSettle), so no renewal lands after the outcome's own visibility
//     change.
//   - job.stopMu: why the job must stop, how to stop its worker, and the span of its run.
//   - leaser.mu: the registry of held jobs by message id.
//   - mailbox.mu: the reports posted and not yet taken (the heartbeat's stopped jobs, the
//     renewals' answers).
//   - brake.mu: the brake's state and window. The runs change it as their outcomes are
//     judged (observe, probeFor), the loop reads what it allows (gate) and tells it when a
//     message leaves (left); a change of state is logged after the lock.
//   - deduper.mu: the claims of the runs under way, and when a table error was last logged.
//   - cutoff.mu: a stop's last moment, its timer and the calls under way it is to end; each
//     call's cancel runs after the lock.
//   - Health.mu: the receive, acknowledgement and heartbeat times that /healthz and /readyz
//     read.
//   - Load.mu: the loop's state for the gauges and the scale-in protector, which read it, and
//     when each run under way started.
//   - slotPool.mu: the books of the slots the queues share (see One queue or several).
//   - Tenants.mu: each queue's top tenants and their counts, written as runs start.
//
// No goroutine holds two of these locks at once.
//
// # Who may wait on whom
//
// The waits form a tree, so no two goroutines can wait on each other:
//
//	Supervisor.run ── loop ── receive loop ── SQS
//	 │      (the loop waits on nothing else: it selects on the receive's answer, the runs'
//	 │       events, the heartbeat's mailbox, the limiter's Changed, its timer and the stop
//	 │       request)
//	 ├── heartbeat ── acknowledger, SQS calls under way, dedupe extensions ── DynamoDB
//	 ├── runs ── loop (events), acknowledger and its calls, renewals under way, dead-letter
//	 │           sends (SQS), DynamoDB, payload fetches and deletes (S3), the worker
//	 ├── hand-backs ── acknowledger and its calls, renewals under way, dead-letter sends (SQS)
//	 └── acknowledger ── its calls ── SQS
//
// Reports that go up the tree never block: an SQS call's goroutine posts a renewal's answer
// to the heartbeat's mailbox, the heartbeat posts the held jobs it stops to the loop's
// (mailbox), and the limiter signals Changed on a channel of one that coalesces. A run's events and the receive loop's answers are the blocking sends to the
// loop, and the loop never waits for a run. The receive loop's pollers answer each of the
// loop's asks exactly once, and the loop asks only while fewer asks than pollers are
// unanswered, so a poller is free to take the ask and neither send of an ask or an answer
// waits on a goroutine that is waiting in turn. Every goroutine is started
// by one of these owners and waited for by it before Run returns; docs/design.md describes
// the whole for contributors.
//
// # One queue or several
//
// Run builds one listen (listen.go), for one queue or several (Config.Queues), on one path:
// what the queues share is built once (the limiter, the slot pool, of one seat for a single
// queue, the task's scale-in protector and the stop's cutoff) and handed to each queue's
// Supervisor, which has all of the above for its queue alone: its loop, scheduler, receive
// loop, heartbeat, acknowledger, brake and startup checks. Every queue is checked before any
// receives. listen.run starts each supervisor's run in a goroutine it waits for, and owns the
// limiter's goroutine, the fan-out of its Changed and the protector, which follows every
// queue's load. A stop reaches every supervisor through the same context, so each drains in
// its own two bounded phases, side by side.
//
// A queue alone is a pool of one seat: it asks for every slot free within its brake's
// limit and is granted them all, so its loop starts what its slots and limits allow at every
// step. Only queues sharing the slots hold messages ahead to claim a slot, and ask for no
// slot for messages their limits held back until the limits change (scheduler.startable,
// room), since a slot asked for and not used wakes every other queue.
//
// The queues share the slots through a slotPool (slots.go): its lock guards the books of
// which queue runs, was granted or waits for how many slots, and is held only to compute a
// decision, never across a call, a send or a wait. A loop tells the pool at each step what
// ended and what it could start, and starts what it is granted; a slot the pool grants to
// another queue wakes that queue's loop through a channel that holds one wake-up, sent
// without waiting. So the loops never wait on each other, and the wait tree above stays a
// tree for each queue, under the listen's:
//
//	Run ── listen.run ── each queue's Supervisor.run (as above)
//	                   ├── limiter ── DynamoDB (--limits-table), ended once every queue's
//	                   │              drain is over, when no run holds a permit
//	                   ├── fan-out of the limiter's Changed
//	                   └── protector ── the ECS agent; relays of the queues' load changes
//
// The limiter's Changed wakes one receiver, so listen.run copies each signal to a channel of
// one per queue (fanOut), never waiting: each loop selects on its own copy.
package supervisor
