/*
 * test_agreement.c — the start-up's blocking steps over the channel (lib/negotiation/
 * agreement.h) with 1-5 ranks as threads over the thread channel: rank 0's bytes reach every
 * rank (an empty message where it had none), rank 0 gathers every rank's in rank order, "all"
 * holds only when every rank says so, and the first failure reaches every rank naming that
 * rank, also when a verdict arrives that does not decode.
 */
#include "../../lib/negotiation/agreement.h"
#include "../../lib/negotiation/wire.h"
#include "../common/channel_threads.h"
#include "../common/check_runner.h"

#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_RANKS = 5 };

/* One rank's thread: its end of the channel, and what its steps returned. */
struct rank_run {
    int rank;
    int nranks;
    struct channel channel;
    struct agreement agreement;
    pthread_t thread;
    void (*body)(struct rank_run *run);
    chorus_status status;
    char error[1024];
    uint8_t *bytes;
    size_t length;
    bool all[2];
    char gathered[MAX_RANKS][32]; /* rank 0: each rank's bytes, as gathered */
    int gathered_count;
};

static struct rank_run runs[MAX_RANKS];
static struct channel_world *world;

static void *run_rank(void *argument)
{
    struct rank_run *run = argument;
    run->body(run);
    return NULL;
}

/* A world of `nranks` ranks, each of which the next run_ranks runs in a thread of its own. */
static void make_world(int nranks)
{
    world = channel_world_create(nranks);
    for (int r = 0; r < nranks; r++) {
        runs[r] = (struct rank_run){.rank = r, .nranks = nranks};
        channel_threads_init(&runs[r].channel, world, r);
        runs[r].agreement =
            (struct agreement){.channel = &runs[r].channel, .rank = r, .size = nranks};
    }
}

/* Runs `body` on every rank of the world, each in its thread, until all are done. */
static void run_ranks(int nranks, void (*body)(struct rank_run *run))
{
    for (int r = 0; r < nranks; r++) {
        runs[r].body = body;
        ck_assert_int_eq(pthread_create(&runs[r].thread, NULL, run_rank, &runs[r]), 0);
    }
    for (int r = 0; r < nranks; r++)
        ck_assert_int_eq(pthread_join(runs[r].thread, NULL), 0);
}

static void end_world(int nranks)
{
    for (int r = 0; r < nranks; r++)
        free(runs[r].bytes);
    channel_world_destroy(world);
}

/* Rank 0's bytes, none when it holds none. */
static void broadcast_held(struct rank_run *run)
{
    run->status = agreement_broadcast(&run->agreement, &run->bytes, &run->length, run->error,
                                      sizeof run->error);
}

static void broadcast_text(struct rank_run *run)
{
    if (run->rank == 0) {
        run->bytes = (uint8_t *)strdup("rank 0's bytes");
        run->length = strlen("rank 0's bytes") + 1;
    }
    broadcast_held(run);
}

START_TEST(broadcast_reaches_every_rank)
{
    int nranks = _i;
    make_world(nranks);
    run_ranks(nranks, broadcast_text);
    for (int r = 0; r < nranks; r++) {
        ck_assert_msg(runs[r].status == CHORUS_OK, "rank %d: %s", r, runs[r].error);
        ck_assert_uint_eq(runs[r].length, strlen("rank 0's bytes") + 1);
        ck_assert_str_eq((const char *)runs[r].bytes, "rank 0's bytes");
    }
    end_world(nranks);
    /* Rank 0 without a message (it could not encode one): the others are not left waiting. */
    make_world(nranks);
    run_ranks(nranks, broadcast_held);
    for (int r = 0; r < nranks; r++) {
        ck_assert_msg(runs[r].status == CHORUS_OK, "rank %d: %s", r, runs[r].error);
        ck_assert_uint_eq(runs[r].length, 0);
        ck_assert(r == 0 ? runs[r].bytes == NULL : runs[r].bytes != NULL);
    }
    end_world(nranks);
}
END_TEST

static void keep_gathered(void *context, int rank, const uint8_t *bytes, size_t length)
{
    struct rank_run *root = context;
    ck_assert_int_eq(rank, root->gathered_count); /* in rank order */
    snprintf(root->gathered[rank], sizeof root->gathered[rank], "%.*s", (int)length,
             (const char *)bytes);
    root->gathered_count++;
}

static void gather_names(struct rank_run *run)
{
    char name[32];
    int length = snprintf(name, sizeof name, "from rank %d", run->rank);
    run->status = agreement_gather(&run->agreement, (uint8_t *)strdup(name), (size_t)length,
                                   keep_gathered, run, run->error, sizeof run->error);
}

START_TEST(gather_hands_rank_0_every_rank_in_order)
{
    int nranks = _i;
    make_world(nranks);
    run_ranks(nranks, gather_names);
    for (int r = 0; r < nranks; r++)
        ck_assert_msg(runs[r].status == CHORUS_OK, "rank %d: %s", r, runs[r].error);
    ck_assert_int_eq(runs[0].gathered_count, nranks);
    for (int r = 0; r < nranks; r++) {
        char expected[32];
        snprintf(expected, sizeof expected, "from rank %d", r);
        ck_assert_str_eq(runs[0].gathered[r], expected);
    }
    for (int r = 1; r < nranks; r++)
        ck_assert_int_eq(runs[r].gathered_count, 0);
    end_world(nranks);
}
END_TEST

/* Twice: every rank says yes; then all but the last. */
static void say_all(struct rank_run *run)
{
    run->status = agreement_all(&run->agreement, true, &run->all[0], run->error, sizeof run->error);
    if (run->status == CHORUS_OK)
        run->status = agreement_all(&run->agreement, run->rank != run->nranks - 1, &run->all[1],
                                    run->error, sizeof run->error);
}

START_TEST(all_holds_only_when_every_rank_says_so)
{
    int nranks = _i;
    make_world(nranks);
    run_ranks(nranks, say_all);
    for (int r = 0; r < nranks; r++) {
        ck_assert_msg(runs[r].status == CHORUS_OK, "rank %d: %s", r, runs[r].error);
        ck_assert(runs[r].all[0]);
        ck_assert(!runs[r].all[1]);
    }
    end_world(nranks);
}
END_TEST

/* No rank fails; then rank 1 (rank 0 alone: rank 0) and the last rank fail, each its own way. */
static void fail_on_some(struct rank_run *run)
{
    run->status =
        agreement_first_failure(&run->agreement, CHORUS_OK, "", run->error, sizeof run->error);
    if (run->status != CHORUS_OK)
        return;
    int first = run->nranks > 1 ? 1 : 0;
    chorus_status mine = CHORUS_OK;
    char message[64] = "";
    if (run->rank == first) {
        mine = CHORUS_ERR_BAD_PARAMETER;
        snprintf(message, sizeof message, "CHORUS_FUSION_THRESHOLD=\"lots\" is not a size");
    } else if (run->rank == run->nranks - 1) {
        mine = CHORUS_ERR_OUT_OF_MEMORY;
        snprintf(message, sizeof message, "out of memory");
    }
    run->status =
        agreement_first_failure(&run->agreement, mine, message, run->error, sizeof run->error);
}

START_TEST(first_failure_reaches_every_rank_naming_it)
{
    int nranks = _i;
    int first = nranks > 1 ? 1 : 0;
    make_world(nranks);
    run_ranks(nranks, fail_on_some);
    for (int r = 0; r < nranks; r++) {
        ck_assert_msg(runs[r].status == CHORUS_ERR_BAD_PARAMETER, "rank %d: %s: %s", r,
                      chorus_status_name(runs[r].status), runs[r].error);
        char expected[128];
        snprintf(expected, sizeof expected, "%sCHORUS_FUSION_THRESHOLD=\"lots\" is not a size",
                 r == first ? "" : "rank 1: ");
        ck_assert_str_eq(runs[r].error, expected);
    }
    end_world(nranks);
}
END_TEST

static void fail_on_the_last(struct rank_run *run)
{
    bool last = run->rank == run->nranks - 1;
    run->status =
        agreement_first_failure(&run->agreement, last ? CHORUS_ERR_MPI : CHORUS_OK,
                                last ? "MPI_Comm_split failed" : "", run->error, sizeof run->error);
}

/* The last rank fails, and rank 1's verdict arrives at rank 0 as bytes that do not decode:
 * rank 1, before the last, is the first failure, with the codec's reason. */
START_TEST(a_verdict_that_does_not_decode_is_its_senders_failure)
{
    int nranks = _i;
    make_world(nranks);
    channel_world_corrupt_next(world, 0);
    run_ranks(nranks, fail_on_the_last);
    for (int r = 0; r < nranks; r++) {
        ck_assert_msg(runs[r].status == CHORUS_ERR_PROTOCOL, "rank %d: %s: %s", r,
                      chorus_status_name(runs[r].status), runs[r].error);
        const char *reason = "malformed start-up verdict message at byte 16 of";
        ck_assert_msg(strstr(runs[r].error, reason) != NULL, "rank %d: %s", r, runs[r].error);
        ck_assert_msg((strncmp(runs[r].error, "rank 1: ", 8) == 0) == (r != 1), "rank %d: %s", r,
                      runs[r].error);
    }
    end_world(nranks);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("agreement");
    TCase *tc = tcase_create("agreement");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, broadcast_reaches_every_rank, 1, MAX_RANKS + 1);
    tcase_add_loop_test(tc, gather_hands_rank_0_every_rank_in_order, 1, MAX_RANKS + 1);
    tcase_add_loop_test(tc, all_holds_only_when_every_rank_says_so, 1, MAX_RANKS + 1);
    tcase_add_loop_test(tc, first_failure_reaches_every_rank_naming_it, 1, MAX_RANKS + 1);
    tcase_add_loop_test(tc, a_verdict_that_does_not_decode_is_its_senders_failure, 2,
                        MAX_RANKS + 1);
    suite_add_tcase(suite, tc);
    return run_suite(suite);
}
