// test_backend_async_cuda.c: backend.h's pinned host memory and async copies on CUDA (skipped, exit 77,
// without a GPU), the way the students' MPI gradient ring uses them:
//   a device buffer written on the backend's stream (a memset after an upload), then copied to a pinned
//   chunk with backend_copy_async (BACKEND_STREAM_COPY): once an event recorded after it has completed, the chunk
//   holds what the stream wrote (the copy ran after the stream's queued work), element by element;
//   the chunk changed on the host and copied back with backend_copy_async (BACKEND_STREAM_TO_DEVICE), an event synced:
//   the device holds the new values; backend_stream_wait then a copy on the stream sees them too;
//   a zero-byte copy, and an event recorded with nothing queued, are complete at once.
// The CPU backend's twins (memcpy, every event complete) run the same sequence.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/backend/backend.h"
#include "testing.h"
#include "testing_device.h"

static void run(backend *be, const char *name) {
    const int N = 3 << 16; // 768 KiB of fp32
    float *host = malloc((size_t)N * 4), *back = malloc((size_t)N * 4);
    for (int i = 0; i < N; i++) host[i] = (float)i * 0.5f - 7.0f;
    float *d = backend_alloc(be, (size_t)N * 4);
    CHECK(d != NULL);
    float *pin = backend_host_alloc(be, (size_t)N * 4);
    CHECK_MSG(pin != NULL, "%s: backend_host_alloc", name);
    void *ev = backend_event_new(be);
    CHECK(ev != NULL);
    backend_copy_to_device(be, d, host, (size_t)N * 4);
    backend_memset_zero(be, d + 1000, 4000 * 4); // queued on the stream: the async copy must see it
    backend_copy_async(be, BACKEND_STREAM_COPY, pin, d, (size_t)N * 4);
    backend_event_record(be, ev, BACKEND_STREAM_COPY);
    backend_event_sync(be, ev);
    CHECK(backend_event_done(be, ev) == 1);
    int wrong = 0;
    for (int i = 0; i < N; i++) wrong += pin[i] != ((i >= 1000 && i < 5000) ? 0.0f : host[i]);
    CHECK_MSG(wrong == 0, "%s: %d elements wrong after the copy to pinned memory", name, wrong);
    for (int i = 0; i < N; i++) pin[i] = pin[i] * 2.0f + 1.0f;
    backend_copy_async(be, BACKEND_STREAM_TO_DEVICE, d + 16, pin + 16, (size_t)(N - 16) * 4); // an offset piece
    backend_event_record(be, ev, BACKEND_STREAM_TO_DEVICE);
    backend_stream_wait(be, ev); // the stream waits for it: the copy below sees the new values
    backend_copy_to_host(be, back, d, (size_t)N * 4);
    wrong = 0;
    for (int i = 0; i < N; i++) {
        float was = (i >= 1000 && i < 5000) ? 0.0f : host[i];
        wrong += back[i] != (i < 16 ? was : was * 2.0f + 1.0f);
    }
    CHECK_MSG(wrong == 0, "%s: %d elements wrong after the copy back", name, wrong);
    backend_copy_async(be, BACKEND_STREAM_COPY, pin, d, 0);
    backend_event_record(be, ev, BACKEND_STREAM_COPY);
    backend_event_sync(be, ev);
    CHECK(backend_event_done(be, ev) == 1);
    backend_event_free(be, ev);
    backend_host_free(be, pin);
    backend_host_free(be, NULL);
    backend_free(be, d);
    free(host);
    free(back);
}

int main(void) {
    backend cpu, gpu;
    int rc = test_open_devices(&cpu, &gpu);
    if (rc) return rc;
    run(&gpu, "cuda");
    run(&cpu, "cpu");
    backend_close(&gpu);
    backend_close(&cpu);
    return test_finish("test_backend_async_cuda");
}
