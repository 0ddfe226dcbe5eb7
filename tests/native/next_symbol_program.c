/* For the tests: prints which library dlsym(RTLD_NEXT) found for the first one (next_symbol.c): 2. */
#include <stdio.h>

int next_library(void);

int main(void) {
    printf("next: %d\n", next_library());
    return 0;
}
