/*
 * A stand-in for libcupti, for tests on machines without a GPU: the CUPTI functions the GPU
 * timer calls, with activity records that the test queues (fake_cupti_kernel, fake_cupti_api)
 * laid out as CUPTI lays them out, handed over at each flush through the registered buffer
 * callbacks. It counts what the timer did (enables, flushes, detaches), and says which record
 * kinds are still on (fake_cupti_kinds_on).
 *
 * FAKE_CUPTI_OWN_CLOCK=1: refuse the timestamp callback, and stamp every record and
 * cuptiGetTimestamp with a clock one second ahead of CLOCK_MONOTONIC (the timer then measures
 * the offset).
 * FAKE_CUPTI_REFUSE_KIND=K: refuse to switch on record kind K (the others are switched on).
 * FAKE_CUPTI_REFUSE_FINALIZE=1: refuse cuptiFinalize (every kind on stays on).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RECORD_BYTES 256
#define MAX_RECORDS 65536
#define OWN_CLOCK_AHEAD 1000000000ULL

typedef void (*requested_fn)(uint8_t **, size_t *, size_t *);
typedef void (*completed_fn)(void *, uint32_t, uint8_t *, size_t, size_t);

static requested_fn requested;
static completed_fn completed;
static int enabled[32], timestamp_callback;
static uint8_t queued[MAX_RECORDS][RECORD_BYTES];
static int n_queued;
int fake_cupti_enables, fake_cupti_flushes, fake_cupti_finalizes;

static int own_clock(void) {
    const char *value = getenv("FAKE_CUPTI_OWN_CLOCK");
    return value && *value == '1';
}

static int refused_kind(void) {
    const char *value = getenv("FAKE_CUPTI_REFUSE_KIND");
    return value ? atoi(value) : -1;
}

static int finalize_refused(void) {
    const char *value = getenv("FAKE_CUPTI_REFUSE_FINALIZE");
    return value && *value == '1';
}

static uint64_t monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void put64(uint8_t *record, size_t offset, uint64_t value) { memcpy(record + offset, &value, 8); }
static void put32(uint8_t *record, size_t offset, uint32_t value) { memcpy(record + offset, &value, 4); }

static uint8_t *queue(uint32_t kind) {
    if (!enabled[kind] || n_queued >= MAX_RECORDS) return NULL;
    uint8_t *record = queued[n_queued++];
    memset(record, 0, RECORD_BYTES);
    put32(record, 0, kind);
    return record;
}

static uint64_t stamped(uint64_t ns) { return own_clock() ? ns + OWN_CLOCK_AHEAD : ns; }

/* ---- what the tests call ------------------------------------------------------------------- */

void fake_cupti_kernel(const char *name, uint64_t start, uint64_t end, uint32_t correlation, uint32_t graph_id,
                       uint64_t graph_node, uint32_t device) {
    uint8_t *record = queue(10); /* CONCURRENT_KERNEL */
    if (!record) return;
    put64(record, 16, stamped(start));
    put64(record, 24, stamped(end));
    put32(record, 40, device);
    put32(record, 48, 7);
    put32(record, 92, correlation);
    put64(record, 104, (uint64_t)(uintptr_t)name);
    put64(record, 144, graph_node);
    put32(record, 156, graph_id);
}

static void queue_api(uint32_t kind, uint32_t cbid, uint64_t start, uint64_t end, uint32_t correlation,
                      uint32_t thread) {
    uint8_t *record = queue(kind);
    if (!record) return;
    put32(record, 4, cbid);
    put64(record, 8, stamped(start));
    put64(record, 16, stamped(end));
    put32(record, 28, thread);
    put32(record, 32, correlation);
}

void fake_cupti_api(uint32_t cbid, uint64_t start, uint64_t end, uint32_t correlation, uint32_t thread) {
    queue_api(5, cbid, start, end, correlation, thread); /* RUNTIME */
}

void fake_cupti_driver_api(uint32_t cbid, uint64_t start, uint64_t end, uint32_t correlation, uint32_t thread) {
    queue_api(4, cbid, start, end, correlation, thread); /* DRIVER */
}

void fake_cupti_memcpy(uint64_t bytes, uint64_t start, uint64_t end, uint32_t correlation, uint32_t graph_id) {
    uint8_t *record = queue(1); /* MEMCPY */
    if (!record) return;
    record[4] = 8; /* DtoD */
    put64(record, 8, bytes);
    put64(record, 16, stamped(start));
    put64(record, 24, stamped(end));
    put32(record, 44, correlation);
    put32(record, 72, graph_id);
}

int fake_cupti_recording(void) { return enabled[10]; }

int fake_cupti_kinds_on(void) {
    int on = 0;
    for (int kind = 0; kind < 32; kind++) on += enabled[kind];
    return on;
}

/* ---- CUPTI's functions --------------------------------------------------------------------- */

int cuptiActivityRegisterCallbacks(requested_fn r, completed_fn c) {
    requested = r;
    completed = c;
    return 0;
}

int cuptiActivityRegisterTimestampCallback(uint64_t (*function)(void)) {
    if (own_clock()) return 15; /* NOT_INITIALIZED: the timer must measure the offset */
    timestamp_callback = function != NULL;
    return 0;
}

int cuptiActivityEnable(int kind) {
    if (kind < 0 || kind >= 32 || kind == refused_kind()) return 1;
    enabled[kind] = 1;
    fake_cupti_enables++;
    return 0;
}

int cuptiActivityDisable(int kind) {
    if (kind < 0 || kind >= 32) return 1;
    enabled[kind] = 0;
    return 0;
}

int cuptiActivityFlushAll(uint32_t flag) {
    (void)flag;
    fake_cupti_flushes++;
    if (!n_queued || !requested || !completed) return 0;
    uint8_t *buffer;
    size_t size, max_records;
    requested(&buffer, &size, &max_records);
    size_t valid = (size_t)n_queued * RECORD_BYTES;
    if (valid > size) valid = size / RECORD_BYTES * RECORD_BYTES;
    memcpy(buffer, queued, valid);
    n_queued = 0;
    completed(NULL, 0, buffer, size, valid);
    return 0;
}

int cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, void **record) {
    uint8_t *next = *record ? (uint8_t *)*record + RECORD_BYTES : buffer;
    if (next >= buffer + valid) return 12; /* MAX_LIMIT_REACHED */
    *record = next;
    return 0;
}

int cuptiActivityGetNumDroppedRecords(void *context, uint32_t stream, size_t *dropped) {
    (void)context;
    (void)stream;
    *dropped = 0;
    return 0;
}

int cuptiFinalize(void) {
    if (finalize_refused()) return 1;
    memset(enabled, 0, sizeof enabled);
    n_queued = 0;
    fake_cupti_finalizes++;
    return 0;
}

int cuptiGetTimestamp(uint64_t *timestamp) {
    *timestamp = stamped(monotonic());
    return 0;
}

int cuptiGetResultString(int result, const char **text) {
    *text = result ? "a fake failure" : "success";
    return 0;
}

int cuptiGetVersion(uint32_t *version) {
    *version = 999;
    return 0;
}
