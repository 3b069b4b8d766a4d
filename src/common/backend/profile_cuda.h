// profile_cuda.h: the CUDA events behind profile.c (profile_cuda.cu).
#pragma once
#include "common/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

void *cuda_prof_event_new(void);                   // a timing event
void cuda_prof_event_free(void *event);
void cuda_prof_record(backend *be, void *event);   // on the backend's stream
double cuda_prof_seconds(void *start, void *stop); // both recorded and complete

#ifdef __cplusplus
}
#endif
