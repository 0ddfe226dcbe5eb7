/*
 * A ggml program that is not llama.cpp, for the tests: y = relu(W x + b), computed through a
 * backend scheduler on the CPU, three times with new inputs. It declares the few ggml
 * functions it calls itself (ggml's headers are not installed with llama-cpp-python).
 * Prints the sum of y after each compute, so a test can check the program's own output.
 *
 *   plain_ggml_program [RUNS [PAUSE_MS [callbacks|- [STRAGGLE_MS]]]]   (3 runs, no pause by default)
 *
 * With `callbacks` it sets an abort callback on its CPU backend and an eval callback on its
 * scheduler of its own, which count their calls (printed at the end): a profiler must keep
 * calling them.
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
#include <time.h>

struct ggml_init_params {
    size_t mem_size;
    void *mem_buffer;
    bool no_alloc;
};
void *ggml_init(struct ggml_init_params params);
void ggml_free(void *ctx);
size_t ggml_tensor_overhead(void);
size_t ggml_graph_overhead(void);
void *ggml_new_tensor_2d(void *ctx, int type, int64_t ne0, int64_t ne1);
void *ggml_set_name(void *tensor, const char *name);
void *ggml_mul_mat(void *ctx, void *a, void *b);
void *ggml_add(void *ctx, void *a, void *b);
void *ggml_relu(void *ctx, void *a);
float *ggml_get_data_f32(const void *tensor);
void *ggml_map_custom1(void *ctx, void *a, void (*fun)(void *, const void *, int, int, void *), int n_tasks,
                       void *userdata);
void *ggml_new_graph(void *ctx);
void ggml_build_forward_expand(void *graph, void *tensor);
void *ggml_backend_cpu_init(void);
void ggml_backend_cpu_set_n_threads(void *backend, int n_threads);
void ggml_backend_free(void *backend);
void *ggml_backend_alloc_ctx_tensors(void *ctx, void *backend);
void ggml_backend_buffer_free(void *buffer);
void ggml_backend_tensor_set(void *tensor, const void *data, size_t offset, size_t size);
void ggml_backend_tensor_get(const void *tensor, void *data, size_t offset, size_t size);
void *ggml_backend_sched_new(void **backends, void **bufts, int n_backends, size_t graph_size, bool parallel,
                             bool op_offload);
void ggml_backend_sched_free(void *sched);
int ggml_backend_sched_graph_compute(void *sched, void *graph);
void ggml_backend_sched_reset(void *sched);
void ggml_backend_cpu_set_abort_callback(void *backend, bool (*callback)(void *), void *data);
void ggml_backend_sched_set_eval_callback(void *sched, bool (*callback)(void *, bool, void *), void *data);

static int abort_calls, eval_asks;

static bool count_abort(void *data) {
    (void)data;
    abort_calls++;
    return false;
}

static bool count_eval(void *tensor, bool ask, void *data) {
    (void)tensor;
    (void)data;
    eval_asks += ask;
    return !ask; /* no node's result is wanted */
}

enum { F32 = 0, IN = 64, OUT = 32, COLUMNS = 4 };

static long straggle_ms;
static void straggle(void *dst, const void *a, int ith, int nth, void *userdata) {
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
    bool callbacks = argc > 3 && argv[3][0] == 'c';
    straggle_ms = argc > 4 ? atol(argv[4]) : 0;
    void *weights = ggml_init((struct ggml_init_params){8 * ggml_tensor_overhead(), NULL, true});
    void *w = ggml_set_name(ggml_new_tensor_2d(weights, F32, IN, OUT), "layer.weight");
    void *b = ggml_set_name(ggml_new_tensor_2d(weights, F32, OUT, 1), "layer.bias");
    void *x = ggml_set_name(ggml_new_tensor_2d(weights, F32, IN, COLUMNS), "input");
    void *backend = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(backend, 2);
    void *buffer = ggml_backend_alloc_ctx_tensors(weights, backend);
    static float w_data[IN * OUT], b_data[OUT], x_data[IN * COLUMNS], y_data[OUT * COLUMNS];
    for (int i = 0; i < IN * OUT; i++) w_data[i] = (float)((i * 7) % 13 - 6) / 10.0f;
    for (int i = 0; i < OUT; i++) b_data[i] = (float)(i % 5) / 10.0f;
    ggml_backend_tensor_set(w, w_data, 0, sizeof w_data);
    ggml_backend_tensor_set(b, b_data, 0, sizeof b_data);

    void *graph_ctx = ggml_init((struct ggml_init_params){16 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true});
    void *product = ggml_set_name(ggml_mul_mat(graph_ctx, w, x), "product");
    void *sum = ggml_set_name(ggml_add(graph_ctx, product, b), "sum");
    if (straggle_ms) sum = ggml_set_name(ggml_map_custom1(graph_ctx, sum, straggle, 2, NULL), "straggler");
    void *y = ggml_set_name(ggml_relu(graph_ctx, sum), "output");
    void *graph = ggml_new_graph(graph_ctx);
    ggml_build_forward_expand(graph, y);
    void *sched = ggml_backend_sched_new(&backend, NULL, 1, 64, false, true);
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
