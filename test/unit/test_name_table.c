/*
 * test_name_table.c — the table from names to pointers: found after insert, gone after remove,
 * a name present refused, growth past its buckets keeping every entry, and removed entries
 * reused (their storage too, a long name taking a new entry) with the right names, and one name
 * in several process sets kept apart.
 */
#include "../../lib/core/name_table.h"

#include "../common/check_runner.h"

#include <check.h>
#include <stdio.h>
#include <string.h>

START_TEST(inserts_finds_and_removes)
{
    struct name_table table;
    name_table_init(&table);
    int a = 1, b = 2;
    ck_assert_ptr_null(name_table_find(&table, 0, "a"));
    ck_assert(name_table_insert(&table, 0, "a", &a));
    ck_assert(name_table_insert(&table, 0, "b", &b));
    ck_assert(!name_table_insert(&table, 0, "a", &b));
    ck_assert_ptr_eq(name_table_find(&table, 0, "a"), &a);
    ck_assert_ptr_eq(name_table_find(&table, 0, "b"), &b);
    ck_assert_ptr_eq(name_table_remove(&table, 0, "a"), &a);
    ck_assert_ptr_null(name_table_find(&table, 0, "a"));
    ck_assert_ptr_null(name_table_remove(&table, 0, "a"));
    ck_assert_uint_eq(table.size, 1);
    name_table_destroy(&table);
}
END_TEST

START_TEST(grows_and_keeps_every_entry)
{
    struct name_table table;
    name_table_init(&table);
    enum { NAMES = 5000 };
    static int values[NAMES];
    char name[64];
    for (int i = 0; i < NAMES; i++) {
        snprintf(name, sizeof name, "layer%d.weight", i);
        ck_assert(name_table_insert(&table, 0, name, &values[i]));
    }
    ck_assert_uint_eq(table.size, NAMES);
    for (int i = 0; i < NAMES; i++) {
        snprintf(name, sizeof name, "layer%d.weight", i);
        ck_assert_ptr_eq(name_table_find(&table, 0, name), &values[i]);
    }
    name_table_destroy(&table);
}
END_TEST

START_TEST(removed_entries_are_reused_with_their_new_names)
{
    struct name_table table;
    name_table_init(&table);
    int value = 7;
    ck_assert(name_table_insert(&table, 0, "step.loss", &value));
    const struct name_entry *first = table.buckets[0];
    for (size_t b = 0; first == NULL && b < table.bucket_count; b++)
        first = table.buckets[b];
    ck_assert_ptr_eq(name_table_remove(&table, 0, "step.loss"), &value);
    ck_assert_uint_eq(table.spare_count, 1);
    /* The spare comes back for the next name, which must read as itself. */
    ck_assert(name_table_insert(&table, 0, "step.accuracy", &value));
    ck_assert_uint_eq(table.spare_count, 0);
    ck_assert_ptr_eq(name_table_find(&table, 0, "step.accuracy"), &value);
    ck_assert_ptr_null(name_table_find(&table, 0, "step.loss"));
    const struct name_entry *second = NULL;
    for (size_t b = 0; second == NULL && b < table.bucket_count; b++)
        second = table.buckets[b];
    ck_assert_ptr_eq(first, second);
    ck_assert_str_eq(second->name, "step.accuracy");
    /* A name longer than any spare's storage takes a new entry; the spare stays. */
    ck_assert_ptr_eq(name_table_remove(&table, 0, "step.accuracy"), &value);
    char long_name[300];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    ck_assert(name_table_insert(&table, 0, long_name, &value));
    ck_assert_uint_eq(table.spare_count, 1);
    ck_assert_ptr_eq(name_table_find(&table, 0, long_name), &value);
    ck_assert_ptr_eq(name_table_remove(&table, 0, long_name), &value);
    ck_assert_uint_eq(table.spare_count, 2);
    name_table_destroy(&table);
}
END_TEST

START_TEST(one_name_in_several_sets_is_several_keys)
{
    struct name_table table;
    name_table_init(&table);
    int job = 0, first = 1, second = 2;
    ck_assert(name_table_insert(&table, 0, "loss", &job));
    ck_assert(name_table_insert(&table, 1, "loss", &first));
    ck_assert(name_table_insert(&table, 2, "loss", &second));
    ck_assert(!name_table_insert(&table, 1, "loss", &second));
    ck_assert_ptr_eq(name_table_find(&table, 2, "loss"), &second);
    ck_assert_ptr_eq(name_table_remove(&table, 1, "loss"), &first);
    ck_assert_ptr_null(name_table_find(&table, 1, "loss"));
    ck_assert_ptr_eq(name_table_find(&table, 0, "loss"), &job);
    ck_assert_ptr_null(name_table_find(&table, 3, "loss"));
    ck_assert_uint_eq(table.size, 2);
    name_table_destroy(&table);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("name_table");
    TCase *tc = tcase_create("name_table");
    tcase_add_test(tc, inserts_finds_and_removes);
    tcase_add_test(tc, grows_and_keeps_every_entry);
    tcase_add_test(tc, removed_entries_are_reused_with_their_new_names);
    tcase_add_test(tc, one_name_in_several_sets_is_several_keys);
    suite_add_tcase(suite, tc);
    return run_suite(suite);
}
