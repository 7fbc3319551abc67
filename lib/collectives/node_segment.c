/*
 * node_segment.c — the barrier over shared progress counters, and the thread-local variant of
 * the segment used by unit tests.
 */
#include "node_segment.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* Tells the CPU this is a spin-wait: it saves power and lets a hypervisor run another virtual
 * CPU (pause-loop exiting) instead of this one spinning away its time slice. */
static inline void spin_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

#define CACHE_LINE 64

void node_segment_barrier(struct node_segment *segment)
{
    uint64_t target = ++segment->sequence;
    atomic_store_explicit(segment->progress[segment->local_rank], target, memory_order_release);
    for (int r = 0; r < segment->local_size; r++) {
        unsigned polls = 0;
        while (atomic_load_explicit(segment->progress[r], memory_order_acquire) < target) {
            /* With a core per rank the peer arrives within microseconds; with more ranks than
             * cores it may need this core to get there. */
            if (segment->yield_while_waiting || ++polls > 4096)
                sched_yield();
            else
                spin_pause();
        }
    }
}

struct local_memory {
    unsigned char *memory;
    int local_size;
};

struct node_segment *node_segments_create_local(int local_size, size_t chunk_bytes)
{
    struct node_segment *segments = calloc((size_t)local_size, sizeof *segments);
    struct local_memory *owner = calloc(1, sizeof *owner);
    size_t per_rank = CACHE_LINE + 2 * chunk_bytes;
    unsigned char *memory = NULL;
    if (segments == NULL || owner == NULL ||
        posix_memalign((void **)&memory, CACHE_LINE, per_rank * (size_t)local_size)) {
        free(segments);
        free(owner);
        return NULL;
    }
    memset(memory, 0, per_rank * (size_t)local_size);
    owner->memory = memory;
    owner->local_size = local_size;
    for (int me = 0; me < local_size; me++) {
        struct node_segment *segment = &segments[me];
        segment->local_rank = me;
        segment->local_size = local_size;
        segment->chunk_bytes = chunk_bytes;
        segment->yield_while_waiting = true;
        segment->owner = me == 0 ? owner : NULL;
        for (int r = 0; r < local_size; r++) {
            segment->progress[r] = (_Atomic uint64_t *)(memory + per_rank * (size_t)r);
            segment->staging[r][0] = memory + per_rank * (size_t)r + CACHE_LINE;
            segment->staging[r][1] = segment->staging[r][0] + chunk_bytes;
        }
    }
    return segments;
}

void node_segments_destroy_local(struct node_segment *segments)
{
    if (segments == NULL)
        return;
    struct local_memory *owner = segments[0].owner;
    for (int r = 0; owner != NULL && r < owner->local_size; r++)
        scratch_release(&segments[r].cross_scratch);
    if (owner != NULL)
        free(owner->memory);
    free(owner);
    free(segments);
}
