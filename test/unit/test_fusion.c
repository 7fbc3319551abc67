/*
 * test_fusion.c — fusion planning: batches by threshold, look-ahead past other dtypes, tensors
 * larger than the threshold alone, threshold 0 = no fusion, non-allreduce responses alone.
 */
#include "../../lib/fusion/fusion_plan.h"

#include "../common/check_runner.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct wire_response response(chorus_collective collective, chorus_dtype dtype,
                                     int64_t elements)
{
    struct wire_response r = {.type = RESPONSE_EXECUTE, .contributors = 4};
    r.request.collective = (uint8_t)collective;
    r.request.dtype = (uint8_t)dtype;
    r.request.ndims = 1;
    r.request.shape[0] = elements;
    r.request.device = -1;
    r.request.prescale = r.request.postscale = 1;
    return r;
}

/* The plan as text: batches separated by '|', members by ','. */
static void describe(const struct fusion_plan *plan, char *text, size_t size)
{
    size_t used = 0;
    text[0] = '\0';
    for (size_t b = 0; b < plan->batch_count; b++)
        for (size_t m = 0; m < plan->batches[b].count; m++)
            used += (size_t)snprintf(text + used, size - used, "%s%zu",
                                     m == 0 ? (b == 0 ? "" : "|") : ",",
                                     plan->order[plan->batches[b].first + m]);
}

START_TEST(batches_respect_threshold_and_look_past_other_dtypes)
{
    struct wire_response list[] = {
        response(CHORUS_ALLREDUCE, CHORUS_FLOAT32, 100), /* 400 B */
        response(CHORUS_ALLREDUCE, CHORUS_INT32, 25),    /* 100 B */
        response(CHORUS_ALLREDUCE, CHORUS_FLOAT32, 100),
        response(CHORUS_ALLREDUCE, CHORUS_FLOAT32, 100),
        response(CHORUS_BROADCAST, CHORUS_FLOAT32, 1),
        response(CHORUS_ALLREDUCE, CHORUS_INT32, 25),
    };
    struct fusion_plan plan;
    ck_assert(fusion_plan_build(list, 6, 1024, 1024, &plan));
    char text[128];
    describe(&plan, text, sizeof text);
    ck_assert_str_eq(text, "0,2|1,5|3|4");
    ck_assert_uint_eq(plan.batches[0].bytes, 800);
    fusion_plan_free(&plan);
}
END_TEST

START_TEST(threshold_zero_and_large_tensors_go_alone)
{
    struct wire_response list[] = {
        response(CHORUS_ALLREDUCE, CHORUS_FLOAT32, 10),
        response(CHORUS_ALLREDUCE, CHORUS_FLOAT32, 10),
        response(CHORUS_ALLREDUCE, CHORUS_FLOAT32, 1000),
        response(CHORUS_ALLREDUCE, CHORUS_FLOAT32, 10),
    };
    struct fusion_plan plan;
    char text[128];
    ck_assert(fusion_plan_build(list, 4, 0, 1 << 20, &plan));
    describe(&plan, text, sizeof text);
    ck_assert_str_eq(text, "0|1|2|3");
    fusion_plan_free(&plan);
    ck_assert(fusion_plan_build(list, 4, 100, 1 << 20, &plan));
    describe(&plan, text, sizeof text);
    ck_assert_str_eq(text, "0,1|2|3"); /* 3 would make 120 B */
    fusion_plan_free(&plan);
}
END_TEST

START_TEST(tensors_over_the_tensor_limit_go_alone)
{
    struct wire_response list[] = {
        response(CHORUS_ALLREDUCE, CHORUS_FLOAT32, 10),
        response(CHORUS_ALLREDUCE, CHORUS_FLOAT32, 100), /* 400 B > 256 B */
        response(CHORUS_ALLREDUCE, CHORUS_FLOAT32, 10),
        response(CHORUS_ALLREDUCE, CHORUS_FLOAT32, 64),  /* 256 B: fused */
    };
    struct fusion_plan plan;
    char text[128];
    ck_assert(fusion_plan_build(list, 4, 1 << 20, 256, &plan));
    describe(&plan, text, sizeof text);
    ck_assert_str_eq(text, "0,2,3|1");
    fusion_plan_free(&plan);
}
END_TEST

START_TEST(different_reductions_do_not_fuse)
{
    struct wire_response list[] = {
        response(CHORUS_ALLREDUCE, CHORUS_FLOAT32, 10),
        response(CHORUS_ALLREDUCE, CHORUS_FLOAT32, 10),
        response(CHORUS_ALLREDUCE, CHORUS_FLOAT32, 10),
        response(CHORUS_ALLREDUCE, CHORUS_FLOAT32, 10),
    };
    list[1].request.op = CHORUS_MAX;
    list[2].request.postscale = 2;
    list[3].request.device = 0;
    struct fusion_plan plan;
    char text[128];
    ck_assert(fusion_plan_build(list, 4, 1 << 20, 1 << 20, &plan));
    describe(&plan, text, sizeof text);
    ck_assert_str_eq(text, "0|1|2|3");
    fusion_plan_free(&plan);
}
END_TEST

START_TEST(plan_of_nothing_is_empty)
{
    struct fusion_plan plan;
    ck_assert(fusion_plan_build(NULL, 0, 1024, 1024, &plan));
    ck_assert_uint_eq(plan.batch_count, 0);
    fusion_plan_free(&plan);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("fusion");
    TCase *tc = tcase_create("plan");
    tcase_add_test(tc, batches_respect_threshold_and_look_past_other_dtypes);
    tcase_add_test(tc, threshold_zero_and_large_tensors_go_alone);
    tcase_add_test(tc, tensors_over_the_tensor_limit_go_alone);
    tcase_add_test(tc, different_reductions_do_not_fuse);
    tcase_add_test(tc, plan_of_nothing_is_empty);
    suite_add_tcase(suite, tc);
    return run_suite(suite);
}
