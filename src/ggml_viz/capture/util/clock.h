/* The one clock every record is on: CLOCK_MONOTONIC, in nanoseconds (CUPTI and the Vulkan layer
   are put on it too). */
#ifndef GGML_VIZ_CLOCK_H
#define GGML_VIZ_CLOCK_H

#include <stdint.h>

int64_t now_ns(void);

#endif
