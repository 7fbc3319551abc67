/*
 * small_segment.c — publishing a slot, waiting for every rank's, and the slots' layout in a
 * rank's part; the variant over ordinary memory for one rank and for unit tests.
 */
#include "small_segment.h"
#include "spin_pause.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void small_publish(struct small_segment *segment)
{
    struct small_line *line = small_next_line(segment);
    segment->phase++;
    atomic_store_explicit(&line->phase, segment->phase, memory_order_release);
}

static bool published(const struct small_segment *segment, int rank)
{
    return atomic_load_explicit(&small_line_of(segment, rank)->phase, memory_order_acquire) ==
           segment->phase;
}

bool small_published(const struct small_segment *segment, int rank)
{
    return published(segment, rank);
}

int small_first_unpublished(const struct small_segment *segment)
{
    for (int r = 0; r < segment->local_size; r++)
        if (!published(segment, r))
            return r;
    return -1;
}

bool small_all_published(const struct small_segment *segment)
{
    return small_first_unpublished(segment) < 0;
}

/* How often spinning looks at the clock and the stop hook: a clock read costs about as much
 * as the wait for a peer that is already on its way. */
#define SPIN_POLLS_PER_CHECK 64

enum wait_mode { WAIT_SPINNING, WAIT_YIELDING, WAIT_SLEEPING };

enum small_wait_end small_wait_all(struct small_segment *segment, double timeout_seconds,
                                   bool (*stopped)(void *context), void *context)
{
    enum wait_mode mode = segment->oversubscribed ? WAIT_YIELDING : WAIT_SPINNING;
    double started = 0, sleep_seconds = 50e-6;
    unsigned polls = 0;
    for (int r = 0; r < segment->local_size; r++) {
        while (!published(segment, r)) {
            if (mode == WAIT_SPINNING && ++polls % SPIN_POLLS_PER_CHECK != 0) {
                spin_pause();
                continue;
            }
            double now = clock_seconds();
            if (started == 0)
                started = now;
            double waited = now - started;
            if (stopped != NULL && stopped(context)) {
                segment->late_rank = r;
                return SMALL_WAIT_STOPPED;
            }
            if (timeout_seconds > 0 && waited > timeout_seconds) {
                segment->late_rank = r;
                return SMALL_WAIT_TIMEOUT;
            }
            if (mode == WAIT_SPINNING && waited >= SMALL_SPIN_SECONDS)
                mode = WAIT_YIELDING;
            if (mode == WAIT_YIELDING && waited >= SMALL_YIELD_SECONDS)
                mode = WAIT_SLEEPING;
            if (mode == WAIT_SPINNING) {
                spin_pause();
            } else if (mode == WAIT_YIELDING) {
                sched_yield();
            } else {
                nanosleep(&(struct timespec){.tv_nsec = (long)(sleep_seconds * 1e9)}, NULL);
                sleep_seconds = sleep_seconds * 2 < 1e-3 ? sleep_seconds * 2 : 1e-3;
            }
        }
    }
    return SMALL_WAIT_DONE;
}

/* A slot's line, then its data area, each starts on a pair of lines of its own: Intel's
 * spatial prefetcher fetches lines in aligned pairs, and a reader that pulled the other slot's
 * line along would cost its owner one more invalidation when it writes that slot. */
#define SLOT_ALIGNMENT (2 * SMALL_LINE_BYTES)

static size_t area_bytes(size_t capacity)
{
    return (capacity + SLOT_ALIGNMENT - 1) / SLOT_ALIGNMENT * SLOT_ALIGNMENT;
}

size_t small_segment_part_bytes(size_t capacity)
{
    return 2 * SLOT_ALIGNMENT + 2 * area_bytes(capacity);
}

void small_segment_map_part(struct small_segment *segment, int rank, unsigned char *part)
{
    size_t area = area_bytes(segment->capacity);
    for (int slot = 0; slot < 2; slot++) {
        segment->lines[rank][slot] = (struct small_line *)(part + slot * SLOT_ALIGNMENT);
        segment->data[rank][slot] = part + 2 * SLOT_ALIGNMENT + (size_t)slot * area;
    }
}

/* The parts of `local_size` ranks in one piece of zeroed memory (NULL when out of memory). */
static unsigned char *allocate_parts(int local_size, size_t capacity)
{
    size_t bytes = (size_t)local_size * small_segment_part_bytes(capacity);
    unsigned char *memory = aligned_alloc(SLOT_ALIGNMENT, bytes);
    if (memory != NULL)
        memset(memory, 0, bytes);
    return memory;
}

/* Local rank `me`'s view of parts in `memory` (allocate_parts). */
static void view_parts(struct small_segment *segment, int me, int local_size, size_t capacity,
                       unsigned char *memory)
{
    size_t part = small_segment_part_bytes(capacity);
    segment->local_rank = me;
    segment->local_size = local_size;
    segment->capacity = capacity;
    segment->late_rank = -1;
    segment->owner = memory;
    for (int r = 0; r < local_size; r++)
        small_segment_map_part(segment, r, memory + (size_t)r * part);
}

struct small_segment *small_segments_create_local(int local_size, size_t capacity)
{
    if (local_size < 1 || local_size > NODE_MAX_LOCAL_RANKS)
        return NULL;
    struct small_segment *segments = calloc((size_t)local_size, sizeof *segments);
    unsigned char *memory = allocate_parts(local_size, capacity);
    if (segments == NULL || memory == NULL) {
        free(segments);
        free(memory);
        return NULL;
    }
    for (int me = 0; me < local_size; me++)
        view_parts(&segments[me], me, local_size, capacity, memory);
    return segments;
}

bool small_segment_create_copies(struct small_segment *segment, int rank, int size, size_t capacity)
{
    memset(segment, 0, sizeof *segment);
    if (size < 1 || size > NODE_MAX_LOCAL_RANKS)
        return false;
    unsigned char *memory = allocate_parts(size, capacity);
    if (memory == NULL)
        return false;
    view_parts(segment, rank, size, capacity, memory);
    return true;
}

void small_segment_destroy_copies(struct small_segment *segment)
{
    free(segment->owner);
    segment->owner = NULL;
}

void small_segments_destroy_local(struct small_segment *segments)
{
    if (segments == NULL)
        return;
    free(segments[0].owner);
    free(segments);
}
