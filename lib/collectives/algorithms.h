/*
 * algorithms.h — what every host collective algorithm receives, the table of algorithms per
 * collective, and how one is chosen. Each algorithm lives in its own file
 * (<collective>_<algorithm>.c) and is written against the transport interface only.
 */
#ifndef CHORUS_ALGORITHMS_H
#define CHORUS_ALGORITHMS_H

#include "../core/algorithm_names.h"
#include "../core/common.h"
#include "../core/scratch.h"
#include "../transport/transport.h"


struct node_segment;
struct small_segment;
struct allreduce_piece;
struct selection_rows;
struct quantize_scheme;
struct topk_scheme;

/* Allreduce in place: every rank's `buffer` ends as the reduction of all ranks' buffers. */
struct allreduce_args {
    struct transport *transport;
    struct scratch *scratch;
    struct node_segment *node; /* this host's shared segment (hierarchical), or NULL */
    struct small_segment *small; /* every rank on this host: its small-message slots, or NULL */
    void *buffer;
    /* Instead of `buffer` (NULL then), for the hierarchical algorithm only: the buffer is these
     * pieces one after the other, read from their inputs, written to their outputs. */
    const struct allreduce_piece *pieces;
    size_t piece_count;
    size_t count;
    chorus_dtype dtype;
    chorus_op op; /* AVERAGE reduces as SUM; the caller divides */
    /* When not NULL, the result is multiplied by *postscale (see reduce_scale_buffer). The algorithm
     * scales each element once, where it is final, instead of in a separate pass over the
     * whole buffer, and every rank ends with the same bits. */
    const double *postscale;
    /* The instance's tuned selection rows, for the algorithms that select another for a step of
     * theirs (the hierarchical one's cross-host step); NULL: none. */
    const struct selection_rows *tuned;
    /* INT8 or INT4 compression (float32 sums): how values are quantized, for the quantized
     * algorithm, which alone runs them; NULL otherwise. */
    const struct quantize_scheme *quantize;
    /* With `quantize` or `topk`: this rank's error feedback residual (count values, read and
     * rewritten, allreduce_quantized.c, allreduce_topk.c), or NULL for none. */
    float *error_feedback;
    /* TOPK compression (float32 sums): its k, for the top-k algorithm, which alone runs them;
     * NULL otherwise. */
    const struct topk_scheme *topk;
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

/* Reducescatter: every rank's `send` holds the whole tensor (`count` elements); rank r's
 * `recv` ends as elements offsets[r] .. offsets[r] + block_counts[r] - 1 of the reduction of all
 * ranks' tensors, multiplied by `factor` (1: left as reduced; AVERAGE reduces as SUM and comes
 * with its division in `factor`). Blocks are in rank order without gaps, the same on all ranks;
 * `send` is not written. */
struct reducescatter_args {
    struct transport *transport;
    struct scratch *scratch;
    struct node_segment *node; /* this host's shared segment (hierarchical), or NULL */
    const void *send;
    void *recv;
    const size_t *block_counts;
    const size_t *offsets;
    chorus_dtype dtype;
    chorus_op op;
    double factor;
    const struct selection_rows *tuned; /* as in allreduce_args */
};

/* Alltoall of blocks of any size (alltoallv): this rank's send_bytes[k] bytes at
 * send + send_offsets[k] go to rank k, and rank k's block for this rank lands at
 * recv + recv_offsets[k] (recv_bytes[k] bytes, what rank k sends here). */
struct alltoall_args {
    struct transport *transport;
    struct scratch *scratch;
    struct node_segment *node; /* the host's shared segment when all ranks share one host */
    /* Where rank k's block for this rank starts in rank k's send buffer (bytes), or NULL when
     * unknown: the single-copy algorithm reads it from there. */
    const size_t *remote_offsets;
    const void *send;
    const size_t *send_bytes;
    const size_t *send_offsets;
    void *recv;
    const size_t *recv_bytes;
    const size_t *recv_offsets;
    /* Every rank's every block has send_bytes[0] bytes, and every rank knows it (the ranks
     * agreed on it), so that Bruck's algorithm may forward blocks for others. */
    bool same_blocks;
};

typedef chorus_status (*allreduce_run)(const struct allreduce_args *args);
typedef chorus_status (*broadcast_run)(const struct broadcast_args *args);
typedef chorus_status (*allgather_run)(const struct allgather_args *args);
typedef chorus_status (*reducescatter_run)(const struct reducescatter_args *args);
typedef chorus_status (*alltoall_run)(const struct alltoall_args *args);

/* The arguments of one collective call, whichever it is. */
union collective_args {
    const struct allreduce_args *allreduce;
    const struct broadcast_args *broadcast;
    const struct allgather_args *allgather;
    const struct reducescatter_args *reducescatter;
    const struct alltoall_args *alltoall;
};

/* Where an algorithm's preconditions on the placement of the ranks hold. */
enum placement {
    PLACEMENT_ANY,
    PLACEMENT_SHARED_HOST, /* the same number, more than one, of ranks on every host */
    PLACEMENT_ONE_HOST,    /* every rank on one host */
};

/* An algorithm, indexed by its id (algorithm_names.h, which also has its name). An algorithm
 * declines a call it cannot run (no shared segment, cross-memory copies refused, a list of
 * pieces it cannot read) by returning CHORUS_ERR_NOT_SUPPORTED before it moves any data, on every
 * rank alike; the selection then tries the next rule. */
struct algorithm {
    const char *summary;
    union {
        allreduce_run allreduce;
        broadcast_run broadcast;
        allgather_run allgather;
        reducescatter_run reducescatter;
        alltoall_run alltoall;
    } run;
    enum placement needs; /* anything but PLACEMENT_ANY works through the host's segment */
    /* An algorithm that decides on each host alone from that host's tensors (the shared heap's:
     * whether they lie there) may decline on some hosts and run on others; where it declines,
     * `per_host_fallback` runs, whose calls across hosts are the same as its own. */
    bool declines_per_host;
    int per_host_fallback;
    /* It declines a list of pieces (a fused batch) on every rank alike. */
    bool declines_pieces;
};

chorus_status allreduce_ring(const struct allreduce_args *args);
chorus_status allreduce_recursive_doubling(const struct allreduce_args *args);
chorus_status allreduce_rabenseifner(const struct allreduce_args *args);
chorus_status allreduce_hierarchical(const struct allreduce_args *args);
chorus_status allreduce_shared_heap(const struct allreduce_args *args);
chorus_status allreduce_small_slots(const struct allreduce_args *args);
/* Adasum, in place (args->op is CHORUS_ADASUM, float32 or float64, no postscale). Chosen by the
 * op, not by the selection table: no other algorithm can run it. */
chorus_status allreduce_adasum(const struct allreduce_args *args);
/* The quantized allreduce of the INT8 and INT4 compressions (args->quantize set, float32, SUM
 * with the average's division in the postscale). Chosen by the compression, as Adasum by its
 * op: the others reduce exact values. */
chorus_status allreduce_quantized(const struct allreduce_args *args);
/* The sparse allreduce of the TOPK compression (args->topk set, float32, SUM with the
 * average's division in the postscale), chosen by the compression likewise; and whether it
 * exchanges pairs (else the sparsified tensor densely, its header says when). */
chorus_status allreduce_topk(const struct allreduce_args *args);
bool allreduce_topk_is_sparse(size_t count, size_t k, int nranks);
chorus_status broadcast_binomial(const struct broadcast_args *args);
chorus_status broadcast_pipelined_chain(const struct broadcast_args *args);
chorus_status broadcast_shared_memory(const struct broadcast_args *args);
chorus_status broadcast_single_copy(const struct broadcast_args *args);
chorus_status allgather_ring(const struct allgather_args *args);
chorus_status allgather_bruck(const struct allgather_args *args);
chorus_status allgather_shared_memory(const struct allgather_args *args);
chorus_status allgather_single_copy(const struct allgather_args *args);
chorus_status reducescatter_ring(const struct reducescatter_args *args);
chorus_status reducescatter_hierarchical(const struct reducescatter_args *args);
chorus_status reducescatter_recursive_halving(const struct reducescatter_args *args);
chorus_status alltoall_pairwise(const struct alltoall_args *args);
chorus_status alltoall_bruck(const struct alltoall_args *args);
chorus_status alltoall_single_copy(const struct alltoall_args *args);
chorus_status alltoall_shared_memory(const struct alltoall_args *args);

/* The algorithms of `collective`, indexed by id, and how many there are. */
const struct algorithm *algorithm_table(chorus_collective collective, size_t *count);

/* One row of the selection table: where its conditions hold, `algorithm` runs. Rows are tried
 * in order; the last row of each collective has no conditions. */
struct selection_rule {
    chorus_collective collective;
    int algorithm;
    enum placement placement;
    int min_ranks, max_ranks; /* inclusive; 0: no bound */
    size_t min_bytes;         /* inclusive */
    size_t max_bytes;         /* inclusive; 0: no bound */
    const char *provenance;   /* which machine and benchmark chose this row */
    bool power_of_two_ranks;  /* only when the ranks are a power of two */
    /* Last, so that the built-in rows' positional initializers keep their meaning. */
    int local_ranks; /* exactly this many ranks per host; 0: any (tuning files) */
    bool in_shared_heap; /* only for a tensor every rank put in the shared heap */
};

/* Whether `placement` holds for a job of `nranks` with `local_ranks` per host (as in
 * selection_query): what a row, or an algorithm's `needs`, asks of the placement. */
bool selection_placement_holds(enum placement placement, int nranks, int local_ranks);

/* The selection table, and how many rows it has. */
const struct selection_rule *selection_rules(size_t *count);

/* Rows measured on the job's own hosts (a tuning file's, lib/tuning), tried before the
 * built-in ones. The instance holds them; every query carries them. */
struct selection_rows {
    const struct selection_rule *rules;
    size_t count;
};

/* What the selection looks at: the call's bytes (the whole buffer, or every rank's blocks
 * together for an allgather), the job's ranks, and ranks per host when every host runs the same
 * number (else 1). `forced` is an algorithm id tried before the table, or -1; `tuned` the
 * instance's tuned rows (NULL: none); `in_shared_heap`: every rank's tensor lies in the shared
 * heap (an allreduce's, as negotiated). */
struct selection_query {
    size_t bytes;
    int nranks;
    int local_ranks;
    int forced;
    const struct selection_rows *tuned;
    bool in_shared_heap;
};

/* The algorithms to try for `query`, in order: the forced one, then those of the rows whose
 * conditions hold; returns how many (at most `capacity`, which ALGORITHMS_MAX holds). Identical on
 * every rank for identical queries. */
#define ALGORITHMS_MAX 16
size_t selection_candidates(chorus_collective collective, const struct selection_query *query,
                            int *candidates, size_t capacity);

/* The candidates at each size (powers of 2 from 1 B to 1 GiB) for `query` without its bytes,
 * runs of sizes with the same candidates merged: `row` gets each run's first and last size and
 * the algorithms, "a, then b" ("a (tuning file)" for a tuned row's). For chorus-info and the
 * log. */
void selection_plan(chorus_collective collective, const struct selection_query *query,
                    void (*row)(void *context, chorus_collective collective, size_t from,
                                size_t to, const char *chain),
                    void *context);

/* Runs the first candidate that does not decline. Returns its status; *ran is the id of the
 * algorithm that ran (or the last that declined, with CHORUS_ERR_NOT_SUPPORTED, when all did). */
chorus_status selection_run(chorus_collective collective, const struct selection_query *query,
                            union collective_args args, int *ran);

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
    TAG_REDUCESCATTER = 140,
    TAG_ALLTOALL = 150,
    TAG_ADASUM = 160,
    TAG_QUANTIZED_SHARDS = 170,
    TAG_QUANTIZED_SUMS = 171,
    TAG_ORDERED_RECORDS = 180, /* the ordered path's check (executor_exchange_records) */
};

#endif
