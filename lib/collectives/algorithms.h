/*
 * algorithms.h — what every host collective algorithm receives, the table of algorithms per
 * collective, and how one is chosen. Each algorithm lives in its own file
 * (<collective>_<algorithm>.c) and is written against the transport interface only.
 */
#ifndef CHORUS_ALGORITHMS_H
#define CHORUS_ALGORITHMS_H

#include "../core/common.h"
#include "transport.h"

/* Reusable scratch memory: allocated on first use, grown when too small, touched once, and
 * kept, because fresh pages cost a fault each on every call. */
struct scratch {
    void *memory;
    size_t capacity;
};

/* Returns at least `bytes` of scratch (NULL when out of memory). */
void *scratch_reserve(struct scratch *scratch, size_t bytes);
void scratch_release(struct scratch *scratch);

struct node_segment;
struct allreduce_piece;

/* Allreduce in place: every rank's `buffer` ends as the reduction of all ranks' buffers. */
struct allreduce_args {
    struct transport *transport;
    struct scratch *scratch;
    struct node_segment *node; /* this host's shared segment (hierarchical), or NULL */
    void *buffer;
    /* Instead of `buffer` (NULL then), for the hierarchical algorithm only: the buffer is these
     * pieces one after the other, read from their inputs, written to their outputs. */
    const struct allreduce_piece *pieces;
    size_t piece_count;
    size_t count;
    chorus_dtype dtype;
    chorus_op op; /* AVERAGE reduces as SUM; the caller divides */
    /* When not NULL, the result is multiplied by *postscale (see scale_buffer). The algorithm
     * scales each element once, where it is final, instead of in a separate pass over the
     * whole buffer, and every rank ends with the same bits. */
    const double *postscale;
};

/* Broadcast in place: every rank's `buffer` ends as root's. */
struct broadcast_args {
    struct transport *transport;
    struct scratch *scratch;
    struct node_segment *node; /* the host's shared segment when all ranks share one host */
    void *buffer;
    size_t bytes;
    int root;
};

/* Allgather with a block per rank of any size (allgatherv): rank r's `send_bytes` bytes land at
 * `recv + offsets[r]` on every rank. `block_bytes[r]` and `offsets[r]` are the same on all
 * ranks; blocks are laid out in rank order without gaps. */
struct allgather_args {
    struct transport *transport;
    struct scratch *scratch;
    struct node_segment *node; /* the host's shared segment when all ranks share one host */
    const void *send;
    void *recv;
    const size_t *block_bytes;
    const size_t *offsets;
};

typedef chorus_status (*allreduce_run)(const struct allreduce_args *args);
typedef chorus_status (*broadcast_run)(const struct broadcast_args *args);
typedef chorus_status (*allgather_run)(const struct allgather_args *args);

/* What an algorithm needs of the placement of the ranks. */
enum host_need {
    NEEDS_NOTHING,
    NEEDS_SHARED_HOST, /* the same number, more than one, of ranks on every host */
    NEEDS_ONE_HOST,    /* every rank on one host */
};

struct algorithm {
    const char *name;
    const char *summary;
    union {
        allreduce_run allreduce;
        broadcast_run broadcast;
        allgather_run allgather;
    } run;
    enum host_need needs; /* anything but NEEDS_NOTHING works through the host's segment */
    int fallback;         /* what runs instead when forced where its need is not met */
};

enum allreduce_algorithm_id {
    ALLREDUCE_RING,
    ALLREDUCE_RECURSIVE_DOUBLING,
    ALLREDUCE_RABENSEIFNER,
    ALLREDUCE_HIERARCHICAL,
    ALLREDUCE_ALGORITHM_COUNT,
};

enum broadcast_algorithm_id {
    BROADCAST_BINOMIAL,
    BROADCAST_PIPELINED_CHAIN,
    BROADCAST_SHARED_MEMORY,
    BROADCAST_SINGLE_COPY,
    BROADCAST_ALGORITHM_COUNT,
};

enum allgather_algorithm_id {
    ALLGATHER_RING,
    ALLGATHER_BRUCK,
    ALLGATHER_SHARED_MEMORY,
    ALLGATHER_SINGLE_COPY,
    ALLGATHER_ALGORITHM_COUNT,
};

chorus_status allreduce_ring(const struct allreduce_args *args);
chorus_status allreduce_recursive_doubling(const struct allreduce_args *args);
chorus_status allreduce_rabenseifner(const struct allreduce_args *args);
chorus_status allreduce_hierarchical(const struct allreduce_args *args);
chorus_status broadcast_binomial(const struct broadcast_args *args);
chorus_status broadcast_pipelined_chain(const struct broadcast_args *args);
chorus_status broadcast_shared_memory(const struct broadcast_args *args);
chorus_status broadcast_single_copy(const struct broadcast_args *args);
chorus_status allgather_ring(const struct allgather_args *args);
chorus_status allgather_bruck(const struct allgather_args *args);
chorus_status allgather_shared_memory(const struct allgather_args *args);
chorus_status allgather_single_copy(const struct allgather_args *args);

/* The algorithms of `collective`, and how many there are. */
const struct algorithm *algorithm_table(chorus_collective collective, size_t *count);
/* Index of the algorithm called `name`, or -1. */
int algorithm_find(chorus_collective collective, const char *name);
/* "ring, recursive_doubling, ..." (malloc'd). */
char *algorithm_names(chorus_collective collective);

/* Chooses an algorithm: `forced` (an index, or -1 for the tuning table) for a message of
 * `bytes` on `nranks` ranks, `local_ranks` per host when every host runs the same number, else
 * 1. A forced algorithm whose host need is not met gives way to its fallback. Identical on
 * every rank for identical arguments. */
int algorithm_select(chorus_collective collective, int forced, size_t bytes, int nranks,
                     int local_ranks);

/* Splits `count` items into `parts` nearly equal contiguous parts: part i starts at
 * part_start(i) and the first count % parts parts have one more item. */
static inline size_t part_start(size_t count, size_t parts, size_t index)
{
    size_t base = count / parts, extra = count % parts;
    return index * base + (index < extra ? index : extra);
}

static inline size_t part_length(size_t count, size_t parts, size_t index)
{
    return count / parts + (index < count % parts ? 1 : 0);
}

/* Tags of the data communicator. Collectives run one at a time there, so a tag only has to
 * keep the phases of one algorithm apart. */
enum {
    TAG_RING_REDUCE_SCATTER = 100,
    TAG_RING_ALLGATHER = 101,
    TAG_FOLD = 110,
    TAG_EXCHANGE = 111,
    TAG_UNFOLD = 112,
    TAG_BROADCAST = 120,
    TAG_ALLGATHER = 130,
};

#endif
