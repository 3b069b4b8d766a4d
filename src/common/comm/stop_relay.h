// stop_relay.h: a stop heard by any rank reaches every rank of the job, whatever its role
// (docs/faults.md, "Signals").
//
// A signal (stop.h: SIGTERM, SIGUSR1/2, a first SIGINT) may reach one rank only: a node that holds
// only teachers drained or preempted, a kill of one pid. The rank that hears it tells every other
// rank with one small message (the signal's number) on a communicator of its own; each rank asks
// at its unit boundaries (a training step, a shard, a batch served): stop_relay_poll answers the
// signal heard here or by any rank so far. A teacher thus forwards its stop to its students, which
// checkpoint and stop as for their own signal, and a rank of dump-features or regenerate stops every
// other at its next shard.
// Every call is on the main thread (MPI_THREAD_FUNNELED). A job of one rank has nothing to relay.
#pragma once

// stop_relay_open: every rank of a job whose mode stops on signals (mode.h stops), after
// watchdog_start (collective: the relay's communicator, a timed wait). No effect on one rank.
void stop_relay_open(void);
// stop_relay_poll: the signal that asked for a stop, heard by this rank (stop_requested) or by
// another (the first that told this one); 0 when none. On its first call after this rank heard
// one, it tells every other rank. Cheap (a test of the posted receives): call it once per unit.
// Without the relay open, stop_requested().
int stop_relay_poll(void);
// stop_relay_close: collective (every rank of the job that opened it; watchdog_finalize calls it,
// through watchdog_on_finalize):
// every rank says whether it told the others, the messages sent are received, the receives that
// no message will match are cancelled, the communicator freed. No effect when not open.
void stop_relay_close(void);
