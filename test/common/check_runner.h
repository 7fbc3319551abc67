/*
 * check_runner.h — runs a Check suite and turns its verdict into an exit status, for the unit
 * test programs.
 */
#ifndef CHORUS_TEST_CHECK_RUNNER_H
#define CHORUS_TEST_CHECK_RUNNER_H

#include <check.h>

static inline int run_suite(Suite *suite)
{
    SRunner *runner = srunner_create(suite);
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}

#endif
