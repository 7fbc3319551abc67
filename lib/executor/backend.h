/*
 * backend.h — private to lib/executor: the backend table and what its backends share.
 *
 * A backend runs the batches of one kind of memory: every collective has an entry in each
 * backend's row, so adding a collective is a column (an entry per backend) and adding a backend
 * (UCC, a socket transport) is a row and a file. The executor picks the row from the memory the
 * batch's tensors live in, and the entry from the collective.
 */
#ifndef CHORUS_EXECUTOR_BACKEND_H
#define CHORUS_EXECUTOR_BACKEND_H

#include "executor.h"

#include "../collectives/collectives.h"

/* Runs one batch: the responses at `members` (`member_count` of them, all of one collective, as
 * the fusion plan grouped them) with this rank's requests for them (NULL where a joined rank has
 * none). On failure the reason is in `error`. */
typedef chorus_status (*batch_run)(struct executor *executor, const struct wire_response *responses,
                                   const size_t *members, size_t member_count,
                                   struct request **requests, char *error, size_t error_size);

struct backend {
    const char *name;
    batch_run run[CHORUS_COLLECTIVE_COUNT];
};

enum backend_id { BACKEND_HOST, BACKEND_NCCL, BACKEND_COUNT };

extern const struct backend executor_host_backend; /* host_*.c: the algorithms of lib/collectives */
extern const struct backend executor_nccl_backend; /* nccl_backend.c: NCCL through lib/gpu */

chorus_status executor_host_allreduce(struct executor *executor, const struct wire_response *responses,
                             const size_t *members, size_t member_count, struct request **requests,
                             char *error, size_t error_size);
chorus_status executor_host_broadcast(struct executor *executor, const struct wire_response *responses,
                             const size_t *members, size_t member_count, struct request **requests,
                             char *error, size_t error_size);
chorus_status executor_host_allgather(struct executor *executor, const struct wire_response *responses,
                             const size_t *members, size_t member_count, struct request **requests,
                             char *error, size_t error_size);
chorus_status executor_host_reducescatter(struct executor *executor, const struct wire_response *responses,
                                 const size_t *members, size_t member_count,
                                 struct request **requests, char *error, size_t error_size);
chorus_status executor_host_alltoall(struct executor *executor, const struct wire_response *responses,
                            const size_t *members, size_t member_count, struct request **requests,
                            char *error, size_t error_size);

/* host_allreduce.c: one INT8, INT4 or TOPK allreduce (`response`) of `request`'s tensor in host
 * memory (NULL: a joined rank's zeros), with its error feedback residual: prescaled (and
 * widened to float32 where it is 16 bits), reduced, and written to its output in its dtype. */
chorus_status executor_host_allreduce_lossy(struct executor *executor,
                                            const struct wire_response *response,
                                            struct request *request, char *error,
                                            size_t error_size);

/* gpu_compressed_on_host.c: a batch of INT8, INT4 or TOPK allreduces of GPU tensors, each
 * staged in host memory (as float32, with its residual) and reduced there as a host tensor's:
 * what a slow link saves is worth two copies over the bus. */
chorus_status executor_gpu_allreduce_compressed(struct executor *executor,
                                                const struct wire_response *responses,
                                                const size_t *members, size_t member_count,
                                                struct request **requests, char *error,
                                                size_t error_size);

/* gpu_reduce_on_host.c: whether NCCL cannot reduce GPU tensors of `dtype` with `op` and these
 * scale factors as chorus defines it; and such a batch (device memory) reduced in host memory
 * instead, in one host allreduce: an allreduce's pieces, or a reducescatter's tensors, of which
 * only this rank's rows go back. */
bool executor_gpu_reduces_on_host(chorus_dtype dtype, chorus_op op, double prescale, double postscale);
chorus_status executor_gpu_allreduce_on_host(struct executor *executor, const struct gpu_piece *pieces,
                                    size_t piece_count, chorus_dtype dtype, chorus_op op,
                                    double prescale, double factor, char *error,
                                    size_t error_size);
chorus_status executor_gpu_reducescatter_on_host(struct executor *executor,
                                        const struct gpu_scatter *scatters, size_t count,
                                        chorus_dtype dtype, chorus_op op, double prescale,
                                        double factor, char *error, size_t error_size);

/* host_algorithms.c: one host collective with the algorithm the selection picks (see
 * selection_run); the algorithm that ran is left in executor->last_algorithm. An allreduce of
 * `pieces` (buffer NULL) runs only where executor_host_allreduce_in_place() said so. */
chorus_status executor_run_host_allreduce(struct executor *executor, void *buffer,
                                 const struct allreduce_piece *pieces, size_t piece_count,
                                 size_t count, chorus_dtype dtype, chorus_op op, double factor,
                                 bool in_shared_heap, char *error, size_t error_size);
/* An INT8, INT4 or TOPK allreduce of `count` float32 values in `buffer` (a sum; `factor` the
 * postscale with an average's division): through the quantized algorithm with `quantize`, or
 * the top-k algorithm with `topk`, whichever is not NULL; `residual`: this rank's error feedback
 * (count values), or NULL. */
struct quantize_scheme;
struct topk_scheme;
chorus_status executor_run_host_allreduce_compressed(struct executor *executor, float *buffer,
                                                     float *residual, size_t count,
                                                     const struct quantize_scheme *quantize,
                                                     const struct topk_scheme *topk,
                                                     double factor, char *error,
                                                     size_t error_size);
chorus_status executor_run_host_broadcast(struct executor *executor, void *buffer, size_t bytes, int root,
                                 char *error, size_t error_size);
chorus_status executor_run_host_allgather(struct executor *executor, const void *send, void *recv,
                                 const size_t *block_bytes, const size_t *offsets, size_t total,
                                 char *error, size_t error_size);
chorus_status executor_run_host_reducescatter(struct executor *executor, const void *send, void *recv,
                                     const size_t *block_counts, const size_t *offsets,
                                     size_t count, chorus_dtype dtype, chorus_op op,
                                     double factor, char *error, size_t error_size);
chorus_status executor_run_host_alltoall(struct executor *executor, const struct alltoall_args *args,
                                size_t bytes, char *error, size_t error_size);

/* host_alltoall.c: where an alltoall's rows go, agreed by the ranks before they move (the host
 * and the GPU alltoall share it). */
struct alltoall_plan {
    int ranks;
    size_t *table; /* the five arrays below, one entry per rank each */
    size_t *send_bytes, *send_offsets, *recv_bytes, *recv_offsets;
    size_t *remote_offsets; /* where each sender's rows for this rank start in its input */
    int64_t *received_splits;
    size_t send_total, recv_total, received_rows;
};
/* Exchanges the rows each rank sends each other (and where they start) through the host
 * transport, and lays out the output. A joined rank (request NULL) sends nothing. */
chorus_status executor_alltoall_plan(struct executor *executor, const struct wire_response *response,
                            const struct request *request, struct alltoall_plan *plan,
                            char *error, size_t error_size);
void executor_alltoall_plan_free(struct alltoall_plan *plan);
/* After the rows moved: the output and (on success) the received splits to the handle. */
void executor_alltoall_settle(const struct wire_response *response, struct request *request,
                     struct alltoall_plan *plan, void *output, size_t capacity,
                     chorus_status status);
/* Whether a fused allreduce of `bytes` runs where its tensors lie (the hierarchical algorithm on
 * the host's segment) rather than through the fusion buffer. */
bool executor_host_allreduce_in_place(const struct executor *executor, size_t bytes);

/* executor.c */
/* The host's shared segment, or NULL where there is none. */
struct node_segment *executor_node(struct executor *executor);
/* A wait's interrupt check (transport and GPU): another rank's notice that it failed. */
chorus_status executor_interrupt_check(void *executor, char *error, size_t error_size);
/* The bound on waits in force (executor_bound_waits), and how a message names where it came
 * from. */
double executor_timeout(const struct executor *executor);
const char *executor_timeout_origin(const struct executor *executor);

/* When a fused batch's phases ended; a batch reduced in place has no copies: packed == started
 * and unpacked == reduced. */
struct batch_times {
    double started, packed, reduced, unpacked;
};

/* Where a fused batch's copies happen. */
enum batch_layout {
    BATCH_PACKED,    /* copied into the host fusion buffer and back: spans of their own */
    BATCH_IN_PLACE,  /* no copies: the algorithm reads and writes the tensors */
    BATCH_ON_DEVICE, /* copied on the GPU's stream, inside the allreduce span */
};

/* The timeline spans of a fused allreduce, per tensor: the copy in, the allreduce with its
 * algorithm and fused size, the copy out (the copies only for a packed batch). */
void executor_timeline_batch(struct executor *executor, const struct wire_response *responses,
                    const size_t *members, size_t member_count, size_t fused_bytes,
                    enum batch_layout layout, const struct batch_times *times);

/* batch.c */
/* Elements of all the members of a batch together. */
size_t executor_batch_elements(const struct wire_response *responses, const size_t *members,
                      size_t member_count);
/* The dtype an allreduce travels as: float16 or bfloat16 for a compressed float32 tensor, else
 * its own. */
chorus_dtype executor_wire_dtype(const struct wire_request *request);
/* What an allreduce's result is multiplied by: the postscale, divided by the contributors for
 * an average. */
double executor_output_factor(const struct wire_response *response);
/* The buffer a joined rank works on when it has no tensor of that name (NULL: out of memory). */
void *executor_stand_in_buffer(struct executor *executor, size_t bytes);
/* The root's input must also be its output. */
chorus_status executor_root_output(struct request *request, size_t bytes, bool gpu, char *error,
                          size_t error_size);
/* An allgather's output: for a request, `bytes` from the output pool (host; *capacity is what
 * the pool gave) or the device; for a joined rank, the stand-in buffer. NULL, with the reason in
 * `error`, when out of memory. */
void *executor_gathered_output(struct executor *executor, const struct wire_response *response,
                      const struct request *request, size_t bytes, size_t *capacity, char *error,
                      size_t error_size);
/* After the collective: a request's output goes to its handle when it succeeded, else back to
 * where it came from. A joined rank's stand-in stays. */
void executor_settle_gathered(const struct wire_response *response, struct request *request, void *output,
                     size_t capacity, chorus_status status);
/* The same for an output of `rows` rows (the response's other dimensions): a reducescatter's. */
void executor_settle_output(const struct wire_response *response, struct request *request, void *output,
                   size_t capacity, int64_t rows, chorus_status status);
/* Where each rank's rows of an allgather land in the gathered tensor; returns its bytes. */
size_t executor_gather_layout(const struct wire_response *response, int nranks, size_t *block_bytes,
                     size_t *offsets);

#endif
