/* The Vulkan layer's records for the GPU timer: see vulkan_timer.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "vulkan_timer.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "vulkan_layer.h"

static struct {
    vulkan_start_fn start;
    vulkan_stop_fn stop;
    vulkan_collect_fn collect;
    vulkan_drain_fn drain;
    vulkan_clock_fn clock;
    char path[512];
} layer;

static int find_path(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    const char *slash = strrchr(info->dlpi_name, '/');
    if (strcmp(slash ? slash + 1 : info->dlpi_name, GGML_VIZ_VULKAN_LAYER_LIBRARY) != 0) return 0;
    snprintf(layer.path, sizeof layer.path, "%s", info->dlpi_name);
    return 1;
}

const char *vulkan_load(void) {
    if (layer.start) return NULL;
    /* Only the copy the Vulkan loader put into this process: loading it here would time nothing. */
    void *library = dlopen(GGML_VIZ_VULKAN_LAYER_LIBRARY, RTLD_NOW | RTLD_NOLOAD);
    if (!library) {
        return "the ggml-viz Vulkan layer is not in this process (ggml-viz run enables it with VK_ADD_LAYER_PATH "
               "and VK_INSTANCE_LAYERS; a loader that refused it, or a Vulkan instance created before recording "
               "began, leaves it out)";
    }
    layer.start = (vulkan_start_fn)dlsym(library, "ggml_viz_vulkan_start");
    layer.stop = (vulkan_stop_fn)dlsym(library, "ggml_viz_vulkan_stop");
    layer.collect = (vulkan_collect_fn)dlsym(library, "ggml_viz_vulkan_collect");
    layer.drain = (vulkan_drain_fn)dlsym(library, "ggml_viz_vulkan_drain");
    layer.clock = (vulkan_clock_fn)dlsym(library, "ggml_viz_vulkan_clock");
    dlclose(library); /* the loader's reference keeps it */
    if (!layer.start || !layer.stop || !layer.collect || !layer.drain || !layer.clock) {
        layer.start = NULL;
        return "the ggml-viz Vulkan layer in this process is not this ggml-viz's (a function is missing)";
    }
    dl_iterate_phdr(find_path, NULL);
    return NULL;
}

const char *vulkan_layer_path(void) {
    return layer.path;
}

const char *vulkan_attach(CuptiActivity *a) {
    (void)a;
    return layer.start();
}

/* Each timed command: the API record of its recording, the activity of its run. */
static void receive(void *context, const VulkanWork *work, size_t n, const char *(*pipeline_name)(uint32_t)) {
    CuptiActivity *a = context;
    for (size_t i = 0; i < n; i++) {
        const VulkanWork *w = &work[i];
        GpuApiRecord *call = array_push(&a->api_calls);
        GpuActivityRecord *activity = array_push(&a->activities);
        if (!call || !activity) {
            a->dropped += n - i;
            return;
        }
        *call = (GpuApiRecord){w->recorded_ns, w->recorded_ns, w->correlation_id,
                               w->command,     w->thread,      GPU_API_VULKAN};
        const char *name = w->kind == GPU_KERNEL ? pipeline_name(w->pipeline) : NULL;
        *activity = (GpuActivityRecord){w->start_ns,
                                        w->end_ns,
                                        w->bytes,
                                        0,
                                        w->correlation_id,
                                        0,
                                        w->device,
                                        w->queue,
                                        w->kind == GPU_KERNEL ? gpu_name_id(a, name ? name : "?") : 0,
                                        w->kind,
                                        0,
                                        {0, 0}};
    }
}

const char *vulkan_flush(CuptiActivity *a) {
    if (!layer.start) return NULL;
    const char *problem = layer.collect();
    cupti_lock(a);
    a->dropped += layer.drain(receive, a);
    cupti_unlock(a);
    return problem;
}

const char *vulkan_detach(CuptiActivity *a) {
    if (!layer.start) return NULL;
    layer.stop();
    return vulkan_flush(a);
}

/* The layer's records, let go unread. */
static void discard(void *context, const VulkanWork *work, size_t n, const char *(*pipeline_name)(uint32_t)) {
    (void)context;
    (void)work;
    (void)n;
    (void)pipeline_name;
}

void vulkan_stop(CuptiActivity *a) {
    if (layer.start) {
        layer.stop();
        layer.collect(); /* what is done now, let go with the rest */
        layer.drain(discard, NULL);
    }
    cupti_lock(a);
    cupti_forget_taken(a);
    cupti_unlock(a);
}

int vulkan_clock(int64_t *uncertainty_ns) {
    *uncertainty_ns = 0;
    return layer.clock ? layer.clock(uncertainty_ns) : 1;
}
