// stop.c: see stop.h.
#include "common/core/stop.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop_sig = 0, stop_interrupts = 0;

static void stop_on_signal(int sig) {
    if (!stop_sig) stop_sig = sig;
}

static void stop_on_interrupt(int sig) {
    if (stop_interrupts++ > 0) {
        static const char m[] = "error: interrupted twice: aborted at once, nothing more written\n";
        ssize_t ignored = write(STDERR_FILENO, m, sizeof m - 1);
        (void)ignored;
        _exit(130);
    }
    static const char m[] = "interrupt: finishing the current step or shard, then stopping (interrupt again to abort at once)\n";
    ssize_t ignored = write(STDERR_FILENO, m, sizeof m - 1);
    (void)ignored;
    if (!stop_sig) stop_sig = sig;
}

void stop_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sa.sa_handler = stop_on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    sa.sa_handler = stop_on_interrupt;
    sigaction(SIGINT, &sa, NULL);
    signal(SIGXFSZ, SIG_IGN);
}

int stop_requested(void) { return (int)stop_sig; }

const char *stop_signal_name(int sig) {
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGINT: return "SIGINT";
    default: return "a signal"; // (another rank's: this one got none)
    }
}
