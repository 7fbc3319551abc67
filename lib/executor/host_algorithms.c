/*
 * host_algorithms.c — the seam between the executor and lib/collectives: runs a host collective
 * with the algorithm the selection table picks, on the host's shared segment where there is one,
 * and tells a failure inside it, or a peer of this host that stopped during it, in one message.
 */
#include "backend.h"

#include "../collectives/small_collectives.h"
#include "../compression/topk.h"

#include <sched.h>
#include <stdio.h>

/* How long a rank that finds a peer of its host poisoned waits for that peer's notice, which
 * says why: the peer sends it before it poisons its counter, so it is normally there. */
#define NOTICE_WAIT_SECONDS 1.0

/* A peer of this host (local rank `peer`) stopped after a fatal error in the middle of the
 * algorithm that just ran, so that its result means nothing. */
static chorus_status local_peer_failed(struct executor *executor, int peer, char *error,
                                       size_t error_size)
{
    double deadline = clock_seconds() + NOTICE_WAIT_SECONDS;
    chorus_status status;
    while ((status = executor_peer_failure(executor, error, error_size)) == CHORUS_OK &&
           clock_seconds() < deadline)
        sched_yield();
    if (status != CHORUS_OK)
        return status;
    snprintf(error, error_size, "stopped because local rank %d of this host failed", peer);
    return CHORUS_ERR_INTERNAL;
}

/* Runs `collective` with the first algorithm of the selection that does not decline, on the
 * host's segment when there is one. Records the algorithm that ran, for the timeline; on failure
 * says which algorithm failed on how many bytes, and why. */
static struct selection_query query_for(const struct executor *executor,
                                        chorus_collective collective, size_t bytes)
{
    return (struct selection_query){.bytes = bytes,
                                    .nranks = executor->nranks,
                                    .local_ranks = executor->local_ranks,
                                    .forced = executor->settings->forced_algorithm[collective],
                                    .tuned = &executor->settings->tuned};
}

static chorus_status run_selected(struct executor *executor, chorus_collective collective,
                                  size_t bytes, bool in_shared_heap, union collective_args args,
                                  char *error, size_t error_size)
{
    struct selection_query query = query_for(executor, collective, bytes);
    query.in_shared_heap = in_shared_heap;
    int ran = -1;
    chorus_status status = selection_run(collective, &query, args, &ran);
    executor->last_algorithm = algorithm_name(collective, ran);
    const struct node_segment *node = executor_node(executor);
    int poisoned = node != NULL ? node_segment_poisoned(node) : -1;
    int stuck = node != NULL ? node_segment_stuck(node) : -1;
    int late = executor->small_ready ? executor->small.late_rank : -1;
    if (poisoned >= 0) {
        status = local_peer_failed(executor, poisoned, executor->transport.error,
                                   sizeof executor->transport.error);
    } else if (stuck >= 0 && node->stuck_ended) {
        executor_local_rank_ended(executor, stuck, executor->transport.error,
                                  sizeof executor->transport.error);
        status = CHORUS_ERR_TIMEOUT;
    } else if (stuck >= 0) {
        snprintf(executor->transport.error, sizeof executor->transport.error,
                 "local rank %d of this host did not reach a barrier within the timeout of %g "
                 "s (%s): it is stopped, dead, far behind or never called it",
                 stuck, executor_timeout(executor), executor_timeout_origin(executor));
        status = CHORUS_ERR_TIMEOUT;
    } else if (late >= 0 && status == CHORUS_ERR_TIMEOUT) {
        snprintf(executor->transport.error, sizeof executor->transport.error,
                 "local rank %d of this host did not publish its part within the timeout of %g "
                 "s (%s): it is stopped, dead, far behind or never called it",
                 late, executor_timeout(executor), executor_timeout_origin(executor));
    }
    if (status == CHORUS_ERR_NOT_SUPPORTED)
        snprintf(executor->transport.error, sizeof executor->transport.error,
                 "every algorithm declined the call");
    if (status != CHORUS_OK)
        snprintf(error, error_size, "%s (%s, %zu bytes): %s", chorus_collective_name(collective),
                 executor->last_algorithm, bytes, executor->transport.error);
    return status;
}

chorus_status executor_run_host_allreduce(struct executor *executor, void *buffer,
                                 const struct allreduce_piece *pieces, size_t piece_count,
                                 size_t count, chorus_dtype dtype, chorus_op op, double factor,
                                 bool in_shared_heap, char *error, size_t error_size)
{
    const struct small_segment *staged =
        pieces == NULL && executor->staged_bytes == count * chorus_dtype_size(dtype)
            ? executor->staged
            : NULL;
    executor->staged = NULL;
    /* Every rank's contribution came with the round that decided it: reduced from there, the
     * same bits on every rank, with no exchange of its own. */
    if (staged != NULL && op != CHORUS_ADASUM) {
        executor->last_algorithm = "rode with its negotiation round";
        small_allreduce_take(staged, buffer, count, dtype, op == CHORUS_AVERAGE ? CHORUS_SUM : op,
                             factor);
        return CHORUS_OK;
    }
    struct allreduce_args args = {
        .transport = &executor->transport,
        .scratch = &executor->scratch,
        .node = executor_node(executor),
        .small = executor->small_ready ? &executor->small : NULL,
        .buffer = buffer,
        .pieces = pieces,
        .piece_count = piece_count,
        .count = count,
        .dtype = dtype,
        .op = op == CHORUS_AVERAGE ? CHORUS_SUM : op,
        .postscale = factor != 1.0 ? &factor : NULL,
        .tuned = &executor->settings->tuned,
    };
    if (op == CHORUS_ADASUM) {
        executor->last_algorithm = "adasum";
        chorus_status status = allreduce_adasum(&args);
        if (status != CHORUS_OK)
            snprintf(error, error_size, "adasum: %s", executor->transport.error);
        return status;
    }
    return run_selected(executor, CHORUS_ALLREDUCE, count * chorus_dtype_size(dtype),
                        in_shared_heap, (union collective_args){.allreduce = &args}, error,
                        error_size);
}

chorus_status executor_run_host_allreduce_compressed(struct executor *executor, float *buffer,
                                                     float *residual, size_t count,
                                                     const struct quantize_scheme *quantize,
                                                     const struct topk_scheme *topk,
                                                     double factor, char *error,
                                                     size_t error_size)
{
    struct allreduce_args args = {
        .transport = &executor->transport,
        .scratch = &executor->scratch,
        .buffer = buffer,
        .count = count,
        .dtype = CHORUS_FLOAT32,
        .op = CHORUS_SUM,
        .postscale = factor != 1.0 ? &factor : NULL,
        .quantize = quantize,
        .topk = topk,
        .error_feedback = residual,
    };
    executor->last_algorithm =
        topk == NULL ? "quantized"
        : allreduce_topk_is_sparse(count, topk->k, executor->transport.nranks)
            ? "topk"
            : "topk (dense ring)";
    chorus_status status = topk != NULL ? allreduce_topk(&args) : allreduce_quantized(&args);
    if (status != CHORUS_OK)
        snprintf(error, error_size, "allreduce (%s, %zu values): %s", executor->last_algorithm,
                 count, executor->transport.error);
    return status;
}

chorus_status executor_run_host_broadcast(struct executor *executor, void *buffer, size_t bytes, int root,
                                 char *error, size_t error_size)
{
    struct broadcast_args args = {.transport = &executor->transport,
                                  .scratch = &executor->scratch,
                                  .node = executor_node(executor),
                                  .buffer = buffer,
                                  .bytes = bytes,
                                  .root = root};
    return run_selected(executor, CHORUS_BROADCAST, bytes, false,
                        (union collective_args){.broadcast = &args}, error, error_size);
}

chorus_status executor_run_host_allgather(struct executor *executor, const void *send, void *recv,
                                 const size_t *block_bytes, const size_t *offsets, size_t total,
                                 char *error, size_t error_size)
{
    struct allgather_args args = {.transport = &executor->transport,
                                  .scratch = &executor->scratch,
                                  .node = executor_node(executor),
                                  .send = send,
                                  .recv = recv,
                                  .block_bytes = block_bytes,
                                  .offsets = offsets};
    return run_selected(executor, CHORUS_ALLGATHER, total, false,
                        (union collective_args){.allgather = &args}, error, error_size);
}

chorus_status executor_run_host_reducescatter(struct executor *executor, const void *send, void *recv,
                                     const size_t *block_counts, const size_t *offsets,
                                     size_t count, chorus_dtype dtype, chorus_op op,
                                     double factor, char *error, size_t error_size)
{
    struct reducescatter_args args = {.transport = &executor->transport,
                                      .scratch = &executor->scratch,
                                      .node = executor_node(executor),
                                      .send = send,
                                      .recv = recv,
                                      .block_counts = block_counts,
                                      .offsets = offsets,
                                      .dtype = dtype,
                                      .op = op,
                                      .factor = factor,
                                      .tuned = &executor->settings->tuned};
    return run_selected(executor, CHORUS_REDUCESCATTER, count * chorus_dtype_size(dtype), false,
                        (union collective_args){.reducescatter = &args}, error, error_size);
}

chorus_status executor_run_host_alltoall(struct executor *executor, const struct alltoall_args *args,
                                size_t bytes, char *error, size_t error_size)
{
    return run_selected(executor, CHORUS_ALLTOALL, bytes, false,
                        (union collective_args){.alltoall = args},
                        error, error_size);
}

bool executor_host_allreduce_in_place(const struct executor *executor, size_t bytes)
{
    struct selection_query query = query_for(executor, CHORUS_ALLREDUCE, bytes);
    int candidates[ALGORITHMS_MAX];
    size_t count = selection_candidates(CHORUS_ALLREDUCE, &query, candidates, ALGORITHMS_MAX);
    size_t algorithms = 0;
    const struct algorithm *table = algorithm_table(CHORUS_ALLREDUCE, &algorithms);
    /* The first that takes a list of pieces, after those that pass it on, reads them in place. */
    size_t first = 0;
    while (first < count && table[candidates[first]].declines_pieces)
        first++;
    return executor->node_ready && first < count && candidates[first] == ALLREDUCE_HIERARCHICAL;
}
