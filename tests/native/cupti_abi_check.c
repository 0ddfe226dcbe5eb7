/* ggml-viz's declarations of CUPTI (native/gpu/cupti_abi.h) against the CUDA toolkit's own
   headers: compiles only if every value and offset agrees (tests/unit/test_gpu_timer.py). */
#include <cupti.h>
#include <stddef.h>

#include "gpu/cupti_abi.h"

#define SAME(a, b) _Static_assert((a) == (b), #a " != " #b)
#define AT(type, field, offset) SAME(offsetof(type, field), offset)
#define KERNEL_FIELDS(type)                                          \
    AT(type, start, CUPTI_ABI_KERNEL_START);                         \
    AT(type, end, CUPTI_ABI_KERNEL_END);                             \
    AT(type, deviceId, CUPTI_ABI_KERNEL_DEVICE);                     \
    AT(type, streamId, CUPTI_ABI_KERNEL_STREAM);                     \
    AT(type, correlationId, CUPTI_ABI_KERNEL_CORRELATION);           \
    AT(type, name, CUPTI_ABI_KERNEL_NAME);                           \
    AT(type, graphNodeId, CUPTI_ABI_KERNEL_GRAPH_NODE);              \
    AT(type, graphId, CUPTI_ABI_KERNEL_GRAPH);                       \
    _Static_assert(sizeof(type) >= CUPTI_ABI_KERNEL_MIN_SIZE, #type " is smaller")
#define COPY_FIELDS(type)                                            \
    AT(type, bytes, CUPTI_ABI_COPY_BYTES);                           \
    AT(type, start, CUPTI_ABI_COPY_START);                           \
    AT(type, end, CUPTI_ABI_COPY_END);                               \
    AT(type, deviceId, CUPTI_ABI_COPY_DEVICE);                       \
    AT(type, streamId, CUPTI_ABI_COPY_STREAM);                       \
    AT(type, correlationId, CUPTI_ABI_COPY_CORRELATION);             \
    AT(type, graphNodeId, CUPTI_ABI_COPY_GRAPH_NODE);                \
    AT(type, graphId, CUPTI_ABI_COPY_GRAPH);                         \
    _Static_assert(sizeof(type) >= CUPTI_ABI_COPY_MIN_SIZE, #type " is smaller")

SAME(CUPTI_SUCCESS, CUPTI_ABI_SUCCESS);
SAME(CUPTI_ERROR_MAX_LIMIT_REACHED, CUPTI_ABI_ERROR_MAX_LIMIT_REACHED);
SAME(CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ABI_KIND_MEMCPY);
SAME(CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ABI_KIND_MEMSET);
SAME(CUPTI_ACTIVITY_KIND_KERNEL, CUPTI_ABI_KIND_KERNEL);
SAME(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ABI_KIND_RUNTIME);
SAME(CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ABI_KIND_DRIVER);
SAME(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ABI_KIND_CONCURRENT_KERNEL);
SAME(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED, CUPTI_ABI_FLUSH_FORCED);
SAME(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, CUPTI_ABI_CBID_LAUNCH_KERNEL);
SAME(CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, CUPTI_ABI_CBID_GRAPH_LAUNCH);
SAME(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060, CUPTI_ABI_CBID_LAUNCH_KERNEL_EXC);
KERNEL_FIELDS(CUpti_ActivityKernel5);
KERNEL_FIELDS(CUpti_ActivityKernel9);
KERNEL_FIELDS(CUpti_ActivityKernel10);
COPY_FIELDS(CUpti_ActivityMemcpy5);
COPY_FIELDS(CUpti_ActivityMemcpy6);
COPY_FIELDS(CUpti_ActivityMemset3);
COPY_FIELDS(CUpti_ActivityMemset4);
AT(CUpti_ActivityMemcpy6, copyKind, CUPTI_ABI_COPY_KIND);
AT(CUpti_ActivityAPI, cbid, CUPTI_ABI_API_CBID);
AT(CUpti_ActivityAPI, start, CUPTI_ABI_API_START);
AT(CUpti_ActivityAPI, end, CUPTI_ABI_API_END);
AT(CUpti_ActivityAPI, threadId, CUPTI_ABI_API_THREAD);
AT(CUpti_ActivityAPI, correlationId, CUPTI_ABI_API_CORRELATION);
_Static_assert(sizeof(CUpti_ActivityAPI) >= CUPTI_ABI_API_MIN_SIZE, "CUpti_ActivityAPI is smaller");
