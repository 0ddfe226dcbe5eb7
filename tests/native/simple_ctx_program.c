/*
 * A ggml program in the oldest style ggml has, for the tests: every tensor's data lives in one
 * ggml context (no backend buffer, no allocator, no scheduler), and the graph
 * output = relu(weight x + bias) * 0.5 is computed by ggml's CPU code directly, RUNS times with
 * new inputs. The weight is F16, so a compute needs a work buffer (x converted to F16), which
 * each mode provides in its own way:
 *
 *   simple_ctx_program [RUNS [MODE]]      (20 runs, with_ctx by default)
 *
 *   with_ctx      ggml_graph_compute_with_ctx(ctx, graph, 2): the work buffer is taken from ctx
 *   plan          ggml_graph_plan(graph, 2, NULL), a work buffer of the program's own (malloc),
 *                 ggml_graph_compute(graph, &cplan)
 *   abort         plan, with an abort callback of the program's own in the cplan, which counts
 *                 its calls (printed at the end): a profiler must keep calling it
 *   backend_plan  a CPU backend (ggml_backend_cpu_init) computing a plan of the graph made once
 *                 (ggml_backend_graph_plan_create, then ggml_backend_graph_plan_compute)
 *
 * Prints the sum of the output after each compute ("run N: sum S"), the same in every mode and
 * with every ggml it was tried on (llama-cpp-python's, whisper.cpp 1.8.5's, ggml-python 0.0.45's
 * and 0.0.37's): a test can check the program's own output. It builds against ggml from early
 * 2024 on (before ggml-cpu.h, ggml_graph_plan had no threadpool argument). How often a compute
 * calls the abort callback depends on the ggml: once per node in today's (80 calls in 20 runs),
 * but in one of early 2024 each thread calls it as it goes, so the count varies (159 or 160).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "ggml.h"
#if __has_include("ggml-cpu.h")
#include "ggml-cpu.h" /* ggml from late 2024 on: the CPU compute has a library and a header of its own */
#define GRAPH_PLAN(graph, threads) ggml_graph_plan(graph, threads, NULL)
#else /* a ggml of early 2024 (ggml-python 0.0.37's): no threadpool yet */
#define GRAPH_PLAN(graph, threads) ggml_graph_plan(graph, threads)
#endif

enum { IN = 64, OUT = 32, COLUMNS = 4, THREADS = 2 };

/* Bounds this graph's work buffer (x as F16 and a cache line per thread: under 1 KiB), which
 * ggml_graph_compute_with_ctx takes from the context anew at every compute. */
enum { WORK_BOUND = 16 * 1024 };

static int abort_calls;

static bool count_abort(void *data) {
    (void)data;
    abort_calls++;
    return false;
}

int main(int argc, char **argv) {
    int runs = argc > 1 ? atoi(argv[1]) : 20;
    const char *mode = argc > 2 ? argv[2] : "with_ctx";
    bool with_ctx = strcmp(mode, "with_ctx") == 0, plan = strcmp(mode, "plan") == 0;
    bool aborts = strcmp(mode, "abort") == 0, backend_plan = strcmp(mode, "backend_plan") == 0;
    if (runs < 1 || !(with_ctx || plan || aborts || backend_plan)) {
        fprintf(stderr, "usage: %s [RUNS [with_ctx|plan|abort|backend_plan]]\n", argv[0]);
        return 2;
    }

    /* The tensors' data and the graph, then (with_ctx) every compute's work buffer. */
    size_t data_size = 1024 * 1024 + ggml_graph_overhead();
    size_t size = data_size + (with_ctx ? (size_t)runs * (ggml_tensor_overhead() + WORK_BOUND) : 0);
    struct ggml_context *ctx = ggml_init((struct ggml_init_params){size, NULL, false});
    struct ggml_tensor *weight = ggml_set_name(ggml_new_tensor_2d(ctx, GGML_TYPE_F16, IN, OUT), "layer.weight");
    struct ggml_tensor *bias = ggml_set_name(ggml_new_tensor_1d(ctx, GGML_TYPE_F32, OUT), "layer.bias");
    struct ggml_tensor *x = ggml_set_name(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, IN, COLUMNS), "input");
    ggml_fp16_t *w_data = weight->data;
    float *b_data = bias->data, *x_data = x->data;
    for (int i = 0; i < IN * OUT; i++) w_data[i] = ggml_fp32_to_fp16((float)((i * 7) % 13 - 6) / 10.0f);
    for (int i = 0; i < OUT; i++) b_data[i] = (float)(i % 5) / 10.0f;

    struct ggml_tensor *product = ggml_set_name(ggml_mul_mat(ctx, weight, x), "product");
    struct ggml_tensor *sum = ggml_set_name(ggml_add(ctx, product, bias), "sum");
    struct ggml_tensor *relu = ggml_set_name(ggml_relu(ctx, sum), "relu");
    struct ggml_tensor *y = ggml_set_name(ggml_scale(ctx, relu, 0.5f), "output");
    struct ggml_cgraph *graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, y);

    ggml_backend_t backend = NULL;
    ggml_backend_graph_plan_t backend_graph_plan = NULL;
    if (backend_plan) {
        backend = ggml_backend_cpu_init();
        ggml_backend_cpu_set_n_threads(backend, THREADS);
        backend_graph_plan = ggml_backend_graph_plan_create(backend, graph);
    }

    for (int run = 0; run < runs; run++) {
        for (int i = 0; i < IN * COLUMNS; i++) x_data[i] = (float)((i + run) % 11 - 5) / 10.0f;
        enum ggml_status status;
        if (with_ctx) {
            status = ggml_graph_compute_with_ctx(ctx, graph, THREADS);
        } else if (backend_plan) {
            status = ggml_backend_graph_plan_compute(backend, backend_graph_plan);
        } else {
            struct ggml_cplan cplan = GRAPH_PLAN(graph, THREADS);
            cplan.work_data = malloc(cplan.work_size);
            if (aborts) cplan.abort_callback = count_abort;
            status = ggml_graph_compute(graph, &cplan);
            free(cplan.work_data);
        }
        if (status != GGML_STATUS_SUCCESS) {
            fprintf(stderr, "run %d: compute failed (status %d)\n", run, (int)status);
            return 1;
        }
        const float *y_data = y->data;
        double total = 0;
        for (int i = 0; i < OUT * COLUMNS; i++) total += y_data[i];
        printf("run %d: sum %.4f\n", run, total);
        fflush(stdout);
    }
    if (aborts) printf("abort calls %d\n", abort_calls);
    if (backend_plan) {
        ggml_backend_graph_plan_free(backend, backend_graph_plan);
        ggml_backend_free(backend);
    }
    ggml_free(ctx);
    return 0;
}
