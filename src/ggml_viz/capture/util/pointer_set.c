#include "pointer_set.h"

#include <stdlib.h>
#include <string.h>

static int grow(PointerSet *s) {
    size_t old_capacity = s->capacity;
    uint64_t *old_keys = s->keys;
    uint8_t *old_kinds = s->kinds;
    size_t capacity = old_capacity ? old_capacity * 2 : 8192;
    uint64_t *keys = calloc(capacity, sizeof(uint64_t));
    uint8_t *kinds = calloc(capacity, 1);
    if (!keys || !kinds) {
        free(keys);
        free(kinds);
        return -1;
    }
    s->keys = keys;
    s->kinds = kinds;
    s->capacity = capacity;
    for (size_t i = 0; i < old_capacity; i++) {
        if (!old_kinds[i]) continue;
        size_t j = pointer_set_slot(old_keys[i], capacity);
        while (kinds[j]) j = (j + 1) & (capacity - 1);
        keys[j] = old_keys[i];
        kinds[j] = old_kinds[i];
    }
    free(old_keys);
    free(old_kinds);
    return 0;
}

int pointer_set_init(PointerSet *s) {
    memset(s, 0, sizeof *s);
    return grow(s);
}

int pointer_set_add(PointerSet *s, uint64_t key, uint8_t kind) {
    if ((s->count + 1) * 2 > s->capacity && grow(s) != 0) return -1;
    size_t i = pointer_set_slot(key, s->capacity);
    while (s->kinds[i]) i = (i + 1) & (s->capacity - 1);
    s->keys[i] = key;
    s->kinds[i] = kind;
    s->count++;
    return 0;
}

void pointer_set_clear(PointerSet *s) {
    if (s->count) memset(s->kinds, 0, s->capacity);
    s->count = 0;
}

void pointer_set_free(PointerSet *s) {
    free(s->keys);
    free(s->kinds);
    memset(s, 0, sizeof *s);
}
