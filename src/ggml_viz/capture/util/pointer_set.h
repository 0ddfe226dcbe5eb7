/* An open-addressing set of pointers, each with a small kind: the recorder's record of what
   the graph in flight has shown it already (its nodes, leaves and buffers). */
#ifndef GGML_VIZ_POINTER_SET_H
#define GGML_VIZ_POINTER_SET_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t *keys;
    uint8_t *kinds; /* 0: empty */
    size_t capacity, count;
} PointerSet;

/* An empty set, with room already (the hot path never finds it unallocated): 0, or -1 out of memory. */
int pointer_set_init(PointerSet *s);
static inline size_t pointer_set_slot(uint64_t p, size_t capacity) {
    p ^= p >> 33;
    p *= 0xff51afd7ed558ccdULL;
    p ^= p >> 33;
    return (size_t)p & (capacity - 1);
}

/* The kind `key` was added with, or 0 if it is not in the set. Inline: the recorder asks it for
   every node and source. */
static inline int pointer_set_find(const PointerSet *s, uint64_t key) {
    size_t i = pointer_set_slot(key, s->capacity);
    while (s->kinds[i]) {
        if (s->keys[i] == key) return s->kinds[i];
        i = (i + 1) & (s->capacity - 1);
    }
    return 0;
}
/* Add a key not in the set yet, with a kind of 1 or more: 0, or -1 out of memory. */
int pointer_set_add(PointerSet *s, uint64_t key, uint8_t kind);
void pointer_set_clear(PointerSet *s);
void pointer_set_free(PointerSet *s);

#endif
