/*
 * node_segment.c — the barrier over shared progress counters, single copies between the ranks'
 * memory, and the thread-local variant of the segment used by unit tests.
 */
#include "node_segment.h"
#include "shared_heap.h"
#include "spin_pause.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h> /* process_vm_readv, process_vm_writev (_GNU_SOURCE, set by the build) */
#include <unistd.h>

#define CACHE_LINE 64

size_t node_segment_part_bytes(unsigned staging_areas, size_t chunk_bytes)
{
    return CACHE_LINE + (staging_areas + 1) * chunk_bytes;
}

void node_segment_map_part(struct node_segment *segment, int rank, unsigned char *part)
{
    segment->progress[rank] = (_Atomic uint64_t *)part;
    segment->mailbox[rank] = (uint64_t *)part + 1;
    for (unsigned area = 0; area < segment->staging_areas; area++)
        segment->staging[rank][area] = part + CACHE_LINE + area * segment->chunk_bytes;
    if (rank == segment->local_rank)
        segment->own_result =
            part + CACHE_LINE + segment->staging_areas * segment->chunk_bytes;
}

void node_segment_barrier(struct node_segment *segment)
{
    if (segment->streaming)
        streaming_copy_fence();
    uint64_t target = ++segment->sequence;
    atomic_store_explicit(segment->progress[segment->local_rank], target, memory_order_release);
    double deadline = 0, next_look = 0;
    for (int r = 0; r < segment->local_size && segment->stuck_rank < 0; r++) {
        unsigned polls = 0;
        while (atomic_load_explicit(segment->progress[r], memory_order_acquire) < target) {
            /* With a core per rank the peer arrives within microseconds; with more ranks than
             * cores it may need this core to get there. */
            if (++polls > 4096 || segment->yield_while_waiting)
                sched_yield();
            else
                spin_pause();
            if (segment->timeout_seconds <= 0 || (polls & 1023) != 0)
                continue;
            if (segment->waiting != NULL)
                segment->waiting(segment->waiting_context);
            double now = clock_seconds();
            if (deadline == 0) {
                deadline = now + segment->timeout_seconds;
                next_look = now + NODE_PROCESS_LOOK_SECONDS;
            } else if (now > deadline) {
                segment->stuck_rank = r;
                break;
            } else if (now > next_look) {
                next_look = now + NODE_PROCESS_LOOK_SECONDS;
                if (node_segment_ended(segment, r)) {
                    segment->stuck_rank = r;
                    segment->stuck_ended = true;
                    break;
                }
            }
        }
    }
}

void node_segment_poison(struct node_segment *segment)
{
    atomic_store_explicit(segment->progress[segment->local_rank], NODE_POISON,
                          memory_order_release);
}

static bool poisoned(const struct node_segment *segment, int rank)
{
    return atomic_load_explicit(segment->progress[rank], memory_order_acquire) == NODE_POISON;
}

int node_segment_poisoned(const struct node_segment *segment)
{
    for (int r = 0; r < segment->local_size; r++)
        if (poisoned(segment, r))
            return r;
    return -1;
}

/* The kernel may copy less than asked (it stops at the first page it cannot access); the rest
 * is asked for again, and no progress at all is a failure. */
static bool copy_with_peer(int pid, void *local, uint64_t remote, size_t bytes, bool to_peer)
{
    unsigned char *here = local;
    while (bytes != 0) {
        struct iovec mine = {here, bytes};
        struct iovec theirs = {(void *)(uintptr_t)remote, bytes};
        ssize_t copied = to_peer ? process_vm_writev(pid, &mine, 1, &theirs, 1, 0)
                                 : process_vm_readv(pid, &mine, 1, &theirs, 1, 0);
        if (copied <= 0)
            return false;
        here += copied;
        remote += (uint64_t)copied;
        bytes -= (size_t)copied;
    }
    return true;
}

/* A poisoned peer may never have published this call's address: the one in its mailbox is an
 * old call's, which may point at memory it has freed or reused since. */
bool node_copy_from_peer(const struct node_segment *segment, int peer, void *local,
                         uint64_t remote, size_t bytes)
{
    if (poisoned(segment, peer))
        return false;
    return copy_with_peer(segment->pids[peer], local, remote, bytes, false);
}

bool node_copy_to_peer(const struct node_segment *segment, int peer, uint64_t remote,
                       const void *local, size_t bytes)
{
    if (poisoned(segment, peer))
        return false;
    return copy_with_peer(segment->pids[peer], (void *)local, remote, bytes, true);
}

void node_single_copy_publish(struct node_segment *segment, const void *buffer)
{
    segment->mailbox[segment->local_rank][NODE_MAILBOX_ADDRESS] = (uint64_t)(uintptr_t)buffer;
    node_segment_barrier(segment); /* its release store publishes the word */
}

uint64_t node_segment_largest(struct node_segment *segment, uint64_t value)
{
    /* Two words in turn, by the barrier count that every rank shares: two calls in a row with
     * no other barrier between them write different words, so a rank may share its next value
     * while a slower one still reads this one. */
    int word = NODE_MAILBOX_VALUES + (int)(segment->sequence & 1);
    segment->mailbox[segment->local_rank][word] = value;
    node_segment_barrier(segment);
    uint64_t largest = 0;
    for (int r = 0; r < segment->local_size; r++)
        if (segment->mailbox[r][word] > largest)
            largest = segment->mailbox[r][word];
    return largest;
}

int node_segment_first_failed(struct node_segment *segment, bool succeeded)
{
    segment->mailbox[segment->local_rank][NODE_MAILBOX_FAILED] = !succeeded;
    node_segment_barrier(segment);
    /* A rank writes its word again only after the next call's publish barrier, which this rank
     * reaches after reading here. */
    for (int r = 0; r < segment->local_size; r++)
        if (segment->mailbox[r][NODE_MAILBOX_FAILED] != 0)
            return r;
    return -1;
}

chorus_status node_single_copy_finish(struct node_segment *segment, bool copied, char *error,
                                      size_t error_size)
{
    int failed = node_segment_first_failed(segment, copied);
    if (failed < 0)
        return CHORUS_OK;
    snprintf(error, error_size,
             "a copy between the memory of two ranks of this host (process_vm_readv/writev) "
             "failed on local rank %d",
             failed);
    return CHORUS_ERR_INTERNAL;
}

bool node_probe_peers(const struct node_segment *segment, const uint64_t *words)
{
    for (int r = 0; r < segment->local_size; r++) {
        uint64_t value = 0;
        if (!node_copy_from_peer(segment, r, &value, words[r], sizeof value) ||
            value != node_probe_value(segment->pids[r]))
            return false;
    }
    return true;
}

struct local_memory {
    unsigned char *memory;
    int local_size;
};

struct node_segment *node_segments_create_local(int local_size, size_t chunk_bytes,
                                                unsigned staging_areas,
                                                enum staging_stores stores)
{
    unsigned areas = node_staging_areas(staging_areas);
    struct node_segment *segments = calloc((size_t)local_size, sizeof *segments);
    struct local_memory *owner = calloc(1, sizeof *owner);
    size_t per_rank = node_segment_part_bytes(areas, chunk_bytes);
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
        segment->stuck_rank = -1;
        node_segment_set_staging(segment, areas, staging_stores_streaming(stores, true, false));
        segment->yield_while_waiting = true;
        segment->owner = me == 0 ? owner : NULL;
        for (int r = 0; r < local_size; r++) {
            node_segment_map_part(segment, r, memory + per_rank * (size_t)r);
            segment->pids[r] = getpid();
        }
    }
    /* The threads share one process, which may still be refused (a seccomp filter). */
    uint64_t word = node_probe_value(getpid());
    uint64_t words[NODE_MAX_LOCAL_RANKS] = {0};
    for (int r = 0; r < local_size; r++)
        words[r] = (uint64_t)(uintptr_t)&word;
    bool single_copy = node_probe_peers(&segments[0], words);
    /* The threads' shared heap is the process's own, mapped whole: buffers from it lie at their
     * own offsets, one heap for every "rank". */
    int heap_file = -1;
    size_t heap_bytes = 0;
    char ignored[256];
    bool heap = shared_heap_open(&heap_file, &heap_bytes, ignored, sizeof ignored);
    for (int me = 0; me < local_size; me++) {
        segments[me].single_copy = single_copy;
        segments[me].shared_heap = heap;
        for (int r = 0; r < local_size; r++) {
            segments[me].heap[r] = heap ? shared_heap_base() : NULL;
            segments[me].heap_mapped[r] = segments[me].heap_reserved[r] = heap ? heap_bytes : 0;
            segments[me].heap_files[r] = -1;
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

static unsigned power_of_two_at_most(unsigned value)
{
    unsigned power = 1;
    while (power * 2 <= value)
        power *= 2;
    return power;
}

unsigned node_staging_areas(unsigned requested)
{
    unsigned areas = requested < 2                        ? 2
                     : requested > NODE_MAX_STAGING_AREAS ? NODE_MAX_STAGING_AREAS
                                                          : requested;
    return power_of_two_at_most(areas);
}

void node_segment_set_staging(struct node_segment *segment, unsigned areas, bool streaming)
{
    segment->staging_areas = areas;
    segment->areas_in_use = areas;
    segment->streaming = streaming;
}

uint64_t node_process_start(int pid)
{
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *file = fopen(path, "re");
    if (file == NULL)
        return 0;
    size_t length = fread(text, 1, sizeof text - 1, file);
    fclose(file);
    text[length] = '\0';
    /* "pid (name) state ppid ...": the name may hold anything, so fields count from the last
     * ')'; the state is field 3, the start time field 22. */
    const char *field = strrchr(text, ')');
    if (field == NULL || field[1] != ' ' || field[2] == 'Z' || field[2] == 'X')
        return 0;
    field += 2;
    for (int number = 3; number < 22 && field != NULL; number++) {
        field = strchr(field, ' ');
        if (field != NULL)
            field++;
    }
    return field != NULL ? strtoull(field, NULL, 10) : 0;
}

bool node_segment_ended(const struct node_segment *segment, int rank)
{
    return segment->watch_processes && rank != segment->local_rank &&
           node_process_start(segment->pids[rank]) != segment->starts[rank];
}

int node_segment_first_ended(const struct node_segment *segment)
{
    for (int r = 0; r < segment->local_size; r++)
        if (node_segment_ended(segment, r))
            return r;
    return -1;
}

void node_segment_probe_peers(struct node_segment *segment, const struct host_exchange *exchange)
{
    int heap_file = -1;
    size_t heap_bytes = 0;
    char ignored[256];
    if (!shared_heap_open(&heap_file, &heap_bytes, ignored, sizeof ignored))
        heap_file = -1;
    int pid = (int)getpid();
    uint64_t word = node_probe_value(pid);
    enum { WORDS = 5 };
    uint64_t mine[WORDS] = {(uint64_t)pid, (uint64_t)(uintptr_t)&word,
                            (uint64_t)(int64_t)heap_file, heap_bytes, node_process_start(pid)};
    uint64_t all[WORDS * NODE_MAX_LOCAL_RANKS], words[NODE_MAX_LOCAL_RANKS];
    int heap_files[NODE_MAX_LOCAL_RANKS];
    size_t heap_reserved[NODE_MAX_LOCAL_RANKS];
    uint64_t works[3] = {0, 0, 0}; /* single copy, shared heap, processes watched */
    if (exchange->allgather(exchange->context, mine, sizeof mine, all)) {
        works[2] = 1;
        for (int r = 0; r < segment->local_size; r++) {
            const uint64_t *theirs = &all[WORDS * r];
            segment->pids[r] = (int)theirs[0];
            words[r] = theirs[1];
            heap_files[r] = (int)(int64_t)theirs[2];
            heap_reserved[r] = (size_t)theirs[3];
            segment->starts[r] = theirs[4];
            /* Seen from here as it sees itself: the same process, in the same pid namespace. */
            works[2] &= theirs[4] != 0 && node_process_start(segment->pids[r]) == theirs[4];
        }
        works[0] = node_probe_peers(segment, words);
        works[1] = node_heap_open_peers(segment, heap_files, heap_reserved);
    }
    /* Every rank must see the same answers; the exchange also keeps each rank's probe word
     * alive until everyone has read it. */
    if (!exchange->minimum(exchange->context, works, 3))
        works[0] = works[1] = works[2] = 0;
    segment->single_copy = works[0] == 1;
    segment->shared_heap = works[1] == 1;
    segment->watch_processes = works[2] == 1;
    if (!segment->shared_heap)
        node_heap_close_peers(segment);
}
