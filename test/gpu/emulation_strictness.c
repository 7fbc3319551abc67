/*
 * emulation_strictness.c — the emulated CUDA runtime and NCCL catch what a GPU catches: a host
 * read of device memory crashes, work on a stream is not done until the stream says so, NCCL
 * refuses host buffers and ranges past an allocation (a reducescatter's, allgather's and
 * alltoall's block per rank, a 2D copy's rows included) and overlaps that are not in place,
 * and a communicator of one rank reduces with a pre-multiplied sum. One process, no MPI.
 */
#include "emulation/emulation.h"

#include "../common/check_runner.h"

#include <check.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

START_TEST(host_reads_of_device_memory_crash)
{
    float *device = NULL;
    ck_assert_int_eq(cudaMalloc((void **)&device, 1024), cudaSuccess);
    pid_t child = fork();
    if (child == 0) {
        volatile float value = device[3]; /* what a GPU would not allow either */
        (void)value;
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV,
                  "reading device memory from the host did not fault");
    ck_assert_int_eq(cudaFree(device), cudaSuccess);
}
END_TEST

START_TEST(stream_work_is_done_only_when_the_stream_says_so)
{
    setenv("GPU_EMU_STREAM_DELAY_US", "200000", 1);
    cudaStream_t stream;
    ck_assert_int_eq(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    unsetenv("GPU_EMU_STREAM_DELAY_US");
    float host[4] = {1, 2, 3, 4}, back[4] = {0};
    void *device = NULL;
    ck_assert_int_eq(cudaMalloc(&device, sizeof host), cudaSuccess);
    ck_assert_int_eq(cudaMemcpyAsync(device, host, sizeof host, cudaMemcpyDefault, stream),
                     cudaSuccess);
    ck_assert_int_eq(cudaStreamQuery(stream), cudaErrorNotReady);
    /* Read without waiting: not there yet. */
    ck_assert_int_eq(cudaMemcpy(back, device, sizeof back, cudaMemcpyDefault), cudaSuccess);
    ck_assert_msg(memcmp(back, host, sizeof host) != 0, "the copy was done before its stream ran");
    ck_assert_int_eq(cudaStreamSynchronize(stream), cudaSuccess);
    ck_assert_int_eq(cudaStreamQuery(stream), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(back, device, sizeof back, cudaMemcpyDefault), cudaSuccess);
    ck_assert_mem_eq(back, host, sizeof host);
    ck_assert_int_eq(cudaFree(device), cudaSuccess);
    ck_assert_int_eq(cudaStreamDestroy(stream), cudaSuccess);
}
END_TEST

/* A copy from host memory on the legacy stream may land after cudaMemcpy returns, as from
 * pageable memory on a GPU: a blocking stream sees it, a non-blocking stream only after waiting
 * for an event recorded behind it. */
START_TEST(copies_from_the_host_land_late_unless_waited_for)
{
    cudaStream_t own, blocking;
    ck_assert_int_eq(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking), cudaSuccess);
    ck_assert_int_eq(cudaStreamCreate(&blocking), cudaSuccess);
    float host[4] = {1, 2, 3, 4}, back[4] = {0};
    void *device = NULL, *seen_by_own = NULL, *seen_by_blocking = NULL;
    ck_assert_int_eq(cudaMalloc(&device, sizeof host), cudaSuccess);
    ck_assert_int_eq(cudaMalloc(&seen_by_own, sizeof host), cudaSuccess);
    ck_assert_int_eq(cudaMalloc(&seen_by_blocking, sizeof host), cudaSuccess);
    setenv("GPU_EMU_STREAM_DELAY_US", "100000", 1); /* the legacy stream starts at its first use */
    ck_assert_int_eq(cudaMemcpy(device, host, sizeof host, cudaMemcpyHostToDevice), cudaSuccess);
    unsetenv("GPU_EMU_STREAM_DELAY_US");
    cudaEvent_t landed;
    ck_assert_int_eq(cudaEventCreate(&landed), cudaSuccess);
    ck_assert_int_eq(cudaEventRecord(landed, cudaStreamLegacy), cudaSuccess);
    ck_assert_int_eq(cudaEventQuery(landed), cudaErrorNotReady);
    ck_assert_int_eq(cudaMemcpyAsync(seen_by_own, device, sizeof host, cudaMemcpyDeviceToDevice,
                                     own), cudaSuccess);
    ck_assert_int_eq(cudaStreamSynchronize(own), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(back, seen_by_own, sizeof back, cudaMemcpyDefault), cudaSuccess);
    ck_assert_msg(memcmp(back, host, sizeof host) != 0, "a non-blocking stream waited");
    ck_assert_int_eq(cudaMemcpyAsync(seen_by_blocking, device, sizeof host,
                                     cudaMemcpyDeviceToDevice, blocking), cudaSuccess);
    ck_assert_int_eq(cudaStreamSynchronize(blocking), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(back, seen_by_blocking, sizeof back, cudaMemcpyDefault),
                     cudaSuccess);
    ck_assert_mem_eq(back, host, sizeof host);
    ck_assert_int_eq(cudaStreamWaitEvent(own, landed, 0), cudaSuccess);
    ck_assert_int_eq(cudaMemcpyAsync(seen_by_own, device, sizeof host, cudaMemcpyDeviceToDevice,
                                     own), cudaSuccess);
    ck_assert_int_eq(cudaStreamSynchronize(own), cudaSuccess);
    ck_assert_int_eq(cudaEventQuery(landed), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(back, seen_by_own, sizeof back, cudaMemcpyDefault), cudaSuccess);
    ck_assert_mem_eq(back, host, sizeof host);
    ck_assert_int_eq(cudaEventDestroy(landed), cudaSuccess);
    cudaFree(device);
    cudaFree(seen_by_own);
    cudaFree(seen_by_blocking);
    cudaStreamDestroy(own);
    cudaStreamDestroy(blocking);
}
END_TEST

/* A communicator of this one process, and a stream for its work. */
static ncclComm_t one_rank(cudaStream_t *stream)
{
    ncclUniqueId id;
    ncclComm_t comm;
    ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
    ck_assert_int_eq(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
    ck_assert_int_eq(cudaStreamCreate(stream), cudaSuccess);
    return comm;
}

START_TEST(nccl_refuses_host_buffers_and_ranges_past_an_allocation)
{
    cudaStream_t stream;
    ncclComm_t comm = one_rank(&stream);
    float host[8] = {0};
    void *device = NULL;
    ck_assert_int_eq(cudaMalloc(&device, sizeof host), cudaSuccess);
    ck_assert_int_eq(ncclAllReduce(host, host, 8, ncclFloat32, ncclSum, comm, stream),
                     ncclInvalidArgument);
    ck_assert_int_eq(ncclAllReduce(device, device, 9, ncclFloat32, ncclSum, comm, stream),
                     ncclInvalidArgument); /* past the end of the allocation */
    ck_assert_int_eq(ncclAllReduce(device, device, 8, ncclFloat32, ncclSum, comm, stream),
                     ncclSuccess);
    ck_assert_int_eq(cudaStreamSynchronize(stream), cudaSuccess);
    ck_assert_int_eq(ncclCommAbort(comm), ncclSuccess);
    ck_assert_int_eq(cudaFree(device), cudaSuccess);
    ck_assert_int_eq(cudaStreamDestroy(stream), cudaSuccess);
}
END_TEST

START_TEST(one_rank_reduces_with_a_premultiplied_sum)
{
    cudaStream_t stream;
    ncclComm_t comm = one_rank(&stream);
    double host[3] = {1.5, -2, 4}, back[3];
    void *in = NULL, *out = NULL;
    ck_assert_int_eq(cudaMalloc(&in, sizeof host), cudaSuccess);
    ck_assert_int_eq(cudaMalloc(&out, sizeof host), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(in, host, sizeof host, cudaMemcpyDefault), cudaSuccess);
    double scalar = 0.5;
    ncclRedOp_t premul;
    ck_assert_int_eq(ncclRedOpCreatePreMulSum(&premul, &scalar, ncclFloat64,
                                              ncclScalarHostImmediate, comm),
                     ncclSuccess);
    ck_assert_int_eq(ncclAllReduce(in, out, 3, ncclFloat64, premul, comm, stream), ncclSuccess);
    ck_assert_int_eq(ncclRedOpDestroy(premul, comm), ncclSuccess);
    ck_assert_int_eq(cudaStreamSynchronize(stream), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(back, out, sizeof back, cudaMemcpyDefault), cudaSuccess);
    ck_assert(back[0] == 0.75 && back[1] == -1 && back[2] == 2);
    ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
    cudaFree(in);
    cudaFree(out);
    cudaStreamDestroy(stream);
}
END_TEST

/* A send to oneself matched by a receive of another size: NCCL would hang or corrupt memory;
 * the emulation reports it as the communicator's asynchronous error. A matched pair moves the
 * data, and a second send to the same peer in one group is refused. */
START_TEST(unmatched_sends_and_receives_are_errors)
{
    cudaStream_t stream;
    ncclComm_t comm = one_rank(&stream);
    float host[4] = {1, 2, 3, 4}, back[4] = {0};
    void *in = NULL, *out = NULL;
    ck_assert_int_eq(cudaMalloc(&in, sizeof host), cudaSuccess);
    ck_assert_int_eq(cudaMalloc(&out, sizeof host), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(in, host, sizeof host, cudaMemcpyDefault), cudaSuccess);
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    ck_assert_int_eq(ncclSend(in, 4, ncclFloat32, 0, comm, stream), ncclSuccess);
    ck_assert_int_eq(ncclRecv(out, 4, ncclFloat32, 0, comm, stream), ncclSuccess);
    ck_assert_int_eq(ncclSend(in, 4, ncclFloat32, 0, comm, stream), ncclInvalidUsage);
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    ck_assert_int_eq(cudaStreamSynchronize(stream), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(back, out, sizeof back, cudaMemcpyDefault), cudaSuccess);
    ck_assert(back[0] == 1 && back[3] == 4);
    ncclResult_t state = ncclSuccess;
    ck_assert_int_eq(ncclCommGetAsyncError(comm, &state), ncclSuccess);
    ck_assert_int_eq(state, ncclSuccess);
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    ck_assert_int_eq(ncclSend(in, 4, ncclFloat32, 0, comm, stream), ncclSuccess);
    ck_assert_int_eq(ncclRecv(out, 3, ncclFloat32, 0, comm, stream), ncclSuccess);
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    ck_assert_int_eq(cudaStreamSynchronize(stream), cudaSuccess);
    ck_assert_int_eq(ncclCommGetAsyncError(comm, &state), ncclSuccess);
    ck_assert_int_eq(state, ncclInvalidUsage);
    ck_assert_int_eq(ncclCommAbort(comm), ncclSuccess);
    cudaFree(in);
    cudaFree(out);
    cudaStreamDestroy(stream);
}
END_TEST

/* A reducescatter reads a block per rank and may write in place only over this rank's block;
 * a 2D copy reads and writes rows at their pitches, within the allocations. */
START_TEST(reducescatters_and_2d_copies_stay_in_their_ranges)
{
    cudaStream_t stream;
    ncclComm_t comm = one_rank(&stream);
    float host[6] = {1, 2, 3, 4, 5, 6}, back[6] = {0};
    float *device = NULL;
    ck_assert_int_eq(cudaMalloc((void **)&device, sizeof host), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(device, host, sizeof host, cudaMemcpyDefault), cudaSuccess);
    ck_assert_int_eq(ncclReduceScatter(device, device + 3, 4, ncclFloat32, ncclSum, comm, stream),
                     ncclInvalidArgument); /* overlaps the input, not in place */
    ck_assert_int_eq(ncclReduceScatter(device, device, 7, ncclFloat32, ncclSum, comm, stream),
                     ncclInvalidArgument); /* past the end */
    ck_assert_int_eq(ncclReduceScatter(device, device, 3, ncclFloat32, ncclMax, comm, stream),
                     ncclSuccess);
    /* Rows of 2 floats, 3 apart, to rows 2 apart: 1 2 4 5, then the rest as it was. */
    ck_assert_int_eq(cudaMemcpy2DAsync(device, 2 * sizeof(float), host, 3 * sizeof(float),
                                       2 * sizeof(float), 2, cudaMemcpyDefault, stream),
                     cudaSuccess);
    ck_assert_int_eq(cudaMemcpy2DAsync(device, sizeof(float), host, 3 * sizeof(float),
                                       2 * sizeof(float), 2, cudaMemcpyDefault, stream),
                     cudaErrorInvalidPitchValue);
    ck_assert_int_eq(cudaMemcpy2DAsync(device, 4 * sizeof(float), host, 2 * sizeof(float),
                                       2 * sizeof(float), 2, cudaMemcpyDefault, stream),
                     cudaSuccess);
    ck_assert_int_eq(cudaMemcpy2DAsync(device, 4 * sizeof(float), host, 2 * sizeof(float),
                                       2 * sizeof(float), 3, cudaMemcpyDefault, stream),
                     cudaErrorInvalidValue); /* the third row runs past the allocation */
    cudaGetLastError();
    ck_assert_int_eq(cudaStreamSynchronize(stream), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(back, device, sizeof back, cudaMemcpyDefault), cudaSuccess);
    const float expected[6] = {1, 2, 4, 5, 3, 4};
    ck_assert_mem_eq(back, expected, sizeof expected);
    ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
    cudaFree(device);
    cudaStreamDestroy(stream);
}
END_TEST

/* An allgather writes a block per rank and may read in place only from this rank's block; an
 * alltoall reads and writes a block per rank and never in place. */
START_TEST(allgathers_and_alltoalls_stay_in_their_ranges)
{
    cudaStream_t stream;
    ncclComm_t comm = one_rank(&stream);
    float host[4] = {1, 2, 3, 4}, back[4] = {0};
    float *device = NULL;
    ck_assert_int_eq(cudaMalloc((void **)&device, sizeof host), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(device, host, sizeof host, cudaMemcpyDefault), cudaSuccess);
    ck_assert_int_eq(ncclAllGather(device, device + 2, 2, ncclFloat32, comm, stream),
                     ncclSuccess); /* separate halves of one allocation */
    ck_assert_int_eq(ncclAllGather(device + 1, device, 2, ncclFloat32, comm, stream),
                     ncclInvalidArgument); /* overlaps, not this rank's block */
    ck_assert_int_eq(ncclAllGather(device, device + 3, 2, ncclFloat32, comm, stream),
                     ncclInvalidArgument); /* past the end */
    ck_assert_int_eq(ncclAlltoAll(device, device, 4, ncclFloat32, comm, stream),
                     ncclInvalidArgument); /* alltoall in place */
    ck_assert_int_eq(ncclAlltoAll(device + 2, device, 2, ncclFloat32, comm, stream),
                     ncclSuccess);
    ck_assert_int_eq(cudaStreamSynchronize(stream), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(back, device, sizeof back, cudaMemcpyDefault), cudaSuccess);
    /* The allgather copied 1 2 over 3 4, the alltoall those back to the front. */
    const float expected[4] = {1, 2, 1, 2};
    ck_assert_mem_eq(back, expected, sizeof expected);
    ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
    cudaFree(device);
    cudaStreamDestroy(stream);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("emulation");
    TCase *cases = tcase_create("strictness");
    tcase_set_timeout(cases, 30);
    tcase_add_test(cases, host_reads_of_device_memory_crash);
    tcase_add_test(cases, stream_work_is_done_only_when_the_stream_says_so);
    tcase_add_test(cases, copies_from_the_host_land_late_unless_waited_for);
    tcase_add_test(cases, nccl_refuses_host_buffers_and_ranges_past_an_allocation);
    tcase_add_test(cases, one_rank_reduces_with_a_premultiplied_sum);
    tcase_add_test(cases, unmatched_sends_and_receives_are_errors);
    tcase_add_test(cases, reducescatters_and_2d_copies_stay_in_their_ranges);
    tcase_add_test(cases, allgathers_and_alltoalls_stay_in_their_ranges);
    suite_add_tcase(suite, cases);
    return run_suite(suite);
}
