/*
 * test_lane.c — ordered operations through lanes (lib/lane), ranks as threads over slots in
 * ordinary memory: every small collective against the reference each rank computes from every
 * rank's inputs, for 1 to 5 ranks, every dtype and reduction, counts 0, 1, fewer than the
 * ranks, primes, in place and out of place, with scale factors; operations too large for the
 * slots, which the members agree to hand to the background thread; members that disagree,
 * which all fail with one message; a member that never arrives (a timeout, reported to the
 * instance) and an instance that stops while a member waits.
 */
#include "../../lib/collectives/reduce.h"
#include "../../lib/core/output_pool.h"
#include "../../lib/lane/lane.h"
#include "../../lib/negotiation/negotiated_fields.h"
#include "../common/reference.h"

#include "../common/check_runner.h"

#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANKS 5
#define LIMIT 4096

/* One job of lanes: a context and a lane per rank, over one piece of memory. */
struct job {
    int nranks;
    struct small_segment *segments;
    struct chorus_context *contexts[MAX_RANKS];
    struct lane *lanes[MAX_RANKS];
};

static void job_start(struct job *job, int nranks, size_t limit, double timeout)
{
    job->nranks = nranks;
    job->segments = small_segments_create_local(nranks, lane_slot_capacity(limit));
    ck_assert_ptr_nonnull(job->segments);
    for (int r = 0; r < nranks; r++) {
        job->contexts[r] = context_create(MPI_COMM_NULL);
        ck_assert_ptr_nonnull(job->contexts[r]);
        job->contexts[r]->rank = r;
        job->contexts[r]->size = nranks;
        job->lanes[r] = lane_create(job->contexts[r], 0, nranks, NULL, &job->segments[r], limit,
                                    timeout);
        ck_assert_ptr_nonnull(job->lanes[r]);
    }
}

static void job_end(struct job *job)
{
    for (int r = 0; r < job->nranks; r++) {
        lane_destroy(job->lanes[r], false);
        context_free(job->contexts[r]);
    }
    small_segments_destroy_local(job->segments);
}

/* What a rank submits: a description as the API makes it, and its buffers. */
struct submission {
    struct wire_request desc;
    const void *input;
    void *output;
    size_t count;
    double timeout;
};

static void describe(struct submission *s, chorus_collective collective, chorus_dtype dtype,
                     chorus_op op, int64_t rows, int64_t columns, int root)
{
    memset(&s->desc, 0, sizeof s->desc);
    s->desc.name = "lane test";
    s->desc.group = "";
    s->desc.collective = (uint8_t)collective;
    s->desc.dtype = (uint8_t)dtype;
    bool reduces = collective == CHORUS_ALLREDUCE || collective == CHORUS_REDUCESCATTER;
    s->desc.op = reduces ? (uint8_t)op : 0;
    s->desc.ndims = columns > 0 ? 2 : 1;
    s->desc.shape[0] = rows;
    s->desc.shape[1] = columns;
    s->desc.root = collective == CHORUS_BROADCAST ? root : 0;
    s->desc.device = DEVICE_HOST;
    s->desc.prescale = 1.0;
    s->desc.postscale = 1.0;
    s->desc.group_size = 1;
    s->desc.compression = CHORUS_COMPRESSION_NONE;
    s->count = (size_t)rows * (size_t)(columns > 0 ? columns : 1);
    s->input = s->output = NULL;
    s->timeout = 0;
}

/* Runs one operation on every rank at once, each on its own thread. */
struct rank_call {
    struct lane *lane;
    struct submission *submission;
    struct lane_result result;
    enum lane_outcome outcome;
    bool skip; /* this rank never arrives */
};

static void *call_lane(void *argument)
{
    struct rank_call *call = argument;
    if (call->skip)
        return NULL;
    struct lane_operation operation = {.desc = &call->submission->desc,
                                       .input = call->submission->input,
                                       .output = call->submission->output,
                                       .count = call->submission->count,
                                       .timeout_seconds = call->submission->timeout};
    ck_assert(lane_enter(call->lane));
    call->outcome = lane_run(call->lane, &operation, &call->result);
    lane_leave(call->lane);
    return NULL;
}

static void run_everywhere(struct job *job, struct submission *submissions,
                           struct rank_call *calls)
{
    pthread_t threads[MAX_RANKS];
    for (int r = 0; r < job->nranks; r++) {
        calls[r].lane = job->lanes[r];
        calls[r].submission = &submissions[r];
        pthread_create(&threads[r], NULL, call_lane, &calls[r]);
    }
    for (int r = 0; r < job->nranks; r++)
        pthread_join(threads[r], NULL);
}

static void release_results(struct job *job, struct rank_call *calls)
{
    for (int r = 0; r < job->nranks; r++) {
        free(calls[r].result.message);
        if (calls[r].result.output.data != NULL)
            output_pool_give(calls[r].result.output.data, calls[r].result.output_capacity);
        ordered_agreement_free(calls[r].result.agreed);
    }
}

static const chorus_dtype all_dtypes[] = {
    CHORUS_UINT8,   CHORUS_INT8,    CHORUS_INT16,   CHORUS_UINT16,  CHORUS_INT32, CHORUS_INT64,
    CHORUS_FLOAT16, CHORUS_BFLOAT16, CHORUS_FLOAT32, CHORUS_FLOAT64, CHORUS_BOOL};
static const chorus_op reductions[] = {CHORUS_SUM, CHORUS_AVERAGE, CHORUS_MIN, CHORUS_MAX,
                                       CHORUS_PRODUCT};

static bool allowed(chorus_dtype dtype, chorus_op op)
{
    return !(dtype == CHORUS_BOOL && op == CHORUS_AVERAGE);
}

/* Counts for `nranks`: 0, 1, fewer than the ranks, primes. */
static size_t counts_for(int nranks, size_t *counts)
{
    size_t list[] = {0, 1, (size_t)(nranks > 1 ? nranks - 1 : 1), 7, 13, 251};
    memcpy(counts, list, sizeof list);
    return sizeof list / sizeof *list;
}

START_TEST(allreduce_and_reducescatter_every_dtype_and_op)
{
    for (int nranks = 1; nranks <= MAX_RANKS; nranks++) {
        struct job job;
        job_start(&job, nranks, LIMIT, 30);
        size_t counts[8];
        size_t count_total = counts_for(nranks, counts);
        uint64_t seed = 100;
        for (size_t d = 0; d < ARRAY_LENGTH(all_dtypes); d++) {
            for (size_t o = 0; o < ARRAY_LENGTH(reductions); o++) {
                chorus_dtype dtype = all_dtypes[d];
                chorus_op op = reductions[o];
                if (!allowed(dtype, op))
                    continue;
                size_t count = counts[(d + o) % count_total];
                bool in_place = (d + o) % 2 == 0;
                bool scaled = dtype_is_floating(dtype) && o % 2 == 1;
                for (int kind = 0; kind < 2; kind++) {
                    chorus_collective collective =
                        kind == 0 ? CHORUS_ALLREDUCE : CHORUS_REDUCESCATTER;
                    struct submission submissions[MAX_RANKS];
                    unsigned char *inputs[MAX_RANKS], *outputs[MAX_RANKS];
                    size_t element = chorus_dtype_size(dtype);
                    seed++;
                    for (int r = 0; r < nranks; r++) {
                        describe(&submissions[r], collective, dtype, op, (int64_t)count, 0, 0);
                        if (scaled) {
                            submissions[r].desc.prescale = 0.5;
                            submissions[r].desc.postscale = 4.0;
                        }
                        inputs[r] = malloc(count * element + 1);
                        outputs[r] = in_place || kind == 1 ? inputs[r]
                                                           : malloc(count * element + 1);
                        reference_fill(inputs[r], count, dtype, op, seed, r);
                        submissions[r].input = inputs[r];
                        submissions[r].output = outputs[r];
                    }
                    struct rank_call calls[MAX_RANKS] = {0};
                    run_everywhere(&job, submissions, calls);
                    for (int r = 0; r < nranks; r++) {
                        char why[512] = "";
                        ck_assert_int_eq(calls[r].outcome, LANE_RAN);
                        ck_assert_msg(calls[r].result.status == CHORUS_OK, "%s",
                                      calls[r].result.message);
                        double prescale = scaled ? 0.5 : 1.0, postscale = scaled ? 4.0 : 1.0;
                        if (kind == 0) {
                            long wrong = reference_check_allreduce(
                                outputs[r], count, dtype, op, nranks, NULL, seed, prescale,
                                postscale, why, sizeof why);
                            ck_assert_msg(wrong < 0, "allreduce %s %s count %zu at %d ranks, "
                                          "rank %d: %s",
                                          chorus_dtype_name(dtype), chorus_op_name(op), count,
                                          nranks, r, why);
                        } else {
                            size_t first = part_start(count, (size_t)nranks, (size_t)r);
                            size_t length = part_length(count, (size_t)nranks, (size_t)r);
                            const chorus_tensor *block = &calls[r].result.output;
                            ck_assert_int_eq(block->shape[0], (int64_t)length);
                            ck_assert_int_eq(block->dtype, dtype);
                            long wrong = reference_check_reduced(
                                block->data, first, length, dtype, op, nranks, NULL, seed,
                                prescale, postscale, why, sizeof why);
                            ck_assert_msg(wrong < 0, "reducescatter %s %s count %zu at %d "
                                          "ranks, rank %d: %s",
                                          chorus_dtype_name(dtype), chorus_op_name(op), count,
                                          nranks, r, why);
                        }
                        if (outputs[r] != inputs[r])
                            free(outputs[r]);
                        free(inputs[r]);
                    }
                    release_results(&job, calls);
                }
            }
        }
        job_end(&job);
    }
}
END_TEST

START_TEST(broadcast_from_every_root_and_allgather_of_uneven_rows)
{
    for (int nranks = 1; nranks <= MAX_RANKS; nranks++) {
        struct job job;
        job_start(&job, nranks, LIMIT, 30);
        /* Broadcasts of 0, 1, 31 (inline), 33 and 1021 bytes from every root. */
        const size_t sizes[] = {0, 1, 31, 33, 1021};
        for (int root = 0; root < nranks; root++) {
            for (size_t i = 0; i < ARRAY_LENGTH(sizes); i++) {
                size_t bytes = sizes[i];
                uint64_t seed = 500 + (uint64_t)root * 10 + i;
                struct submission submissions[MAX_RANKS];
                unsigned char *buffers[MAX_RANKS];
                for (int r = 0; r < nranks; r++) {
                    describe(&submissions[r], CHORUS_BROADCAST, CHORUS_UINT8, CHORUS_SUM,
                             (int64_t)bytes, 0, root);
                    buffers[r] = calloc(bytes + 1, 1);
                    if (r == root)
                        reference_fill_bytes(buffers[r], bytes, seed, root);
                    submissions[r].input = buffers[r];
                    submissions[r].output = buffers[r];
                }
                struct rank_call calls[MAX_RANKS] = {0};
                run_everywhere(&job, submissions, calls);
                for (int r = 0; r < nranks; r++) {
                    ck_assert_int_eq(calls[r].result.status, CHORUS_OK);
                    ck_assert_msg(reference_check_bytes(buffers[r], bytes, seed, root) < 0,
                                  "broadcast of %zu bytes from %d at %d ranks, rank %d", bytes,
                                  root, nranks, r);
                    free(buffers[r]);
                }
                release_results(&job, calls);
            }
        }
        /* Allgathers of rows of 3 float64 (24 bytes: inline at one row) that differ per rank,
         * rank r sending (r * 7 + call) % 4 rows. */
        for (int call = 0; call < 6; call++) {
            struct submission submissions[MAX_RANKS];
            double *inputs[MAX_RANKS];
            int64_t rows[MAX_RANKS], total = 0;
            for (int r = 0; r < nranks; r++) {
                rows[r] = (r * 7 + call) % 4;
                total += rows[r];
                describe(&submissions[r], CHORUS_ALLGATHER, CHORUS_FLOAT64, CHORUS_SUM, rows[r],
                         3, 0);
                inputs[r] = malloc((size_t)rows[r] * 3 * sizeof(double) + 1);
                for (int64_t i = 0; i < rows[r] * 3; i++)
                    inputs[r][i] = r * 1000.0 + (double)i + call;
                submissions[r].input = inputs[r];
            }
            struct rank_call calls[MAX_RANKS] = {0};
            run_everywhere(&job, submissions, calls);
            for (int r = 0; r < nranks; r++) {
                ck_assert_int_eq(calls[r].result.status, CHORUS_OK);
                const chorus_tensor *gathered = &calls[r].result.output;
                ck_assert_int_eq(gathered->shape[0], total);
                ck_assert_int_eq(gathered->shape[1], 3);
                const double *at = gathered->data;
                for (int s = 0; s < nranks; s++)
                    for (int64_t i = 0; i < rows[s] * 3; i++)
                        ck_assert_msg(*at++ == s * 1000.0 + (double)i + call,
                                      "allgather call %d at %d ranks, rank %d: rank %d's "
                                      "element %lld",
                                      call, nranks, r, s, (long long)i);
            }
            release_results(&job, calls);
            for (int r = 0; r < nranks; r++)
                free(inputs[r]);
        }
        job_end(&job);
    }
}
END_TEST

START_TEST(larger_operations_go_to_the_background_thread_agreed)
{
    for (int nranks = 1; nranks <= MAX_RANKS; nranks++) {
        struct job job;
        job_start(&job, nranks, 256, 30);
        /* An allgather where only the last rank's rows exceed the slots: every member hands
         * it over alike, with every member's rows. */
        struct submission submissions[MAX_RANKS];
        static double rows_of[MAX_RANKS][64];
        for (int r = 0; r < nranks; r++) {
            int64_t rows = r == nranks - 1 ? 40 : r;
            describe(&submissions[r], CHORUS_ALLGATHER, CHORUS_FLOAT64, CHORUS_SUM, rows, 0, 0);
            submissions[r].input = rows_of[r];
        }
        struct rank_call calls[MAX_RANKS] = {0};
        run_everywhere(&job, submissions, calls);
        for (int r = 0; r < nranks; r++) {
            ck_assert_int_eq(calls[r].outcome, LANE_ELSEWHERE);
            const struct ordered_agreement *agreed = calls[r].result.agreed;
            ck_assert_ptr_nonnull(agreed);
            ck_assert_uint_eq(agreed->members, (unsigned)nranks);
            ck_assert_uint_eq(agreed->position, 0);
            for (int m = 0; m < nranks; m++)
                ck_assert_int_eq(agreed->first_dims[m], m == nranks - 1 ? 40 : m);
        }
        release_results(&job, calls);
        /* Then a small one runs in the lane at the next position. */
        float values[MAX_RANKS];
        for (int r = 0; r < nranks; r++) {
            values[r] = (float)(r + 1);
            describe(&submissions[r], CHORUS_ALLREDUCE, CHORUS_FLOAT32, CHORUS_SUM, 1, 0, 0);
            submissions[r].input = submissions[r].output = &values[r];
        }
        memset(calls, 0, sizeof calls);
        run_everywhere(&job, submissions, calls);
        for (int r = 0; r < nranks; r++) {
            ck_assert_int_eq(calls[r].outcome, LANE_RAN);
            ck_assert(values[r] == (float)(nranks * (nranks + 1) / 2));
        }
        release_results(&job, calls);
        job_end(&job);
    }
}
END_TEST

START_TEST(members_that_disagree_all_fail_with_one_message)
{
    for (int nranks = 2; nranks <= MAX_RANKS; nranks++) {
        struct job job;
        job_start(&job, nranks, LIMIT, 30);
        const char *const what[] = {"dtype mismatch", "shape mismatch", "op mismatch",
                                    "root mismatch"};
        for (size_t w = 0; w < ARRAY_LENGTH(what); w++) {
            struct submission submissions[MAX_RANKS];
            float data[MAX_RANKS][8] = {{0}};
            for (int r = 0; r < nranks; r++) {
                bool odd = r == nranks - 1;
                chorus_collective collective = w == 3 ? CHORUS_BROADCAST : CHORUS_ALLREDUCE;
                describe(&submissions[r], collective,
                         odd && w == 0 ? CHORUS_INT32 : CHORUS_FLOAT32,
                         odd && w == 2 ? CHORUS_MAX : CHORUS_SUM, odd && w == 1 ? 5 : 6, 0,
                         odd && w == 3 ? 1 : 0);
                submissions[r].input = submissions[r].output = data[r];
            }
            struct rank_call calls[MAX_RANKS] = {0};
            run_everywhere(&job, submissions, calls);
            for (int r = 0; r < nranks; r++) {
                ck_assert_int_eq(calls[r].outcome, LANE_RAN);
                ck_assert_int_eq(calls[r].result.status, CHORUS_ERR_MISMATCH);
                const char *message = calls[r].result.message;
                ck_assert_ptr_nonnull(message);
                ck_assert_msg(strstr(message, what[w]) != NULL &&
                                  strstr(message, "ordered position") != NULL,
                              "%s", message);
                ck_assert_str_eq(message, calls[0].result.message);
            }
            release_results(&job, calls);
        }
        /* In step afterwards. */
        struct submission submissions[MAX_RANKS];
        int32_t values[MAX_RANKS];
        for (int r = 0; r < nranks; r++) {
            values[r] = r;
            describe(&submissions[r], CHORUS_ALLREDUCE, CHORUS_INT32, CHORUS_SUM, 1, 0, 0);
            submissions[r].input = submissions[r].output = &values[r];
        }
        struct rank_call calls[MAX_RANKS] = {0};
        run_everywhere(&job, submissions, calls);
        for (int r = 0; r < nranks; r++)
            ck_assert_int_eq(values[r], nranks * (nranks - 1) / 2);
        release_results(&job, calls);
        job_end(&job);
    }
}
END_TEST

/* A barrier (chorus_barrier in the job's lane) where another rank submitted an allreduce: the
 * lines alone tell, and every rank says the same. Barriers that agree just pass. */
START_TEST(a_barrier_against_another_collective)
{
    for (int nranks = 2; nranks <= MAX_RANKS; nranks++) {
        struct job job;
        job_start(&job, nranks, LIMIT, 30);
        struct submission submissions[MAX_RANKS];
        float values[MAX_RANKS] = {0};
        for (int pass = 0; pass < 2; pass++) {
            for (int r = 0; r < nranks; r++) {
                bool barrier = pass == 1 || r != 1;
                describe(&submissions[r], CHORUS_ALLREDUCE, CHORUS_FLOAT32, CHORUS_SUM, 1, 0, 0);
                if (barrier) {
                    memset(&submissions[r].desc, 0, sizeof submissions[r].desc);
                    submissions[r].desc.name = "barrier";
                    submissions[r].desc.group = "";
                    submissions[r].desc.collective = COLLECTIVE_BARRIER;
                    submissions[r].desc.device = DEVICE_HOST;
                    submissions[r].desc.group_size = 1;
                    submissions[r].count = 0;
                }
                submissions[r].input = submissions[r].output = &values[r];
            }
            struct rank_call calls[MAX_RANKS] = {0};
            run_everywhere(&job, submissions, calls);
            for (int r = 0; r < nranks; r++) {
                if (pass == 1) { /* a barrier is all in the lane's phase */
                    ck_assert_int_eq(calls[r].outcome, LANE_RAN);
                    ck_assert_int_eq(calls[r].result.status, CHORUS_OK);
                    continue;
                }
                ck_assert_int_eq(calls[r].result.status, CHORUS_ERR_MISMATCH);
                ck_assert_msg(strstr(calls[r].result.message, "collective mismatch") != NULL &&
                                  strstr(calls[r].result.message, "barrier") != NULL &&
                                  strstr(calls[r].result.message, "rank 1 allreduce") != NULL,
                              "%s", calls[r].result.message);
                /* Each names its own operation ("barrier", or the allreduce's name), then the
                 * same difference. */
                ck_assert_str_eq(strstr(calls[r].result.message, "collective mismatch"),
                                 strstr(calls[0].result.message, "collective mismatch"));
            }
            release_results(&job, calls);
        }
        job_end(&job);
    }
}
END_TEST

START_TEST(a_member_that_never_arrives_times_out_and_stops_the_instance)
{
    struct job job;
    job_start(&job, 3, LIMIT, 30);
    struct submission submissions[3];
    float values[3] = {1, 2, 3};
    for (int r = 0; r < 3; r++) {
        describe(&submissions[r], CHORUS_ALLREDUCE, CHORUS_FLOAT32, CHORUS_SUM, 1, 0, 0);
        submissions[r].input = submissions[r].output = &values[r];
        submissions[r].timeout = 0.3;
    }
    struct rank_call calls[3] = {{0}, {0}, {.skip = true}};
    double started = clock_seconds();
    run_everywhere(&job, submissions, calls);
    double waited = clock_seconds() - started;
    ck_assert_msg(waited >= 0.25 && waited < 10, "gave up after %.2f s", waited);
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(calls[r].result.status, CHORUS_ERR_TIMEOUT);
        ck_assert_msg(strstr(calls[r].result.message, "within the timeout of 0.3 s (the "
                                                      "operation's timeout): rank 2") != NULL,
                      "%s", calls[r].result.message);
        ck_assert_int_eq(atomic_load(&job.contexts[r]->user_failure), CHORUS_ERR_TIMEOUT);
    }
    release_results(&job, calls);
    /* The lane is out of step now: it is closed to new operations (a submit then fails with
     * the instance's failure). */
    ck_assert(!lane_enter(job.lanes[0]));
    ck_assert(!lane_enter(job.lanes[1]));
    job_end(&job);
}
END_TEST

struct stopper {
    struct chorus_context *context;
};

static void *stop_soon(void *argument)
{
    struct stopper *stopper = argument;
    struct timespec pause = {.tv_nsec = 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
    pthread_mutex_lock(&stopper->context->lock);
    snprintf(stopper->context->stopped_message, sizeof stopper->context->stopped_message,
             "rank 1 failed: test");
    atomic_store(&stopper->context->stopped, CHORUS_ERR_MPI);
    pthread_mutex_unlock(&stopper->context->lock);
    return NULL;
}

START_TEST(a_member_whose_instance_stops_gives_up_at_once)
{
    struct job job;
    job_start(&job, 2, LIMIT, 0); /* no timeout: only the stop ends the wait */
    struct submission submissions[2];
    float values[2] = {1, 2};
    for (int r = 0; r < 2; r++) {
        describe(&submissions[r], CHORUS_ALLREDUCE, CHORUS_FLOAT32, CHORUS_SUM, 1, 0, 0);
        submissions[r].input = submissions[r].output = &values[r];
    }
    struct stopper stopper = {job.contexts[0]};
    pthread_t thread;
    pthread_create(&thread, NULL, stop_soon, &stopper);
    struct rank_call calls[2] = {{0}, {.skip = true}};
    run_everywhere(&job, submissions, calls);
    pthread_join(thread, NULL);
    ck_assert_int_eq(calls[0].result.status, CHORUS_ERR_MPI);
    ck_assert_msg(strstr(calls[0].result.message, "rank 1 failed: test") != NULL, "%s",
                  calls[0].result.message);
    release_results(&job, calls);
    job_end(&job);
}
END_TEST

/* The digest says what the negotiated fields' comparison says: requests that agree have the
 * same digest; here every field that a collective compares, changed alone, changes it. */
START_TEST(digests_follow_the_negotiated_fields)
{
    struct submission a, b;
    describe(&a, CHORUS_ALLGATHER, CHORUS_FLOAT32, CHORUS_SUM, 3, 4, 0);
    b = a;
    b.desc.shape[0] = 9; /* an allgather's rows may differ */
    b.desc.name = "another name";
    ck_assert(negotiated_fields_agree(&a.desc, &b.desc));
    ck_assert_uint_eq(negotiated_fields_digest(&a.desc), negotiated_fields_digest(&b.desc));
    b = a;
    b.desc.shape[1] = 5;
    ck_assert(!negotiated_fields_agree(&a.desc, &b.desc));
    ck_assert_uint_ne(negotiated_fields_digest(&a.desc), negotiated_fields_digest(&b.desc));
    describe(&a, CHORUS_ALLREDUCE, CHORUS_FLOAT32, CHORUS_SUM, 3, 0, 0);
    struct wire_request changed[8];
    for (int i = 0; i < 8; i++)
        changed[i] = a.desc;
    changed[0].dtype = CHORUS_FLOAT64;
    changed[1].op = CHORUS_MAX;
    changed[2].shape[0] = 4;
    changed[3].prescale = 2;
    changed[4].postscale = 2;
    changed[5].device = 0;
    changed[6].process_set = 3;
    changed[7].compression = CHORUS_COMPRESSION_FP16;
    for (int i = 0; i < 8; i++) {
        ck_assert_msg(!negotiated_fields_agree(&a.desc, &changed[i]), "change %d", i);
        ck_assert_msg(negotiated_fields_digest(&a.desc) != negotiated_fields_digest(&changed[i]),
                      "change %d", i);
    }
    /* Another GPU agrees (ranks agree on host or GPU, not on which GPU). */
    struct wire_request gpu0 = a.desc, gpu1 = a.desc;
    gpu0.device = 0;
    gpu1.device = 1;
    ck_assert(negotiated_fields_agree(&gpu0, &gpu1));
    ck_assert_uint_eq(negotiated_fields_digest(&gpu0), negotiated_fields_digest(&gpu1));
    /* Every row with an agreement of its own mixes a digest of its own. */
    for (size_t i = 0; i < negotiated_field_count; i++)
        ck_assert_msg(negotiated_fields[i].agrees == NULL || negotiated_fields[i].digest != NULL,
                      "%s", negotiated_fields[i].name);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("lane");
    TCase *tc = tcase_create("lane");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, allreduce_and_reducescatter_every_dtype_and_op);
    tcase_add_test(tc, broadcast_from_every_root_and_allgather_of_uneven_rows);
    tcase_add_test(tc, larger_operations_go_to_the_background_thread_agreed);
    tcase_add_test(tc, members_that_disagree_all_fail_with_one_message);
    tcase_add_test(tc, a_barrier_against_another_collective);
    tcase_add_test(tc, a_member_that_never_arrives_times_out_and_stops_the_instance);
    tcase_add_test(tc, a_member_whose_instance_stops_gives_up_at_once);
    tcase_add_test(tc, digests_follow_the_negotiated_fields);
    suite_add_tcase(suite, tc);
    int failed = run_suite(suite);
    output_pool_drain();
    return failed;
}
