/*
 * test_executor.c — the executor over the thread transport, without MPI: ranks are threads, each
 * with its own executor, given the same agreed responses (as rank 0 would send them) and its own
 * requests. Every rank runs the fusion plan's batches through the backend table, and every
 * result is checked against the independent reference (test/common) computed from every rank's
 * known inputs: fused and unfused allreduces of several dtypes and ops (an average, an empty
 * tensor, one past the fusion tensor limit), fused broadcasts from the last rank (one out of
 * place), fused allgathers with ragged first dimensions (empty blocks included), and an error
 * response, which completes its handle with the coordinator's status and message. The timeline
 * must name, per tensor, the algorithm that actually ran.
 */
#include "../../lib/core/handle.h"
#include "../../lib/executor/executor.h"
#include "../common/check_runner.h"
#include "../common/reference.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_RANKS = 5, MAX_TENSORS = 16, ROW_WIDTH = 5 };

/* One tensor of the step: what rank 0 agreed, and how to make every rank's input. */
struct tensor_case {
    const char *name;
    chorus_collective collective;
    chorus_dtype dtype;
    chorus_op op;
    size_t count;      /* allreduce and broadcast: elements; allgather: unused */
    bool out_of_place; /* broadcast: a separate output buffer */
    bool error;        /* an error response instead of a collective */
};

static const struct tensor_case step[] = {
    {.name = "fc1.weight",
     .collective = CHORUS_ALLREDUCE,
     .dtype = CHORUS_FLOAT32,
     .op = CHORUS_SUM,
     .count = 1001},
    {.name = "fc1.bias",
     .collective = CHORUS_ALLREDUCE,
     .dtype = CHORUS_FLOAT32,
     .op = CHORUS_SUM,
     .count = 7},
    {.name = "empty",
     .collective = CHORUS_ALLREDUCE,
     .dtype = CHORUS_INT32,
     .op = CHORUS_MAX,
     .count = 0},
    {.name = "mean",
     .collective = CHORUS_ALLREDUCE,
     .dtype = CHORUS_FLOAT64,
     .op = CHORUS_AVERAGE,
     .count = 3},
    {.name = "counts",
     .collective = CHORUS_ALLREDUCE,
     .dtype = CHORUS_INT64,
     .op = CHORUS_PRODUCT,
     .count = 131},
    {.name = "large",
     .collective = CHORUS_ALLREDUCE,
     .dtype = CHORUS_FLOAT32,
     .op = CHORUS_SUM,
     .count = 70001}, /* past the tensor limit */
    {.name = "bc.small",
     .collective = CHORUS_BROADCAST,
     .dtype = CHORUS_UINT8,
     .op = CHORUS_SUM,
     .count = 13},
    {.name = "bc.other",
     .collective = CHORUS_BROADCAST,
     .dtype = CHORUS_UINT8,
     .op = CHORUS_SUM,
     .count = 1000,
     .out_of_place = true},
    {.name = "ag.rows", .collective = CHORUS_ALLGATHER, .dtype = CHORUS_FLOAT32},
    {.name = "ag.bytes", .collective = CHORUS_ALLGATHER, .dtype = CHORUS_UINT8},
    {.name = "refused",
     .collective = CHORUS_ALLREDUCE,
     .dtype = CHORUS_FLOAT32,
     .op = CHORUS_SUM,
     .count = 5,
     .error = true},
};
#define STEP_TENSORS (sizeof step / sizeof step[0])

static uint64_t seed_of(size_t tensor)
{
    return 1000 + tensor;
}

/* Rank r's rows of an allgather: some ranks have none. */
static int64_t rows_of(size_t tensor, int rank)
{
    return rank % 3 == 1 ? 0 : (int64_t)(rank + 1 + tensor % 2);
}

static size_t row_elements(size_t tensor)
{
    return step[tensor].dtype == CHORUS_UINT8 ? 1 : ROW_WIDTH;
}

/* The responses rank 0 would send for the step, in its order. */
static void build_responses(struct wire_response *responses, int nranks)
{
    for (size_t t = 0; t < STEP_TENSORS; t++) {
        const struct tensor_case *c = &step[t];
        struct wire_response *response = &responses[t];
        *response = (struct wire_response){
            .type = c->error ? RESPONSE_ERROR : RESPONSE_EXECUTE,
            .status = c->error ? CHORUS_ERR_MISMATCH : CHORUS_OK,
            .contributors = (uint32_t)nranks,
            .message = c->error ? strdup("allreduce \"refused\": shape mismatch: ranks 0-1") : NULL,
            .request = {.name = strdup(c->name),
                        .collective = (uint8_t)c->collective,
                        .dtype = (uint8_t)c->dtype,
                        .op = (uint8_t)c->op,
                        .ndims = 1,
                        .root = nranks - 1,
                        .device = DEVICE_HOST,
                        .shape = {(int64_t)c->count},
                        .prescale = 1.0,
                        .postscale = 1.0,
                        .group = strdup(""),
                        .group_size = 1},
        };
        if (c->collective == CHORUS_ALLGATHER) {
            response->request.ndims = 2;
            response->request.shape[1] = (int64_t)row_elements(t);
            response->first_dim_count = (uint32_t)nranks;
            response->first_dims = calloc((size_t)nranks, sizeof *response->first_dims);
            for (int r = 0; r < nranks; r++)
                response->first_dims[r] = rows_of(t, r);
        }
    }
}

struct rank_state {
    int rank, nranks;
    struct thread_fabric *fabric;
    struct executor executor;
    struct param_set params; /* the defaults, with a 64 MiB fusion threshold */
    struct executor_settings settings;
    struct request *requests[MAX_TENSORS];
    void *inputs[MAX_TENSORS];
    void *outputs[MAX_TENSORS]; /* allreduce and broadcast results (host buffers) */
    const char *timeline_path;  /* rank 0's timeline, or NULL */
    struct chorus_handle *handles[MAX_TENSORS];
    chorus_status finished[MAX_TENSORS];
    int finish_calls[MAX_TENSORS];
    chorus_status run_status;
    char error[1024];
};

static size_t index_of(const char *name)
{
    for (size_t t = 0; t < STEP_TENSORS; t++)
        if (strcmp(step[t].name, name) == 0)
            return t;
    return STEP_TENSORS;
}

static struct request *take_request(void *owner, const struct wire_request *agreed)
{
    struct rank_state *state = owner;
    size_t t = index_of(agreed->name);
    struct request *request = t < STEP_TENSORS ? state->requests[t] : NULL;
    if (request != NULL)
        state->requests[t] = NULL;
    return request;
}

static void finish(void *owner, struct request *request, chorus_status status, const char *message)
{
    struct rank_state *state = owner;
    size_t t = index_of(request->desc.name);
    state->finished[t] = status;
    state->finish_calls[t]++;
    handle_member_done(request->handle, status, "%s", message ? message : "");
    request_free(request);
}

static void join_done(void *owner, int last_rank)
{
    (void)owner;
    (void)last_rank;
}

static void fatal_error(void *owner, chorus_status status, const char *message)
{
    struct rank_state *state = owner;
    snprintf(state->error, sizeof state->error, "fatal %s: %s", chorus_status_name(status),
             message);
}

/* This rank's request for tensor t, with its input made from (seed, rank). */
static struct request *make_request(struct rank_state *state, size_t t)
{
    const struct tensor_case *c = &step[t];
    struct request *request = calloc(1, sizeof *request);
    request->desc = (struct wire_request){.name = strdup(c->name),
                                          .collective = (uint8_t)c->collective,
                                          .dtype = (uint8_t)c->dtype,
                                          .group = strdup("")};
    size_t element = chorus_dtype_size(c->dtype);
    size_t count = c->collective == CHORUS_ALLGATHER
                       ? (size_t)rows_of(t, state->rank) * row_elements(t)
                       : c->count;
    void *input = calloc(count + 1, element);
    if (c->collective == CHORUS_ALLREDUCE)
        reference_fill(input, count, c->dtype, c->op, seed_of(t), state->rank);
    else if (c->collective == CHORUS_BROADCAST && state->rank != state->nranks - 1)
        memset(input, 0xee, count * element);
    else
        reference_fill_bytes(input, count * element, seed_of(t), state->rank);
    request->input = input;
    request->output = input;
    if (c->out_of_place) {
        request->output = calloc(count + 1, element);
        memset(request->output, 0xdd, count * element);
    }
    request->count = count;
    request->handle = handle_create(c->collective, 1);
    state->handles[t] = request->handle;
    state->inputs[t] = input;
    state->outputs[t] = request->output;
    return request;
}

static void *run_rank(void *argument)
{
    struct rank_state *state = argument;
    struct executor *executor = &state->executor;
    char error[256];
    ck_assert_int_eq(params_load(&state->params, NULL, "CHORUS_FUSION_THRESHOLD=64M", error,
                                 sizeof error),
                     CHORUS_OK);
    executor_settings_init(&state->settings, &state->params.values);
    *executor = (struct executor){
        .rank = state->rank,
        .nranks = state->nranks,
        .settings = &state->settings,
        .local_ranks = 1, /* no shared segment: the algorithms over the transport */
        .owner = state,
        .take_request = take_request,
        .finish = finish,
        .join_done = join_done,
        .fatal_error = fatal_error,
    };
    executor->abort.request = MPI_REQUEST_NULL; /* no notices to watch without MPI */
    transport_threads_init(&executor->transport, state->fabric, state->rank);
    if (state->timeline_path != NULL)
        executor->timeline = timeline_open(state->timeline_path, state->error, sizeof state->error);
    for (size_t t = 0; t < STEP_TENSORS; t++)
        state->requests[t] = make_request(state, t);
    struct wire_response responses[MAX_TENSORS];
    build_responses(responses, state->nranks);
    state->run_status =
        executor_run(executor, responses, STEP_TENSORS, NULL, state->error, sizeof state->error);
    for (size_t t = 0; t < STEP_TENSORS; t++)
        wire_response_free(&responses[t]);
    executor_release(executor);
    return NULL;
}

/* Checks rank `state`'s results; returns a description of the first wrong one, or "". */
static void check_rank(const struct rank_state *state, char *why, size_t why_size)
{
    why[0] = '\0';
    int p = state->nranks;
    for (size_t t = 0; t < STEP_TENSORS && !why[0]; t++) {
        const struct tensor_case *c = &step[t];
        const struct chorus_handle *handle = state->handles[t];
        char detail[256] = "";
        if (state->finish_calls[t] != 1) {
            snprintf(why, why_size, "\"%s\" finished %d times", c->name, state->finish_calls[t]);
        } else if (c->error) {
            if (state->finished[t] != CHORUS_ERR_MISMATCH ||
                strstr(handle->message, "shape mismatch: ranks 0-1") == NULL)
                snprintf(why, why_size, "\"%s\": %s \"%s\" instead of the coordinator's error",
                         c->name, chorus_status_name(state->finished[t]), handle->message);
        } else if (state->finished[t] != CHORUS_OK) {
            snprintf(why, why_size, "\"%s\": %s: %s", c->name,
                     chorus_status_name(state->finished[t]), handle->message);
        } else if (c->collective == CHORUS_ALLREDUCE) {
            long wrong =
                reference_check_allreduce(state->outputs[t], c->count, c->dtype, c->op, p, NULL,
                                          seed_of(t), 1.0, 1.0, detail, sizeof detail);
            if (wrong >= 0)
                snprintf(why, why_size, "\"%s\": element %ld: %s", c->name, wrong, detail);
        } else if (c->collective == CHORUS_BROADCAST) {
            long wrong = reference_check_bytes(state->outputs[t], c->count, seed_of(t), p - 1);
            if (wrong >= 0)
                snprintf(why, why_size, "\"%s\": byte %ld differs from the root's", c->name, wrong);
        } else {
            const unsigned char *gathered = handle->outputs[0].tensor.data;
            size_t row_bytes = row_elements(t) * chorus_dtype_size(c->dtype), offset = 0;
            int64_t rows = 0;
            for (int r = 0; r < p; r++)
                rows += rows_of(t, r);
            if (handle->outputs[0].tensor.shape[0] != rows ||
                handle->outputs[0].tensor.shape[1] != (int64_t)row_elements(t))
                snprintf(why, why_size, "\"%s\": gathered shape %lld x %lld", c->name,
                         (long long)handle->outputs[0].tensor.shape[0],
                         (long long)handle->outputs[0].tensor.shape[1]);
            for (int r = 0; r < p && !why[0]; r++) {
                size_t bytes = (size_t)rows_of(t, r) * row_bytes;
                long wrong = reference_check_bytes(gathered + offset, bytes, seed_of(t), r);
                if (wrong >= 0)
                    snprintf(why, why_size, "\"%s\": rank %d's rows wrong at byte %ld", c->name, r,
                             wrong);
                offset += bytes;
            }
        }
    }
}

START_TEST(executor_runs_a_step_through_the_backend_table)
{
    int nranks = _i;
    struct thread_fabric *fabric = thread_fabric_create(nranks);
    struct rank_state states[MAX_RANKS];
    pthread_t threads[MAX_RANKS];
    char timeline[64];
    snprintf(timeline, sizeof timeline, "/tmp/chorus-test-executor-%d.json", (int)getpid());
    for (int r = 0; r < nranks; r++) {
        memset(&states[r], 0, sizeof states[r]);
        states[r].timeline_path = r == 0 ? timeline : NULL;
        states[r].rank = r;
        states[r].nranks = nranks;
        states[r].fabric = fabric;
        pthread_create(&threads[r], NULL, run_rank, &states[r]);
    }
    for (int r = 0; r < nranks; r++)
        pthread_join(threads[r], NULL);
    /* The timeline names what ran: recursive doubling for the small fused batch, the ring past
     * 256 KiB (one rank: recursive doubling for everything), never a placeholder. */
    FILE *file = fopen(timeline, "r");
    ck_assert_ptr_nonnull(file);
    char trace[1 << 16] = "";
    size_t length = fread(trace, 1, sizeof trace - 1, file);
    trace[length] = '\0';
    fclose(file);
    remove(timeline);
    ck_assert_msg(strstr(trace, "\"algorithm\": \"recursive_doubling\"") != NULL, "%s", trace);
    ck_assert_msg(nranks == 1 || strstr(trace, "\"algorithm\": \"ring\"") != NULL, "%s", trace);
    ck_assert_msg(strstr(trace, "\"algorithm\": \"?\"") == NULL, "%s", trace);
    for (int r = 0; r < nranks; r++) {
        ck_assert_msg(states[r].run_status == CHORUS_OK, "%d ranks, rank %d: %s: %s", nranks, r,
                      chorus_status_name(states[r].run_status), states[r].error);
        char why[512];
        check_rank(&states[r], why, sizeof why);
        ck_assert_msg(why[0] == '\0', "%d ranks, rank %d: %s", nranks, r, why);
        for (size_t t = 0; t < STEP_TENSORS; t++) {
            free(states[r].inputs[t]);
            if (step[t].out_of_place)
                free(states[r].outputs[t]);
            chorus_handle_free(states[r].handles[t]);
        }
    }
    thread_fabric_destroy(fabric);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("executor");
    TCase *run = tcase_create("run");
    tcase_set_timeout(run, 120);
    tcase_add_loop_test(run, executor_runs_a_step_through_the_backend_table, 1, MAX_RANKS + 1);
    suite_add_tcase(suite, run);
    return run_suite(suite);
}
