/*
 * test_groups.c — groups of ranks over one transport (transport_subset.c) and the start-up
 * collectives (startup_collectives.h), for 1 to 5 ranks as threads: disjoint groups reducing at
 * once, a host's group then the hosts' leaders then the whole, messages of different groups
 * between the same two ranks kept apart, the allgather, barrier and folds over the whole and
 * over a group, and what a group refuses. Results are checked against references computed here
 * from the members' deterministic inputs.
 *
 * Built twice, as test_collectives.c is (common/rank_fabric.h): over the thread transport and,
 * where UCX is found, over UCX, whose tags carry the groups' numbers in their upper bits.
 */
#include "../../lib/collectives/algorithms.h"
#include "../../lib/collectives/startup_collectives.h"
#include "../common/rank_fabric.h"
#include "../common/reference.h"

#include "../common/check_runner.h"

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_RANKS = 5, WORDS = 5, COUNT = 1021 };

struct group_job {
    struct rank_fabric *fabric;
    int rank, nranks;
    void (*body)(struct group_job *job, struct transport *world);
    atomic_int *barriers_entered; /* per rank */
    char failure[768];
};

static void *run_group_job(void *argument)
{
    struct group_job *job = argument;
    struct transport world;
    rank_fabric_transport(job->fabric, job->rank, &world);
    job->body(job, &world);
    return NULL;
}

/* Runs `body` on every rank's thread; fails the test with the first rank's failure. */
static void run_ranks(int nranks, void (*body)(struct group_job *, struct transport *))
{
    struct rank_fabric *fabric = rank_fabric_create(nranks);
    atomic_int entered[MAX_RANKS] = {0};
    struct group_job jobs[MAX_RANKS];
    pthread_t threads[MAX_RANKS];
    for (int r = 0; r < nranks; r++) {
        jobs[r] = (struct group_job){.fabric = fabric,
                                     .rank = r,
                                     .nranks = nranks,
                                     .body = body,
                                     .barriers_entered = entered};
        pthread_create(&threads[r], NULL, run_group_job, &jobs[r]);
    }
    char failure[768] = "";
    for (int r = 0; r < nranks; r++) {
        pthread_join(threads[r], NULL);
        if (jobs[r].failure[0] && !failure[0])
            snprintf(failure, sizeof failure, "rank %d: %s", r, jobs[r].failure);
    }
    rank_fabric_release(fabric, failure[0] == '\0');
    ck_assert_msg(failure[0] == '\0', "%s, %d ranks: %s", rank_fabric_kind(), nranks, failure);
}

/* Records the first failure of a rank; true when `status` is a failure. */
static bool failed(struct group_job *job, chorus_status status, const char *what,
                   const struct transport *transport)
{
    if (status == CHORUS_OK)
        return false;
    if (!job->failure[0])
        snprintf(job->failure, sizeof job->failure, "%s: %s: %s", what, chorus_status_name(status),
                 transport->error);
    return true;
}

/* The parent ranks of the form `first`, `first + step`, ... below nranks, in descending order
 * when `descending`; returns how many. */
static int strided_members(int nranks, int first, int step, bool descending, int *members)
{
    int count = 0;
    for (int r = first; r < nranks; r += step)
        members[count++] = r;
    for (int i = 0; descending && i < count / 2; i++) {
        int swap = members[i];
        members[i] = members[count - 1 - i];
        members[count - 1 - i] = swap;
    }
    return count;
}

static bool is_member(const int *members, int count, int rank)
{
    for (int i = 0; i < count; i++)
        if (members[i] == rank)
            return true;
    return false;
}

/* Allreduce (ring, SUM) over `transport` of every member's reference input of `seed`, checked
 * against the reduction of the inputs of `contributors` (parent ranks); `buffer` holds the
 * result, or the input already when `filled`. */
static void group_allreduce(struct group_job *job, struct transport *transport, int *buffer,
                            bool filled, const int *contributors, int contributor_count,
                            uint64_t seed, const char *what)
{
    struct scratch scratch = {0};
    if (!filled)
        reference_fill(buffer, COUNT, CHORUS_INT32, CHORUS_SUM, seed, job->rank);
    struct allreduce_args args = {.transport = transport,
                                  .scratch = &scratch,
                                  .buffer = buffer,
                                  .count = COUNT,
                                  .dtype = CHORUS_INT32,
                                  .op = CHORUS_SUM};
    chorus_status status = allreduce_ring(&args);
    scratch_release(&scratch);
    if (failed(job, status, what, transport))
        return;
    bool contributes[MAX_RANKS] = {false};
    for (int i = 0; i < contributor_count; i++)
        contributes[contributors[i]] = true;
    char why[256];
    if (reference_check_allreduce(buffer, COUNT, CHORUS_INT32, CHORUS_SUM, job->nranks, contributes,
                                  seed, 1.0, 1.0, why, sizeof why) >= 0 &&
        !job->failure[0])
        snprintf(job->failure, sizeof job->failure, "%s: %s", what, why);
}

/* Even and odd ranks reduce at once, each group over its own transport; then every host of two
 * ranks reduces, the hosts' leaders (in descending order) reduce the hosts' sums, each leader
 * broadcasts the total to its host, and last the whole world reduces. */
static void reduce_in_groups(struct group_job *job, struct transport *world)
{
    int *buffer = malloc(COUNT * sizeof *buffer);
    int members[MAX_RANKS], everyone[MAX_RANKS];
    int count = strided_members(job->nranks, job->rank % 2, 2, false, members);
    struct transport parity;
    transport_subset_init(&parity, world, members, count, 1 + job->rank % 2);
    group_allreduce(job, &parity, buffer, false, members, count, 11, "even or odd ranks");
    transport_subset_release(&parity);

    int host = job->rank / 2, host_members[2];
    int host_size = strided_members(job->nranks < 2 * host + 2 ? 2 * host + 1 : 2 * host + 2,
                                    2 * host, 1, false, host_members);
    struct transport host_group, leaders;
    transport_subset_init(&host_group, world, host_members, host_size, 100 + host);
    group_allreduce(job, &host_group, buffer, false, host_members, host_size, 12, "a host");
    int all = strided_members(job->nranks, 0, 1, false, everyone);
    if (job->rank % 2 == 0) {
        int leader_members[MAX_RANKS];
        int leader_count = strided_members(job->nranks, 0, 2, true, leader_members);
        transport_subset_init(&leaders, world, leader_members, leader_count, 3);
        group_allreduce(job, &leaders, buffer, true, everyone, all, 12, "the leaders");
        transport_subset_release(&leaders);
    }
    struct scratch scratch = {0};
    struct broadcast_args broadcast = {.transport = &host_group,
                                       .scratch = &scratch,
                                       .buffer = buffer,
                                       .bytes = COUNT * sizeof *buffer};
    chorus_status status = broadcast_binomial(&broadcast);
    scratch_release(&scratch);
    bool contributes[MAX_RANKS] = {true, true, true, true, true};
    char why[256];
    if (!failed(job, status, "the host's broadcast", &host_group) &&
        reference_check_allreduce(buffer, COUNT, CHORUS_INT32, CHORUS_SUM, job->nranks, contributes,
                                  12, 1.0, 1.0, why, sizeof why) >= 0 &&
        !job->failure[0])
        snprintf(job->failure, sizeof job->failure, "the leaders' total: %s", why);
    transport_subset_release(&host_group);

    group_allreduce(job, world, buffer, false, everyone, all, 13, "the whole");
    free(buffer);
}

START_TEST(groups_reduce_apart_at_once_and_in_turn)
{
    run_ranks(_i, reduce_in_groups);
}
END_TEST

/* Ranks 0 and 1 in two groups, one in each order, and the whole: rank 0 sends one message of
 * the same tag in each, rank 1 receives them in the opposite order. */
static void keep_messages_apart(struct group_job *job, struct transport *world)
{
    if (job->rank > 1)
        return;
    const int forward[2] = {0, 1}, backward[2] = {1, 0};
    struct transport groups[2];
    transport_subset_init(&groups[0], world, forward, 2, 1);
    transport_subset_init(&groups[1], world, backward, 2, 2);
    /* Where each transport's other rank is, and the three messages: the whole's first. */
    struct transport *transports[3] = {world, &groups[0], &groups[1]};
    const int peers[2][3] = {{1, 1, 0}, {0, 0, 1}};
    uint64_t sent[3] = {0x1111, 0x2222, 0x3333}, received[3] = {0};
    struct transport_request requests[3];
    chorus_status status = CHORUS_OK;
    for (int m = 0; m < 3 && status == CHORUS_OK; m++) {
        if (job->rank == 0) {
            status = transport_isend(transports[m], &sent[m], sizeof sent[m], peers[0][m], 7,
                                     &requests[m]);
            continue;
        }
        int late = 2 - m; /* the group in reverse order's message first */
        status = transport_irecv_up_to(transports[late], &received[late], sizeof received[late],
                                       peers[1][late], 7, &requests[0]);
        if (status == CHORUS_OK)
            status = transport_waitall(transports[late], 1, requests);
    }
    if (job->rank == 0 && status == CHORUS_OK)
        status = transport_waitall(world, 3, requests);
    failed(job, status, "messages of three transports", world);
    for (int m = 0; job->rank == 1 && m < 3 && !job->failure[0]; m++)
        if (received[m] != sent[m])
            snprintf(job->failure, sizeof job->failure,
                     "transport %d's message is %#llx, not %#llx", m,
                     (unsigned long long)received[m], (unsigned long long)sent[m]);
    transport_subset_release(&groups[0]);
    transport_subset_release(&groups[1]);
}

START_TEST(groups_keep_their_messages_apart)
{
    run_ranks(_i, keep_messages_apart);
}
END_TEST

static uint64_t expected_fold(uint64_t a, uint64_t b, enum startup_fold fold)
{
    if (fold == STARTUP_OR)
        return a | b;
    return (fold == STARTUP_MIN) == (a < b) ? a : b;
}

/* The allgather of 1, 3 and 17 bytes, the barrier and the three folds over `transport`, whose
 * rank r is the parent's members[r]. */
static void check_startup_collectives(struct group_job *job, struct transport *transport,
                                      const int *members, const char *where)
{
    static const size_t sizes[] = {1, 3, 17};
    size_t n = (size_t)transport->nranks;
    unsigned char *gathered = malloc(n * 17), own[17];
    for (size_t s = 0; s < 3 && !job->failure[0]; s++) {
        uint64_t seed = 20 + s;
        reference_fill_bytes(own, sizes[s], seed, job->rank);
        if (failed(job, startup_allgather(transport, own, sizes[s], gathered), where, transport))
            break;
        for (size_t r = 0; r < n && !job->failure[0]; r++)
            if (reference_check_bytes(gathered + r * sizes[s], sizes[s], seed, members[r]) >= 0)
                snprintf(job->failure, sizeof job->failure,
                         "%s: allgather of %zu bytes: block %zu is not rank %d's", where, sizes[s],
                         r, members[r]);
    }
    free(gathered);

    atomic_fetch_add(&job->barriers_entered[job->rank], 1);
    int entered = atomic_load(&job->barriers_entered[job->rank]);
    if (!failed(job, startup_barrier(transport), where, transport))
        for (size_t r = 0; r < n && !job->failure[0]; r++)
            if (atomic_load(&job->barriers_entered[members[r]]) < entered)
                snprintf(job->failure, sizeof job->failure,
                         "%s: the barrier let rank %d out before rank %d entered", where, job->rank,
                         members[r]);

    static const enum startup_fold folds[] = {STARTUP_MIN, STARTUP_MAX, STARTUP_OR};
    for (size_t f = 0; f < 3 && !job->failure[0]; f++) {
        uint64_t words[WORDS], expected[WORDS];
        for (size_t i = 0; i < WORDS; i++) {
            for (size_t r = 0; r < n; r++) {
                uint64_t random = test_random(30 + f, (uint64_t)members[r], i);
                /* A bit apiece, so that the or is not all ones. */
                uint64_t word = folds[f] == STARTUP_OR ? 1ull << random % 64 : random;
                if (members[r] == job->rank)
                    words[i] = word;
                expected[i] = r == 0 ? word : expected_fold(expected[i], word, folds[f]);
            }
        }
        if (failed(job, startup_fold(transport, words, WORDS, folds[f]), where, transport))
            break;
        for (size_t i = 0; i < WORDS && !job->failure[0]; i++)
            if (words[i] != expected[i])
                snprintf(job->failure, sizeof job->failure,
                         "%s: fold %zu, word %zu: %#llx, not %#llx", where, f, i,
                         (unsigned long long)words[i], (unsigned long long)expected[i]);
    }
}

/* Over the whole, then over every rank but rank 1 in descending order. */
static void run_startup_collectives(struct group_job *job, struct transport *world)
{
    int everyone[MAX_RANKS], members[MAX_RANKS], count = 0;
    strided_members(job->nranks, 0, 1, false, everyone);
    check_startup_collectives(job, world, everyone, "the whole");
    for (int r = job->nranks - 1; r >= 0; r--)
        if (r != 1 || job->nranks == 1)
            members[count++] = r;
    if (!is_member(members, count, job->rank))
        return;
    struct transport group;
    transport_subset_init(&group, world, members, count, 9);
    check_startup_collectives(job, &group, members, "all but rank 1");
    transport_subset_release(&group);
}

START_TEST(startup_collectives_over_the_whole_and_a_group)
{
    run_ranks(_i, run_startup_collectives);
}
END_TEST

/* A call refused with CHORUS_ERR_INVALID_ARGUMENT and an error that says `because`. */
static void assert_refused(chorus_status status, const struct transport *transport,
                           const char *because)
{
    ck_assert_msg(status == CHORUS_ERR_INVALID_ARGUMENT, "%s: %s", chorus_status_name(status),
                  transport->error);
    ck_assert_msg(strstr(transport->error, because) != NULL, "the error \"%s\" lacks \"%s\"",
                  transport->error, because);
}

START_TEST(a_group_refuses_what_it_cannot_carry)
{
    struct rank_fabric *fabric = rank_fabric_create(2);
    struct transport world, group, inner;
    rank_fabric_transport(fabric, 0, &world);
    struct transport_request request;
    uint64_t word = 0;
    const int both[2] = {0, 1}, other[1] = {1};

    /* Tags from 65536 up would reach other groups' numbers. */
    transport_subset_init(&group, &world, both, 2, 4);
    assert_refused(transport_isend(&group, &word, sizeof word, 1, 65536, &request), &group,
                   "tag 65536 is outside 0 .. 65535");
    assert_refused(transport_irecv(&group, &word, sizeof word, 1, -1, &request), &group, "tag -1");
    assert_refused(transport_irecv_up_to(&group, &word, sizeof word, 2, 0, &request), &group,
                   "has no rank 2");
    /* A group of a group: the outer group refuses the inner one's tags. */
    transport_subset_init(&inner, &group, both, 2, 5);
    assert_refused(transport_isend(&inner, &word, sizeof word, 1, 3, &request), &inner,
                   "a group of a group");
    ck_assert_msg(strstr(inner.error, "group 5") != NULL, "%s", inner.error);
    transport_subset_release(&inner);
    transport_subset_release(&group);

    /* Numbers out of range, a member that does not exist or twice, this rank missing. */
    const struct {
        const int *members;
        int count, group;
        const char *because;
    } wrong[] = {{both, 2, 0, "1 .. 32767"},
                 {both, 2, 32768, "1 .. 32767"},
                 {(const int[]){0, 2}, 2, 1, "not one of the whole's 2 ranks"},
                 {(const int[]){0, 0}, 2, 1, "named twice"},
                 {other, 1, 1, "rank 0 of the whole is not among its 1 members"}};
    for (size_t w = 0; w < sizeof wrong / sizeof wrong[0]; w++) {
        transport_subset_init(&group, &world, wrong[w].members, wrong[w].count, wrong[w].group);
        ck_assert_int_eq(group.rank, -1);
        assert_refused(transport_isend(&group, &word, sizeof word, 0, 0, &request), &group,
                       wrong[w].because);
        assert_refused(startup_barrier(&group), &group, wrong[w].because);
        transport_subset_release(&group);
    }
    rank_fabric_release(fabric, true);
}
END_TEST

static chorus_status stopped_by_test(void *context, char *error, size_t error_size)
{
    (void)context;
    snprintf(error, error_size, "stopped by the test");
    return CHORUS_ERR_SHUTDOWN;
}

/* A group's wait asks the group's hook, names the group and leaves the parent's hook alone. */
START_TEST(a_group_wait_asks_the_group_hook)
{
    struct rank_fabric *fabric = rank_fabric_create(2);
    struct transport world, group;
    rank_fabric_transport(fabric, 0, &world);
    const int both[2] = {1, 0};
    chorus_status (*world_hook)(void *, char *, size_t) = world.interrupted;
    transport_subset_init(&group, &world, both, 2, 6);
    ck_assert_ptr_eq(group.interrupted, world.interrupted);
    group.interrupted = stopped_by_test;
    struct transport_request request;
    uint64_t word;
    ck_assert_int_eq(transport_irecv(&group, &word, sizeof word, 0, 1, &request), CHORUS_OK);
    chorus_status status = transport_waitall(&group, 1, &request);
    ck_assert_msg(status == CHORUS_ERR_SHUTDOWN, "%s", chorus_status_name(status));
    ck_assert_msg(strstr(group.error, "group 6") && strstr(group.error, "stopped by the test"),
                  "%s", group.error);
    ck_assert_msg(world.interrupted == world_hook, "the parent's hook was not put back");
    transport_cancel(&group, 1, &request);
    transport_subset_release(&group);
    rank_fabric_release(fabric, false);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("groups");
    TCase *groups = tcase_create("groups");
    tcase_set_timeout(groups, 120);
    tcase_add_loop_test(groups, groups_reduce_apart_at_once_and_in_turn, 1, MAX_RANKS + 1);
    tcase_add_loop_test(groups, groups_keep_their_messages_apart, 2, MAX_RANKS + 1);
    tcase_add_loop_test(groups, startup_collectives_over_the_whole_and_a_group, 1, MAX_RANKS + 1);
    tcase_add_test(groups, a_group_refuses_what_it_cannot_carry);
    tcase_add_test(groups, a_group_wait_asks_the_group_hook);
    suite_add_tcase(suite, groups);
    return run_suite(suite);
}
