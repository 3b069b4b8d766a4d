// profile_cuda.cu: the CUDA events behind profile.c (see profile_cuda.h).
#include <cuda_runtime.h>

#include "common/backend/backend_cuda.h"
#include "common/backend/check_cuda.h"
#include "common/backend/profile_cuda.h"

extern "C" void *cuda_prof_event_new(void) {
    cudaEvent_t e;
    cuda_check(cudaEventCreate(&e));
    return (void *)e;
}

extern "C" void cuda_prof_event_free(void *event) { cuda_check(cudaEventDestroy((cudaEvent_t)event)); }

extern "C" void cuda_prof_record(backend *be, void *event) {
    cuda_check(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)cuda_stream(be)));
}

extern "C" double cuda_prof_seconds(void *start, void *stop) {
    float ms = 0.0f;
    cuda_check(cudaEventElapsedTime(&ms, (cudaEvent_t)start, (cudaEvent_t)stop));
    return 1e-3 * (double)ms;
}
