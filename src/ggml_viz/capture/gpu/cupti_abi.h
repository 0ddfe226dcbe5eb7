/*
 * The part of NVIDIA's CUPTI that ggml-viz uses, declared here so that no CUDA header is
 * needed to build ggml-viz and libcupti is loaded only at run time (dlopen), in a program
 * whose ggml computes on CUDA.
 *
 * Values and record layouts are CUPTI's own (cupti_activity.h, cupti_result.h,
 * cupti_runtime_cbid.h; runtime and driver API calls share one record, CUpti_ActivityAPI).
 * The fields read from activity records sit at the same offsets in every record version
 * since CUDA 11.0 (CUpti_ActivityKernel5 .. CUpti_ActivityKernel10, CUpti_ActivityMemcpy4
 * .. 6, CUpti_ActivityMemset3 .. 4): tests/native/cupti_abi_check.c compares every value
 * and offset here with the CUDA toolkit's headers where one is found.
 */
#ifndef GGML_VIZ_CUPTI_ABI_H
#define GGML_VIZ_CUPTI_ABI_H

#include <stddef.h>
#include <stdint.h>

#define CUPTI_ABI_SUCCESS 0
#define CUPTI_ABI_ERROR_MAX_LIMIT_REACHED 12 /* cuptiActivityGetNextRecord: no more records */

enum {
    CUPTI_ABI_KIND_MEMCPY = 1,
    CUPTI_ABI_KIND_MEMSET = 2,
    CUPTI_ABI_KIND_KERNEL = 3,
    CUPTI_ABI_KIND_DRIVER = 4, /* a driver API call (cuLaunchKernelEx: cuBLAS launches so) */
    CUPTI_ABI_KIND_RUNTIME = 5,
    CUPTI_ABI_KIND_CONCURRENT_KERNEL = 10,
};
#define CUPTI_ABI_FLUSH_FORCED 1

/* Runtime API calls that launch GPU work one piece at a time, or a whole CUDA graph (the
   ones attribution reads, of both APIs, are in capture/gpu/records.py, checked there). */
enum {
    CUPTI_ABI_CBID_LAUNCH_KERNEL = 211,     /* cudaLaunchKernel_v7000 */
    CUPTI_ABI_CBID_GRAPH_LAUNCH = 311,      /* cudaGraphLaunch_v10000 */
    CUPTI_ABI_CBID_LAUNCH_KERNEL_EXC = 430, /* cudaLaunchKernelExC_v11060 */
};

/* Field offsets in activity records (all little-endian, x86-64 and aarch64 alike). */
enum {
    CUPTI_ABI_KERNEL_START = 16,
    CUPTI_ABI_KERNEL_END = 24,
    CUPTI_ABI_KERNEL_DEVICE = 40,
    CUPTI_ABI_KERNEL_STREAM = 48,
    CUPTI_ABI_KERNEL_CORRELATION = 92,
    CUPTI_ABI_KERNEL_NAME = 104,
    CUPTI_ABI_KERNEL_GRAPH_NODE = 144,
    CUPTI_ABI_KERNEL_GRAPH = 156,
    CUPTI_ABI_COPY_KIND = 4,
    CUPTI_ABI_COPY_BYTES = 8,
    CUPTI_ABI_COPY_START = 16,
    CUPTI_ABI_COPY_END = 24,
    CUPTI_ABI_COPY_DEVICE = 32,
    CUPTI_ABI_COPY_STREAM = 40,
    CUPTI_ABI_COPY_CORRELATION = 44,
    CUPTI_ABI_COPY_GRAPH_NODE = 64,
    CUPTI_ABI_COPY_GRAPH = 72, /* memset records share these */
    CUPTI_ABI_API_CBID = 4,
    CUPTI_ABI_API_START = 8,
    CUPTI_ABI_API_END = 16,
    CUPTI_ABI_API_THREAD = 28,
    CUPTI_ABI_API_CORRELATION = 32,
};
/* The smallest record of each kind carrying every field read above. */
enum { CUPTI_ABI_KERNEL_MIN_SIZE = 160, CUPTI_ABI_COPY_MIN_SIZE = 76, CUPTI_ABI_API_MIN_SIZE = 36 };

typedef int cupti_result;
typedef void (*cupti_buffer_requested)(uint8_t **buffer, size_t *size, size_t *max_records);
typedef void (*cupti_buffer_completed)(void *context, uint32_t stream, uint8_t *buffer, size_t size, size_t valid);
typedef uint64_t (*cupti_timestamp_fn)(void);

/* The functions of libcupti ggml-viz calls, found with dlsym. */
typedef struct {
    cupti_result (*register_callbacks)(cupti_buffer_requested, cupti_buffer_completed);
    cupti_result (*register_timestamp)(cupti_timestamp_fn);
    cupti_result (*enable)(int kind);
    cupti_result (*disable)(int kind);
    cupti_result (*flush_all)(uint32_t flag);
    cupti_result (*next_record)(uint8_t *buffer, size_t valid, void **record);
    cupti_result (*dropped)(void *context, uint32_t stream, size_t *dropped);
    cupti_result (*finalize)(void);
    cupti_result (*get_timestamp)(uint64_t *timestamp);
    cupti_result (*result_string)(cupti_result result, const char **text);
    cupti_result (*get_version)(uint32_t *version);
} CuptiFunctions;

#endif
