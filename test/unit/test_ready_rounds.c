/*
 * test_ready_rounds.c — negotiation with 1..64 simulated ranks (test/common/simulated_ranks),
 * by the star protocol and by ready rounds: every rank runs the same list in the same order,
 * every tensor exactly once per step, and in the rounds' steady state rank 0 exchanges O(log N)
 * messages per cycle. Mismatches, stalls, joins, duplicate names and changed shapes met in the
 * steady state are reported as in the star protocol, naming the ranks.
 */
#include "../common/simulated_ranks.h"

#include "../common/check_runner.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int rank_counts[] = {1, 2, 3, 4, 5, 8, 16, 33, 64};
enum { TENSORS = 12, DEMOTE_AFTER = 2 };

static char names[TENSORS][16];

static struct wire_request tensor(int index)
{
    snprintf(names[index], sizeof names[index], "grad.%d", index);
    struct wire_request request = {.name = names[index],
                                   .collective =
                                       index % 4 == 3 ? CHORUS_BROADCAST : CHORUS_ALLREDUCE,
                                   .dtype = CHORUS_FLOAT32,
                                   .op = CHORUS_SUM,
                                   .ndims = 1,
                                   .shape = {index + 1},
                                   .device = -1,
                                   .prescale = 1,
                                   .postscale = 1,
                                   .group = "",
                                   .group_size = 1};
    return request;
}

/* Every rank's log is the same, line for line. */
static void assert_same_logs(const struct simulated_ranks *world, int nranks)
{
    const char *const *first = NULL;
    size_t first_count = simulated_log(world, 0, &first);
    for (int r = 1; r < nranks; r++) {
        const char *const *lines = NULL;
        size_t count = simulated_log(world, r, &lines);
        ck_assert_msg(count == first_count, "rank %d ran %zu, rank 0 %zu", r, count, first_count);
        for (size_t i = 0; i < count; i++)
            ck_assert_msg(strcmp(lines[i], first[i]) == 0, "rank %d line %zu: %s; rank 0: %s", r, i,
                          lines[i], first[i]);
    }
}

/* How often `line` appears in rank `rank`'s log from line `from` on. */
static size_t count_lines(const struct simulated_ranks *world, int rank, size_t from,
                          const char *line)
{
    const char *const *lines = NULL;
    size_t count = simulated_log(world, rank, &lines), found = 0;
    for (size_t i = from; i < count; i++)
        found += strcmp(lines[i], line) == 0;
    return found;
}

/* A training step: each rank submits every tensor in its own random order, a few per cycle;
 * then cycles run until nothing is pending. Returns the cycles it took. */
static size_t step(struct simulated_ranks *world, int nranks, double *now, unsigned *seed)
{
    int order[64][TENSORS];
    int next[64] = {0};
    for (int r = 0; r < nranks; r++) {
        for (int t = 0; t < TENSORS; t++)
            order[r][t] = t;
        for (int t = TENSORS - 1; t > 0; t--) {
            int other = rand_r(seed) % (t + 1), kept = order[r][t];
            order[r][t] = order[r][other];
            order[r][other] = kept;
        }
    }
    size_t cycles = 0;
    for (bool more = true; more; cycles++) {
        more = false;
        for (int r = 0; r < nranks; r++)
            for (int n = rand_r(seed) % 4; n > 0 && next[r] < TENSORS; n--) {
                struct wire_request request = tensor(order[r][next[r]++]);
                simulated_submit(world, r, &request, *now);
            }
        simulated_cycle(world, *now, 0, 0);
        *now += 1e-3;
        for (int r = 0; r < nranks; r++)
            more |= next[r] < TENSORS || simulated_pending(world, r) > 0;
        ck_assert_msg(cycles < 1000, "a step did not finish at %d ranks", nranks);
    }
    return cycles;
}

static int ceil_log2(int n)
{
    int steps = 0;
    while ((1 << steps) < n)
        steps++;
    return steps;
}

static void steady_state(enum simulated_protocol protocol)
{
    for (size_t i = 0; i < ARRAY_LENGTH(rank_counts); i++) {
        int nranks = rank_counts[i];
        unsigned seed = 17u + (unsigned)nranks;
        double now = 0;
        struct simulated_ranks *world = simulated_ranks_create(nranks, protocol, 64, DEMOTE_AFTER);
        step(world, nranks, &now, &seed);
        for (int s = 0; s < 3; s++) {
            const char *const *lines = NULL;
            size_t before = simulated_log(world, 0, &lines);
            simulated_reset_work(world);
            size_t cycles = step(world, nranks, &now, &seed);
            for (int t = 0; t < TENSORS; t++) {
                char line[32];
                snprintf(line, sizeof line, "run grad.%d", t);
                ck_assert_uint_eq(count_lines(world, 0, before, line), 1);
            }
            const struct rank0_work *work = simulated_rank0_work(world);
            if (protocol == SIMULATED_ROUNDS)
                ck_assert_msg(work->messages_in <= cycles * (size_t)ceil_log2(nranks),
                              "%d ranks: %zu messages into rank 0 in %zu cycles", nranks,
                              work->messages_in, cycles);
            else if (nranks > 1)
                ck_assert_uint_ge(work->messages_out, (size_t)nranks - 1);
        }
        assert_same_logs(world, nranks);
        simulated_ranks_destroy(world);
    }
}

START_TEST(star_protocol_runs_every_tensor_once_in_one_order)
{
    steady_state(SIMULATED_STAR);
}
END_TEST

START_TEST(rounds_run_every_tensor_once_in_one_order_with_log_n_messages)
{
    steady_state(SIMULATED_ROUNDS);
}
END_TEST

/* A world after one warm-up step, so that every tensor is in the response cache. */
static struct simulated_ranks *warmed_up(int nranks, enum simulated_protocol protocol, double *now)
{
    unsigned seed = 5;
    struct simulated_ranks *world = simulated_ranks_create(nranks, protocol, 64, DEMOTE_AFTER);
    step(world, nranks, now, &seed);
    return world;
}

static const char *last_line(const struct simulated_ranks *world, int rank)
{
    const char *const *lines = NULL;
    size_t count = simulated_log(world, rank, &lines);
    return count > 0 ? lines[count - 1] : "";
}

/* Every rank's last run is `line` and nothing is left waiting. */
static void assert_every_rank_ended_with(const struct simulated_ranks *world, int nranks,
                                         const char *line)
{
    for (int r = 0; r < nranks; r++) {
        ck_assert_msg(strcmp(last_line(world, r), line) == 0, "rank %d: %s", r,
                      last_line(world, r));
        ck_assert_uint_eq(simulated_pending(world, r), 0);
    }
    assert_same_logs(world, nranks);
}

static void run_cycles(struct simulated_ranks *world, int cycles, double *now, double spacing,
                       double warn_after, double fail_after)
{
    for (int c = 0; c < cycles; c++, *now += spacing)
        simulated_cycle(world, *now, warn_after, fail_after);
}

START_TEST(a_mismatch_in_the_steady_state_names_the_rank)
{
    for (size_t i = 0; i < ARRAY_LENGTH(rank_counts); i++) {
        int nranks = rank_counts[i];
        if (nranks < 2)
            continue;
        double now = 0;
        struct simulated_ranks *world = warmed_up(nranks, SIMULATED_ROUNDS, &now);
        int odd = nranks / 2;
        for (int r = 0; r < nranks; r++) {
            struct wire_request request = tensor(2);
            if (r == odd)
                request.dtype = CHORUS_FLOAT16;
            simulated_submit(world, r, &request, now);
        }
        run_cycles(world, 4, &now, 1e-3, 0, 0);
        char expected[64];
        snprintf(expected, sizeof expected, "rank %d float16", odd);
        for (int r = 0; r < nranks; r++) {
            ck_assert_msg(strstr(last_line(world, r), "CHORUS_ERR_MISMATCH") != NULL &&
                              strstr(last_line(world, r), expected) != NULL,
                          "%d ranks, rank %d: %s", nranks, r, last_line(world, r));
            ck_assert_uint_eq(simulated_pending(world, r), 0);
        }
        /* The slot is back on the bit path for the next, consistent submission. */
        for (int r = 0; r < nranks; r++) {
            struct wire_request request = tensor(2);
            simulated_submit(world, r, &request, now);
        }
        simulated_reset_work(world);
        simulated_cycle(world, now, 0, 0);
        ck_assert_str_eq(last_line(world, 0), "run grad.2");
        ck_assert_uint_le(simulated_rank0_work(world)->messages_in, (size_t)ceil_log2(nranks));
        assert_same_logs(world, nranks);
        simulated_ranks_destroy(world);
    }
}
END_TEST

START_TEST(a_stall_in_the_steady_state_names_the_missing_ranks)
{
    for (size_t i = 0; i < ARRAY_LENGTH(rank_counts); i++) {
        int nranks = rank_counts[i];
        if (nranks < 2)
            continue;
        double now = 0;
        struct simulated_ranks *world = warmed_up(nranks, SIMULATED_ROUNDS, &now);
        int late = nranks - 1;
        for (int r = 0; r < late; r++) {
            struct wire_request request = tensor(0);
            simulated_submit(world, r, &request, now);
        }
        /* Bits wait DEMOTE_AFTER seconds, then go to rank 0, whose inspector warns. */
        run_cycles(world, 40, &now, 0.25, 5.0, 0);
        const char *const *warnings = NULL;
        size_t warning_count = simulated_warnings(world, &warnings);
        ck_assert_uint_ge(warning_count, 1);
        char expected[32];
        snprintf(expected, sizeof expected, "but not by rank %d", late);
        ck_assert_msg(strstr(warnings[0], expected) != NULL, "%s", warnings[0]);
        /* The late rank submits: it runs everywhere. */
        struct wire_request request = tensor(0);
        simulated_submit(world, late, &request, now);
        run_cycles(world, 3, &now, 1e-3, 5.0, 0);
        assert_every_rank_ended_with(world, nranks, "run grad.0");
        simulated_ranks_destroy(world);
    }
}
END_TEST

START_TEST(a_stall_past_the_shutdown_limit_fails_on_every_rank)
{
    double now = 0;
    int nranks = 16;
    struct simulated_ranks *world = warmed_up(nranks, SIMULATED_ROUNDS, &now);
    for (int r = 0; r < nranks; r++) {
        if (r == 3 || r == 7)
            continue;
        struct wire_request request = tensor(1);
        simulated_submit(world, r, &request, now);
    }
    run_cycles(world, 60, &now, 0.25, 0, 10.0);
    for (int r = 0; r < nranks; r++) {
        if (r == 3 || r == 7)
            continue;
        ck_assert_msg(strstr(last_line(world, r), "CHORUS_ERR_STALLED") != NULL &&
                          strstr(last_line(world, r), "not by ranks 3,7") != NULL,
                      "rank %d: %s", r, last_line(world, r));
        ck_assert_uint_eq(simulated_pending(world, r), 0);
    }
    simulated_ranks_destroy(world);
}
END_TEST

START_TEST(joins_in_the_steady_state_count_as_ready)
{
    for (size_t i = 0; i < ARRAY_LENGTH(rank_counts); i++) {
        int nranks = rank_counts[i];
        double now = 0;
        struct simulated_ranks *world = warmed_up(nranks, SIMULATED_ROUNDS, &now);
        int joining = nranks / 3;
        simulated_join(world, joining);
        for (int t = 0; t < 3; t++)
            for (int r = 0; r < nranks; r++) {
                if (r == joining)
                    continue;
                struct wire_request request = tensor(t);
                simulated_submit(world, r, &request, now);
            }
        run_cycles(world, 5, &now, 1e-3, 0, 0);
        for (int r = 0; r < nranks; r++)
            ck_assert_uint_eq(simulated_pending(world, r), 0);
        for (int r = 0; r < nranks; r++)
            if (r != joining)
                simulated_join(world, r);
        run_cycles(world, 3, &now, 1e-3, 0, 0);
        ck_assert_str_eq(last_line(world, 0), "join done");
        assert_same_logs(world, nranks);
        /* After the join, cached tensors travel as bits again. */
        for (int r = 0; r < nranks; r++) {
            struct wire_request request = tensor(4);
            simulated_submit(world, r, &request, now);
        }
        simulated_reset_work(world);
        simulated_cycle(world, now, 0, 0);
        ck_assert_str_eq(last_line(world, nranks - 1), "run grad.4");
        ck_assert_uint_le(simulated_rank0_work(world)->messages_in, (size_t)ceil_log2(nranks));
        simulated_ranks_destroy(world);
    }
}
END_TEST

START_TEST(a_duplicate_name_is_refused_and_runs_once)
{
    double now = 0;
    int nranks = 8;
    struct simulated_ranks *world = warmed_up(nranks, SIMULATED_ROUNDS, &now);
    const char *const *lines = NULL;
    size_t before = simulated_log(world, 5, &lines);
    for (int r = 0; r < nranks; r++) {
        struct wire_request request = tensor(6);
        simulated_submit(world, r, &request, now);
        if (r == 5)
            simulated_submit(world, r, &request, now);
    }
    run_cycles(world, 3, &now, 1e-3, 0, 0);
    ck_assert_uint_eq(count_lines(world, 5, before, "duplicate grad.6"), 1);
    ck_assert_uint_eq(count_lines(world, 5, before, "run grad.6"), 1);
    ck_assert_uint_eq(count_lines(world, 0, 0, "run grad.6"), 2);
    simulated_ranks_destroy(world);
}
END_TEST

START_TEST(a_shape_changed_everywhere_runs_with_the_new_shape)
{
    double now = 0;
    int nranks = 5;
    struct simulated_ranks *world = warmed_up(nranks, SIMULATED_ROUNDS, &now);
    for (int r = 0; r < nranks; r++) {
        struct wire_request request = tensor(8);
        request.shape[0] = 1000;
        simulated_submit(world, r, &request, now);
    }
    run_cycles(world, 4, &now, 1e-3, 0, 0);
    assert_every_rank_ended_with(world, nranks, "run grad.8");
    /* The new shape took the old one's place in the cache: the next steps decide it by the
     * rounds' bits alone, with no request sent to rank 0. */
    for (int s = 0; s < 3; s++) {
        simulated_reset_work(world);
        for (int r = 0; r < nranks; r++) {
            struct wire_request request = tensor(8);
            request.shape[0] = 1000;
            simulated_submit(world, r, &request, now);
        }
        size_t cycles = 0;
        for (bool more = true; more; cycles++) {
            simulated_cycle(world, now, 0, 0);
            now += 1e-3;
            more = false;
            for (int r = 0; r < nranks; r++)
                more |= simulated_pending(world, r) > 0;
            ck_assert_msg(cycles < 100, "step %d did not finish", s);
        }
        const struct rank0_work *work = simulated_rank0_work(world);
        ck_assert_msg(work->messages_in <= cycles * (size_t)ceil_log2(nranks),
                      "step %d: %zu messages into rank 0 in %zu cycles", s, work->messages_in,
                      cycles);
        assert_every_rank_ended_with(world, nranks, "run grad.8");
    }
    simulated_ranks_destroy(world);
}
END_TEST

/* The slot of a rank's only waiting bit, which may ride with the round (rounds.c): none with
 * nothing waiting, none with two waiting, across the vector's words. */
START_TEST(lone_names_the_only_waiting_slot)
{
    enum { SLOTS = 130 };
    struct response_cache cache;
    response_cache_init(&cache, SLOTS);
    static char slot_names[SLOTS][16];
    for (int i = 0; i < SLOTS; i++) {
        struct wire_response response = {.type = RESPONSE_EXECUTE, .contributors = 2};
        response.request = tensor(0);
        snprintf(slot_names[i], sizeof slot_names[i], "slot.%d", i);
        response.request.name = slot_names[i];
        ck_assert(response_cache_record(&cache, &response, 2));
    }
    struct ready_rounds rounds;
    ck_assert(ready_rounds_init(&rounds, SLOTS));
    ck_assert_int_eq(ready_rounds_lone(&rounds), -1);
    struct wire_request request = *response_cache_get(&cache, 129);
    ck_assert_int_eq(ready_rounds_route(&rounds, &cache, &request, 0), ROUTE_BIT);
    ck_assert_int_eq(ready_rounds_lone(&rounds), 129);
    request = *response_cache_get(&cache, 3);
    ck_assert_int_eq(ready_rounds_route(&rounds, &cache, &request, 0), ROUTE_BIT);
    ck_assert_int_eq(ready_rounds_lone(&rounds), -1);
    ready_rounds_destroy(&rounds);
    ck_assert(ready_rounds_init(&rounds, SLOTS));
    ck_assert_int_eq(ready_rounds_route(&rounds, &cache, &request, 0), ROUTE_BIT);
    request = *response_cache_get(&cache, 5);
    ck_assert_int_eq(ready_rounds_route(&rounds, &cache, &request, 0), ROUTE_BIT);
    ck_assert_int_eq(ready_rounds_lone(&rounds), -1); /* two in one word */
    ready_rounds_destroy(&rounds);
    response_cache_destroy(&cache);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("ready_rounds");
    TCase *tc = tcase_create("ready_rounds");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, star_protocol_runs_every_tensor_once_in_one_order);
    tcase_add_test(tc, rounds_run_every_tensor_once_in_one_order_with_log_n_messages);
    tcase_add_test(tc, a_mismatch_in_the_steady_state_names_the_rank);
    tcase_add_test(tc, a_stall_in_the_steady_state_names_the_missing_ranks);
    tcase_add_test(tc, a_stall_past_the_shutdown_limit_fails_on_every_rank);
    tcase_add_test(tc, joins_in_the_steady_state_count_as_ready);
    tcase_add_test(tc, a_duplicate_name_is_refused_and_runs_once);
    tcase_add_test(tc, a_shape_changed_everywhere_runs_with_the_new_shape);
    tcase_add_test(tc, lone_names_the_only_waiting_slot);
    suite_add_tcase(suite, tc);
    return run_suite(suite);
}
