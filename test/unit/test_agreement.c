/*
 * test_agreement.c — the start-up's agreement over the channel with 1-5 ranks as threads over
 * the thread channel. Its blocking steps (lib/negotiation/agreement.h): rank 0's bytes reach
 * every rank (an empty message where it had none), rank 0 gathers every rank's in rank order,
 * "all" holds only when every rank says so, and the first failure reaches every rank naming
 * that rank, also when a verdict arrives that does not decode. What init agrees on with them:
 * the parameters that shape the wire are rank 0's on every rank, a bad one fails every rank
 * naming the rank, and rank 0's tuning file is every rank's, its missing file fails every rank;
 * a message of either that does not decode on one rank fails every rank naming that rank.
 */
#include "../../lib/coordinator/background.h"
#include "../../lib/negotiation/agreement.h"
#include "../../lib/negotiation/wire.h"
#include "../../lib/tuning/tuning_agreement.h"
#include "../common/channel_threads.h"
#include "../common/check_runner.h"

#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    struct chorus_context *context; /* init's agreement: the rank's parameters, */
    struct tuning_table table;      /* and its tuning table */
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
    for (int r = 0; r < nranks; r++) {
        free(runs[r].bytes);
        context_free(runs[r].context);
        tuning_free(&runs[r].table);
    }
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

/* ----- what init agrees on ------------------------------------------------------------- */

/* Each rank's parameters from its own overrides ("NAME=VALUE;...", NULL: none), as init reads
 * them: a malformed one is the rank's params_status, for the agreement to report. */
static void load_parameters(int nranks, const char *const overrides[])
{
    char *const no_environment[] = {NULL};
    for (int r = 0; r < nranks; r++) {
        struct chorus_context *context = context_create(MPI_COMM_NULL);
        context->rank = r;
        context->size = nranks;
        context->params_status =
            params_load(&context->params, no_environment, overrides[r], context->params_message,
                        sizeof context->params_message);
        runs[r].context = context;
    }
}

static void agree_on_parameters(struct rank_run *run)
{
    run->status =
        coord_agree_on_parameters(run->context, &run->agreement, run->error, sizeof run->error);
}

static void agree_on_tuning_file(struct rank_run *run)
{
    run->status = tuning_agree_on_file(&run->agreement, &run->context->params, &run->table,
                                       run->error, sizeof run->error);
}

/* Every rank failed with `status`, the last rank's `reason` in its error: "rank N: " before it
 * on the other ranks. */
static void expect_the_last_ranks_failure(int nranks, chorus_status status, const char *reason)
{
    int last = nranks - 1;
    for (int r = 0; r < nranks; r++) {
        ck_assert_msg(runs[r].status == status, "rank %d: %s: %s", r,
                      chorus_status_name(runs[r].status), runs[r].error);
        char prefix[32] = "";
        if (r != last)
            snprintf(prefix, sizeof prefix, "rank %d: ", last);
        ck_assert_msg(strncmp(runs[r].error, prefix, strlen(prefix)) == 0 &&
                          strstr(runs[r].error, reason) != NULL,
                      "rank %d: expected '%s%s' in: %s", r, prefix, reason, runs[r].error);
    }
}

/* Rank 0 sets the fusion threshold, the last rank another and its own cycle time: every rank
 * runs with rank 0's, and each rank that gave one up marks it as rank 0's. */
START_TEST(parameters_that_differ_are_rank_0s_on_every_rank)
{
    int nranks = _i, last = nranks - 1;
    const char *overrides[MAX_RANKS] = {"CHORUS_FUSION_THRESHOLD=32M"};
    if (last > 0)
        overrides[last] = "CHORUS_FUSION_THRESHOLD=1M;CHORUS_CYCLE_TIME_MS=2";
    make_world(nranks);
    load_parameters(nranks, overrides);
    run_ranks(nranks, agree_on_parameters);
    int threshold = param_index("CHORUS_FUSION_THRESHOLD");
    int cycle = param_index("CHORUS_CYCLE_TIME_MS");
    const struct param_set *rank0 = &runs[0].context->params;
    for (int r = 0; r < nranks; r++) {
        ck_assert_msg(runs[r].status == CHORUS_OK, "rank %d: %s", r, runs[r].error);
        const struct param_set *set = &runs[r].context->params;
        ck_assert_uint_eq(set->values.fusion_threshold, (size_t)32 << 20);
        ck_assert(set->values.cycle_time_ms == rank0->values.cycle_time_ms);
        ck_assert_int_eq(set->sources[threshold],
                         r == 0 ? PARAM_SOURCE_OPTIONS : PARAM_SOURCE_RANK0);
        ck_assert_int_eq(set->sources[cycle],
                         r == last && r != 0 ? PARAM_SOURCE_RANK0 : PARAM_SOURCE_DEFAULT);
    }
    end_world(nranks);
}
END_TEST

START_TEST(a_bad_parameter_fails_every_rank_naming_it)
{
    int nranks = _i;
    const char *overrides[MAX_RANKS] = {NULL};
    overrides[nranks - 1] = "CHORUS_FUSION_THRESHOLD=lots";
    make_world(nranks);
    load_parameters(nranks, overrides);
    run_ranks(nranks, agree_on_parameters);
    expect_the_last_ranks_failure(nranks, CHORUS_ERR_BAD_PARAMETER, "CHORUS_FUSION_THRESHOLD");
    for (int r = 0; r < nranks; r++)
        ck_assert_msg(strstr(runs[r].error, "\"lots\"") != NULL, "%s", runs[r].error);
    end_world(nranks);
}
END_TEST

START_TEST(a_parameters_message_that_does_not_decode_fails_every_rank)
{
    int nranks = _i;
    const char *overrides[MAX_RANKS] = {NULL};
    make_world(nranks);
    load_parameters(nranks, overrides);
    channel_world_corrupt_next(world, nranks - 1);
    run_ranks(nranks, agree_on_parameters);
    expect_the_last_ranks_failure(nranks, CHORUS_ERR_PROTOCOL,
                                  "malformed parameters message at byte 16");
    end_world(nranks);
}
END_TEST

/* A tuning file at a path of its own, removed by the caller. */
static void write_tuning_file(char *path, const char *text)
{
    int descriptor = mkstemp(path);
    ck_assert_int_ge(descriptor, 0);
    ck_assert_int_eq(write(descriptor, text, strlen(text)), (ssize_t)strlen(text));
    close(descriptor);
}

/* Rank 0's file (the others name one that is not there): its rows on every rank, its settings
 * where rank 0's user set none (the staging areas), not where it did (the fusion threshold). */
START_TEST(rank_0s_tuning_file_is_every_ranks)
{
    int nranks = _i;
    char path[] = "/tmp/chorus-tuning-XXXXXX";
    write_tuning_file(path, "chorus-tuning 1\n"
                            "setting CHORUS_STAGING_AREAS=8 # test\n"
                            "setting CHORUS_FUSION_THRESHOLD=4M\n"
                            "alltoall pairwise # test\n");
    char rank0[128];
    snprintf(rank0, sizeof rank0, "CHORUS_TUNING_FILE=%s;CHORUS_FUSION_THRESHOLD=32M", path);
    const char *overrides[MAX_RANKS] = {rank0, "CHORUS_TUNING_FILE=/nonexistent/tuning",
                                        "CHORUS_TUNING_FILE=/nonexistent/tuning"};
    make_world(nranks);
    load_parameters(nranks, overrides);
    run_ranks(nranks, agree_on_parameters);
    run_ranks(nranks, agree_on_tuning_file);
    for (int r = 0; r < nranks; r++) {
        ck_assert_msg(runs[r].status == CHORUS_OK, "rank %d: %s", r, runs[r].error);
        ck_assert_uint_eq(runs[r].table.count, 1);
        ck_assert_uint_eq(runs[r].table.setting_count, 2);
        ck_assert_uint_eq(runs[r].context->params.values.staging_areas, 8);
        ck_assert_uint_eq(runs[r].context->params.values.fusion_threshold, (size_t)32 << 20);
    }
    end_world(nranks);
    unlink(path);
}
END_TEST

START_TEST(rank_0s_missing_tuning_file_fails_every_rank_naming_it)
{
    int nranks = _i;
    const char *overrides[MAX_RANKS] = {"CHORUS_TUNING_FILE=/nonexistent/tuning"};
    make_world(nranks);
    load_parameters(nranks, overrides);
    run_ranks(nranks, agree_on_parameters);
    run_ranks(nranks, agree_on_tuning_file);
    for (int r = 0; r < nranks; r++) {
        ck_assert_int_eq(runs[r].status, CHORUS_ERR_BAD_PARAMETER);
        ck_assert_str_eq(
            runs[r].error,
            "rank 0: CHORUS_TUNING_FILE /nonexistent/tuning: No such file or directory");
    }
    end_world(nranks);
}
END_TEST

START_TEST(a_tuning_file_message_that_does_not_decode_fails_every_rank)
{
    int nranks = _i;
    char path[] = "/tmp/chorus-tuning-XXXXXX";
    write_tuning_file(path, "chorus-tuning 1\nalltoall pairwise\n");
    char rank0[128];
    snprintf(rank0, sizeof rank0, "CHORUS_TUNING_FILE=%s", path);
    const char *overrides[MAX_RANKS] = {rank0};
    make_world(nranks);
    load_parameters(nranks, overrides);
    run_ranks(nranks, agree_on_parameters);
    channel_world_corrupt_next(world, nranks - 1);
    run_ranks(nranks, agree_on_tuning_file);
    expect_the_last_ranks_failure(nranks, CHORUS_ERR_PROTOCOL,
                                  "malformed tuning file message at byte 16");
    end_world(nranks);
    unlink(path);
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
    tcase_add_loop_test(tc, parameters_that_differ_are_rank_0s_on_every_rank, 1, MAX_RANKS + 1);
    tcase_add_loop_test(tc, a_bad_parameter_fails_every_rank_naming_it, 1, MAX_RANKS + 1);
    tcase_add_loop_test(tc, a_parameters_message_that_does_not_decode_fails_every_rank, 2,
                        MAX_RANKS + 1);
    tcase_add_loop_test(tc, rank_0s_tuning_file_is_every_ranks, 1, MAX_RANKS + 1);
    tcase_add_loop_test(tc, rank_0s_missing_tuning_file_fails_every_rank_naming_it, 1,
                        MAX_RANKS + 1);
    tcase_add_loop_test(tc, a_tuning_file_message_that_does_not_decode_fails_every_rank, 2,
                        MAX_RANKS + 1);
    suite_add_tcase(suite, tc);
    return run_suite(suite);
}
