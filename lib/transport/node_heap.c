/*
 * node_heap.c — the peers' shared heaps (shared_heap.h), as one rank of the host sees them: each
 * opened once when the segment is created, then mapped as far as the calls need. A heap is
 * reserved at the size of the host's memory; mapping every peer's whole reservation would take
 * the address space of 128 ranks times that, so each mapping grows to the highest block used.
 */
#include "node_segment.h"
#include "shared_heap.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

/* Mappings grow by at least this much, so that a run's tensors take few remappings. */
#define HEAP_MAPPING_STEP ((size_t)1 << 30)

bool node_heap_open_peers(struct node_segment *segment, const int *files, const size_t *bytes)
{
    bool opened = true;
    for (int r = 0; r < segment->local_size; r++) {
        segment->heap_files[r] = -1;
        segment->heap_mapped[r] = 0;
        segment->heap[r] = NULL;
        segment->heap_reserved[r] = files[r] >= 0 ? bytes[r] : 0;
        if (files[r] < 0) {
            opened = false;
        } else if (r == segment->local_rank) {
            segment->heap[r] = shared_heap_base();
            segment->heap_mapped[r] = bytes[r];
        } else {
            char path[64];
            snprintf(path, sizeof path, "/proc/%d/fd/%d", segment->pids[r], files[r]);
            segment->heap_files[r] = open(path, O_RDWR | O_CLOEXEC);
            opened &= segment->heap_files[r] >= 0;
        }
    }
    if (!opened)
        node_heap_close_peers(segment);
    return opened;
}

void node_heap_close_peers(struct node_segment *segment)
{
    for (int r = 0; r < segment->local_size; r++) {
        if (r == segment->local_rank)
            continue;
        if (segment->heap[r] != NULL)
            munmap(segment->heap[r], segment->heap_mapped[r]);
        if (segment->heap_files[r] >= 0)
            close(segment->heap_files[r]);
        segment->heap[r] = NULL;
        segment->heap_mapped[r] = 0;
        segment->heap_files[r] = -1;
    }
}

unsigned char *node_heap_at(struct node_segment *segment, int rank, uint64_t offset, size_t bytes)
{
    if (offset > segment->heap_reserved[rank] || bytes > segment->heap_reserved[rank] - offset)
        return NULL;
    size_t needed = (size_t)offset + bytes;
    if (needed > segment->heap_mapped[rank]) {
        if (segment->heap_files[rank] < 0)
            return NULL;
        size_t grown = segment->heap_mapped[rank] + HEAP_MAPPING_STEP;
        if (grown < needed)
            grown = (needed + HEAP_MAPPING_STEP - 1) / HEAP_MAPPING_STEP * HEAP_MAPPING_STEP;
        if (grown > segment->heap_reserved[rank])
            grown = segment->heap_reserved[rank];
        void *mapping = mmap(NULL, grown, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
                             segment->heap_files[rank], 0);
        if (mapping == MAP_FAILED)
            return NULL;
        if (segment->heap[rank] != NULL)
            munmap(segment->heap[rank], segment->heap_mapped[rank]);
        segment->heap[rank] = mapping;
        segment->heap_mapped[rank] = grown;
    }
    return segment->heap[rank] + offset;
}
