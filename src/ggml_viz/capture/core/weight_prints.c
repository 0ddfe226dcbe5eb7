/* Weights the program left unnamed: fingerprinted the first time a graph reads them, so the
   collector can find their names in the model file (recorder.h: weight_fingerprint). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "recorder_internal.h"

#include <string.h>

/* ---- weights without a name ------------------------------------------------------------ */

enum { FINGERPRINT_SAMPLE = 64 };

static uint64_t fnv1a(uint64_t hash, const uint8_t *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) hash = (hash ^ bytes[i]) * 0x100000001b3ULL;
    return hash;
}

uint64_t weight_fingerprint(const uint8_t *bytes, uint64_t nbytes) {
    size_t k = nbytes < FINGERPRINT_SAMPLE ? (size_t)nbytes : FINGERPRINT_SAMPLE;
    uint64_t hash = fnv1a(0xcbf29ce484222325ULL, bytes, k);
    hash = fnv1a(hash, bytes + (nbytes - k) / 2, k);
    return fnv1a(hash, bytes + nbytes - k, k);
}

/* Where `key` is, or goes, in a sorted array of uint64; whether it is there. */
static bool sorted_find(const Array *a, uint64_t key, size_t *at) {
    size_t low = 0, high = a->count;
    while (low < high) {
        size_t mid = (low + high) / 2;
        if (ARRAY_AT(*a, uint64_t, mid) < key) low = mid + 1;
        else high = mid;
    }
    *at = low;
    return low < a->count && ARRAY_AT(*a, uint64_t, low) == key;
}

/* A leaf the program left unnamed (ggml names it leaf_N in the graph) in a weights buffer the
   host can read: fingerprinted once, the first time a graph reads it. */
int print_weight(Recorder *r, const uint8_t *tensor) {
    const char *name = (const char *)tensor + r->layout.name_offset;
    if (name[0] && strncmp(name, "leaf_", 5) != 0) return 0;
    const void *buffer = (const void *)(uintptr_t)field_u64(tensor, r->layout.buffer_offset);
    const uint8_t *data = (const uint8_t *)(uintptr_t)field_u64(tensor, r->layout.data_offset);
    if (!buffer || !data || buffer_usage_of(r, buffer) != BUFFER_USAGE_WEIGHTS || !r->is_host_buffer(buffer)) {
        return 0;
    }
    size_t at;
    if (sorted_find(&r->printed, (uint64_t)(uintptr_t)data, &at)) return 0;
    if (array_reserve(&r->printed, 1) != 0) return -1;
    memmove(r->printed.items + (at + 1) * sizeof(uint64_t), r->printed.items + at * sizeof(uint64_t),
            (r->printed.count - at) * sizeof(uint64_t));
    ARRAY_AT(r->printed, uint64_t, at) = (uint64_t)(uintptr_t)data;
    r->printed.count++;
    WeightPrint *print = array_push(&r->weight_prints);
    if (!print) return -1;
    uint64_t nbytes = r->print_nbytes(tensor);
    *print = (WeightPrint){(uint64_t)(uintptr_t)data, nbytes, weight_fingerprint(data, nbytes)};
    return 0;
}
