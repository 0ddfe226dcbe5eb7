/*
 * For the tests: ggml built with longer tensor names (-DGGML_MAX_NAME=128, a build option ggml.h
 * offers), whose ggml_tensor is 64 bytes larger than the one ggml-viz reads. Put before the real
 * libggml-base (LD_PRELOAD), this library answers ggml_tensor_overhead as such a build does; the
 * rest is the real ggml's, so the program computes as before. Built with a ggml's own headers.
 */
#define GGML_MAX_NAME 128
#include "ggml.h"

/* ggml.c: each tensor in a context follows its 32-byte struct ggml_object */
size_t ggml_tensor_overhead(void) {
    return 32 + sizeof(struct ggml_tensor);
}
