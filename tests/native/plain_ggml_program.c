/*
 * A ggml program that is not llama.cpp, for the tests: y = relu(W x + b), computed through a
 * backend scheduler on the CPU, three times with new inputs. Built with the headers of the
 * ggml it links to (llama-cpp-python installs its ggml's; whisper.cpp's build keeps its own),
 * so it is that ggml version's program. Prints the sum of y after each compute, so a test can
 * check the program's own output.
 *
 *   plain_ggml_program [RUNS [PAUSE_MS [callbacks|fork|- [STRAGGLE_MS]]]]   (3 runs, no pause by default)
 *
 * With `callbacks` it sets an abort callback on its CPU backend and an eval callback on its
 * scheduler of its own, which count their calls (printed at the end): a profiler must keep
 * calling them.
 *
 * With `fork`, after its first compute it forks a child that computes nothing and ends with
 * exit(), running its exit handlers (a profiler's too), and waits for it before going on.
 *
 * With STRAGGLE_MS, a custom op between the ADD and the RELU copies its input on thread 0
 * while thread 1 sleeps that long: a node with a known straggler, whose wait a profiler
 * must charge to it (and not to the RELU after it).
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

static int abort_calls, eval_asks;

static bool count_abort(void *data) {
    (void)data;
    abort_calls++;
    return false;
}

static bool count_eval(struct ggml_tensor *tensor, bool ask, void *data) {
    (void)tensor;
    (void)data;
    eval_asks += ask;
    return !ask; /* no node's result is wanted */
}

enum { IN = 64, OUT = 32, COLUMNS = 4 };

static long straggle_ms;
static void straggle(struct ggml_tensor *dst, const struct ggml_tensor *a, int ith, int nth, void *userdata) {
    (void)nth;
    (void)userdata;
    if (ith == 0) {
        const float *from = ggml_get_data_f32(a);
        float *to = ggml_get_data_f32(dst);
        for (int i = 0; i < OUT * COLUMNS; i++) to[i] = from[i];
    } else {
        nanosleep(&(struct timespec){straggle_ms / 1000, (straggle_ms % 1000) * 1000000L}, NULL);
    }
}

int main(int argc, char **argv) {
    int runs = argc > 1 ? atoi(argv[1]) : 3;
    long pause_ms = argc > 2 ? atol(argv[2]) : 0;
    bool callbacks = argc > 3 && argv[3][0] == 'c', forks = argc > 3 && argv[3][0] == 'f';
    straggle_ms = argc > 4 ? atol(argv[4]) : 0;
    struct ggml_context *weights = ggml_init((struct ggml_init_params){8 * ggml_tensor_overhead(), NULL, true});
    struct ggml_tensor *w = ggml_set_name(ggml_new_tensor_2d(weights, GGML_TYPE_F32, IN, OUT), "layer.weight");
    struct ggml_tensor *b = ggml_set_name(ggml_new_tensor_2d(weights, GGML_TYPE_F32, OUT, 1), "layer.bias");
    struct ggml_tensor *x = ggml_set_name(ggml_new_tensor_2d(weights, GGML_TYPE_F32, IN, COLUMNS), "input");
    ggml_backend_t backend = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(backend, 2);
    ggml_backend_buffer_t buffer = ggml_backend_alloc_ctx_tensors(weights, backend);
    static float w_data[IN * OUT], b_data[OUT], x_data[IN * COLUMNS], y_data[OUT * COLUMNS];
    for (int i = 0; i < IN * OUT; i++) w_data[i] = (float)((i * 7) % 13 - 6) / 10.0f;
    for (int i = 0; i < OUT; i++) b_data[i] = (float)(i % 5) / 10.0f;
    ggml_backend_tensor_set(w, w_data, 0, sizeof w_data);
    ggml_backend_tensor_set(b, b_data, 0, sizeof b_data);

    struct ggml_context *graph_ctx = ggml_init((struct ggml_init_params){16 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true});
    struct ggml_tensor *product = ggml_set_name(ggml_mul_mat(graph_ctx, w, x), "product");
    struct ggml_tensor *sum = ggml_set_name(ggml_add(graph_ctx, product, b), "sum");
    if (straggle_ms) sum = ggml_set_name(ggml_map_custom1(graph_ctx, sum, straggle, 2, NULL), "straggler");
    struct ggml_tensor *y = ggml_set_name(ggml_relu(graph_ctx, sum), "output");
    struct ggml_cgraph *graph = ggml_new_graph(graph_ctx);
    ggml_build_forward_expand(graph, y);
    ggml_backend_sched_t sched = ggml_backend_sched_new(&backend, NULL, 1, 64, false, true);
    if (callbacks) {
        ggml_backend_cpu_set_abort_callback(backend, count_abort, NULL);
        ggml_backend_sched_set_eval_callback(sched, count_eval, NULL);
    }
    for (int run = 0; run < runs; run++) {
        for (int i = 0; i < IN * COLUMNS; i++) x_data[i] = (float)((i + run) % 11 - 5) / 10.0f;
        ggml_backend_tensor_set(x, x_data, 0, sizeof x_data);
        if (ggml_backend_sched_graph_compute(sched, graph) != 0) return 1;
        ggml_backend_tensor_get(y, y_data, 0, sizeof y_data);
        double total = 0;
        for (int i = 0; i < OUT * COLUMNS; i++) total += y_data[i];
        printf("run %d: sum %.4f\n", run, total);
        fflush(stdout);
        ggml_backend_sched_reset(sched);
        if (forks && run == 0) {
            pid_t child = fork();
            if (child == 0) exit(0);
            waitpid(child, NULL, 0);
        }
        if (pause_ms) nanosleep(&(struct timespec){pause_ms / 1000, (pause_ms % 1000) * 1000000L}, NULL);
    }
    if (callbacks) printf("abort calls %d, eval asks %d\n", abort_calls, eval_asks);
    ggml_backend_sched_free(sched);
    ggml_free(graph_ctx);
    ggml_backend_buffer_free(buffer);
    ggml_backend_free(backend);
    ggml_free(weights);
    return 0;
}
