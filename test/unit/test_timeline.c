/*
 * test_timeline.c — the timeline file: names that are not valid UTF-8 are escaped (the file must
 * stay loadable), valid multi-byte names are kept, and a second timeline of the same path in one
 * process is written beside the first ("stem.1.json") instead of over it.
 */
#include "../../lib/core/timeline.h"

#include "../common/check_runner.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char directory[64];

static char *read_file(const char *path)
{
    FILE *file = fopen(path, "rb");
    ck_assert_ptr_nonnull(file);
    static char text[8192];
    size_t length = fread(text, 1, sizeof text - 1, file);
    text[length] = '\0';
    fclose(file);
    return text;
}

/* A timeline in the test's directory, written to `path`. */
static struct timeline *open_in_directory(const char *file, char *path, size_t path_size)
{
    char error[256];
    snprintf(path, path_size, "%s/%s", directory, file);
    struct timeline *timeline = timeline_open(path, error, sizeof error);
    ck_assert_msg(timeline != NULL, "%s", error);
    return timeline;
}

START_TEST(names_that_are_not_utf8_are_escaped)
{
    char path[128];
    struct timeline *timeline = open_in_directory("escape.json", path, sizeof path);
    timeline_span(timeline, 0, "bad\xff\xfe name \xc3(", "allreduce", 0, 1, NULL);
    timeline_span(timeline, 0, "gr\xc3\xbc\xc3\x9f \xe2\x82\xac", "allreduce", 0, 1, NULL);
    timeline_close(timeline);
    const char *text = read_file(path);
    ck_assert_ptr_nonnull(strstr(text, "bad\\u00ff\\u00fe name \\u00c3("));
    ck_assert_ptr_nonnull(strstr(text, "gr\xc3\xbc\xc3\x9f \xe2\x82\xac"));
    for (const unsigned char *c = (const unsigned char *)text; *c; c++)
        ck_assert(*c != 0xff && *c != 0xfe);
}
END_TEST

START_TEST(a_second_timeline_of_the_same_path_goes_beside_it)
{
    char path[128], error[256], beside[160];
    snprintf(path, sizeof path, "%s/trace.json", directory);
    snprintf(beside, sizeof beside, "%s/trace.1.json", directory);
    struct timeline *first = timeline_open(path, error, sizeof error);
    timeline_span(first, 0, "first", "allreduce", 0, 1, NULL);
    timeline_close(first);
    struct timeline *second = timeline_open(path, error, sizeof error);
    ck_assert_str_eq(timeline_path(second), beside);
    timeline_span(second, 0, "second", "allreduce", 0, 1, NULL);
    timeline_close(second);
    ck_assert_ptr_nonnull(strstr(read_file(path), "\"first\""));
    ck_assert_ptr_nonnull(strstr(read_file(beside), "\"second\""));
}
END_TEST

START_TEST(one_name_in_two_sets_has_two_rows)
{
    char path[128];
    struct timeline *timeline = open_in_directory("sets.json", path, sizeof path);
    timeline_span(timeline, 0, "loss", "allreduce", 0, 1, NULL);
    timeline_span(timeline, 2, "loss", "allreduce", 0, 1, NULL);
    timeline_span(timeline, 2, "loss", "allreduce", 1, 2, NULL);
    timeline_close(timeline);
    const char *text = read_file(path);
    ck_assert_ptr_nonnull(strstr(text, "\"loss\""));
    const char *set_row = strstr(text, "\"loss (process set 2)\"");
    ck_assert_ptr_nonnull(set_row);
    ck_assert_ptr_null(strstr(set_row + 1, "\"loss (process set 2)\"")); /* one row */
}
END_TEST

int main(void)
{
    snprintf(directory, sizeof directory, "/tmp/chorus-timeline-XXXXXX");
    if (mkdtemp(directory) == NULL)
        return 1;
    Suite *suite = suite_create("timeline");
    TCase *tc = tcase_create("timeline");
    tcase_add_test(tc, names_that_are_not_utf8_are_escaped);
    tcase_add_test(tc, one_name_in_two_sets_has_two_rows);
    tcase_add_test(tc, a_second_timeline_of_the_same_path_goes_beside_it);
    suite_add_tcase(suite, tc);
    int status = run_suite(suite);
    char command[128];
    snprintf(command, sizeof command, "rm -rf %s", directory);
    if (system(command) != 0)
        status = 1;
    return status;
}
