/*
 * test_coordinator.c — the whole background loop (lib/coordinator/background.h) with ranks as
 * threads, without MPI: each rank's loop runs over the thread channel (test/common) and its
 * executor over the thread transport, or both over UCX (test/common/rank_links.h: the program
 * is built once with each), and the test submits into each rank's context as the
 * user threads do. For 1-4 ranks, by the star protocol and by ready rounds: collectives submitted
 * in different orders on different ranks, checked against values computed from every rank's
 * inputs; a shutdown from one rank that fails a tensor some ranks never submitted, on every
 * rank that has it; a join; and a fatal error on one rank (a message that does not decode)
 * that every other rank learns from its notice, every handle completing with an error and every
 * loop ending.
 */
#include "../../lib/api/instance.h"
#include "../../lib/coordinator/background.h"
#include "../../lib/coordinator/world_links.h"
#include "../../lib/core/handle.h"
#include "../common/rank_links.h"
#include "../common/check_runner.h"

#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_RANKS = 4, COUNT = 1001 };

struct rank_run {
    int rank;
    int nranks;
    struct chorus_context *context;
    struct background background;
    struct rank_links *links;
    pthread_t thread;
    char error[256];
};

static struct rank_run runs[MAX_RANKS];
/* The ranks negotiate as across hosts: by rounds whose parts travel as messages (rounds.h). */
static bool across_hosts;

static void *run_loop(void *argument)
{
    struct rank_run *run = argument;
    struct background *background = &run->background;
    background->context = run->context;
    background->rank = run->rank;
    background->size = run->nranks;
    struct world_links links;
    rank_links_init(run->links, run->rank, &links);
    background->channel = links.channel;
    background->runner.executor.transport = links.transport;
    chorus_status status = coord_setup(background, run->error, sizeof run->error);
    if (status == CHORUS_OK && across_hosts) {
        ck_assert(rounds_open_copies(&background->rounds, &run->context->params.values, run->rank,
                                     run->nranks, run->error, sizeof run->error) ||
                  run->nranks == 1);
        background->star.rounds_mode = background->rounds.on;
    }
    if (status == CHORUS_OK) {
        executor_watch_aborts_through(&background->runner.executor, links.poll_abort,
                                      links.notify_abort, links.abort_context);
        coord_loop(background);
    }
    coord_teardown(background);
    return NULL;
}

/* A rank's context with the parameters `overrides` ("NAME=VALUE;..."), no environment. */
static struct chorus_context *rank_context(const char *overrides)
{
    char *const no_environment[] = {NULL};
    struct chorus_context *context = context_create(MPI_COMM_NULL);
    char message[256] = "";
    ck_assert_msg(params_load(&context->params, no_environment, overrides, message,
                              sizeof message) == CHORUS_OK,
                  "%s", message);
    return context;
}

/* Starts `nranks` loops with the parameters `overrides` ("NAME=VALUE;..."), or with
 * ACROSS_HOSTS's, as ranks on hosts of their own would. */
static const char ACROSS_HOSTS[] = "across hosts";
static void start(int nranks, const char *overrides)
{
    across_hosts = overrides == ACROSS_HOSTS;
    if (across_hosts)
        overrides = "";
    struct rank_links *links = rank_links_create(nranks);
    for (int r = 0; r < nranks; r++) {
        struct rank_run *run = &runs[r];
        *run = (struct rank_run){.rank = r, .nranks = nranks, .links = links};
        run->context = rank_context(overrides);
        run->context->rank = r;
        run->context->size = nranks;
    }
    for (int r = 0; r < nranks; r++)
        ck_assert_int_eq(pthread_create(&runs[r].thread, NULL, run_loop, &runs[r]), 0);
}

/* Starts `nranks` ranks as chorus starts them, each on a thread in coord_thread_main, on a
 * world without MPI: its links (rank_links.h) handed over in context->links, ranks alternating
 * between two made-up hosts. Returns once every rank has started. */
static struct world_links world_links[MAX_RANKS];
static void start_world(int nranks)
{
    across_hosts = false;
    struct rank_links *links = rank_links_create(nranks);
    for (int r = 0; r < nranks; r++) {
        struct rank_run *run = &runs[r];
        *run = (struct rank_run){.rank = r, .nranks = nranks, .links = links};
        run->context = rank_context("");
        rank_links_init(links, r, &world_links[r]);
        world_links[r].host = r % 2 ? "host-b" : "host-a";
        run->context->links = &world_links[r];
    }
    for (int r = 0; r < nranks; r++)
        ck_assert_int_eq(pthread_create(&runs[r].thread, NULL, coord_thread_main,
                                        runs[r].context),
                         0);
    for (int r = 0; r < nranks; r++) {
        struct chorus_context *context = runs[r].context;
        pthread_mutex_lock(&context->lock);
        while (!context->startup_finished)
            pthread_cond_wait(&context->started, &context->lock);
        pthread_mutex_unlock(&context->lock);
        ck_assert_msg(context->startup_status == CHORUS_OK, "%s, rank %d: %s", rank_links_kind(),
                      r, context->startup_message);
    }
}

/* Waits for every loop to end and frees the world. */
static void finish(int nranks)
{
    for (int r = 0; r < nranks; r++) {
        ck_assert_int_eq(pthread_join(runs[r].thread, NULL), 0);
        ck_assert_msg(runs[r].error[0] == '\0', "rank %d: %s", r, runs[r].error);
    }
    rank_links_destroy(runs[0].links);
    for (int r = 0; r < nranks; r++)
        context_free(runs[r].context);
}

/* Submits a float32 tensor of `count` elements as a user thread does; returns its handle, or
 * NULL where the rank refused it (`refusable`: it may have stopped already). */
static chorus_handle *submit_refusable(int rank, chorus_collective collective, const char *name,
                                       float *data, size_t count, int root, bool refusable);

static chorus_handle *submit(int rank, chorus_collective collective, const char *name,
                             float *data, size_t count, int root)
{
    return submit_refusable(rank, collective, name, data, count, root, false);
}

static chorus_handle *submit_refusable(int rank, chorus_collective collective, const char *name,
                                       float *data, size_t count, int root, bool refusable)
{
    struct request *request = calloc(1, sizeof *request);
    request->desc = (struct wire_request){.name = strdup(name),
                                          .collective = (uint8_t)collective,
                                          .dtype = CHORUS_FLOAT32,
                                          .op = collective == CHORUS_ALLREDUCE ? CHORUS_SUM : 0,
                                          .ndims = 1,
                                          .compression = CHORUS_COMPRESSION_NONE,
                                          .shape = {(int64_t)count},
                                          .root = root,
                                          .device = DEVICE_HOST,
                                          .prescale = 1,
                                          .postscale = 1,
                                          .group = strdup(""),
                                          .group_size = 1};
    request->input = request->output = data;
    request->count = count;
    request->handle = handle_create(collective, 1);
    request->submitted_at = clock_seconds();
    chorus_handle *handle = request->handle;
    chorus_status status = api_enqueue_requests(runs[rank].context, &request, 1, true);
    if (refusable && status != CHORUS_OK) {
        request_free(request);
        handle_member_done(handle, status, NULL);
        chorus_handle_free(handle);
        return NULL;
    }
    ck_assert_int_eq(status, CHORUS_OK);
    return handle;
}

static void request_shutdown(int rank)
{
    struct chorus_context *context = runs[rank].context;
    pthread_mutex_lock(&context->lock);
    context->shutdown_requested = true;
    pthread_cond_signal(&context->wakeup);
    pthread_mutex_unlock(&context->lock);
}

static chorus_handle *request_join(int rank)
{
    struct chorus_context *context = runs[rank].context;
    chorus_handle *handle = handle_create(CHORUS_ALLREDUCE, 1);
    pthread_mutex_lock(&context->lock);
    context->join_requested = true;
    context->join_handle = handle;
    pthread_cond_signal(&context->wakeup);
    pthread_mutex_unlock(&context->lock);
    return handle;
}

static float input_of(int rank, size_t i, int step)
{
    return (float)(rank + 1) * 0.5f + (float)(i % 97) + (float)step;
}

/* Star; rounds by an allreduce of the vectors, as from NEGOTIATION_ROUNDS_FROM ranks; rounds by
 * copies of each rank's part, as across hosts (where a lone small allreduce rides in them). */
static const char *const protocols[] = {"", "CHORUS_NEGOTIATION=rounds", ACROSS_HOSTS};
enum { PROTOCOLS = ARRAY_LENGTH(protocols) };

/* _i: ranks 1-4, by each protocol. */
START_TEST(collectives_in_any_order_then_a_shutdown_fails_what_is_left)
{
    int nranks = 1 + _i % MAX_RANKS;
    start(nranks, protocols[_i / MAX_RANKS]);
    static float sums[MAX_RANKS][2][COUNT], broadcast[MAX_RANKS][COUNT], orphan[COUNT];
    /* Two steps: the second finds every description in the response cache (and, by rounds,
     * sends each as a bit). */
    for (int step = 0; step < 2; step++) {
        chorus_handle *handles[MAX_RANKS][3];
        for (int r = 0; r < nranks; r++) {
            for (size_t i = 0; i < COUNT; i++) {
                sums[r][0][i] = input_of(r, i, step);
                sums[r][1][i] = -input_of(r, i, step);
                broadcast[r][i] = input_of(r, i, step) * 3;
            }
            /* Odd ranks submit in the other order. */
            int order[3] = {0, 1, 2};
            if (r % 2 == 1)
                order[0] = 2, order[2] = 0;
            for (int k = 0; k < 3; k++) {
                int which = order[k];
                handles[r][which] =
                    which == 2 ? submit(r, CHORUS_BROADCAST, "layer.embedding", broadcast[r],
                                        COUNT, nranks - 1)
                               : submit(r, CHORUS_ALLREDUCE, which ? "layer.bias" : "layer.weight",
                                        sums[r][which], which ? 7 : COUNT, 0);
            }
        }
        for (int r = 0; r < nranks; r++) {
            for (int t = 0; t < 3; t++) {
                ck_assert_msg(chorus_wait(handles[r][t]) == CHORUS_OK, "rank %d tensor %d: %s",
                              r, t, chorus_handle_error(handles[r][t]));
                chorus_handle_free(handles[r][t]);
            }
            for (size_t i = 0; i < COUNT; i++) {
                double expected = 0;
                for (int s = 0; s < nranks; s++)
                    expected += input_of(s, i, step);
                ck_assert_msg(fabs(sums[r][0][i] - expected) <= 1e-3 * fabs(expected) + 1e-3,
                              "rank %d element %zu: %g, expected %g", r, i,
                              (double)sums[r][0][i], expected);
                if (i < 7)
                    ck_assert(fabs(sums[r][1][i] + expected) <= 1e-3 * fabs(expected) + 1e-3);
                ck_assert(broadcast[r][i] == input_of(nranks - 1, i, step) * 3);
            }
        }
    }
    /* A tensor only rank 0 submits, then the last rank shuts down: every rank ends, and rank
     * 0's tensor fails with the reason. */
    chorus_handle *left = nranks > 1 ? submit(0, CHORUS_ALLREDUCE, "never.everywhere", orphan,
                                              COUNT, 0)
                                     : NULL;
    request_shutdown(nranks - 1);
    finish(nranks);
    if (left != NULL) {
        ck_assert_int_eq(chorus_wait(left), CHORUS_ERR_SHUTDOWN);
        char expected[128];
        snprintf(expected, sizeof expected, "rank %d called chorus_shutdown", nranks - 1);
        ck_assert_msg(strstr(chorus_handle_error(left), expected) != NULL &&
                          strstr(chorus_handle_error(left), "\"never.everywhere\"") != NULL,
                      "%s", chorus_handle_error(left));
        chorus_handle_free(left);
    }
    for (int r = 0; r < nranks; r++)
        ck_assert_int_eq(runs[r].background.state, COORD_FINISHED);
}
END_TEST

/* Allreduces submitted one at a time, each waited for (a loss, a norm): after the first, by
 * rounds each rides in the round that decides it, inline in a rank's line (up to 32 bytes) or
 * beside it, and is reduced from there; every rank's result against the sum of all inputs. */
START_TEST(lone_allreduces_ride_with_their_rounds)
{
    int nranks = 1 + _i % MAX_RANKS;
    start(nranks, protocols[_i / MAX_RANKS]);
    static const size_t counts[] = {1, 8, 9, 257, COUNT};
    static float data[MAX_RANKS][COUNT];
    for (int step = 0; step < 4; step++) {
        for (size_t c = 0; c < ARRAY_LENGTH(counts); c++) {
            char name[32];
            snprintf(name, sizeof name, "lone.%zu", counts[c]);
            chorus_handle *handles[MAX_RANKS];
            for (int r = 0; r < nranks; r++) {
                for (size_t i = 0; i < counts[c]; i++)
                    data[r][i] = input_of(r, i, step);
                handles[r] = submit(r, CHORUS_ALLREDUCE, name, data[r], counts[c], 0);
            }
            for (int r = 0; r < nranks; r++) {
                ck_assert_msg(chorus_wait(handles[r]) == CHORUS_OK, "%s",
                              chorus_handle_error(handles[r]));
                chorus_handle_free(handles[r]);
                for (size_t i = 0; i < counts[c]; i++) {
                    double expected = 0;
                    for (int s = 0; s < nranks; s++)
                        expected += input_of(s, i, step);
                    ck_assert_msg(fabs(data[r][i] - expected) <= 1e-5 * fabs(expected),
                                  "step %d, %zu floats, rank %d, element %zu: %g, not %g", step,
                                  counts[c], r, i, data[r][i], expected);
                }
            }
        }
    }
    request_shutdown(0);
    finish(nranks);
}
END_TEST

/* The last rank joins first: the others' allreduce sums their inputs alone; then they join too,
 * and every join completes with a rank that joined last. */
START_TEST(a_join_completes_once_every_rank_joined)
{
    int nranks = 2 + _i % (MAX_RANKS - 1);
    start(nranks, protocols[_i / (MAX_RANKS - 1)]);
    static float data[MAX_RANKS][COUNT];
    chorus_handle *joins[MAX_RANKS];
    joins[nranks - 1] = request_join(nranks - 1);
    chorus_handle *handles[MAX_RANKS];
    for (int r = 0; r < nranks - 1; r++) {
        for (size_t i = 0; i < COUNT; i++)
            data[r][i] = input_of(r, i, 0);
        handles[r] = submit(r, CHORUS_ALLREDUCE, "while.joined", data[r], COUNT, 0);
    }
    for (int r = 0; r < nranks - 1; r++) {
        ck_assert_msg(chorus_wait(handles[r]) == CHORUS_OK, "%s",
                      chorus_handle_error(handles[r]));
        chorus_handle_free(handles[r]);
        for (size_t i = 0; i < COUNT; i++) {
            double expected = 0;
            for (int s = 0; s < nranks - 1; s++)
                expected += input_of(s, i, 0);
            ck_assert(fabs(data[r][i] - expected) <= 1e-3 * fabs(expected) + 1e-3);
        }
        joins[r] = request_join(r);
    }
    for (int r = 0; r < nranks; r++) {
        ck_assert_msg(chorus_wait(joins[r]) == CHORUS_OK, "%s", chorus_handle_error(joins[r]));
        chorus_handle_free(joins[r]);
    }
    for (int r = 0; r < nranks; r++) {
        int last = runs[r].context->last_joined_rank;
        ck_assert_msg(last >= 0 && last < nranks - 1, "rank %d: last joined %d", r, last);
        ck_assert_int_eq(last, runs[0].context->last_joined_rank);
    }
    request_shutdown(0);
    finish(nranks);
}
END_TEST

/* Rank 1 receives a message that does not decode: it fails with a protocol error, tells the
 * others, which fail with "stopped because rank 1 failed"; every handle completes with an error,
 * later submits fail at once, and every loop ends without a shutdown. */
START_TEST(a_fatal_error_on_one_rank_stops_every_rank)
{
    int nranks = 2 + _i % (MAX_RANKS - 1);
    start(nranks, protocols[_i / (MAX_RANKS - 1)]);
    /* By rounds the first submission of a name still travels to rank 0 and back in full. By
     * copies (across hosts) rank 0's idle round may be the message spoiled, before a rank has
     * submitted: that rank then refuses the submission, having stopped. */
    rank_links_corrupt_next(runs[0].links, 1);
    static float data[MAX_RANKS][COUNT];
    chorus_handle *handles[MAX_RANKS];
    for (int r = 0; r < nranks; r++)
        handles[r] = submit_refusable(r, CHORUS_ALLREDUCE, "doomed", data[r], COUNT, 0,
                                      protocols[_i / (MAX_RANKS - 1)] == ACROSS_HOSTS);
    for (int r = 0; r < nranks; r++) {
        if (handles[r] == NULL)
            continue; /* it stopped first: its state is checked below */
        chorus_status status = chorus_wait(handles[r]);
        const char *message = chorus_handle_error(handles[r]);
        if (r == 1)
            ck_assert_msg(status == CHORUS_ERR_PROTOCOL &&
                              strstr(message, "malformed negotiation message") != NULL,
                          "rank 1: %s %s", chorus_status_name(status), message);
        else
            ck_assert_msg(status < 0 && strstr(message, "stopped because rank 1 failed") != NULL,
                          "rank %d: %s %s", r, chorus_status_name(status), message);
        chorus_handle_free(handles[r]);
    }
    for (int r = 0; r < nranks; r++) {
        struct request *late = NULL;
        float value = 0;
        chorus_handle *handle = handle_create(CHORUS_ALLREDUCE, 1);
        late = calloc(1, sizeof *late);
        late->desc.name = strdup("late");
        late->desc.group = strdup("");
        late->input = late->output = &value;
        late->handle = handle;
        ck_assert_int_lt(api_enqueue_requests(runs[r].context, &late, 1, true), 0);
        request_free(late);
        handle_member_done(handle, CHORUS_ERR_SHUTDOWN, NULL);
        chorus_handle_free(handle);
    }
    finish(nranks);
    for (int r = 0; r < nranks; r++)
        ck_assert_int_eq(runs[r].background.state, COORD_FAILED);
}
END_TEST

/* A world without MPI, as an elastic job over UCX makes one: chorus starts on its links (the
 * topology from the ranks' records: two made-up hosts), negotiates over its channel, runs
 * allreduces and broadcasts over its transport against every rank's inputs, and shuts down. */
START_TEST(a_world_without_mpi_starts_on_its_links_and_runs)
{
    int nranks = 1 + _i;
    start_world(nranks);
    for (int r = 0; r < nranks; r++) {
        const chorus_topology *topology = &runs[r].context->topology;
        ck_assert_int_eq(topology->size, nranks);
        ck_assert_int_eq(topology->rank, r);
        ck_assert_int_eq(topology->cross_size, nranks > 1 ? 2 : 1);
        ck_assert_int_eq(topology->cross_rank, r % 2);
        ck_assert_int_eq(topology->local_rank, r / 2);
        ck_assert_str_eq(context_host_name(runs[r].context, nranks - 1),
                         (nranks - 1) % 2 ? "host-b" : "host-a");
    }
    static float sums[MAX_RANKS][COUNT], broadcast[MAX_RANKS][COUNT];
    for (int step = 0; step < 3; step++) {
        chorus_handle *handles[MAX_RANKS][2];
        for (int r = 0; r < nranks; r++) {
            for (size_t i = 0; i < COUNT; i++) {
                sums[r][i] = input_of(r, i, step);
                broadcast[r][i] = -input_of(r, i, step);
            }
            handles[r][0] = submit(r, CHORUS_ALLREDUCE, "world.sum", sums[r], COUNT, 0);
            handles[r][1] = submit(r, CHORUS_BROADCAST, "world.root", broadcast[r], COUNT,
                                   nranks - 1);
        }
        for (int r = 0; r < nranks; r++) {
            for (int t = 0; t < 2; t++) {
                ck_assert_msg(chorus_wait(handles[r][t]) == CHORUS_OK, "%s, rank %d: %s",
                              rank_links_kind(), r, chorus_handle_error(handles[r][t]));
                chorus_handle_free(handles[r][t]);
            }
            for (size_t i = 0; i < COUNT; i++) {
                double expected = 0;
                for (int q = 0; q < nranks; q++)
                    expected += input_of(q, i, step);
                ck_assert_msg(fabs(sums[r][i] - expected) <= 1e-5 * fabs(expected),
                              "step %d, rank %d, element %zu: %g, not %g", step, r, i,
                              (double)sums[r][i], expected);
                ck_assert(broadcast[r][i] == -input_of(nranks - 1, i, step));
            }
        }
    }
    request_shutdown(0);
    finish(nranks);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("coordinator");
    TCase *tc = tcase_create("loop");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, collectives_in_any_order_then_a_shutdown_fails_what_is_left, 0,
                        PROTOCOLS * MAX_RANKS);
    tcase_add_loop_test(tc, lone_allreduces_ride_with_their_rounds, 0, PROTOCOLS * MAX_RANKS);
    tcase_add_loop_test(tc, a_join_completes_once_every_rank_joined, 0,
                        PROTOCOLS * (MAX_RANKS - 1));
    tcase_add_loop_test(tc, a_fatal_error_on_one_rank_stops_every_rank, 0,
                        PROTOCOLS * (MAX_RANKS - 1));
    tcase_add_loop_test(tc, a_world_without_mpi_starts_on_its_links_and_runs, 0, MAX_RANKS);
    suite_add_tcase(suite, tc);
    return run_suite(suite);
}
