/*
 * For the tests: a stand-in for a libggml-base from before ggml_op_desc and ggml_version (ggml of
 * early 2024), with the other functions ggml-viz looks up (never called: ggml-viz stops at the
 * missing ones) and a scheduler compute that computes nothing; early_ggml_program.c uses it.
 */
#define PRESENT(name) \
    void name(void) {}
PRESENT(ggml_tensor_overhead)
PRESENT(ggml_init)
PRESENT(ggml_free)
PRESENT(ggml_new_tensor_2d)
PRESENT(ggml_view_1d)
PRESENT(ggml_add)
PRESENT(ggml_set_name)
PRESENT(ggml_get_name)
PRESENT(ggml_nbytes)
PRESENT(ggml_backend_buffer_name)
PRESENT(ggml_backend_buffer_get_usage)
PRESENT(ggml_backend_buffer_get_size)
PRESENT(ggml_backend_buffer_get_base)
PRESENT(ggml_backend_buffer_get_type)
PRESENT(ggml_backend_buft_name)
PRESENT(ggml_op_name)

int ggml_backend_sched_graph_compute(void *sched, void *graph) {
    (void)sched;
    (void)graph;
    return 0;
}
