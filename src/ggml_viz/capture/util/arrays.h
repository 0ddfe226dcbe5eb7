/* Growable arrays of fixed-size items: what the recorder, the GPU timer and the preload library
   hold their records in. No Python, no ggml here. */
#ifndef GGML_VIZ_ARRAYS_H
#define GGML_VIZ_ARRAYS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t count, capacity, item_size;
    uint8_t *items;
} Array;

#define ARRAY_AT(a, type, i) (((type *)(a).items)[i])

void array_init(Array *a, size_t item_size);
void array_free(Array *a);
/* Room for `extra` more items: 0, or -1 out of memory. */
int array_reserve(Array *a, size_t extra);
/* A new item at the end (uninitialized), or NULL out of memory. */
void *array_push(Array *a);
/* Append `count` items of `from` (same item size), starting at item `start`: 0, or -1. */
int array_append(Array *a, const Array *from, size_t start, size_t count);
/* Append `count` items read from `items` (of the array's item size): 0, or -1. */
int array_append_items(Array *a, const void *items, size_t count);

#endif
