/*
 * For the tests: a library that looks a function up with dlsym(RTLD_NEXT), as an interposing
 * library does. Built twice: as the first library (FIRST defined), which defines which_library()
 * and asks for the next definition of it, and as the second, which defines it too. The first's
 * next_library() must reach the second's: dlsym sees which library called it by its return
 * address, so a dlsym that another library interposes must pass the call on without standing in
 * between (ggml-viz's does, for every name but the few ggml functions it wraps).
 */
#include <dlfcn.h>

#ifdef FIRST
int which_library(void) {
    return 1;
}

int next_library(void) {
    int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "which_library");
    return next ? next() : -1;
}
#else
int which_library(void) {
    return 2;
}
#endif
