// protocol.c: the students' requests and the credits (see protocol.h).
#include "common/comm/protocol.h"

#include "common/core/error.h"

void protocol_request_send(payload_link *l, int teacher, const protocol_request *r) {
    int64_t msg[PROTOCOL_REQUEST] = {r->kind, r->index, r->student};
    payload_link_send(l, teacher, TAG_REQUEST, msg, sizeof msg);
}

int protocol_request_recv(payload_link *l, protocol_request *r, int *from) {
    int64_t msg[PROTOCOL_REQUEST];
    size_t got = payload_link_recv(l, LINK_ANY, TAG_REQUEST, msg, sizeof msg, from);
    if (got != sizeof msg) return error_set("a request of %zu bytes from rank %d (want %zu)", got, *from, sizeof msg);
    *r = (protocol_request){.kind = msg[0], .index = msg[1], .student = msg[2]};
    return 0;
}

int protocol_credits(const config *cfg, int G) { return (int)cfg->slots + G - 1; }

int protocol_send_buffers(const config *cfg, int G, int students) { return protocol_credits(cfg, G) * students + 1; }
