/*
 * scratch.c — see scratch.h.
 */
#include "scratch.h"

#include <stdlib.h>
#include <string.h>

void *scratch_reserve(struct scratch *scratch, size_t bytes)
{
    if (bytes <= scratch->capacity && scratch->memory != NULL)
        return scratch->memory;
    size_t capacity = scratch->capacity ? scratch->capacity : 4096;
    while (capacity < bytes)
        capacity *= 2;
    void *memory = NULL;
    if (posix_memalign(&memory, 64, capacity) != 0)
        return NULL;
    /* Touch every page now, so that the first collective does not pay the page faults. */
    memset(memory, 0, capacity);
    free(scratch->memory);
    scratch->memory = memory;
    scratch->capacity = capacity;
    return memory;
}

void scratch_release(struct scratch *scratch)
{
    free(scratch->memory);
    scratch->memory = NULL;
    scratch->capacity = 0;
}
