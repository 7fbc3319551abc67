/*
 * gpu_faults.c — what a user sees when the GPU path fails, run against the emulated CUDA
 * runtime and NCCL, whose faults the environment injects on rank 1 (test/meson.build sets them
 * per scenario; emulation.h lists them). Usage: gpu_faults_emulated SCENARIO, under mpirun.
 *
 *   nccl_error   rank 1's 3rd NCCL call fails
 *   async_error  rank 1's 3rd collective stalls and NCCL reports an asynchronous error
 *   hang         rank 1's 3rd collective never completes (CHORUS_TIMEOUT_SECONDS=3)
 *   no_fusion_buffer  rank 1 cannot allocate the device's fusion buffer
 *   init_hang    rank 1 never joins the NCCL communicator (CHORUS_TIMEOUT_SECONDS=3)
 *   mismatch     rank 0 submits host memory where the others submit device memory
 *   no_device    no device is visible
 *
 * In every failing scenario: two GPU allreduces run first, one at a time (NCCL calls 1 and 2);
 * then six are submitted at once, unfused (calls 3-8). Every one of the six must complete on
 * every rank, with an error and its cause, within seconds, whatever rank 1's fault; a later
 * submit fails at once; chorus_shutdown returns. No rank may hang.
 */
#include "../../lib/gpu/gpu.h"
#include "../common/reference.h"
#include "../mpi/mpi_test.h"

#include <time.h>

enum { COUNT = 1000, FIRST = 2, PENDING = 6, BOUND_SECONDS = 15 };

static double seconds_now(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

static chorus_tensor device_floats(void *data, int device)
{
    return (chorus_tensor){.data = data, .dtype = CHORUS_FLOAT32, .ndims = 1, .shape = {COUNT},
                           .memory = CHORUS_MEMORY_CUDA, .device = device};
}

/* A device tensor of this rank's reference input. */
static void *device_input(uint64_t seed, int device)
{
    float host[COUNT];
    reference_fill(host, COUNT, CHORUS_FLOAT32, CHORUS_SUM, seed, test_rank);
    void *data = gpu_malloc(sizeof host, device);
    if (data != NULL)
        gpu_copy(data, host, sizeof host);
    return data;
}

static void check_result(void *data, uint64_t seed, const char *name)
{
    float host[COUNT];
    gpu_copy(host, data, sizeof host);
    char why[256];
    EXPECT(reference_check_allreduce(host, COUNT, CHORUS_FLOAT32, CHORUS_SUM, test_size, NULL,
                                     seed, 1.0, 1.0, why, sizeof why) < 0,
           "%s: %s", name, why);
}

/* The scenarios where rank 1 fails: see the file's comment. */
static void run_failing_scenario(const char *scenario, int device)
{
    void *data[FIRST + PENDING];
    for (int t = 0; t < FIRST + PENDING; t++)
        data[t] = device_input(100 + (uint64_t)t, device);
    bool setup_fails = strcmp(scenario, "init_hang") == 0;
    test_step = "allreduces before the fault";
    for (int t = 0; t < FIRST; t++) {
        char name[32];
        snprintf(name, sizeof name, "before.%d", t);
        chorus_tensor tensor = device_floats(data[t], device);
        chorus_status status = chorus_allreduce(name, &tensor, NULL, CHORUS_SUM);
        if (setup_fails) {
            /* Every rank waits for rank 1 to join the communicator, then gives up. */
            EXPECT(status == CHORUS_ERR_TIMEOUT || (status != CHORUS_OK && test_rank != 1),
                   "%s: %s: %s", name, chorus_status_name(status), chorus_last_error());
            EXPECT(strstr(chorus_last_error(), "timeout of 3 s") != NULL ||
                       strstr(chorus_last_error(), "rank 1") != NULL,
                   "%s: no cause: %s", name, chorus_last_error());
            return;
        }
        EXPECT_STATUS(status, CHORUS_OK);
        check_result(data[t], 100 + (uint64_t)t, name);
    }
    test_step = "allreduces pending at the fault";
    chorus_handle *handles[PENDING] = {0};
    double started = seconds_now();
    /* Without a fusion buffer the batch must be a fused one: the six as one group. */
    bool grouped = strcmp(scenario, "no_fusion_buffer") == 0;
    chorus_op_args group[PENDING];
    char group_names[PENDING][32];
    for (int t = 0; grouped && t < PENDING; t++) {
        group[t] = (chorus_op_args)CHORUS_OP_ARGS_INIT;
        snprintf(group_names[t], sizeof group_names[t], "pending.%d", t);
        group[t].name = group_names[t];
        group[t].input = device_floats(data[FIRST + t], device);
    }
    if (grouped)
        EXPECT_STATUS(chorus_submit_group(group, PENDING, &handles[0]), CHORUS_OK);
    for (int t = 0; !grouped && t < PENDING; t++) {
        char name[32];
        snprintf(name, sizeof name, "pending.%d", t);
        chorus_tensor tensor = device_floats(data[FIRST + t], device);
        chorus_status status = chorus_allreduce_async(name, &tensor, NULL, CHORUS_SUM,
                                                      &handles[t]);
        /* A rank that already stopped refuses at once, with the cause. */
        EXPECT(status == CHORUS_OK || strstr(chorus_last_error(), "rank 1") != NULL ||
                   test_rank == 1,
               "%s refused without a cause: %s", name, chorus_last_error());
    }
    int failed = 0;
    for (int t = 0; t < (grouped ? 1 : PENDING); t++) {
        if (handles[t] == NULL) {
            failed++;
            continue;
        }
        chorus_status status = chorus_wait(handles[t]);
        const char *message = chorus_handle_error(handles[t]);
        if (status != CHORUS_OK) {
            failed++;
            EXPECT(message != NULL && strstr(message, "pending.") != NULL &&
                       strlen(message) > strlen("allreduce \"pending.0\": "),
                   "handle %d: %s without a cause: \"%s\"", t, chorus_status_name(status),
                   message ? message : "");
            /* The others learn which rank failed; rank 1 says what failed. */
            if (test_rank != 1)
                EXPECT(strstr(message, "rank 1") != NULL || status == CHORUS_ERR_TIMEOUT,
                       "handle %d: the failed rank is not named: %s", t, message);
        }
        chorus_handle_free(handles[t]);
    }
    double elapsed = seconds_now() - started;
    EXPECT(failed > 0, "no pending allreduce failed");
    EXPECT(elapsed < BOUND_SECONDS, "the pending allreduces took %.1f s to fail", elapsed);
    test_step = "after the fault";
    chorus_tensor tensor = device_floats(data[0], device);
    double before = seconds_now();
    EXPECT(chorus_allreduce("after", &tensor, NULL, CHORUS_SUM) != CHORUS_OK,
           "a submit after the fault succeeded");
    EXPECT(seconds_now() - before < 1.0, "a submit after the fault waited");
    if (test_rank == 0)
        printf("gpu_faults %s: pending allreduces failed on every rank within %.2f s\n",
               scenario, elapsed);
    for (int t = 0; t < FIRST + PENDING; t++)
        gpu_free(data[t]);
}

/* Rank 0 submits host memory, the others device memory: a mismatch on every rank, after which
 * chorus goes on. */
static void run_mismatch(int device)
{
    test_step = "host on rank 0, device elsewhere";
    float host[COUNT];
    reference_fill(host, COUNT, CHORUS_FLOAT32, CHORUS_SUM, 7, test_rank);
    void *data = device_input(7, device);
    chorus_tensor tensor = test_rank == 0 ? floats(host, COUNT) : device_floats(data, device);
    chorus_status status = chorus_allreduce("mixed.memory", &tensor, NULL, CHORUS_SUM);
    EXPECT(status == CHORUS_ERR_MISMATCH, "got %s: %s", chorus_status_name(status),
           chorus_last_error());
    EXPECT(strstr(chorus_last_error(), "mixed.memory") != NULL &&
               strstr(chorus_last_error(), "rank 0") != NULL,
           "unclear message: %s", chorus_last_error());
    test_step = "device allreduce after the mismatch";
    tensor = device_floats(data, device);
    EXPECT_STATUS(chorus_allreduce("after.mismatch", &tensor, NULL, CHORUS_SUM), CHORUS_OK);
    check_result(data, 7, "after.mismatch");
    gpu_free(data);
}

/* No device: a GPU tensor is refused at submit, naming the tensor and the device. */
static void run_no_device(void)
{
    test_step = "no device";
    EXPECT(gpu_device_count() == 0, "%d devices visible", gpu_device_count());
    EXPECT(gpu_malloc(64, 0) == NULL, "device memory without a device");
    static float never_read[COUNT];
    chorus_tensor tensor = device_floats(never_read, 0);
    chorus_status status = chorus_allreduce("no.device", &tensor, NULL, CHORUS_SUM);
    EXPECT(status != CHORUS_OK, "a GPU tensor was accepted without a device");
    EXPECT(strstr(chorus_last_error(), "no.device") != NULL &&
               strstr(chorus_last_error(), "device") != NULL,
           "unclear message: %s", chorus_last_error());
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 120);
    const char *scenario = argc > 1 ? argv[1] : "";
    test_init_chorus();
    int device = chorus_local_rank();
    if (strcmp(scenario, "mismatch") == 0)
        run_mismatch(device);
    else if (strcmp(scenario, "no_device") == 0)
        run_no_device();
    else if (test_size >= 2)
        run_failing_scenario(scenario, device);
    test_step = "shutdown";
    chorus_shutdown();
    return test_finish("gpu_faults");
}
