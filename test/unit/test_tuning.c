/*
 * test_tuning.c — tuning files (CHORUS_TUNING_FILE): rows read with every condition, the
 * malformed ones refused naming the line and what is wrong, and the selection trying the file's
 * rows before the built-in ones where their conditions hold (ranks per host among them).
 */
#include "../../lib/tuning/tuning_file.h"
#include "../../lib/core/algorithm_names.h"
#include "../../lib/core/params.h"

#include "../common/check_runner.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct tuning_table table;
static char error[1024];

static chorus_status parse(const char *text)
{
    error[0] = '\0';
    tuning_free(&table);
    return tuning_parse(text, "tune.txt", &table, error, sizeof error);
}

START_TEST(rows_with_every_condition)
{
    ck_assert_int_eq(parse("# written by hand\n"
                           "chorus-tuning 1\n"
                           "\n"
                           "allreduce ring bytes=1M- ranks=4 local_ranks=2 # 1.8 against 2.1 ms\n"
                           "broadcast binomial bytes=-64K ranks=2-8 placement=shared-host\n"
                           "alltoall bruck bytes=4K-1M power_of_two\r\n"
                           "allgather ring\n"),
                     CHORUS_OK);
    ck_assert_uint_eq(table.count, 4);
    const struct selection_rule *r = table.rules;
    ck_assert_int_eq(r[0].collective, CHORUS_ALLREDUCE);
    ck_assert_int_eq(r[0].algorithm, ALLREDUCE_RING);
    ck_assert_uint_eq(r[0].min_bytes, (size_t)1 << 20);
    ck_assert_uint_eq(r[0].max_bytes, 0);
    ck_assert_int_eq(r[0].min_ranks, 4);
    ck_assert_int_eq(r[0].max_ranks, 4);
    ck_assert_int_eq(r[0].local_ranks, 2);
    ck_assert_str_eq(r[0].provenance, "tune.txt, line 4: 1.8 against 2.1 ms");
    ck_assert_int_eq(r[1].algorithm, BROADCAST_BINOMIAL);
    ck_assert_uint_eq(r[1].min_bytes, 0);
    ck_assert_uint_eq(r[1].max_bytes, 64 << 10);
    ck_assert_int_eq(r[1].min_ranks, 2);
    ck_assert_int_eq(r[1].max_ranks, 8);
    ck_assert_int_eq(r[1].placement, PLACEMENT_SHARED_HOST);
    ck_assert_str_eq(r[1].provenance, "tune.txt, line 5");
    ck_assert(r[2].power_of_two_ranks);
    ck_assert_uint_eq(r[2].min_bytes, 4096);
    ck_assert_uint_eq(r[2].max_bytes, 1 << 20);
    ck_assert_int_eq(r[3].collective, CHORUS_ALLGATHER);
    ck_assert_int_eq(r[3].min_ranks + r[3].max_ranks + r[3].local_ranks, 0);
}
END_TEST

START_TEST(malformed_rows_name_the_line)
{
    static const struct {
        const char *text, *message;
    } cases[] = {
        {"", "line 1: empty"},
        {"allreduce ring\n", "line 1: the first line must be 'chorus-tuning 1'"},
        {"chorus-tuning 2\n", "line 1: the first line must be"},
        {"chorus-tuning 1\nallreduce rign\n", "line 2: allreduce has no algorithm 'rign' (ring"},
        {"chorus-tuning 1\n\nreduce ring\n", "line 3: unknown collective 'reduce'"},
        {"chorus-tuning 1\nallreduce\n", "line 2: allreduce has no algorithm ''"},
        {"chorus-tuning 1\nallreduce ring bytes=4M-1M\n", "line 2: bytes=4M-1M is not a range"},
        {"chorus-tuning 1\nallreduce ring bytes=lots\n", "line 2: bytes=lots"},
        {"chorus-tuning 1\nallreduce ring ranks=two\n", "line 2: ranks=two is not"},
        {"chorus-tuning 1\nallreduce ring local_ranks=2-4\n", "line 2: local_ranks=2-4 is not"},
        {"chorus-tuning 1\nallreduce ring placement=rack\n", "line 2: placement=rack"},
        {"chorus-tuning 1\nallreduce ring colour=red\n", "line 2: unknown condition 'colour'"},
        {"chorus-tuning 1\nallreduce ring fast\n", "line 2: 'fast' is not a condition"},
        {"chorus-tuning 1\nallreduce ring\nallgather ring bytes=-\n", "line 3: bytes=-"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_int_eq(parse(cases[i].text), CHORUS_ERR_BAD_PARAMETER);
        ck_assert_msg(strstr(error, "CHORUS_TUNING_FILE tune.txt, ") == error, "%s", error);
        ck_assert_msg(strstr(error, cases[i].message) != NULL, "case %zu: %s", i, error);
        ck_assert_uint_eq(table.count, 0);
        ck_assert_ptr_null(table.rules);
    }
}
END_TEST

START_TEST(settings_rows)
{
    ck_assert_int_eq(parse("chorus-tuning 1\n"
                           "setting CHORUS_STAGING_AREAS=4 # 1.9 against 2.3 ms at 16 MiB\n"
                           "allreduce ring bytes=1M-\n"
                           "  setting CHORUS_STAGING_STORES=streaming\r\n"
                           "setting CHORUS_FUSION_THRESHOLD=16M\n"),
                     CHORUS_OK);
    ck_assert_uint_eq(table.count, 1);
    ck_assert_uint_eq(table.setting_count, 3);
    ck_assert_int_eq(table.settings[0].parameter, param_index("CHORUS_STAGING_AREAS"));
    ck_assert_str_eq(table.settings[0].value, "4");
    ck_assert_str_eq(table.settings[0].provenance, "tune.txt, line 2: 1.9 against 2.3 ms at 16 MiB");
    ck_assert_int_eq(table.settings[1].parameter, param_index("CHORUS_STAGING_STORES"));
    ck_assert_str_eq(table.settings[1].value, "streaming");
    ck_assert_str_eq(table.settings[2].value, "16M");
    ck_assert_str_eq(table.settings[2].provenance, "tune.txt, line 5");
    static const struct {
        const char *text, *message;
    } cases[] = {
        {"chorus-tuning 1\nsetting CHORUS_TIMEOUT_SECONDS=5\n",
         "line 2: 'CHORUS_TIMEOUT_SECONDS' cannot be set by a tuning file (CHORUS_FUSION_TENSOR_LIMIT"},
        {"chorus-tuning 1\nsetting CHORUS_STAGING_AREAS=3\n",
         "line 2: CHORUS_STAGING_AREAS=3: expected 0 (the default), 2, 4, 8 or 16"},
        {"chorus-tuning 1\nsetting CHORUS_STAGING_STORES=fast\n",
         "line 2: CHORUS_STAGING_STORES=fast"},
        {"chorus-tuning 1\nsetting CHORUS_FUSION_THRESHOLD\n", "line 2: a setting is 'setting"},
        {"chorus-tuning 1\nsetting CHORUS_FUSION_THRESHOLD=1M 2M\n",
         "line 2: a setting is 'setting"},
        {"chorus-tuning 1\nsetting NO_SUCH=1\n", "line 2: 'NO_SUCH' cannot be set"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_int_eq(parse(cases[i].text), CHORUS_ERR_BAD_PARAMETER);
        ck_assert_msg(strstr(error, cases[i].message) != NULL, "case %zu: %s", i, error);
        ck_assert_uint_eq(table.setting_count, 0);
        ck_assert_ptr_null(table.settings);
    }
}
END_TEST

/* The rows of the table parsed last, as the executor hands them to the selection; NULL: none. */
static struct selection_rows tuned_rows;
static const struct selection_rows *tuned;

static void use_parsed_rows(void)
{
    tuned_rows = (struct selection_rows){table.rules, table.count};
    tuned = &tuned_rows;
}

static int first_candidate(chorus_collective collective, size_t bytes, int nranks,
                           int local_ranks)
{
    struct selection_query query = {.bytes = bytes, .nranks = nranks,
                                    .local_ranks = local_ranks, .forced = -1, .tuned = tuned};
    int candidates[ALGORITHMS_MAX];
    ck_assert_uint_gt(selection_candidates(collective, &query, candidates, ALGORITHMS_MAX), 0);
    return candidates[0];
}

START_TEST(selection_tries_the_files_rows_first)
{
    int built_in = first_candidate(CHORUS_ALLREDUCE, 4 << 20, 4, 1);
    ck_assert_int_eq(parse("chorus-tuning 1\n"
                           "allreduce rabenseifner bytes=1M-16M ranks=4 local_ranks=1\n"
                           "alltoall pairwise local_ranks=2\n"),
                     CHORUS_OK);
    use_parsed_rows();
    ck_assert_int_eq(first_candidate(CHORUS_ALLREDUCE, 4 << 20, 4, 1), ALLREDUCE_RABENSEIFNER);
    /* outside the row's conditions the built-in table decides */
    ck_assert_int_eq(first_candidate(CHORUS_ALLREDUCE, 32 << 20, 4, 1), built_in);
    ck_assert_int_ne(first_candidate(CHORUS_ALLREDUCE, 4 << 20, 8, 1), ALLREDUCE_RABENSEIFNER);
    ck_assert_int_ne(first_candidate(CHORUS_ALLREDUCE, 4 << 20, 4, 2), ALLREDUCE_RABENSEIFNER);
    ck_assert_int_eq(first_candidate(CHORUS_ALLTOALL, 1 << 20, 2, 2), ALLTOALL_PAIRWISE);
    ck_assert_int_ne(first_candidate(CHORUS_ALLTOALL, 1 << 20, 4, 4), ALLTOALL_PAIRWISE);
    /* a forced algorithm still comes first, and the tuned one is not listed twice */
    struct selection_query query = {.bytes = 4 << 20, .nranks = 4, .local_ranks = 1,
                                    .forced = ALLREDUCE_RING, .tuned = tuned};
    int candidates[ALGORITHMS_MAX];
    size_t count = selection_candidates(CHORUS_ALLREDUCE, &query, candidates, ALGORITHMS_MAX);
    ck_assert_int_eq(candidates[0], ALLREDUCE_RING);
    ck_assert_int_eq(candidates[1], ALLREDUCE_RABENSEIFNER);
    for (size_t i = 2; i < count; i++)
        ck_assert_int_ne(candidates[i], ALLREDUCE_RABENSEIFNER);
    tuned = NULL;
    ck_assert_int_eq(first_candidate(CHORUS_ALLREDUCE, 4 << 20, 4, 1), built_in);
}
END_TEST

static char plan[2048];

static void plan_row(void *context, chorus_collective collective, size_t from, size_t to,
                     const char *chain)
{
    (void)context;
    (void)collective;
    snprintf(plan + strlen(plan), sizeof plan - strlen(plan), "%zu-%zu: %s\n", from, to, chain);
}

START_TEST(the_plan_marks_the_files_rows)
{
    ck_assert_int_eq(parse("chorus-tuning 1\nallgather ring bytes=64K-1M ranks=4\n"), CHORUS_OK);
    use_parsed_rows();
    struct selection_query query = {.nranks = 4, .local_ranks = 1, .forced = -1, .tuned = tuned};
    plan[0] = '\0';
    selection_plan(CHORUS_ALLGATHER, &query, plan_row, NULL);
    ck_assert_msg(strstr(plan, "65536-1048576: ring (tuning file)\n") != NULL, "%s", plan);
    tuned = NULL;
}
END_TEST

START_TEST(reading_a_file)
{
    char *text = NULL;
    size_t length = 0;
    ck_assert_int_eq(tuning_read_file("/nonexistent/tune.txt", &text, &length, error,
                                      sizeof error),
                     CHORUS_ERR_BAD_PARAMETER);
    ck_assert_msg(strstr(error, "CHORUS_TUNING_FILE /nonexistent/tune.txt: No such file") != NULL,
                  "%s", error);
    char path[] = "/tmp/chorus-tuning-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    const char contents[] = "chorus-tuning 1\nallreduce ring\n";
    ck_assert_int_eq(write(fd, contents, sizeof contents - 1), (ssize_t)sizeof contents - 1);
    close(fd);
    ck_assert_int_eq(tuning_read_file(path, &text, &length, error, sizeof error), CHORUS_OK);
    ck_assert_uint_eq(length, sizeof contents - 1);
    ck_assert_str_eq(text, contents);
    free(text);
    unlink(path);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("tuning");
    TCase *tc = tcase_create("tuning");
    tcase_add_test(tc, rows_with_every_condition);
    tcase_add_test(tc, malformed_rows_name_the_line);
    tcase_add_test(tc, settings_rows);
    tcase_add_test(tc, selection_tries_the_files_rows_first);
    tcase_add_test(tc, the_plan_marks_the_files_rows);
    tcase_add_test(tc, reading_a_file);
    suite_add_tcase(suite, tc);
    int status = run_suite(suite);
    tuning_free(&table);
    return status;
}
