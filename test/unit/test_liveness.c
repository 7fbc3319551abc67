/*
 * test_liveness.c — heartbeat timing and silent peers, with made-up clocks: rank 0 watches every
 * rank, the others rank 0 alone; a batch or a BYE is not silence; a bound of 0 watches nothing.
 */
#include "../../lib/negotiation/liveness.h"

#include "../common/check_runner.h"

#include <check.h>

START_TEST(heartbeats_are_due_after_a_quarter_of_the_bound_at_most_five_seconds)
{
    struct liveness liveness;
    ck_assert(liveness_init(&liveness, 1, 4, 8, 100));
    ck_assert_double_eq(liveness_heartbeat_spacing(&liveness), 2);
    ck_assert(!liveness_heartbeat_due(&liveness, 101.9));
    ck_assert(liveness_heartbeat_due(&liveness, 102));
    liveness_sent(&liveness, 102);
    ck_assert(!liveness_heartbeat_due(&liveness, 103));
    liveness_release(&liveness);

    ck_assert(liveness_init(&liveness, 1, 4, 60, 0));
    ck_assert_double_eq(liveness_heartbeat_spacing(&liveness), 5);
    liveness_release(&liveness);

    ck_assert(liveness_init(&liveness, 0, 4, 0, 0)); /* no bound: neither heartbeats nor checks */
    ck_assert(!liveness_heartbeat_due(&liveness, 1e6));
    double silence = -1;
    ck_assert_int_eq(liveness_silent_peer(&liveness, 1e6, &silence), -1);
    liveness_release(&liveness);
}
END_TEST

START_TEST(rank_0_names_the_rank_silent_longest)
{
    struct liveness liveness;
    ck_assert(liveness_init(&liveness, 0, 4, 3, 0));
    liveness_heard(&liveness, 1, 2);
    liveness_heard(&liveness, 2, 1);
    liveness_heard(&liveness, 3, 2.5);
    double silence = -1;
    ck_assert_int_eq(liveness_silent_peer(&liveness, 3.9, &silence), -1);
    ck_assert_double_eq(silence, -1);
    ck_assert_int_eq(liveness_silent_peer(&liveness, 5.6, &silence), 2);
    ck_assert_double_eq_tol(silence, 4.6, 1e-9);
    /* A message clears it; then rank 1 is the silent one. */
    liveness_heard(&liveness, 2, 5.6);
    ck_assert_int_eq(liveness_silent_peer(&liveness, 5.8, &silence), 1);
    /* Checks come at most ten times a second. */
    ck_assert_int_eq(liveness_silent_peer(&liveness, 5.85, &silence), -1);
    liveness_release(&liveness);
}
END_TEST

START_TEST(a_batch_and_a_bye_are_not_silence)
{
    struct liveness liveness;
    ck_assert(liveness_init(&liveness, 0, 3, 3, 0));
    liveness_batch_done(&liveness, 10); /* a batch ran from 0 to 10: nobody negotiated */
    double silence = -1;
    ck_assert_int_eq(liveness_silent_peer(&liveness, 12, &silence), -1);
    liveness_gone(&liveness, 1);
    liveness_heard(&liveness, 1, 12); /* late messages do not bring it back */
    ck_assert_int_eq(liveness_silent_peer(&liveness, 13.5, &silence), 2);
    liveness_heard(&liveness, 2, 13.5);
    ck_assert_int_eq(liveness_silent_peer(&liveness, 100, &silence), 2);
    liveness_release(&liveness);
}
END_TEST

START_TEST(other_ranks_watch_rank_0_alone)
{
    struct liveness liveness;
    ck_assert(liveness_init(&liveness, 2, 4, 3, 0));
    liveness_heard(&liveness, 0, 5);
    double silence = -1;
    /* Ranks 1 and 3 have been silent from the start: only rank 0 is watched. */
    ck_assert_int_eq(liveness_silent_peer(&liveness, 7, &silence), -1);
    ck_assert_int_eq(liveness_silent_peer(&liveness, 8.5, &silence), 0);
    ck_assert_double_eq_tol(silence, 3.5, 1e-9);
    liveness_release(&liveness);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("liveness");
    TCase *tc = tcase_create("liveness");
    tcase_add_test(tc, heartbeats_are_due_after_a_quarter_of_the_bound_at_most_five_seconds);
    tcase_add_test(tc, rank_0_names_the_rank_silent_longest);
    tcase_add_test(tc, a_batch_and_a_bye_are_not_silence);
    tcase_add_test(tc, other_ranks_watch_rank_0_alone);
    suite_add_tcase(suite, tc);
    return run_suite(suite);
}
