#include "arrays.h"

#include <stdlib.h>
#include <string.h>

int array_reserve(Array *a, size_t extra) {
    if (a->count + extra <= a->capacity) return 0;
    size_t capacity = a->capacity ? a->capacity : 1024;
    while (capacity < a->count + extra) capacity *= 2;
    uint8_t *items = realloc(a->items, capacity * a->item_size);
    if (!items) return -1;
    a->items = items;
    a->capacity = capacity;
    return 0;
}

void *array_push(Array *a) {
    if (array_reserve(a, 1) != 0) return NULL;
    return a->items + (a->count++) * a->item_size;
}

int array_append(Array *a, const Array *from, size_t start, size_t count) {
    if (array_reserve(a, count) != 0) return -1;
    memcpy(a->items + a->count * a->item_size, from->items + start * from->item_size, count * a->item_size);
    a->count += count;
    return 0;
}

int array_append_items(Array *a, const void *items, size_t count) {
    if (array_reserve(a, count) != 0) return -1;
    memcpy(a->items + a->count * a->item_size, items, count * a->item_size);
    a->count += count;
    return 0;
}

void array_init(Array *a, size_t item_size) {
    memset(a, 0, sizeof *a);
    a->item_size = item_size;
}

void array_free(Array *a) {
    free(a->items);
    a->items = NULL;
    a->count = a->capacity = 0;
}
