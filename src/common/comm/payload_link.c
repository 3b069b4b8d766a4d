// payload_link.c: the front of the payload links and the registry of their transports (see
// payload_link.h; a transport's table: payload_link_ops.h).
#include "common/comm/payload_link.h"
#include "common/core/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/comm/msg.h"
#include "common/comm/payload_link_ops.h"
#include "common/comm/watchdog.h"
#include "common/core/check.h"
#include "common/core/error.h"

// The registry: "mpi" first (the host path, which always opens), then the device transports in the
// order "auto" tries them.
static const payload_link_ops *const link_registry[] = {
    &payload_link_mpi_ops,
    &payload_link_nccl_ops,
};
#define LINK_KINDS ((int)(sizeof link_registry / sizeof link_registry[0]))

struct payload_link {
    const payload_link_ops *ops;
    void *impl;
};

int payload_link_kinds(void) { return LINK_KINDS; }
const char *payload_link_kind(int i) { return i >= 0 && i < LINK_KINDS ? link_registry[i]->name : NULL; }
const char *payload_link_kind_label(int i) { return i >= 0 && i < LINK_KINDS ? link_registry[i]->label : NULL; }

// One transport: 1 opened (*out), 0 declined (why), -1 failed.
static int link_try(payload_link **out, const payload_link_ops *ops, const world *w, int device, char *why, size_t n) {
    void *impl = NULL;
    why[0] = '\0';
    int rc = ops->open(&impl, w, device, why, n);
    if (rc <= 0) return rc;
    payload_link *l = xcalloc(1, sizeof *l);
    l->ops = ops, l->impl = impl;
    *out = l;
    return 1;
}

int payload_link_open(payload_link **out, const char *want, const world *w, int device, char *why, size_t n) {
    *out = NULL;
    if (n) why[0] = '\0';
    if (strcmp(want, "auto") == 0) { // the first device transport that opens, else mpi
        char said[512] = "", one[256];
        for (int i = 0; i < LINK_KINDS; i++) {
            if (!link_registry[i]->device) continue;
            int rc = link_try(out, link_registry[i], w, device, one, sizeof one);
            if (rc != 0) return rc < 0 ? -1 : 0;
            size_t at = strlen(said);
            snprintf(said + at, sizeof said - at, "%s%s not used: %s", at ? "; " : "", link_registry[i]->label, one);
        }
        if (link_try(out, &payload_link_mpi_ops, w, device, one, sizeof one) < 0) return -1;
        snprintf(why, n, "%s", said);
        return 0;
    }
    for (int i = 0; i < LINK_KINDS; i++)
        if (strcmp(want, link_registry[i]->name) == 0) return link_try(out, link_registry[i], w, device, why, n) < 0 ? -1 : 0;
    return error_set("transport.payload: no transport named '%s'", want);
}

void payload_link_close(payload_link *l) {
    if (!l) return;
    l->ops->close(l->impl);
    free(l);
}

const char *payload_link_name(const payload_link *l) { return l->ops->name; }
const char *payload_link_label(const payload_link *l) { return l->ops->label; }
const char *payload_link_title(const payload_link *l) { return l->ops->title; }
const char *payload_link_says(const payload_link *l) { return l->ops->says; }
int payload_link_device(const payload_link *l) { return l && l->ops->device; }

int payload_link_check(void *ctx, char *msg, size_t n) {
    payload_link *l = ctx;
    return l && l->ops->check ? l->ops->check(l->impl, msg, n) : 0;
}

void payload_link_post_send(payload_link *l, int peer, int tag, const void *buf, size_t bytes, payload_ticket *t) {
    l->ops->post_send(l->impl, peer, tag, buf, bytes, &t->req);
    t->pending = LINK_SEND;
}

void payload_link_post_recv(payload_link *l, int peer, int tag, void *buf, size_t cap, payload_ticket *t) {
    l->ops->post_recv(l->impl, peer, tag, buf, cap, &t->req);
    t->pending = LINK_RECV;
    t->bytes = 0, t->peer = -1;
}

void payload_link_send(payload_link *l, int peer, int tag, const void *buf, size_t bytes) {
    payload_ticket t = {0};
    payload_link_post_send(l, peer, tag, buf, bytes, &t);
    payload_link_wait(&t);
}

size_t payload_link_recv(payload_link *l, int peer, int tag, void *buf, size_t cap, int *from) {
    payload_ticket t = {0};
    payload_link_post_recv(l, peer, tag, buf, cap, &t);
    payload_link_wait(&t);
    if (from) *from = t.peer;
    return t.bytes;
}

// A device block either way (send: from dev; else into it).
static int link_dev(payload_link *l, int send, int peer, void *dev, size_t bytes, payload_ticket *t) {
    if (!l->ops->device) return error_set("the %s transport carries no device memory", l->ops->name);
    if (t->event && t->ops != l->ops) payload_link_ticket_free(t);
    t->ops = l->ops;
    if (send ? l->ops->send_dev(l->impl, peer, dev, bytes, &t->event) : l->ops->recv_dev(l->impl, peer, dev, bytes, &t->event))
        return -1;
    t->pending = LINK_DEVICE;
    return 0;
}

int payload_link_post_send_dev(payload_link *l, int peer, const void *dev, size_t bytes, payload_ticket *t) {
    return link_dev(l, 1, peer, (void *)dev, bytes, t);
}

int payload_link_post_recv_dev(payload_link *l, int peer, void *dev, size_t bytes, payload_ticket *t) {
    return link_dev(l, 0, peer, dev, bytes, t);
}

// A completed host message: a receive's bytes and sender (a send's status says nothing).
static void ticket_host_done(payload_ticket *t, const MPI_Status *st) {
    if (t->pending == LINK_RECV) t->bytes = msg_bytes(st), t->peer = st->MPI_SOURCE;
    t->pending = LINK_NONE;
}

int payload_link_test(payload_ticket *t) {
    if (t->pending == LINK_SEND || t->pending == LINK_RECV) {
        int done = 0;
        MPI_Status st;
        mpi_check(MPI_Test(&t->req, &done, &st));
        if (done) ticket_host_done(t, &st);
        return done;
    }
    if (t->pending == LINK_DEVICE) {
        int done = t->ops->event_done(t->event);
        if (done == 1) t->pending = LINK_NONE;
        return done;
    }
    return 1;
}

int payload_link_wait(payload_ticket *t) {
    if (t->pending == LINK_SEND || t->pending == LINK_RECV) {
        MPI_Status st;
        world_wait(&t->req, &st);
        ticket_host_done(t, &st);
        return 0;
    }
    if (t->pending == LINK_DEVICE) {
        if (t->ops->event_wait(t->event)) return -1;
        t->pending = LINK_NONE;
    }
    return 0;
}

void payload_link_ticket_free(payload_ticket *t) {
    if (t->event && t->ops) t->ops->event_free(t->event);
    memset(t, 0, sizeof *t);
}

// Settings: the keys of how the features travel teacher -> student (docs/config.md, Keys; src/settings.c lists every file's).
static const config_key payload_keys[] = {
    {"transport.slots", CFG_INT, CONFIG_F(slots), "2", "batches in flight per teacher and student (credits)", NULL, 1, 64},
    {"transport.payload", CFG_STRING, CONFIG_F(payload), "auto", "how the features travel teacher -> student: nccl (GPU to GPU; needs every rank on its own GPU), mpi (from host memory), or auto (nccl when every rank has its own GPU, else mpi; the job's first log lines say which and why)", "auto|mpi|nccl", CONFIG_NOLIM},
    {"transport.check_payloads", CFG_BOOL, CONFIG_F(check_payloads), "false", "teachers seal every payload with a CRC-32C of its bytes and the students check it on arrival (a mismatch is an error naming the teacher and the batch): for a first run on new hardware or a transport suspected of damaging data; one pass over each payload on both sides", NULL, CONFIG_NOLIM},
};
const config_key_set payload_settings = CONFIG_KEY_SET(payload_keys, NULL);
