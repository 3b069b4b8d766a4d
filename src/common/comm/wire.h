// wire.h: the payload a teacher sends a student for one packed batch (SPEC §8; the requests and
// tags: protocol.h).
//
// One contiguous buffer, so one host message of the payload link carries a batch:
//   header   int64[WIRE_HEADER]: kind, index, S, n_seq, k, D, teacher peak bytes, features_on_link,
//            seal (transport.check_payloads: 2^32 + the CRC-32C of every byte after the header; 0: none)
//   tokens   int32[S]
//   cu       int32[n_seq + 1]
//   mask     uint8[S]            (padded to 8 bytes)
//   features uint16[S, D]        bf16 bits ("BF16 on the wire"); absent (0 bytes) when
//                                features_on_link = 1: they follow as a device block of the
//                                payload link (payload_link.h: NCCL, GPU to GPU)
//   topk_idx int32[S, k]
//   topk_val f32[S, k]
//   lse      f32[S]
// Every section starts 8-byte aligned.
#pragma once
#include <stddef.h>
#include <stdint.h>

#define WIRE_HEADER 9
enum { WIRE_TRAIN = 1, WIRE_HELDOUT = 2, WIRE_STOP = 3 };

typedef struct {
    int64_t kind, index, S, n_seq, k, D, peak_bytes;
    int64_t features_on_link;    // 1: the features follow as a device block; features = NULL
    int64_t seal;                // 0, or 2^32 + the CRC-32C of the payload after its header (wire_seal)
    int32_t *tokens, *cu;
    uint8_t *mask;
    uint16_t *features;
    int32_t *topk_idx;
    float *topk_val, *lse;
} wire_batch;

// wire_bytes: the size of a payload for these dimensions (D = 0 when the features go over a link).
size_t wire_bytes(int64_t S, int64_t n_seq, int64_t k, int64_t D);
// wire_layout: fill the section pointers of a payload in buf (header values from w->S etc. when
// writing: call wire_write_header first; when reading: wire_read parses the header).
void wire_write_header(void *buf, const wire_batch *w);
// wire_read: point w's sections into buf after checking the header against the received size;
// -1 with error_set on a malformed payload.
int wire_read(void *buf, size_t bytes, wire_batch *w);
void wire_layout(void *buf, wire_batch *w);
// wire_seal: write the seal of the payload in buf (bytes long, its header written) into its header.
void wire_seal(void *buf, size_t bytes);
// wire_check_seal: 0 when the payload in buf has no seal or its seal matches its bytes; -1 with
// error_set (both CRCs) when it does not.
int wire_check_seal(const void *buf, size_t bytes);
