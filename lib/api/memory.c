/*
 * memory.c — chorus_mem_alloc and chorus_mem_free: blocks of this process's shared heap
 * (lib/transport/shared_heap.h), which the hierarchical allreduce reduces in place.
 */
#include "../core/common.h"
#include "../transport/shared_heap.h"

#include <chorus.h>

chorus_status chorus_mem_alloc(size_t bytes, void **pointer)
{
    if (pointer == NULL)
        return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT, "chorus_mem_alloc: pointer is NULL");
    char error[256];
    *pointer = shared_heap_alloc(bytes, error, sizeof error);
    if (*pointer == NULL)
        return status_set_last_error(CHORUS_ERR_OUT_OF_MEMORY, "chorus_mem_alloc(%zu): %s", bytes, error);
    return CHORUS_OK;
}

chorus_status chorus_mem_free(void *pointer)
{
    if (pointer == NULL || shared_heap_free(pointer))
        return CHORUS_OK;
    return status_set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "chorus_mem_free(%p): not a block from chorus_mem_alloc (or freed "
                          "already)",
                          pointer);
}
