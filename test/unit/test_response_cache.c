/*
 * test_response_cache.c — the response cache: what is recorded, in which slots, what is found,
 * a changed description taking its name's slot, and that two caches fed the same responses
 * agree slot for slot.
 */
#include "../../lib/negotiation/response_cache.h"
#include "../../lib/negotiation/negotiated_fields.h"

#include "../common/check_runner.h"

#include <check.h>
#include <stdio.h>

static struct wire_response execute(const char *name, int64_t elements, uint32_t contributors)
{
    struct wire_response response = {.type = RESPONSE_EXECUTE, .contributors = contributors};
    response.request = (struct wire_request){.name = (char *)name,
                                             .collective = CHORUS_ALLREDUCE,
                                             .dtype = CHORUS_FLOAT32,
                                             .ndims = 1,
                                             .shape = {elements},
                                             .device = -1,
                                             .prescale = 1,
                                             .postscale = 1,
                                             .group = "",
                                             .group_size = 1};
    return response;
}

START_TEST(records_in_order_and_finds_exact_descriptions)
{
    struct response_cache cache;
    response_cache_init(&cache, 3);
    struct wire_response a = execute("a", 10, 4), b = execute("b", 20, 4);
    ck_assert(response_cache_record(&cache, &a, 4));
    ck_assert(response_cache_record(&cache, &b, 4));
    ck_assert(!response_cache_record(&cache, &a, 4)); /* known name */
    ck_assert_int_eq(response_cache_find(&cache, &a.request), 0);
    ck_assert_int_eq(response_cache_find(&cache, &b.request), 1);
    struct wire_response resized = execute("a", 11, 4);
    ck_assert_int_eq(response_cache_find(&cache, &resized.request), -1);
    ck_assert_str_eq(response_cache_get(&cache, 1)->name, "b");
    ck_assert_ptr_null(response_cache_get(&cache, 2));
    /* Run with its new shape, "a" keeps its slot with the new description. */
    ck_assert(response_cache_record(&cache, &resized, 4));
    ck_assert_int_eq(response_cache_find(&cache, &resized.request), 0);
    ck_assert_int_eq(response_cache_find(&cache, &a.request), -1);
    ck_assert_int_eq(response_cache_get(&cache, 0)->shape[0], 11);
    ck_assert(!response_cache_get(&cache, 0)->cached);
    ck_assert_ptr_null(response_cache_get(&cache, 2));
    response_cache_destroy(&cache);
}
END_TEST

START_TEST(skips_what_must_not_be_cached_and_stops_when_full)
{
    struct response_cache cache;
    response_cache_init(&cache, 2);
    struct wire_response joined = execute("joined", 4, 3); /* a rank had joined */
    ck_assert(!response_cache_record(&cache, &joined, 4));
    struct wire_response gather = execute("gather", 4, 4);
    gather.request.collective = CHORUS_ALLGATHER;
    ck_assert(!response_cache_record(&cache, &gather, 4));
    struct wire_response error = execute("error", 4, 4);
    error.type = RESPONSE_ERROR;
    ck_assert(!response_cache_record(&cache, &error, 4));
    struct wire_response x = execute("x", 1, 4), y = execute("y", 1, 4), z = execute("z", 1, 4);
    ck_assert(response_cache_record(&cache, &x, 4));
    ck_assert(response_cache_record(&cache, &y, 4));
    ck_assert(!response_cache_record(&cache, &z, 4));
    ck_assert_int_eq(response_cache_find(&cache, &z.request), -1);
    response_cache_destroy(&cache);

    struct response_cache off;
    response_cache_init(&off, 0);
    ck_assert(!response_cache_record(&off, &x, 4));
    response_cache_destroy(&off);
}
END_TEST

START_TEST(two_ranks_fed_the_same_stream_agree)
{
    struct response_cache coordinator, worker;
    response_cache_init(&coordinator, 64);
    response_cache_init(&worker, 64);
    char names[100][16];
    for (int i = 0; i < 100; i++) {
        snprintf(names[i], sizeof names[i], "t%d", i % 70);
        struct wire_response response = execute(names[i], i % 7, (uint32_t)(i % 9 == 0 ? 3 : 4));
        response_cache_record(&coordinator, &response, 4);
        response_cache_record(&worker, &response, 4);
    }
    ck_assert_uint_eq(coordinator.count, worker.count);
    for (uint32_t slot = 0; slot < coordinator.count; slot++)
        ck_assert(wire_request_equal(response_cache_get(&coordinator, slot),
                                     response_cache_get(&worker, slot)));
    response_cache_destroy(&coordinator);
    response_cache_destroy(&worker);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("response_cache");
    TCase *tc = tcase_create("cache");
    tcase_add_test(tc, records_in_order_and_finds_exact_descriptions);
    tcase_add_test(tc, skips_what_must_not_be_cached_and_stops_when_full);
    tcase_add_test(tc, two_ranks_fed_the_same_stream_agree);
    suite_add_tcase(suite, tc);
    return run_suite(suite);
}
