/*
 * small_segment.h — memory shared by the ranks of one host for collectives of a few bytes to a
 * few KiB, run on the thread that submits them (lib/lane). Each rank owns two slots, used in
 * turn by its phases: a slot is one cache line (the line) with a phase word, what the rank
 * submitted and the first bytes of its payload, then a data area for a longer payload. Only the
 * owner writes a slot; the others only read it, so a line moves between caches once per phase,
 * and a payload of up to SMALL_INLINE_BYTES travels with its flag (as Open MPI's coll/xhc puts
 * small payloads beside their flags).
 *
 * A phase: every rank writes its slot, then publishes it by storing the phase number last
 * (release); then it waits until every rank's slot of that phase is published (acquire) and
 * reads what it needs. Two slots suffice: a rank writes a slot again two phases later, and it
 * starts that phase only after every rank published the phase between, which each did only
 * after it had read everything of the phase before.
 *
 * Between processes the memory comes from MPI_Win_allocate_shared (small_segment_mpi.c); for a
 * single rank, and in unit tests (ranks as threads), it is ordinary memory.
 */
#ifndef CHORUS_SMALL_SEGMENT_H
#define CHORUS_SMALL_SEGMENT_H

#include "../core/common.h"
#include "node_segment.h"

#include <stdatomic.h>

#define SMALL_LINE_BYTES 64
#define SMALL_INLINE_BYTES 32

/* One rank's slot header: one cache line, written by its owner alone. */
struct small_line {
    _Atomic uint64_t phase; /* the phase (counted from 1) whose contents the line holds */
    uint64_t signature;     /* what the rank submitted (lib/lane fills these three) */
    uint64_t count;
    uint64_t digest;
    unsigned char payload[SMALL_INLINE_BYTES]; /* the start of the payload */
};
static_assert(sizeof(struct small_line) == SMALL_LINE_BYTES, "a slot's header is one line");

/* Why a wait gave up (small_wait_all). */
enum small_wait_end {
    SMALL_WAIT_DONE,     /* every rank published the phase */
    SMALL_WAIT_STOPPED,  /* the `stopped` hook said so, while waiting for `late_rank` */
    SMALL_WAIT_TIMEOUT,  /* `late_rank` did not publish within the timeout */
};

struct small_segment {
    int local_rank;
    int local_size;
    size_t capacity; /* bytes of each data area (a multiple of SMALL_LINE_BYTES) */
    struct small_line *lines[NODE_MAX_LOCAL_RANKS][2];
    unsigned char *data[NODE_MAX_LOCAL_RANKS][2];
    uint64_t phase; /* this rank's last published phase */
    /* Waiting: spin first unless the host has more ranks than cores (then yield at once). */
    bool oversubscribed;
    int late_rank; /* after a wait that gave up: the first local rank that had not published */
    void *owner;   /* what to free: the MPI window, the parts' files, or the local allocation */
    bool over_links; /* made by small_segment_create_links */
};

/* The slot this rank writes in its next phase, and local rank `rank`'s slot of the current
 * (last published, or being waited for) phase. */
static inline struct small_line *small_next_line(const struct small_segment *segment)
{
    return segment->lines[segment->local_rank][(segment->phase + 1) & 1];
}
static inline unsigned char *small_next_data(const struct small_segment *segment)
{
    return segment->data[segment->local_rank][(segment->phase + 1) & 1];
}
static inline const struct small_line *small_line_of(const struct small_segment *segment,
                                                     int rank)
{
    return segment->lines[rank][segment->phase & 1];
}
static inline const unsigned char *small_data_of(const struct small_segment *segment, int rank)
{
    return segment->data[rank][segment->phase & 1];
}

/* Where local rank `rank`'s payload of the current phase starts: in its line when it has at
 * most SMALL_INLINE_BYTES, else in its data area. */
static inline const unsigned char *small_payload_of(const struct small_segment *segment,
                                                    int rank, size_t bytes)
{
    return bytes <= SMALL_INLINE_BYTES ? small_line_of(segment, rank)->payload
                                       : small_data_of(segment, rank);
}
/* Where this rank writes a payload of `bytes` for its next phase. */
static inline unsigned char *small_next_payload(const struct small_segment *segment,
                                                size_t bytes)
{
    return bytes <= SMALL_INLINE_BYTES ? small_next_line(segment)->payload
                                       : small_next_data(segment);
}

/* Whether every local rank has published the current phase (no waiting). */
bool small_all_published(const struct small_segment *segment);
/* The first local rank that has not published the current phase, or -1: whom a timed-out
 * wait names. */
int small_first_unpublished(const struct small_segment *segment);
/* Whether local rank `rank` has published the current phase. */
bool small_published(const struct small_segment *segment, int rank);

/* Publishes this rank's next slot (written through small_next_*): its phase number last. */
void small_publish(struct small_segment *segment);

/* Waits until every local rank has published the current phase, or until `stopped(context)`
 * (asked now and then; may be NULL) returns true, or `timeout_seconds` (0: never) pass. It
 * spins for SMALL_SPIN_SECONDS (a peer with a core of its own arrives within microseconds),
 * then yields the core between polls until SMALL_YIELD_SECONDS (a peer that shares this core
 * needs it to get there), then sleeps between polls, from 50 us doubling to 1 ms, so that a
 * rank waiting for a slow peer costs no core; a peer arriving then is seen within 1 ms. */
#define SMALL_SPIN_SECONDS 20e-6
#define SMALL_YIELD_SECONDS 1e-3
enum small_wait_end small_wait_all(struct small_segment *segment, double timeout_seconds,
                                   bool (*stopped)(void *context), void *context);

/* Bytes of one rank's part for data areas of `capacity` bytes (rounded up to a line). */
size_t small_segment_part_bytes(size_t capacity);
/* Points local rank `rank`'s slots into its part at `part`, after local_size and capacity are
 * set. */
void small_segment_map_part(struct small_segment *segment, int rank, unsigned char *part);

/* For one rank, and for tests: `local_size` segments over one piece of ordinary memory, one
 * per thread. Free with small_segments_destroy_local. NULL when out of memory. */
struct small_segment *small_segments_create_local(int local_size, size_t capacity);
void small_segments_destroy_local(struct small_segment *segments);

/* One rank's view of a segment in its own memory for `size` ranks: the other ranks' slots
 * are copies that this rank writes as their messages arrive (negotiation rounds across hosts,
 * lib/coordinator/rounds.c), where no memory is shared. False when out of memory or `size` is
 * beyond NODE_MAX_LOCAL_RANKS. Free with small_segment_destroy_copies. */
bool small_segment_create_copies(struct small_segment *segment, int rank, int size,
                                 size_t capacity);
void small_segment_destroy_copies(struct small_segment *segment);

/* Over MPI: collective over `node_comm` (the ranks of one host, an MPI_Comm passed by pointer).
 * Every rank learns whether every rank succeeded: the result is the same on all of them. */
chorus_status small_segment_create_mpi(struct small_segment *segment, const void *node_comm,
                                       size_t capacity, bool oversubscribed, char *error,
                                       size_t error_size);
void small_segment_destroy_mpi(struct small_segment *segment);
/* After a fatal error, when the window cannot be freed (that takes every local rank): keeps
 * what peers may still read until MPI is finalized (retained.h). */
void small_segment_retain_mpi(struct small_segment *segment);

/* In a world without MPI (lib/coordinator/world_links.h): collective over `exchange` (the
 * ranks of this host), the parts memory files (host_parts.h). Every rank learns whether every
 * rank succeeded, as over MPI. */
chorus_status small_segment_create_links(struct small_segment *segment,
                                         const struct host_exchange *exchange, size_t capacity,
                                         bool oversubscribed, char *error, size_t error_size);
void small_segment_destroy_links(struct small_segment *segment);
void small_segment_retain_links(struct small_segment *segment);

/* The segment's release by its maker's kind (MPI or links): freed, or, after a fatal error
 * (`in_use`), kept as the retain functions say. */
void small_segment_release(struct small_segment *segment, bool in_use);

#endif
