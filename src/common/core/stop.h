// stop.h: a stop asked for by a signal, the same in every mode (docs/faults.md, "Signals").
//
// SIGTERM, SIGUSR1, SIGUSR2 (a batch system's warning before the time limit; mpirun forwards them
// to every rank) and a first SIGINT (Ctrl-C) only note the request: the mode finishes its current
// unit (a training step, a dump-features shard, a regenerate part, an evaluation batch), publishes
// what is complete, prints one line saying what it did and how to resume, and exits 0. A second
// SIGINT aborts at once (exit 130), writing nothing more.
#pragma once

// stop_install: the handlers above, and SIGXFSZ ignored (a file-size limit makes write() fail with
// EFBIG, reported as such, rather than kill the rank). Before any thread starts (threads inherit
// the mask; the watchdog's thread blocks every signal itself).
void stop_install(void);
// stop_requested: the signal that asked for the stop, 0 when none did.
int stop_requested(void);
// stop_signal_name: "SIGTERM", "SIGUSR1", ... for a line saying what stopped the run ("a signal"
// for 0: another rank got it).
const char *stop_signal_name(int sig);
