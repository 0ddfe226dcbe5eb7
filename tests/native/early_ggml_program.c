/* For the tests: a program on early_ggml.c's libggml-base that computes a graph through the
   scheduler (what ggml-viz interposes), prints what the compute returned, and exits with 3. */
#include <stdio.h>

int ggml_backend_sched_graph_compute(void *sched, void *graph);

int main(void) {
    printf("computed: %d\n", ggml_backend_sched_graph_compute(NULL, NULL));
    return 3;
}
