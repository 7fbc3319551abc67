/*
 * test_fusion.c — fusion planning: batches by threshold, look-ahead past other dtypes, tensors
 * larger than the threshold alone, threshold 0 = no fusion, GPU tensors fused apart from host
 * tensors, broadcasts fused by root and allgathers by gathered size; the copier thread's order and waiting; the packed
 * pipeline's segments, packing (with prescale, or converted to 16 bits) and unpacking into
 * irregular pieces, in and out of place, with and without the copier.
 */
#include "../../lib/collectives/reduce.h"
#include "../../lib/fusion/copier.h"
#include "../../lib/fusion/fusion_plan.h"
#include "../../lib/fusion/packed_pipeline.h"

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

/* Plans `list` and checks its batches against `expected` (as describe() writes them). */
static void assert_plan(const struct wire_response *list, size_t count, size_t threshold,
                        size_t tensor_limit, const char *expected, struct fusion_plan *plan)
{
    char text[128];
    ck_assert(fusion_plan_build(list, count, threshold, tensor_limit, plan));
    describe(plan, text, sizeof text);
    ck_assert_str_eq(text, expected);
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
    assert_plan(list, 6, 1024, 1024, "0,2|1,5|3|4", &plan);
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
    assert_plan(list, 4, 0, 1 << 20, "0|1|2|3", &plan);
    fusion_plan_free(&plan);
    assert_plan(list, 4, 100, 1 << 20, "0,1|2|3", &plan); /* 3 would make 120 B */
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
    assert_plan(list, 4, 1 << 20, 256, "0,2,3|1", &plan);
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
    assert_plan(list, 4, 1 << 20, 1 << 20, "0|1|2|3", &plan);
    fusion_plan_free(&plan);
}
END_TEST

START_TEST(gpu_tensors_fuse_with_each_other_not_with_host_tensors)
{
    struct wire_response list[] = {
        response(CHORUS_ALLREDUCE, CHORUS_FLOAT32, 10),
        response(CHORUS_ALLREDUCE, CHORUS_FLOAT32, 10), /* GPU */
        response(CHORUS_ALLREDUCE, CHORUS_FLOAT32, 10),
        response(CHORUS_ALLREDUCE, CHORUS_FLOAT32, 10), /* GPU, another device index */
        response(CHORUS_ALLREDUCE, CHORUS_FLOAT32, 100), /* GPU, over the tensor limit */
    };
    list[1].request.device = 0;
    list[3].request.device = 1;
    list[4].request.device = 0;
    struct fusion_plan plan;
    assert_plan(list, 5, 1 << 20, 256, "0,2|1,3|4", &plan);
    ck_assert_uint_eq(plan.batches[1].bytes, 80);
    fusion_plan_free(&plan);
}
END_TEST

START_TEST(broadcasts_fuse_by_root_and_allgathers_by_gathered_size)
{
    int64_t first_dims[2][3] = {{2, 0, 5}, {1, 1, 1}};
    struct wire_response list[] = {
        response(CHORUS_BROADCAST, CHORUS_UINT8, 100),  /* root 0 */
        response(CHORUS_BROADCAST, CHORUS_FLOAT32, 10), /* root 1 */
        response(CHORUS_BROADCAST, CHORUS_INT64, 5),    /* root 0, another dtype */
        response(CHORUS_ALLGATHER, CHORUS_FLOAT32, 0),  /* 7 rows of 4 floats: 112 B */
        response(CHORUS_ALLGATHER, CHORUS_INT8, 0),     /* 3 rows of 1 byte */
        response(CHORUS_BROADCAST, CHORUS_UINT8, 7),    /* root 0, on a GPU */
        response(CHORUS_ALLGATHER, CHORUS_FLOAT64, 0),  /* 3 rows of 16 doubles: over 256 B */
        response(CHORUS_BROADCAST, CHORUS_FLOAT32, 3),  /* root 0, on a GPU: joins 5 */
    };
    list[1].request.root = 1;
    list[5].request.device = list[7].request.device = 0;
    list[3].request.ndims = list[4].request.ndims = list[6].request.ndims = 2;
    list[3].request.shape[1] = 4;
    list[4].request.shape[1] = 1;
    list[6].request.shape[1] = 16;
    list[3].first_dim_count = 3;
    list[3].first_dims = first_dims[0];
    list[4].first_dim_count = list[6].first_dim_count = 3;
    list[4].first_dims = list[6].first_dims = first_dims[1];
    ck_assert_uint_eq(request_batch_member_bytes(&list[3]), 112);
    ck_assert_uint_eq(request_batch_member_bytes(&list[6]), 384);
    struct fusion_plan plan;
    assert_plan(list, 8, 1 << 20, 256, "0,2|1|3,4|5,7|6", &plan);
    ck_assert_uint_eq(plan.batches[0].bytes, 140);
    ck_assert_uint_eq(plan.batches[2].bytes, 115);
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

/* --- copier ------------------------------------------------------------------------------ */

struct ordered_job {
    int index;
    int *next; /* the index the next job must have */
    bool in_order;
};

static void run_ordered(void *argument)
{
    struct ordered_job *job = argument;
    job->in_order = *job->next == job->index;
    *job->next = job->index + 1;
}

START_TEST(copier_runs_jobs_in_order_and_waits_for_them)
{
    struct copier copier;
    ck_assert(copier_start(&copier));
    enum { JOBS = 5000 };
    struct ordered_job *jobs = calloc(JOBS, sizeof *jobs);
    int next = 0;
    uint64_t last = 0;
    for (int i = 0; i < JOBS; i++) {
        jobs[i] = (struct ordered_job){.index = i, .next = &next};
        /* More jobs than the queue holds: submitting must wait for room. */
        last = copier_submit(&copier, run_ordered, &jobs[i]);
        ck_assert_uint_eq(last, (uint64_t)i);
        if (i % 97 == 0) {
            copier_wait(&copier, last);
            ck_assert_int_eq(next, i + 1);
        }
    }
    copier_wait(&copier, last);
    ck_assert_int_eq(next, JOBS);
    for (int i = 0; i < JOBS; i++)
        ck_assert_msg(jobs[i].in_order, "job %d ran out of order", i);
    copier_stop(&copier);
    copier_stop(&copier); /* harmless twice */
    free(jobs);
}
END_TEST

/* --- packed pipeline ----------------------------------------------------------------------- */

/* A stand-in for the collective: multiplies the segment by 3 (in float for 16-bit data) and
 * records the length of every segment it was given. */
struct fake_collective {
    chorus_dtype dtype;
    size_t calls;
    size_t lengths[16384];
};

static chorus_status triple_segment(void *context, void *segment, size_t count)
{
    struct fake_collective *fake = context;
    ck_assert_uint_lt(fake->calls, 16384);
    fake->lengths[fake->calls++] = count;
    if (fake->dtype == CHORUS_FLOAT64) {
        double *values = segment;
        for (size_t i = 0; i < count; i++)
            values[i] *= 3;
    } else {
        uint16_t *values = segment;
        for (size_t i = 0; i < count; i++)
            values[i] = float_to_half(half_to_float(values[i]) * 3);
    }
    return CHORUS_OK;
}

/* Pieces of these element counts (one empty), every other one out of place, through segments of
 * `segment_elements`; float64 with prescale 0.5, or float32 carried as float16 with small
 * integers that float16 holds exactly. */
static void check_pipeline(bool compressed, size_t segment_elements, bool with_copier)
{
    const size_t counts[] = {17, 0, 1, 1000, 4099, 3, 7919};
    enum { PIECES = 7 };
    size_t element_size = compressed ? sizeof(float) : sizeof(double);
    struct allreduce_piece pieces[PIECES];
    void *inputs[PIECES], *outputs[PIECES];
    size_t total = 0;
    for (int p = 0; p < PIECES; p++) {
        size_t bytes = counts[p] * element_size;
        inputs[p] = malloc(bytes + 1);
        outputs[p] = p % 2 == 1 ? malloc(bytes + 1) : inputs[p];
        for (size_t i = 0; i < counts[p]; i++) {
            double value = (double)((p * 31 + (int)i) % 200) - 100;
            if (compressed)
                ((float *)inputs[p])[i] = (float)value;
            else
                ((double *)inputs[p])[i] = value + 0.25;
        }
        pieces[p] = (struct allreduce_piece){inputs[p], outputs[p], total * element_size, bytes};
        total += counts[p];
    }
    struct packed_batch batch = {
        .pieces = pieces,
        .piece_count = PIECES,
        .count = total,
        .wire_dtype = compressed ? CHORUS_FLOAT16 : CHORUS_FLOAT64,
        .compressed = compressed,
        .prescale = compressed ? 1.0 : 0.5,
        .decompress_factor = compressed ? 0.5f : 1.0f,
    };
    size_t wire_size = compressed ? 2 : 8;
    char *fusion = malloc(2 * segment_elements * wire_size);
    void *const halves[2] = {fusion, fusion + segment_elements * wire_size};
    struct fake_collective *fake = calloc(1, sizeof *fake);
    fake->dtype = batch.wire_dtype;
    struct copier copier;
    if (with_copier)
        ck_assert(copier_start(&copier));
    struct packed_times times;
    ck_assert_int_eq(packed_pipeline_run(&batch, with_copier ? &copier : NULL, halves,
                                         segment_elements, triple_segment, fake, &times),
                     CHORUS_OK);
    if (with_copier)
        copier_stop(&copier);
    size_t expected_calls = (total + segment_elements - 1) / segment_elements;
    ck_assert_uint_eq(fake->calls, expected_calls);
    for (size_t k = 0; k < fake->calls; k++)
        ck_assert_uint_eq(fake->lengths[k], k + 1 < expected_calls
                                                ? segment_elements
                                                : total - k * segment_elements);
    for (int p = 0; p < PIECES; p++)
        for (size_t i = 0; i < counts[p]; i++) {
            double value = (double)((p * 31 + (int)i) % 200) - 100;
            /* compressed: x * 3 * 0.5; plain: (x + 0.25) * 0.5 * 3 */
            double want = compressed ? value * 1.5 : (value + 0.25) * 1.5;
            double got = compressed ? ((float *)outputs[p])[i] : ((double *)outputs[p])[i];
            ck_assert_msg(got == want, "piece %d element %zu: %g, want %g (segments of %zu)", p,
                          i, got, want, segment_elements);
            if (outputs[p] != inputs[p]) {
                double input = compressed ? ((float *)inputs[p])[i] : ((double *)inputs[p])[i];
                ck_assert_msg(input == (compressed ? value : value + 0.25),
                              "piece %d: an out-of-place input changed", p);
            }
        }
    for (int p = 0; p < PIECES; p++) {
        if (outputs[p] != inputs[p])
            free(outputs[p]);
        free(inputs[p]);
    }
    free(fake);
    free(fusion);
}

START_TEST(pipeline_packs_reduces_and_unpacks_every_segment)
{
    /* One segment, an exact multiple (13139 = 7 x 1877), a remainder, many small segments. */
    const size_t segments[] = {20000, 1877, 1000, 64, 1};
    for (size_t s = 0; s < 5; s++)
        for (int copier = 0; copier < 2; copier++) {
            check_pipeline(false, segments[s], copier);
            check_pipeline(true, segments[s], copier);
        }
}
END_TEST

START_TEST(pipeline_of_an_empty_batch_is_one_empty_collective)
{
    struct allreduce_piece piece = {NULL, NULL, 0, 0};
    struct packed_batch batch = {.pieces = &piece, .piece_count = 1, .count = 0,
                                 .wire_dtype = CHORUS_FLOAT64, .prescale = 1.0};
    double half[4];
    void *const halves[2] = {half, half + 2};
    struct fake_collective *fake = calloc(1, sizeof *fake);
    fake->dtype = CHORUS_FLOAT64;
    struct packed_times times;
    ck_assert_int_eq(packed_pipeline_run(&batch, NULL, halves, 2, triple_segment, fake, &times),
                     CHORUS_OK);
    ck_assert_uint_eq(fake->calls, 1);
    ck_assert_uint_eq(fake->lengths[0], 0);
    free(fake);
}
END_TEST

static chorus_status fail_second_segment(void *context, void *segment, size_t count)
{
    (void)segment, (void)count;
    size_t *calls = context;
    return ++*calls == 2 ? CHORUS_ERR_MPI : CHORUS_OK;
}

START_TEST(pipeline_stops_at_a_failed_collective)
{
    enum { COUNT = 100 };
    double *input = calloc(COUNT, sizeof *input);
    struct allreduce_piece piece = {input, input, 0, COUNT * sizeof(double)};
    struct packed_batch batch = {.pieces = &piece, .piece_count = 1, .count = COUNT,
                                 .wire_dtype = CHORUS_FLOAT64, .prescale = 1.0};
    double fusion[20];
    void *const halves[2] = {fusion, fusion + 10};
    struct copier copier;
    ck_assert(copier_start(&copier));
    size_t calls = 0;
    struct packed_times times;
    ck_assert_int_eq(
        packed_pipeline_run(&batch, &copier, halves, 10, fail_second_segment, &calls, &times),
        CHORUS_ERR_MPI);
    ck_assert_uint_eq(calls, 2);
    copier_stop(&copier);
    free(input);
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
    tcase_add_test(tc, gpu_tensors_fuse_with_each_other_not_with_host_tensors);
    tcase_add_test(tc, broadcasts_fuse_by_root_and_allgathers_by_gathered_size);
    tcase_add_test(tc, plan_of_nothing_is_empty);
    suite_add_tcase(suite, tc);
    TCase *copying = tcase_create("copying");
    tcase_set_timeout(copying, 60);
    tcase_add_test(copying, copier_runs_jobs_in_order_and_waits_for_them);
    tcase_add_test(copying, pipeline_packs_reduces_and_unpacks_every_segment);
    tcase_add_test(copying, pipeline_of_an_empty_batch_is_one_empty_collective);
    tcase_add_test(copying, pipeline_stops_at_a_failed_collective);
    suite_add_tcase(suite, copying);
    return run_suite(suite);
}
