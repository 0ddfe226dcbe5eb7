/*
 * The Vulkan timer layer's interface to the recorder (no Vulkan header here).
 *
 * libggml_viz_vulkan_layer.so is a Vulkan layer: `ggml-viz run` puts it into the traced
 * process's dispatch chain (its manifest, ggml_viz_vulkan_layer.json, found through
 * VK_ADD_LAYER_PATH and enabled by VK_INSTANCE_LAYERS), where it sees every command the program
 * records, whatever way the program reaches Vulkan (ggml-vulkan calls it through vulkan-hpp's
 * dynamic dispatcher: no symbol to interpose).
 *
 * It does nothing but pass calls on until the recorder (the preload library or the Python
 * extension, which find the loaded layer with dlopen(RTLD_NOLOAD)) calls ggml_viz_vulkan_start.
 * From then until ggml_viz_vulkan_stop, each work command recorded (a dispatch, a buffer copy,
 * fill or update) is followed by a timestamp query (VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT: when
 * everything before it in the queue has finished), and the first of a command buffer is
 * preceded by one. No barrier is added: a command's time is the time from the end of the work
 * before it to its own end, on the device's own clock. The results are read once the work is
 * known to be done (a fence waited for, the queue or device idle, the command buffer begun again,
 * or ggml_viz_vulkan_collect after the recorder synchronized the device), converted with the
 * device's timestampPeriod and put on CLOCK_MONOTONIC with VK_EXT_calibrated_timestamps (the
 * layer enables it where the device has it; else from the submissions' bounds).
 */
#ifndef GGML_VIZ_VULKAN_LAYER_H
#define GGML_VIZ_VULKAN_LAYER_H

#include <stddef.h>
#include <stdint.h>

#include "ggml_viz_contract.h"

#define GGML_VIZ_VULKAN_LAYER_LIBRARY "libggml_viz_vulkan_layer.so"
#define GGML_VIZ_VULKAN_LAYER_NAME "VK_LAYER_GGMLVIZ_timer"

/* VulkanWork.command: the commands timed, VULKAN_* in ggml_viz_contract.h (the API record's cbid in
   the Vulkan domain). */

/* One timed command, once the device ran it. */
typedef struct {
    int64_t start_ns, end_ns; /* on the recorder's clock (CLOCK_MONOTONIC) */
    int64_t recorded_ns;      /* when the program recorded it (host) */
    uint64_t bytes;           /* copies, fills, updates */
    uint32_t thread;          /* the recording thread (pthread_self, low 32 bits) */
    uint32_t correlation_id;  /* from 1, per command timed */
    uint32_t device;          /* the device's order of creation in the process, from 0 */
    uint32_t queue;           /* queue family << 16 | queue index */
    uint32_t pipeline;        /* a dispatch's pipeline: its index in the layer's names (0: none) */
    uint8_t kind, command;    /* GPU_KERNEL, GPU_MEMCPY or GPU_MEMSET; VULKAN_* */
    uint8_t reserved[2];
} VulkanWork;

/* What the drain hands over: the work done since the last drain, and how to name a pipeline. */
typedef void (*VulkanSink)(void *context, const VulkanWork *work, size_t n, const char *(*pipeline_name)(uint32_t));

/* Time the work recorded from now on: NULL, or why it cannot be (no device has timestamps). */
typedef const char *(*vulkan_start_fn)(void);
/* Stop timing work recorded from now on (what is timed already is still read). */
typedef void (*vulkan_stop_fn)(void);
/* Read the results of every timed command the device finished: NULL, or a problem. */
typedef const char *(*vulkan_collect_fn)(void);
/* Hand the work read over (under the layer's lock) and forget it; returns the commands whose
   results were lost since the last drain (a command buffer submitted again before they were read). */
typedef uint64_t (*vulkan_drain_fn)(VulkanSink sink, void *context);
/* How the device's clock was put on the host's: 1 calibrated (VK_EXT_calibrated_timestamps),
   0 bounded by submissions; and within how many nanoseconds. */
typedef int (*vulkan_clock_fn)(int64_t *uncertainty_ns);
/* Forget every state after fork, in a child (the parent's device is not the child's). */
typedef void (*vulkan_forget_fn)(void);

#endif
