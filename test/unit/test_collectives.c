/*
 * test_collectives.c — every host algorithm over the thread transport, for 1 to 5 ranks, odd
 * counts (0, 1, ranks - 1, 7, 13, 1021, 65537), every dtype and every reduction, against the
 * reference each rank computes from all ranks' deterministic inputs.
 *
 * Linked with the UCX transport instead (test_collectives_ucx, common/rank_fabric.h), it runs
 * the algorithms that use point to point alone over UCX, one worker per rank thread: there the
 * transport is under test, not the reductions or the host's segment, so fewer dtypes and ops.
 */
#include "../../lib/collectives/algorithms.h"
#include "../../lib/transport/node_segment.h"
#include "../../lib/transport/small_segment.h"
#include "../../lib/transport/shared_heap.h"
#include "../../lib/collectives/pieces.h"
#include "../common/rank_fabric.h"
#include "../common/reference.h"

#include "../common/check_runner.h"

#include <check.h>
#include <sched.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rank_job {
    int rank;
    int nranks;
    struct rank_fabric *fabric;
    chorus_collective collective;
    int algorithm;
    chorus_dtype dtype;
    chorus_op op;
    size_t count; /* allreduce: elements; broadcast: bytes; allgather: base block bytes */
    int root;
    uint64_t seed;
    double postscale; /* 0: none */
    int calls;        /* allreduce: back-to-back calls, count growing by 37 each; 0 means 1 */
    int mixed_calls;  /* one host: this many calls rotating through the shared-memory algorithms */
    bool as_pieces;   /* hierarchical: the buffer as a list of pieces, every other out of place */
    /* allreduce buffers' memory: the heap on every rank, on even ranks, on the first half (at
     * 4 ranks, every rank of the first emulated host: one host in place, the other staged) */
    enum { HEAP_NONE, HEAP_EVERY_RANK, HEAP_EVEN_RANKS, HEAP_FIRST_HALF } heap;
    unsigned staging_areas; /* per rank in the segment; 0: the default */
    enum staging_stores stores; /* how the staged algorithms write them */
    enum { SINGLE_COPY_AS_PROBED, SINGLE_COPY_REFUSED, SINGLE_COPY_BROKEN } single_copy;
    chorus_status expected; /* what every rank's call must return (results checked when OK) */
    struct node_segment *node; /* hierarchical: this rank's host segment */
    struct small_segment *small; /* one host: this rank's small-message slots */
    int ran;                   /* the algorithm that ran after any declines */
    char failure[768];
};

/* Runs the job's algorithm through the selection, as the executor does: forced first, and where
 * it declines, the selection table's next candidate. */
static chorus_status run_forced(struct rank_job *job, size_t bytes, union collective_args args)
{
    int local_ranks = job->node != NULL ? job->node->local_size : 1;
    struct selection_query query = {.bytes = bytes,
                                    .nranks = job->nranks,
                                    .local_ranks = local_ranks,
                                    .forced = job->algorithm};
    return selection_run(job->collective, &query, args, &job->ran);
}

/* Allgather block sizes: varied, with empty blocks. */
static size_t block_size(size_t base, int rank)
{
    return rank % 3 == 1 ? 0 : base + (size_t)rank * 13;
}

/* The buffer as pieces of irregular sizes (0 included); odd pieces are out of place. */
struct split {
    struct allreduce_piece pieces[256];
    size_t count;
    unsigned char *outputs;
};

static void split_into_pieces(struct split *split, struct allreduce_args *args,
                              unsigned char *buffer, size_t bytes, size_t element)
{
    static const size_t sizes[] = {0, 1, 7, 300, 2, 1500, 0, 13, 4096, 61};
    split->outputs = malloc(bytes + 1);
    size_t count = 0, offset = 0;
    while (offset < bytes && count < 255) {
        size_t piece = sizes[count % 10] * element;
        piece = piece < bytes - offset ? piece : bytes - offset;
        unsigned char *output = count % 2 ? split->outputs + offset : buffer + offset;
        split->pieces[count] = (struct allreduce_piece){buffer + offset, output, offset, piece};
        count++;
        offset += piece;
    }
    split->pieces[count++] = (struct allreduce_piece){buffer + offset, buffer + offset, offset,
                                                      bytes - offset};
    split->count = count;
    args->buffer = NULL;
    args->pieces = split->pieces;
    args->piece_count = count;
}

/* Puts the out-of-place results back into `buffer` for the check; false when an out-of-place
 * input was modified. */
static bool join_pieces(struct split *split, unsigned char *buffer, const struct rank_job *job,
                        uint64_t seed, size_t count)
{
    size_t element = chorus_dtype_size(job->dtype);
    unsigned char *original = malloc(count * element + 1);
    reference_fill(original, count, job->dtype, job->op, seed, job->rank);
    bool inputs_kept = true;
    for (size_t i = 0; i < split->count; i++) {
        const struct allreduce_piece *piece = &split->pieces[i];
        if (piece->output == piece->input)
            continue;
        inputs_kept &= memcmp(buffer + piece->offset, original + piece->offset, piece->bytes) == 0;
        memcpy(buffer + piece->offset, piece->output, piece->bytes);
    }
    free(original);
    free(split->outputs);
    return inputs_kept;
}

/* Whether rank `rank`'s allreduce buffers lie in the shared heap. */
static bool in_heap(const struct rank_job *job, int rank)
{
    return job->heap == HEAP_EVERY_RANK || (job->heap == HEAP_EVEN_RANKS && rank % 2 == 0) ||
           (job->heap == HEAP_FIRST_HALF && rank < job->nranks / 2);
}

static int host_count(int nranks);

/* The shared-heap algorithm runs where every rank of this rank's host has its tensor in the
 * heap; elsewhere the hierarchical one runs instead (the algorithm table's per-host fallback). */
static int expected_heap_algorithm(const struct rank_job *job)
{
    int local = job->nranks / host_count(job->nranks), first = job->rank / local * local;
    for (int r = first; r < first + local; r++)
        if (!in_heap(job, r))
            return ALLREDUCE_HIERARCHICAL;
    return ALLREDUCE_SHARED_HEAP;
}

static void *run_rank(void *argument)
{
    struct rank_job *job = argument;
    struct transport transport;
    struct scratch scratch = {0};
    rank_fabric_transport(job->fabric, job->rank, &transport);
    chorus_status status = CHORUS_OK;
    /* Every rank makes every call, also after a wrong result: the others wait for it. */
    for (int call = 0; job->collective == CHORUS_ALLREDUCE && call < (job->calls ? job->calls : 1) &&
                       status == CHORUS_OK;
         call++) {
        size_t element = chorus_dtype_size(job->dtype);
        size_t count = job->count + (size_t)call * 37;
        uint64_t seed = job->seed + (uint64_t)call;
        bool heap = in_heap(job, job->rank);
        char heap_error[256];
        void *buffer = heap ? shared_heap_alloc(count * element + 1, heap_error,
                                                   sizeof heap_error)
                               : malloc(count * element + 1);
        reference_fill(buffer, count, job->dtype, job->op, seed, job->rank);
        struct allreduce_args args = {.transport = &transport,
                                      .scratch = &scratch,
                                      .node = job->node,
                                      .small = job->small,
                                      .buffer = buffer,
                                      .count = count,
                                      .dtype = job->dtype,
                                      .op = job->op,
                                      .postscale = job->postscale != 0 ? &job->postscale : NULL};
        struct split split = {0};
        if (job->as_pieces)
            split_into_pieces(&split, &args, buffer, count * element, element);
        status = run_forced(job, count * element, (union collective_args){.allreduce = &args});
        char why[256] = "";
        if (job->as_pieces && !join_pieces(&split, buffer, job, seed, count) && !job->failure[0])
            snprintf(job->failure, sizeof job->failure,
                     "rank %d, call %d: an out-of-place piece's input changed", job->rank, call);
        if (status == CHORUS_OK && !job->failure[0] &&
            reference_check_allreduce(buffer, count, job->dtype, job->op, job->nranks, NULL, seed,
                                      1.0, job->postscale != 0 ? job->postscale : 1.0, why,
                                      sizeof why) >= 0)
            snprintf(job->failure, sizeof job->failure, "rank %d, call %d: %s", job->rank, call,
                     why);
        if (status == CHORUS_OK && !job->failure[0] && job->algorithm == ALLREDUCE_SHARED_HEAP &&
            job->heap != HEAP_NONE && count > 0 && job->ran != expected_heap_algorithm(job))
            snprintf(job->failure, sizeof job->failure, "rank %d, call %d: %s ran, not %s",
                     job->rank, call, algorithm_name(CHORUS_ALLREDUCE, job->ran),
                     algorithm_name(CHORUS_ALLREDUCE, expected_heap_algorithm(job)));
        if (heap)
            shared_heap_free(buffer);
        else
            free(buffer);
    }
    if (job->collective == CHORUS_BROADCAST) {
        uint8_t *buffer = malloc(job->count + 1);
        if (job->rank == job->root)
            reference_fill_bytes(buffer, job->count, job->seed, job->root);
        else
            memset(buffer, 0xee, job->count);
        struct broadcast_args args = {&transport, &scratch, job->node, buffer, job->count,
                                      job->root};
        status = run_forced(job, job->count, (union collective_args){.broadcast = &args});
        long wrong = reference_check_bytes(buffer, job->count, job->seed, job->root);
        if (status == CHORUS_OK && wrong >= 0)
            snprintf(job->failure, sizeof job->failure, "rank %d: byte %ld wrong", job->rank,
                     wrong);
        free(buffer);
    } else if (job->collective == CHORUS_ALLGATHER) {
        size_t *bytes = calloc((size_t)job->nranks, sizeof *bytes);
        size_t *offsets = calloc((size_t)job->nranks, sizeof *offsets);
        size_t total = 0;
        for (int r = 0; r < job->nranks; r++) {
            bytes[r] = block_size(job->count, r);
            offsets[r] = total;
            total += bytes[r];
        }
        uint8_t *send = malloc(bytes[job->rank] + 1);
        uint8_t *recv = malloc(total + 1);
        memset(recv, 0xee, total);
        reference_fill_bytes(send, bytes[job->rank], job->seed, job->rank);
        struct allgather_args args = {&transport, &scratch, job->node, send, recv, bytes, offsets};
        status = run_forced(job, total, (union collective_args){.allgather = &args});
        for (int r = 0; status == CHORUS_OK && r < job->nranks && !job->failure[0]; r++) {
            long wrong = reference_check_bytes(recv + offsets[r], bytes[r], job->seed, r);
            if (wrong >= 0)
                snprintf(job->failure, sizeof job->failure,
                         "rank %d: block of rank %d wrong at byte %ld", job->rank, r, wrong);
        }
        free(send);
        free(recv);
        free(bytes);
        free(offsets);
    }
    bool single_copy = (job->collective == CHORUS_BROADCAST && job->ran == BROADCAST_SINGLE_COPY) ||
                       (job->collective == CHORUS_ALLGATHER && job->ran == ALLGATHER_SINGLE_COPY);
    if (job->single_copy == SINGLE_COPY_REFUSED && single_copy && job->nranks > 1)
        snprintf(job->failure, sizeof job->failure,
                 "rank %d: the single copy ran where copies are refused", job->rank);
    if (status != job->expected)
        snprintf(job->failure, sizeof job->failure, "rank %d: %s (expected %s): %s", job->rank,
                 chorus_status_name(status), chorus_status_name(job->expected), transport.error);
    scratch_release(&scratch);
    return NULL;
}

/* Calls in a row on one shared segment: hierarchical allreduce, shared-memory and single-copy
 * broadcast (the root moving round) and allgather in turn, of changing sizes. */
static void *run_mixed_rank(void *argument)
{
    struct rank_job *job = argument;
    struct rank_job call = *job;
    /* Every rank makes every call, also after a wrong result: the others wait for it. */
    for (int i = 0; i < job->mixed_calls; i++) {
        const chorus_collective kinds[] = {CHORUS_ALLREDUCE, CHORUS_BROADCAST, CHORUS_ALLGATHER,
                                           CHORUS_BROADCAST, CHORUS_ALLGATHER};
        const int algorithms[] = {ALLREDUCE_HIERARCHICAL, BROADCAST_SHARED_MEMORY,
                                  ALLGATHER_SHARED_MEMORY, BROADCAST_SINGLE_COPY,
                                  ALLGATHER_SINGLE_COPY};
        call.collective = kinds[i % 5];
        call.algorithm = algorithms[i % 5];
        call.dtype = CHORUS_INT32;
        call.op = CHORUS_SUM;
        call.count = 1000 + (size_t)i * 53 % 9000;
        call.root = i % job->nranks;
        call.seed = job->seed + (uint64_t)i;
        call.mixed_calls = 0;
        call.failure[0] = '\0';
        run_rank(&call);
        if (call.failure[0] && !job->failure[0])
            snprintf(job->failure, sizeof job->failure, "call %d: %.700s", i, call.failure);
    }
    return NULL;
}

/* The hierarchical allreduce runs on 2 emulated hosts when the ranks split evenly (4 ranks:
 * hosts {0,1} and {2,3}), else on one host. Small chunks make every buffer take several. */
#define TEST_CHUNK_BYTES 4096
/* The small-message slots: counts beyond them decline to the next algorithm of the table. */
#define TEST_SMALL_LIMIT 4096

static int host_count(int nranks)
{
    return nranks >= 4 && nranks % 2 == 0 ? 2 : 1;
}

/* Runs one collective on `nranks` threads; returns the first rank's failure or "". */
static void run_case(struct rank_job prototype, int nranks, char *failure, size_t failure_size)
{
    struct rank_fabric *fabric = rank_fabric_create(nranks);
    struct rank_job jobs[5];
    pthread_t threads[5];
    size_t table_size = 0;
    bool one_host_segment =
        prototype.mixed_calls > 0 ||
        algorithm_table(prototype.collective, &table_size)[prototype.algorithm].needs ==
            PLACEMENT_ONE_HOST;
    bool hierarchical =
        one_host_segment ||
        algorithm_table(prototype.collective, &table_size)[prototype.algorithm].needs ==
            PLACEMENT_SHARED_HOST;
    int hosts = one_host_segment ? 1 : host_count(nranks), local_size = nranks / hosts;
    struct node_segment *segments[2] = {NULL, NULL};
    struct thread_fabric *cross_fabrics[5] = {NULL};
    struct transport cross[5];
    for (int h = 0; hierarchical && h < hosts; h++)
        segments[h] =
            node_segments_create_local(local_size, TEST_CHUNK_BYTES, prototype.staging_areas,
                                       prototype.stores);
    for (int r = 0; hierarchical && r < local_size; r++) {
        if (prototype.single_copy == SINGLE_COPY_REFUSED)
            segments[0][r].single_copy = false;
        /* Local rank 1 sees a process that does not exist where rank 0 is: its copies from
         * rank 0 fail (rank 1 always reads from rank 0: its part of the broadcast from root 0,
         * rank 0's non-empty block of the allgather). */
        if (prototype.single_copy == SINGLE_COPY_BROKEN && r == 1)
            segments[0][r].pids[0] = -1;
    }
    for (int l = 0; hierarchical && hosts > 1 && l < local_size; l++)
        cross_fabrics[l] = thread_fabric_create(hosts);
    /* One host: the small-slots algorithm's slots (a call beyond their capacity declines). */
    struct small_segment *small =
        one_host_segment ? small_segments_create_local(nranks, TEST_SMALL_LIMIT) : NULL;
    for (int r = 0; r < nranks; r++) {
        jobs[r] = prototype;
        jobs[r].rank = r;
        jobs[r].nranks = nranks;
        jobs[r].fabric = fabric;
        jobs[r].failure[0] = '\0';
        jobs[r].small = small != NULL ? &small[r] : NULL;
        if (hierarchical) {
            int host = r / local_size, local = r % local_size;
            jobs[r].node = &segments[host][local];
            if (hosts > 1) {
                transport_threads_init(&cross[r], cross_fabrics[local], host);
                jobs[r].node->cross = &cross[r];
            }
        }
        pthread_create(&threads[r], NULL, prototype.mixed_calls > 0 ? run_mixed_rank : run_rank,
                       &jobs[r]);
    }
    failure[0] = '\0';
    for (int r = 0; r < nranks; r++) {
        pthread_join(threads[r], NULL);
        if (jobs[r].failure[0] && !failure[0])
            snprintf(failure, failure_size, "%s", jobs[r].failure);
    }
    for (int h = 0; h < 2; h++)
        node_segments_destroy_local(segments[h]);
    small_segments_destroy_local(small);
    for (int l = 0; l < 5; l++)
        thread_fabric_destroy(cross_fabrics[l]);
    rank_fabric_release(fabric, failure[0] == '\0');
}

static void assert_case_passes(struct rank_job job, int nranks)
{
    char failure[512];
    run_case(job, nranks, failure, sizeof failure);
    ck_assert_msg(failure[0] == '\0', "%d ranks: %s", nranks, failure);
}

static const chorus_op reduce_ops[] = {CHORUS_SUM, CHORUS_MIN, CHORUS_MAX, CHORUS_PRODUCT};

static bool over_ucx(void)
{
    return strcmp(rank_fabric_kind(), "ucx") == 0;
}

/* Whether a case runs over this build's transport: over UCX, the algorithms that use point to
 * point alone (variant: past the table, the streaming-stores runs of the segment's), and of the
 * allreduce's dtypes and ops (-1: any) a float summed and an integer type maximized. */
static bool runs_here(chorus_collective collective, size_t variant, int dtype, int op)
{
    size_t table_size = 0;
    const struct algorithm *table = algorithm_table(collective, &table_size);
    return !over_ucx() || (variant < table_size && table[variant].needs == PLACEMENT_ANY &&
                           (dtype < 0 || (dtype == CHORUS_FLOAT32 && op == CHORUS_SUM) ||
                            (dtype == CHORUS_INT16 && op == CHORUS_MAX)));
}

START_TEST(allreduce_every_algorithm_dtype_op_and_count)
{
    int nranks = _i;
    size_t counts[] = {0, 1, (size_t)nranks - 1, 7, 13, 1021, 65537};
    size_t algorithms = algorithm_count(CHORUS_ALLREDUCE);
    for (size_t variant = 0; variant < algorithms + 1; variant++)
        for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; dtype++)
            for (size_t o = 0; o < sizeof reduce_ops / sizeof reduce_ops[0]; o++)
                for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
                    if (!runs_here(CHORUS_ALLREDUCE, variant, dtype, reduce_ops[o]))
                        continue;
                    /* Every algorithm, then the hierarchical one with streaming stores. */
                    size_t a = variant < algorithms ? variant : ALLREDUCE_HIERARCHICAL;
                    struct rank_job job = {.collective = CHORUS_ALLREDUCE,
                                           .algorithm = (int)a,
                                           .dtype = (chorus_dtype)dtype,
                                           .op = reduce_ops[o],
                                           .count = counts[c],
                                           .seed = 1000 + c * 7 + o,
                                           /* every other sum is scaled, as averages are
                                            * (not bools, which take no scale factors) */
                                           .postscale = reduce_ops[o] == CHORUS_SUM && c % 2 &&
                                                                dtype != CHORUS_BOOL
                                                            ? 0.25
                                                            : 0,
                                           .stores = variant < algorithms
                                                         ? STAGING_STORES_AUTO
                                                         : STAGING_STORES_STREAMING};
                    char failure[512];
                    run_case(job, nranks, failure, sizeof failure);
                    ck_assert_msg(failure[0] == '\0', "%s%s, %d ranks, %s %s, count %zu: %s",
                                  algorithm_name(CHORUS_ALLREDUCE, (int)a), variant < algorithms ? "" : " (streaming)",
                                  nranks, chorus_dtype_name(job.dtype), chorus_op_name(job.op),
                                  job.count, failure);
                }
}
END_TEST

/* Large enough that the ring runs several pipelined segments per chunk. */
START_TEST(allreduce_large_buffers_are_pipelined_correctly)
{
    int nranks = _i;
    size_t algorithms = algorithm_count(CHORUS_ALLREDUCE);
    const chorus_dtype dtypes[] = {CHORUS_FLOAT32, CHORUS_BFLOAT16, CHORUS_INT64};
    for (size_t variant = 0; variant < algorithms + 1; variant++)
        for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
            /* Over UCX the ring alone, the algorithm for large buffers. */
            if (!runs_here(CHORUS_ALLREDUCE, variant, (int)dtypes[d], CHORUS_SUM) ||
                (over_ucx() && variant != ALLREDUCE_RING))
                continue;
            /* Every algorithm, then the hierarchical one with streaming stores. */
            size_t a = variant < algorithms ? variant : ALLREDUCE_HIERARCHICAL;
            struct rank_job job = {.collective = CHORUS_ALLREDUCE,
                                   .algorithm = (int)a,
                                   .dtype = dtypes[d],
                                   .op = CHORUS_SUM,
                                   .count = 1000003,
                                   .seed = 4242 + d,
                                   .stores = variant < algorithms ? STAGING_STORES_AUTO
                                                                       : STAGING_STORES_STREAMING};
            char failure[512];
            run_case(job, nranks, failure, sizeof failure);
            ck_assert_msg(failure[0] == '\0', "%s, %d ranks, %s, count %zu: %s", algorithm_name(CHORUS_ALLREDUCE, (int)a),
                          nranks, chorus_dtype_name(job.dtype), job.count, failure);
        }
}
END_TEST

/* Calls in a row on one segment, each a different length, so the chunks' slices fall in other
 * places every call, while a slow rank may still be copying the previous result out: with two
 * staging areas and four, with ordinary and streaming stores. */
START_TEST(hierarchical_back_to_back_calls_share_the_segment_safely)
{
    int nranks = _i;
    const struct {
        unsigned areas;
        enum staging_stores stores;
    } setups[] = {{2, STAGING_STORES_CACHED},
                  {4, STAGING_STORES_CACHED},
                  {2, STAGING_STORES_STREAMING},
                  {4, STAGING_STORES_STREAMING}};
    for (size_t d = 0; d < sizeof setups / sizeof setups[0]; d++) {
        struct rank_job job = {.collective = CHORUS_ALLREDUCE,
                               .algorithm = ALLREDUCE_HIERARCHICAL,
                               .dtype = CHORUS_INT32,
                               .op = CHORUS_SUM,
                               .count = 2000,
                               .calls = 400,
                               .staging_areas = setups[d].areas,
                               .stores = setups[d].stores,
                               .seed = 31337 + d};
        assert_case_passes(job, nranks);
    }
}
END_TEST

/* A fused allreduce reduced where its tensors lie: irregular pieces, half out of place. */
START_TEST(hierarchical_reduces_a_list_of_pieces)
{
    int nranks = _i;
    const chorus_dtype dtypes[] = {CHORUS_FLOAT32, CHORUS_INT64, CHORUS_BFLOAT16, CHORUS_UINT8};
    size_t counts[] = {1, 7, 1021, 65537};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            struct rank_job job = {.collective = CHORUS_ALLREDUCE,
                                   .algorithm = ALLREDUCE_HIERARCHICAL,
                                   .dtype = dtypes[d],
                                   .op = c % 2 ? CHORUS_SUM : CHORUS_MAX,
                                   .count = counts[c],
                                   .as_pieces = true,
                                   .postscale = c == 2 ? 0.5 : 0,
                                   .stores = d % 2 ? STAGING_STORES_STREAMING
                                                   : STAGING_STORES_CACHED,
                                   .seed = 606 + c};
            assert_case_passes(job, nranks);
        }
}
END_TEST

/* Tensors in the shared heap: reduced in place by the shared-heap algorithm where every rank's
 * lies there (each rank's slice straight from every buffer into every buffer), staged by the
 * hierarchical one where only some ranks' do, and across 2 emulated hosts in place on both, or
 * on one while the other stages; calls in a row whose lengths change, so that slices move
 * between calls. */
START_TEST(shared_heap_reduces_in_place_or_declines_per_host)
{
    int nranks = _i;
    const struct {
        chorus_dtype dtype;
        chorus_op op;
        size_t count;
        double postscale;
    } cases[] = {{CHORUS_FLOAT32, CHORUS_SUM, 1, 0},
                 {CHORUS_FLOAT64, CHORUS_SUM, 100003, 0.25},
                 {CHORUS_INT32, CHORUS_MAX, 4099, 0},
                 {CHORUS_FLOAT16, CHORUS_SUM, 65537, 0},
                 {CHORUS_FLOAT32, CHORUS_PRODUCT, 3, 0}};
    for (int heap = HEAP_EVERY_RANK; heap <= HEAP_FIRST_HALF; heap++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            struct rank_job job = {.collective = CHORUS_ALLREDUCE,
                                   .algorithm = ALLREDUCE_SHARED_HEAP,
                                   .dtype = cases[c].dtype,
                                   .op = cases[c].op,
                                   .count = cases[c].count,
                                   .calls = 12,
                                   .postscale = cases[c].postscale,
                                   .heap = heap,
                                   .stores = c % 2 ? STAGING_STORES_STREAMING
                                                   : STAGING_STORES_CACHED,
                                   .seed = 4242 + c};
            assert_case_passes(job, nranks);
        }
}
END_TEST

START_TEST(shared_memory_algorithms_back_to_back_share_the_segment_safely)
{
    int nranks = _i;
    struct rank_job job = {.mixed_calls = 300, .seed = 2718};
    assert_case_passes(job, nranks);
    job.stores = STAGING_STORES_STREAMING;
    assert_case_passes(job, nranks);
}
END_TEST

/* Single-copy broadcast and allgather: where the host refuses cross-memory copies they stage
 * through the segment instead; where a copy fails on one rank, every rank's call fails. */
START_TEST(single_copy_falls_back_or_fails_on_every_rank)
{
    int nranks = _i;
    struct node_segment *probe =
        node_segments_create_local(1, TEST_CHUNK_BYTES, 2, STAGING_STORES_AUTO);
    bool available = probe->single_copy;
    node_segments_destroy_local(probe);
    const chorus_collective kinds[] = {CHORUS_BROADCAST, CHORUS_ALLGATHER};
    const int algorithms[] = {BROADCAST_SINGLE_COPY, ALLGATHER_SINGLE_COPY};
    for (int k = 0; k < 2; k++) {
        struct rank_job job = {.collective = kinds[k],
                               .algorithm = algorithms[k],
                               .count = 70001,
                               .seed = 31,
                               .single_copy = SINGLE_COPY_REFUSED};
        assert_case_passes(job, nranks);
        if (!available || nranks < 2)
            continue;
        job.single_copy = SINGLE_COPY_BROKEN;
        job.expected = CHORUS_ERR_INTERNAL;
        assert_case_passes(job, nranks);
    }
    if (!available)
        printf("single_copy: cross-memory copies refused here; only the fallback was tested\n");
}
END_TEST

/* An allgather's layout for `nranks` blocks of `bytes` each, in rank order. */
static void equal_blocks(size_t *blocks, size_t *offsets, int nranks, size_t bytes)
{
    for (int r = 0; r < nranks; r++) {
        blocks[r] = bytes;
        offsets[r] = (size_t)r * bytes;
    }
}

/* A rank of the host that stopped after a fatal error (it poisoned its counter and never
 * calls): the others' shared-memory algorithms must return instead of waiting for it, see that
 * it failed, and copy nothing to or from it. */
struct beside_poisoned {
    struct node_segment *node;
    struct rank_fabric *fabric;
    int rank, nranks, victim;
    int poisoned;       /* what node_segment_poisoned() said after the calls */
    bool copy_refused;  /* node_copy_from_peer(victim) failed */
};

static void *run_beside_poisoned_rank(void *argument)
{
    struct beside_poisoned *job = argument;
    if (job->rank == job->victim) {
        node_segment_poison(job->node);
        return NULL;
    }
    enum { COUNT = 70001 };
    struct transport transport;
    struct scratch scratch = {0};
    rank_fabric_transport(job->fabric, job->rank, &transport);
    float *data = calloc((size_t)COUNT * (size_t)job->nranks, sizeof *data);
    struct allreduce_args reduce = {.transport = &transport, .scratch = &scratch,
                                    .node = job->node, .buffer = data, .count = COUNT,
                                    .dtype = CHORUS_FLOAT32, .op = CHORUS_SUM};
    allreduce_hierarchical(&reduce);
    struct broadcast_args broadcast = {.transport = &transport, .scratch = &scratch,
                                       .node = job->node, .buffer = data,
                                       .bytes = COUNT * sizeof *data, .root = job->victim};
    broadcast_shared_memory(&broadcast);
    broadcast_single_copy(&broadcast);
    size_t blocks[5], offsets[5];
    equal_blocks(blocks, offsets, job->nranks, COUNT * sizeof *data);
    struct allgather_args gather = {.transport = &transport, .scratch = &scratch,
                                    .node = job->node, .send = data + (size_t)job->rank * COUNT,
                                    .recv = data, .block_bytes = blocks, .offsets = offsets};
    allgather_shared_memory(&gather);
    allgather_single_copy(&gather);
    float *exchanged = calloc((size_t)COUNT * (size_t)job->nranks, sizeof *exchanged);
    struct alltoall_args exchange = {.transport = &transport, .scratch = &scratch,
                                     .node = job->node, .send = data, .send_bytes = blocks,
                                     .send_offsets = offsets, .recv = exchanged,
                                     .recv_bytes = blocks, .recv_offsets = offsets};
    alltoall_shared_memory(&exchange);
    free(exchanged);
    job->poisoned = node_segment_poisoned(job->node);
    float word = 0;
    job->copy_refused = !node_copy_from_peer(job->node, job->victim, &word,
                                             (uint64_t)(uintptr_t)data, sizeof word);
    free(data);
    scratch_release(&scratch);
    return NULL;
}

START_TEST(a_poisoned_rank_is_not_waited_for)
{
    int nranks = _i;
    for (int victim = 0; victim < nranks; victim++) {
        struct rank_fabric *fabric = rank_fabric_create(nranks);
        struct node_segment *segments =
            node_segments_create_local(nranks, TEST_CHUNK_BYTES, 0, STAGING_STORES_AUTO);
        struct beside_poisoned jobs[5];
        pthread_t threads[5];
        for (int r = 0; r < nranks; r++) {
            jobs[r] = (struct beside_poisoned){&segments[r], fabric, r, nranks, victim, -1, false};
            pthread_create(&threads[r], NULL, run_beside_poisoned_rank, &jobs[r]);
        }
        for (int r = 0; r < nranks; r++)
            pthread_join(threads[r], NULL);
        for (int r = 0; r < nranks; r++) {
            if (r == victim)
                continue;
            ck_assert_msg(jobs[r].poisoned == victim, "%d ranks, victim %d: rank %d saw %d",
                          nranks, victim, r, jobs[r].poisoned);
            ck_assert_msg(jobs[r].copy_refused, "%d ranks: rank %d copied from the victim",
                          nranks, r);
        }
        node_segments_destroy_local(segments);
        rank_fabric_release(fabric, false);
    }
}
END_TEST

/* A rank that stopped after a fatal error and never calls: the others' algorithms over the
 * transport must return once their waits are interrupted (abort.h), with the reason, instead of
 * waiting for it forever. A rank whose part needs nothing from it may still finish correctly. */
struct beside_stopped {
    struct rank_fabric *fabric;
    chorus_collective collective;
    int algorithm, rank, nranks, victim;
    _Atomic bool *stopped;
    chorus_status status;
    char error[512];
};

static chorus_status victim_stopped(void *context, char *error, size_t error_size)
{
    if (!atomic_load((_Atomic bool *)context))
        return CHORUS_OK;
    snprintf(error, error_size, "stopped because the victim failed");
    return CHORUS_ERR_INTERNAL;
}

static void *run_beside_stopped_rank(void *argument)
{
    struct beside_stopped *job = argument;
    if (job->rank == job->victim) {
        atomic_store(job->stopped, true);
        return NULL;
    }
    enum { COUNT = 65537 };
    struct transport transport;
    struct scratch scratch = {0};
    rank_fabric_transport(job->fabric, job->rank, &transport);
    transport.interrupted = victim_stopped;
    transport.interrupt_context = job->stopped;
    float *data = calloc((size_t)COUNT * (size_t)job->nranks, sizeof *data);
    size_t table_size = 0;
    const struct algorithm *algorithm =
        &algorithm_table(job->collective, &table_size)[job->algorithm];
    size_t blocks[5], offsets[5];
    equal_blocks(blocks, offsets, job->nranks, COUNT * sizeof *data);
    if (job->collective == CHORUS_ALLREDUCE) {
        struct allreduce_args args = {.transport = &transport, .scratch = &scratch,
                                      .buffer = data, .count = COUNT, .dtype = CHORUS_FLOAT32,
                                      .op = CHORUS_SUM};
        job->status = algorithm->run.allreduce(&args);
    } else if (job->collective == CHORUS_BROADCAST) {
        struct broadcast_args args = {.transport = &transport, .scratch = &scratch,
                                      .buffer = data, .bytes = COUNT * sizeof *data,
                                      .root = job->victim};
        job->status = algorithm->run.broadcast(&args);
    } else {
        struct allgather_args args = {.transport = &transport, .scratch = &scratch,
                                      .send = data + (size_t)job->rank * COUNT, .recv = data,
                                      .block_bytes = blocks, .offsets = offsets};
        job->status = algorithm->run.allgather(&args);
    }
    snprintf(job->error, sizeof job->error, "%s", transport.error);
    free(data);
    scratch_release(&scratch);
    return NULL;
}

START_TEST(waits_for_a_stopped_rank_are_interrupted)
{
    int nranks = _i;
    const chorus_collective collectives[] = {CHORUS_ALLREDUCE, CHORUS_BROADCAST,
                                             CHORUS_ALLGATHER};
    for (int c = 0; c < 3; c++) {
        size_t table_size = 0;
        const struct algorithm *table = algorithm_table(collectives[c], &table_size);
        for (size_t a = 0; a < table_size; a++) {
            if (table[a].needs != PLACEMENT_ANY)
                continue;
            /* Over UCX, the last rank alone: every other's wait goes through the same loop. */
            for (int victim = over_ucx() ? nranks - 1 : 0; victim < nranks; victim++) {
                struct rank_fabric *fabric = rank_fabric_create(nranks);
                _Atomic bool stopped = false;
                struct beside_stopped jobs[5];
                pthread_t threads[5];
                for (int r = 0; r < nranks; r++) {
                    jobs[r] = (struct beside_stopped){fabric, collectives[c], (int)a, r, nranks,
                                                      victim, &stopped, CHORUS_OK, ""};
                    pthread_create(&threads[r], NULL, run_beside_stopped_rank, &jobs[r]);
                }
                int interrupted = 0;
                for (int r = 0; r < nranks; r++) {
                    pthread_join(threads[r], NULL);
                    if (r == victim || jobs[r].status == CHORUS_OK)
                        continue;
                    interrupted++;
                    ck_assert_msg(strstr(jobs[r].error, "the victim failed") != NULL,
                                  "%s %s, %d ranks, victim %d: rank %d: %s",
                                  chorus_collective_name(collectives[c]), algorithm_name(collectives[c], (int)a), nranks,
                                  victim, r, jobs[r].error);
                }
                /* Someone always needs the victim's data. */
                ck_assert_msg(interrupted > 0, "%s %s, %d ranks, victim %d: nobody noticed",
                              chorus_collective_name(collectives[c]), algorithm_name(collectives[c], (int)a), nranks,
                              victim);
                rank_fabric_release(fabric, false); /* the victim's messages stay */
            }
        }
    }
}
END_TEST

/* irecv_up_to takes a message shorter than its buffer, in send order; a plain receive still
 * refuses one of another length. Rank 0 sends, rank 1 receives. */
struct shorter_job {
    struct rank_fabric *fabric;
    int rank;
    chorus_status plain; /* rank 1: the plain receive's status */
    char failure[640];
};

static void *run_shorter_messages(void *argument)
{
    struct shorter_job *job = argument;
    struct transport transport;
    rank_fabric_transport(job->fabric, job->rank, &transport);
    unsigned char sent[2][300], received[2][512];
    for (int m = 0; m < 2; m++)
        for (int i = 0; i < 300; i++)
            sent[m][i] = (unsigned char)(m * 101 + i * 7);
    size_t lengths[2] = {5, 300};
    struct transport_request requests[2];
    if (job->rank == 0) {
        for (int m = 0; m < 2; m++)
            transport_isend(&transport, sent[m], lengths[m], 1, 7, &requests[m]);
        chorus_status status = transport_waitall(&transport, 2, requests);
        if (status != CHORUS_OK)
            snprintf(job->failure, sizeof job->failure, "sends: %s", transport.error);
        uint32_t odd = 1;
        transport_isend(&transport, &odd, sizeof odd, 1, 8, &requests[0]);
        transport_waitall(&transport, 1, requests);
        return NULL;
    }
    memset(received, 0xee, sizeof received);
    for (int m = 0; m < 2; m++)
        transport_irecv_up_to(&transport, received[m], sizeof received[m], 0, 7, &requests[m]);
    chorus_status status = transport_waitall(&transport, 2, requests);
    if (status != CHORUS_OK)
        snprintf(job->failure, sizeof job->failure, "receives up to: %s", transport.error);
    for (int m = 0; m < 2 && job->failure[0] == '\0'; m++)
        if (memcmp(received[m], sent[m], lengths[m]) != 0 || received[m][lengths[m]] != 0xee)
            snprintf(job->failure, sizeof job->failure, "message %d arrived wrong", m);
    uint64_t wider = 0;
    transport_irecv(&transport, &wider, sizeof wider, 0, 8, &requests[0]);
    job->plain = transport_waitall(&transport, 1, requests);
    return NULL;
}

START_TEST(a_receive_up_to_a_length_takes_a_shorter_message)
{
    struct rank_fabric *fabric = rank_fabric_create(2);
    struct shorter_job jobs[2] = {{.fabric = fabric, .rank = 0}, {.fabric = fabric, .rank = 1}};
    pthread_t threads[2];
    for (int r = 0; r < 2; r++)
        pthread_create(&threads[r], NULL, run_shorter_messages, &jobs[r]);
    for (int r = 0; r < 2; r++)
        pthread_join(threads[r], NULL);
    for (int r = 0; r < 2; r++)
        ck_assert_msg(jobs[r].failure[0] == '\0', "%s, rank %d: %s", rank_fabric_kind(), r,
                      jobs[r].failure);
    ck_assert_msg(jobs[1].plain != CHORUS_OK, "%s: a plain receive took a shorter message",
                  rank_fabric_kind());
    rank_fabric_release(fabric, false);
}
END_TEST

START_TEST(broadcast_every_algorithm_root_and_size)
{
    int nranks = _i;
    size_t sizes[] = {0, 1, 7, 1021, 600000};
    size_t algorithms = algorithm_count(CHORUS_BROADCAST);
    for (size_t variant = 0; variant < algorithms + 1; variant++)
        for (int root = 0; root < nranks; root++)
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
                if (!runs_here(CHORUS_BROADCAST, variant, -1, -1))
                    continue;
                /* Every algorithm, then the shared segment's with streaming stores. */
                size_t a = variant < algorithms ? variant : BROADCAST_SHARED_MEMORY;
                struct rank_job job = {.collective = CHORUS_BROADCAST,
                                       .algorithm = (int)a,
                                       .count = sizes[s],
                                       .root = root,
                                       .seed = 77 + s,
                                       .stores = variant < algorithms
                                                     ? STAGING_STORES_AUTO
                                                     : STAGING_STORES_STREAMING};
                char failure[512];
                run_case(job, nranks, failure, sizeof failure);
                ck_assert_msg(failure[0] == '\0', "%s%s, %d ranks, root %d, %zu bytes: %s",
                              algorithm_name(CHORUS_BROADCAST, (int)a), variant < algorithms ? "" : " (streaming)",
                              nranks, root, job.count, failure);
            }
}
END_TEST

START_TEST(allgather_every_algorithm_with_uneven_blocks)
{
    int nranks = _i;
    size_t bases[] = {0, 1, 5, 4099};
    size_t algorithms = algorithm_count(CHORUS_ALLGATHER);
    for (size_t variant = 0; variant < algorithms + 1; variant++)
        for (size_t b = 0; b < sizeof bases / sizeof bases[0]; b++) {
            if (!runs_here(CHORUS_ALLGATHER, variant, -1, -1))
                continue;
            /* Every algorithm, then the shared segment's with streaming stores. */
            size_t a = variant < algorithms ? variant : ALLGATHER_SHARED_MEMORY;
            struct rank_job job = {.collective = CHORUS_ALLGATHER,
                                   .algorithm = (int)a,
                                   .count = bases[b],
                                   .seed = 99 + b,
                                   .stores = variant < algorithms
                                                 ? STAGING_STORES_AUTO
                                                 : STAGING_STORES_STREAMING};
            char failure[512];
            run_case(job, nranks, failure, sizeof failure);
            ck_assert_msg(failure[0] == '\0', "%s%s, %d ranks, base %zu bytes: %s",
                          algorithm_name(CHORUS_ALLGATHER, (int)a), variant < algorithms ? "" : " (streaming)",
                          nranks, job.count, failure);
        }
}
END_TEST

/* A reducescatter rank: its input is element i = (rank + 1) * (i % 7) - 3 (exact in float64),
 * with the whole's split into uneven blocks; it checks its block of the sum times a factor. */
struct scatter_job {
    struct rank_fabric *fabric;
    int rank, nranks, algorithm;
    size_t count;
    bool skewed; /* blocks by weights 0, 1, 2, 0, 1, 2, ... instead of Horovod's split */
    chorus_op op;
    double factor;
    long wrong;
    chorus_status status;
};

#define SCATTER_RANKS 8

/* The blocks of a skewed reducescatter: rank r's weighs r % 3 (ranks 0, 3, 6 get none), the
 * last rank takes what the division leaves. */
static void skewed_blocks(size_t count, size_t p, size_t *blocks, size_t *offsets)
{
    size_t weights = 0, start = 0;
    for (size_t r = 0; r < p; r++)
        weights += r % 3;
    for (size_t r = 0; r < p; r++) {
        blocks[r] = weights == 0 ? 0 : count * (r % 3) / weights;
        if (r == p - 1)
            blocks[r] = count - start;
        offsets[r] = start;
        start += blocks[r];
    }
}

static double scatter_input(int rank, size_t i)
{
    return (double)(rank + 1) * (double)(i % 7) - 3;
}

static void *run_scatter_rank(void *argument)
{
    struct scatter_job *job = argument;
    struct transport transport;
    struct scratch scratch = {0};
    rank_fabric_transport(job->fabric, job->rank, &transport);
    size_t p = (size_t)job->nranks;
    size_t blocks[SCATTER_RANKS], offsets[SCATTER_RANKS];
    for (size_t r = 0; r < p; r++) {
        blocks[r] = part_length(job->count, p, r);
        offsets[r] = part_start(job->count, p, r);
    }
    if (job->skewed)
        skewed_blocks(job->count, p, blocks, offsets);
    double *send = malloc((job->count + 1) * sizeof *send);
    double *recv = malloc((blocks[job->rank] + 1) * sizeof *recv);
    for (size_t i = 0; i < job->count; i++)
        send[i] = scatter_input(job->rank, i);
    struct reducescatter_args args = {.transport = &transport, .scratch = &scratch,
                                      .send = send, .recv = recv, .block_counts = blocks,
                                      .offsets = offsets, .dtype = CHORUS_FLOAT64,
                                      .op = job->op, .factor = job->factor};
    size_t table_size = 0;
    job->status =
        algorithm_table(CHORUS_REDUCESCATTER, &table_size)[job->algorithm].run.reducescatter(&args);
    for (size_t i = 0; job->status == CHORUS_OK && i < blocks[job->rank]; i++) {
        size_t whole = offsets[job->rank] + i;
        double expected = job->op == CHORUS_MAX ? -INFINITY : 0;
        for (int r = 0; r < job->nranks; r++)
            expected = job->op == CHORUS_MAX ? fmax(expected, scatter_input(r, whole))
                                             : expected + scatter_input(r, whole);
        job->wrong += recv[i] != expected * job->factor;
        /* The input is only read. */
        job->wrong += send[whole] != scatter_input(job->rank, whole);
    }
    free(send);
    free(recv);
    scratch_release(&scratch);
    return NULL;
}

START_TEST(reducescatter_with_uneven_blocks)
{
    int nranks = _i;
    size_t counts[] = {0, 1, 4, 7, 1021, 65537};
    const int algorithms[] = {REDUCESCATTER_RING, REDUCESCATTER_RECURSIVE_HALVING};
    for (size_t a = 0; a < sizeof algorithms / sizeof algorithms[0]; a++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
            for (int variant = 0; variant < 4; variant++) {
                /* Over UCX, even blocks summed and skewed ones maximized. */
                if (over_ucx() && (variant == 1 || variant == 2))
                    continue;
                struct rank_fabric *fabric = rank_fabric_create(nranks);
                struct scatter_job jobs[SCATTER_RANKS];
                pthread_t threads[SCATTER_RANKS];
                bool max = variant % 2 != 0, skewed = variant >= 2;
                for (int r = 0; r < nranks; r++) {
                    jobs[r] = (struct scatter_job){fabric,
                                                   r,
                                                   nranks,
                                                   algorithms[a],
                                                   counts[c],
                                                   skewed,
                                                   max ? CHORUS_MAX : CHORUS_SUM,
                                                   max ? 1.0 : 0.25,
                                                   0,
                                                   CHORUS_OK};
                    pthread_create(&threads[r], NULL, run_scatter_rank, &jobs[r]);
                }
                for (int r = 0; r < nranks; r++) {
                    pthread_join(threads[r], NULL);
                    ck_assert_msg(jobs[r].status == CHORUS_OK && jobs[r].wrong == 0,
                                  "%s, %d ranks, %zu elements%s, %s: rank %d: %s, %ld wrong",
                                  algorithm_name(CHORUS_REDUCESCATTER, algorithms[a]), nranks,
                                  counts[c], skewed ? " (skewed blocks)" : "",
                                  max ? "max" : "sum x 0.25", r,
                                  chorus_status_name(jobs[r].status), jobs[r].wrong);
                }
                rank_fabric_release(fabric, true);
            }
}
END_TEST

/* An alltoall rank: its block for rank `to` is bytes made from (rank, to, i); it checks the
 * block from every rank. Blocks have `block` bytes, or where the ranks did not agree on one size
 * (!same_blocks), a size that depends on the pair: 0, 1 or 2 times `block`, 4 times that from rank
 * 0 (so that the ranks' largest blocks differ). */
struct exchange_job {
    struct rank_fabric *fabric;
    struct node_segment *node; /* the host's segment, for the shared-memory algorithm */
    int rank, nranks, algorithm;
    size_t block;
    bool same_blocks;
    long wrong;
    chorus_status status;
};

static unsigned char exchange_byte(int from, int to, size_t i)
{
    return (unsigned char)(from * 131 + to * 31 + (int)i * 7 + 1);
}

static size_t exchange_block(const struct exchange_job *job, int from, int to)
{
    size_t scale = from == 0 ? 4 : 1;
    return job->same_blocks ? job->block : job->block * (size_t)((from + 2 * to) % 3) * scale;
}

#define EXCHANGE_RANKS 17

static void *run_exchange_rank(void *argument)
{
    struct exchange_job *job = argument;
    struct transport transport;
    struct scratch scratch = {0};
    rank_fabric_transport(job->fabric, job->rank, &transport);
    int p = job->nranks, me = job->rank;
    size_t send_bytes[EXCHANGE_RANKS], send_offsets[EXCHANGE_RANKS];
    size_t recv_bytes[EXCHANGE_RANKS], recv_offsets[EXCHANGE_RANKS];
    size_t sent = 0, received = 0;
    for (int r = 0; r < p; r++) {
        send_bytes[r] = exchange_block(job, me, r);
        send_offsets[r] = sent;
        sent += send_bytes[r];
        recv_bytes[r] = exchange_block(job, r, me);
        recv_offsets[r] = received;
        received += recv_bytes[r];
    }
    unsigned char *send = malloc(sent + 1);
    unsigned char *recv = calloc(received + 1, 1);
    for (int to = 0; to < p; to++)
        for (size_t i = 0; i < send_bytes[to]; i++)
            send[send_offsets[to] + i] = exchange_byte(me, to, i);
    struct alltoall_args args = {.transport = &transport,
                                 .scratch = &scratch,
                                 .node = job->node,
                                 .send = send,
                                 .send_bytes = send_bytes,
                                 .send_offsets = send_offsets,
                                 .recv = recv,
                                 .recv_bytes = recv_bytes,
                                 .recv_offsets = recv_offsets,
                                 .same_blocks = job->same_blocks};
    size_t table_size = 0;
    job->status = algorithm_table(CHORUS_ALLTOALL, &table_size)[job->algorithm].run.alltoall(&args);
    for (int from = 0; job->status == CHORUS_OK && from < p; from++)
        for (size_t i = 0; i < recv_bytes[from]; i++)
            job->wrong += recv[recv_offsets[from] + i] != exchange_byte(from, me, i);
    free(send);
    free(recv);
    scratch_release(&scratch);
    return NULL;
}

START_TEST(alltoall_moves_every_block)
{
    int nranks = _i;
    /* With 4 KiB staging areas, 1021-byte blocks take up to 8 rounds of the shared segment. */
    const size_t blocks[] = {1, 3, 16, 1021};
    const int algorithms[] = {ALLTOALL_BRUCK, ALLTOALL_PAIRWISE, ALLTOALL_SHARED_MEMORY};
    size_t algorithm_total = sizeof algorithms / sizeof algorithms[0];
    for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++)
        for (size_t a = 0; a < algorithm_total; a++)
            for (int same = 0; same < 2; same++) {
                if (!runs_here(CHORUS_ALLTOALL, (size_t)algorithms[a], -1, -1))
                    continue;
                struct rank_fabric *fabric = rank_fabric_create(nranks);
                struct node_segment *segments = node_segments_create_local(
                    nranks, TEST_CHUNK_BYTES, 0, STAGING_STORES_AUTO);
                struct exchange_job jobs[EXCHANGE_RANKS];
                pthread_t threads[EXCHANGE_RANKS];
                for (int r = 0; r < nranks; r++) {
                    jobs[r] = (struct exchange_job){fabric,        &segments[r], r,    nranks,
                                                    algorithms[a], blocks[b],    same, 0,
                                                    CHORUS_OK};
                    pthread_create(&threads[r], NULL, run_exchange_rank, &jobs[r]);
                }
                /* Bruck forwards blocks for others, so it runs only on blocks the ranks
                 * agreed are of one size. */
                chorus_status expected =
                    algorithms[a] == ALLTOALL_BRUCK && !same ? CHORUS_ERR_NOT_SUPPORTED : CHORUS_OK;
                for (int r = 0; r < nranks; r++) {
                    pthread_join(threads[r], NULL);
                    ck_assert_msg(jobs[r].status == expected && jobs[r].wrong == 0,
                                  "%s, %d ranks, blocks of %zu bytes%s: rank %d: %s, %ld wrong",
                                  algorithm_name(CHORUS_ALLTOALL, algorithms[a]), nranks, blocks[b],
                                  same ? "" : " (uneven)", r,
                                  chorus_status_name(jobs[r].status), jobs[r].wrong);
                }
                node_segments_destroy_local(segments);
                rank_fabric_release(fabric, true);
            }
}
END_TEST

/* The first candidate the selection offers for a call. */
static int first_choice(chorus_collective collective, int forced, size_t bytes, int nranks,
                        int local_ranks)
{
    struct selection_query query = {bytes, nranks, local_ranks, forced, NULL, false};
    int candidates[ALGORITHMS_MAX];
    size_t count = selection_candidates(collective, &query, candidates, ALGORITHMS_MAX);
    return count > 0 ? candidates[0] : -1;
}

/* Whether `algorithm` is among the candidates after `before`, which is among them too. */
static bool offered_after(chorus_collective collective, int before, int algorithm, size_t bytes,
                          int nranks, int local_ranks)
{
    struct selection_query query = {bytes, nranks, local_ranks, -1, NULL, false};
    int candidates[ALGORITHMS_MAX];
    size_t count = selection_candidates(collective, &query, candidates, ALGORITHMS_MAX);
    bool seen = false;
    for (size_t i = 0; i < count; i++) {
        if (seen && candidates[i] == algorithm)
            return true;
        seen |= candidates[i] == before;
    }
    return false;
}

START_TEST(selection_is_deterministic_and_covers_every_size)
{
    size_t rule_count = 0;
    const struct selection_rule *rules = selection_rules(&rule_count);
    for (int c = 0; c < CHORUS_COLLECTIVE_COUNT; c++) {
        size_t count = algorithm_count((chorus_collective)c);
        /* Each collective's last row has no conditions: every call has an algorithm that runs
         * anywhere, and it is not one that works through the host's segment. */
        const struct selection_rule *last = NULL;
        for (size_t i = 0; i < rule_count; i++)
            if (rules[i].collective == (chorus_collective)c)
                last = &rules[i];
        ck_assert_ptr_nonnull(last);
        ck_assert_msg(last->placement == PLACEMENT_ANY && !last->min_ranks && !last->max_ranks &&
                          !last->min_bytes && !last->max_bytes,
                      "%s: the last row has conditions", chorus_collective_name(c));
        size_t table_size = 0;
        ck_assert(algorithm_table((chorus_collective)c, &table_size)[last->algorithm].needs ==
                  PLACEMENT_ANY);
        for (int p = 1; p <= 64; p++)
            for (size_t bytes = 0; bytes < ((size_t)1 << 30); bytes = bytes * 2 + 1) {
                int local_ranks = p % 2 == 0 ? 2 : 1;
                int chosen = first_choice((chorus_collective)c, -1, bytes, p, local_ranks);
                ck_assert_int_ge(chosen, 0);
                ck_assert_int_lt(chosen, (int)count);
                ck_assert_int_eq(chosen, first_choice((chorus_collective)c, -1, bytes, p,
                                                      local_ranks));
            }
        /* A forced algorithm comes first. */
        int forced = (int)count - 1;
        ck_assert_int_eq(first_choice((chorus_collective)c, forced, 8, 4, 1), forced);
    }
    /* Forced where the host layout does not allow it: forced first, and the table behind it
     * for when it declines. */
    ck_assert_int_eq(first_choice(CHORUS_ALLREDUCE, ALLREDUCE_HIERARCHICAL, 1 << 20, 4, 1),
                     ALLREDUCE_HIERARCHICAL);
    /* One host: everything through the shared segment; a tensor every rank put in the shared
     * heap by the shared heap's algorithm, which declines (to the staged one) on a host where
     * one does not lie there after all. */
    ck_assert_int_eq(first_choice(CHORUS_ALLREDUCE, -1, 1 << 20, 4, 4), ALLREDUCE_HIERARCHICAL);
    /* Small ones on one host in the small-message slots, the heap's too; not across hosts. */
    ck_assert_int_eq(first_choice(CHORUS_ALLREDUCE, -1, 8, 4, 4), ALLREDUCE_SMALL_SLOTS);
    ck_assert_int_eq(first_choice(CHORUS_ALLREDUCE, -1, 64 << 10, 4, 4), ALLREDUCE_HIERARCHICAL);
    ck_assert_int_ne(first_choice(CHORUS_ALLREDUCE, -1, 8, 4, 2), ALLREDUCE_SMALL_SLOTS);
    struct selection_query heap = {.bytes = 1 << 20, .nranks = 4, .local_ranks = 4,
                                   .forced = -1, .in_shared_heap = true};
    int heap_candidates[ALGORITHMS_MAX];
    ck_assert_uint_ge(selection_candidates(CHORUS_ALLREDUCE, &heap, heap_candidates,
                                           ALGORITHMS_MAX), 2);
    ck_assert_int_eq(heap_candidates[0], ALLREDUCE_SHARED_HEAP);
    ck_assert_int_eq(heap_candidates[1], ALLREDUCE_HIERARCHICAL);
    heap.local_ranks = 1; /* no host shared: the heap means nothing */
    ck_assert_uint_ge(selection_candidates(CHORUS_ALLREDUCE, &heap, heap_candidates,
                                           ALGORITHMS_MAX), 1);
    ck_assert_int_ne(heap_candidates[0], ALLREDUCE_SHARED_HEAP);
    ck_assert_int_eq(first_choice(CHORUS_BROADCAST, -1, 1 << 20, 4, 4), BROADCAST_SHARED_MEMORY);
    ck_assert_int_eq(first_choice(CHORUS_BROADCAST, -1, 1 << 20, 2, 2), BROADCAST_SINGLE_COPY);
    ck_assert_int_eq(first_choice(CHORUS_BROADCAST, -1, 1 << 10, 2, 2), BROADCAST_BINOMIAL);
    ck_assert_int_eq(first_choice(CHORUS_ALLGATHER, -1, 512 << 10, 2, 2), ALLGATHER_SINGLE_COPY);
    ck_assert_int_eq(first_choice(CHORUS_ALLGATHER, -1, 1 << 20, 2, 2), ALLGATHER_SHARED_MEMORY);
    ck_assert_int_eq(first_choice(CHORUS_ALLGATHER, -1, 16 << 20, 2, 2), ALLGATHER_SINGLE_COPY);
    ck_assert_int_eq(first_choice(CHORUS_ALLGATHER, -1, 1 << 10, 2, 2), ALLGATHER_SHARED_MEMORY);
    ck_assert_int_eq(first_choice(CHORUS_ALLGATHER, -1, 1 << 20, 4, 4), ALLGATHER_SHARED_MEMORY);
    /* Not one host: over MPI by size. */
    ck_assert_int_eq(first_choice(CHORUS_ALLREDUCE, -1, 8 << 10, 4, 1),
                     ALLREDUCE_RECURSIVE_DOUBLING);
    ck_assert_int_eq(first_choice(CHORUS_ALLREDUCE, -1, 128 << 10, 4, 1), ALLREDUCE_RABENSEIFNER);
    ck_assert_int_eq(first_choice(CHORUS_ALLREDUCE, -1, 1 << 20, 4, 1), ALLREDUCE_RING);
    ck_assert_int_eq(first_choice(CHORUS_BROADCAST, -1, 1 << 20, 4, 2), BROADCAST_PIPELINED_CHAIN);
    ck_assert_int_eq(first_choice(CHORUS_ALLGATHER, -1, 1 << 20, 4, 2), ALLGATHER_RING);
    ck_assert_int_eq(first_choice(CHORUS_REDUCESCATTER, -1, 64 << 10, 4, 1),
                     REDUCESCATTER_RECURSIVE_HALVING);
    ck_assert_int_eq(first_choice(CHORUS_REDUCESCATTER, -1, 64 << 10, 3, 1), REDUCESCATTER_RING);
    ck_assert_int_eq(first_choice(CHORUS_REDUCESCATTER, -1, 64 << 10, 6, 1), REDUCESCATTER_RING);
    ck_assert_int_eq(first_choice(CHORUS_REDUCESCATTER, -1, 8 << 10, 6, 1),
                     REDUCESCATTER_RECURSIVE_HALVING);
    ck_assert_int_eq(first_choice(CHORUS_REDUCESCATTER, -1, 8 << 10, 5, 1), REDUCESCATTER_RING);
    ck_assert_int_eq(first_choice(CHORUS_REDUCESCATTER, -1, 1 << 20, 4, 1), REDUCESCATTER_RING);
    ck_assert_int_eq(first_choice(CHORUS_REDUCESCATTER, -1, 1 << 20, 4, 4),
                     REDUCESCATTER_HIERARCHICAL);
    /* What runs when an algorithm declines: the hierarchical allreduce without a segment gives
     * way to one over MPI, the single copies (copies refused) to the staged segment, and the
     * staged segment to MPI. */
    ck_assert(offered_after(CHORUS_ALLREDUCE, ALLREDUCE_HIERARCHICAL, ALLREDUCE_RING, 1 << 20, 4,
                            4));
    ck_assert(offered_after(CHORUS_BROADCAST, BROADCAST_SINGLE_COPY, BROADCAST_SHARED_MEMORY,
                            1 << 20, 2, 2));
    ck_assert(offered_after(CHORUS_BROADCAST, BROADCAST_SHARED_MEMORY, BROADCAST_PIPELINED_CHAIN,
                            1 << 20, 4, 4));
    ck_assert(offered_after(CHORUS_ALLGATHER, ALLGATHER_SINGLE_COPY, ALLGATHER_SHARED_MEMORY,
                            512 << 10, 2, 2));
    ck_assert(offered_after(CHORUS_ALLGATHER, ALLGATHER_SHARED_MEMORY, ALLGATHER_RING, 1 << 20, 4,
                            4));
    ck_assert_int_eq(algorithm_find(CHORUS_ALLREDUCE, "ring"), ALLREDUCE_RING);
    ck_assert_int_eq(algorithm_find(CHORUS_ALLREDUCE, "no_such"), -1);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("collectives");
    TCase *allreduce = tcase_create("allreduce");
    tcase_set_timeout(allreduce, 600);
    tcase_add_loop_test(allreduce, allreduce_every_algorithm_dtype_op_and_count, 1, 6);
    tcase_add_loop_test(allreduce, allreduce_large_buffers_are_pipelined_correctly, 1, 6);
    TCase *others = tcase_create("broadcast_allgather");
    tcase_set_timeout(others, 300);
    tcase_add_loop_test(others, broadcast_every_algorithm_root_and_size, 1, 6);
    tcase_add_loop_test(others, allgather_every_algorithm_with_uneven_blocks, 1, 6);
    tcase_add_loop_test(others, waits_for_a_stopped_rank_are_interrupted, 2, 6);
    tcase_add_test(others, a_receive_up_to_a_length_takes_a_shorter_message);
    if (over_ucx()) {
        /* 1-5 ranks; the host's segment is not for this transport. */
        tcase_add_loop_test(others, reducescatter_with_uneven_blocks, 1, 6);
        tcase_add_loop_test(others, alltoall_moves_every_block, 1, 6);
    } else {
        tcase_add_loop_test(allreduce, hierarchical_back_to_back_calls_share_the_segment_safely,
                            1, 6);
        tcase_add_loop_test(allreduce,
                            shared_memory_algorithms_back_to_back_share_the_segment_safely, 1, 6);
        tcase_add_loop_test(allreduce, hierarchical_reduces_a_list_of_pieces, 1, 6);
        tcase_add_loop_test(allreduce, shared_heap_reduces_in_place_or_declines_per_host, 1, 6);
        tcase_add_loop_test(others, reducescatter_with_uneven_blocks, 1, SCATTER_RANKS + 1);
        tcase_add_loop_test(others, alltoall_moves_every_block, 1, EXCHANGE_RANKS + 1);
        tcase_add_loop_test(others, single_copy_falls_back_or_fails_on_every_rank, 1, 6);
        tcase_add_loop_test(others, a_poisoned_rank_is_not_waited_for, 1, 6);
        tcase_add_test(others, selection_is_deterministic_and_covers_every_size);
    }
    suite_add_tcase(suite, allreduce);
    suite_add_tcase(suite, others);
    return run_suite(suite);
}
