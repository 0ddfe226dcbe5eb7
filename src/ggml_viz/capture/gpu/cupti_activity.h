/*
 * CUPTI's activity records, owned in one place (no Python, no CUDA header here).
 *
 * libcupti is loaded at run time with dlopen (it is never a build requirement), attached
 * for a trace window and detached after it (cuptiFinalize: a process with CUPTI attached
 * launches CUDA graphs more slowly, even with its activity switched off). What CUPTI hands
 * over, in buffers on its own thread, is turned at once into ggml-viz's records below, on
 * the recorder's clock (CLOCK_MONOTONIC): CUPTI is asked to read that clock itself, or,
 * where it cannot be, its clock's offset is measured at attach (`clock_offset_ns`).
 */
#ifndef GGML_VIZ_CUPTI_ACTIVITY_H
#define GGML_VIZ_CUPTI_ACTIVITY_H

#include <stdint.h>

#include "../util/arrays.h"
#include "../util/clock.h"
#include "ggml_viz_contract.h"

typedef struct {
    int loaded;
    int in_session; /* CUPTI is in the process (until cuptiFinalize) */
    int attached;   /* its records are on: a window is open */
    uint32_t enabled_kinds; /* 1 << kind for each record kind switched on and not yet off */
    char path[512];       /* the libcupti loaded */
    uint32_t version;     /* CUPTI's API version */
    int own_clock;        /* CUPTI reads the recorder's clock (else: clock_offset_ns) */
    int64_t clock_offset_ns, clock_uncertainty_ns; /* CUPTI's time minus the recorder's */
    /* records since the last take, and kernel names not yet taken */
    Array activities, api_calls, names, name_lengths; /* name bytes; uint32 per new name */
    uint64_t dropped, invalid;
} CuptiActivity;

/* Load libcupti: the first of `candidates` (colon-separated paths) that loads, else the one
   beside the CUDA runtime the program loaded, else the loader's search. NULL, or why not. */
const char *cupti_load(CuptiActivity *a, const char *candidates);
/* Attach and switch on kernel, copy, memset, runtime- and driver-API records. NULL, or why
   not (then some kinds may be on: cupti_stop switches them off). */
const char *cupti_attach(CuptiActivity *a);
/* Hand over every record of the work done so far (the device synchronized first). */
const char *cupti_flush(CuptiActivity *a);
/* Hand over every record of the work done so far (the device synchronized first), then
   detach (`finalize`: CUPTI leaves the process) or only switch the records off. */
const char *cupti_detach(CuptiActivity *a, int finalize);
/* After a failure, for good: every record kind still on is switched off and CUPTI detached
   where it can be, so nothing keeps recording; the records not taken are dropped. */
void cupti_stop(CuptiActivity *a);
/* In a forked child (the records lock held): CUPTI's threads and the parent's device are not
   the child's, so nothing is called; the parent's records and state are forgotten. */
void cupti_forget_after_fork(CuptiActivity *a);

/* Taking: the records gathered (under the activity lock), then forget them. */
void cupti_lock(CuptiActivity *a);
void cupti_unlock(CuptiActivity *a);
void cupti_forget_taken(CuptiActivity *a);

/* One CUPTI activity record (laid out as cupti_abi.h says) turned into ours, as the buffer
   callback does for each record: 1 kept, 0 not a kind we keep or not valid (counted),
   -1 out of memory. The tests call it with records they build. */
int cupti_convert_record(CuptiActivity *a, const uint8_t *record);
void cupti_records_init(CuptiActivity *a);
/* The id of a kernel name, the same for the process whichever timer saw it; a name not seen
   before is also added to `a`'s new names. 0: out of memory. */
uint32_t gpu_name_id(CuptiActivity *a, const char *name);
void cupti_records_free(CuptiActivity *a);

#endif
