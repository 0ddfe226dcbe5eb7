/*
 * The Vulkan layer's records handed to the GPU timer as CUPTI's are (no Vulkan header here).
 *
 * The layer (vulkan_layer.h) is a library of its own, loaded by the Vulkan loader into the
 * traced process when `ggml-viz run` enabled it. The recorder finds it there (dlopen with
 * RTLD_NOLOAD: never loaded by us) and drives it: timing on for a trace window, its results
 * read after the device was synchronized, each timed command turned into one API record (when
 * and on which thread the program recorded it: attribution.py maps it to the node ggml-vulkan
 * was building then, as a CUDA launch) and one activity (when the device ran it).
 */
#ifndef GGML_VIZ_VULKAN_TIMER_H
#define GGML_VIZ_VULKAN_TIMER_H

#include "cupti_activity.h"

/* Find the layer in the process: NULL, or why not. */
const char *vulkan_load(void);
/* Time the work recorded from now on: NULL, or why not (no device with timestamps). */
const char *vulkan_attach(CuptiActivity *a);
/* Read what the (synchronized) device finished, into `a`'s records. */
const char *vulkan_flush(CuptiActivity *a);
/* Flush, then stop timing. */
const char *vulkan_detach(CuptiActivity *a);
/* After a failure, for good: timing off, the records not taken dropped. */
void vulkan_stop(CuptiActivity *a);
/* The device clock's way onto the host's: 1 calibrated, 0 bounded by submissions. */
int vulkan_clock(int64_t *uncertainty_ns);
/* The layer's path ("" before it was found). */
const char *vulkan_layer_path(void);

#endif
