/*
 * request.h — what a rank submits and what rank 0 answers, as every layer sees them: the
 * negotiated description of a tensor (struct wire_request), the agreed response to run
 * (struct wire_response), one rank's submitted tensor (struct request), and the sizes they
 * describe. The coordinator puts the first two on the wire (wire.h); fusion and the executor
 * plan and run them.
 */
#ifndef CHORUS_REQUEST_H
#define CHORUS_REQUEST_H

#include "common.h"

/* What a rank submitted, as negotiated: everything every rank must agree on. */
struct wire_request {
    char *name;
    uint8_t collective;
    uint8_t dtype;
    uint8_t op;
    uint8_t ndims;
    uint8_t compression; /* chorus_compression, resolved: NONE, FP16, BF16, INT8, INT4 or TOPK */
    int32_t root;
    int32_t device;
    int64_t shape[CHORUS_MAX_DIMS];
    double prescale;
    double postscale;
    double compression_ratio; /* TOPK: the fraction of values each rank sends; else 0 */
    char *group;         /* first name of the group; "" when not grouped */
    uint32_t group_size; /* tensors in the group; 1 when not grouped */
    int32_t process_set;  /* the ranks it runs on: 0 for every rank (process_set.h) */
    uint32_t member_count; /* COLLECTIVE_PROCESS_SET: the ranks of a set to add (0: remove) */
    int32_t *members;
    /* Alltoall: 1 when this rank sends rows/nranks rows to every rank. In a response, 1 when
     * every rank does so with the same rows, so that no rank needs the others' splits. */
    uint8_t even_split;
    /* Allreduce: 1 when this rank's result buffer lies in the shared heap (chorus_mem_alloc).
     * In a response, 1 when every rank's does: then the selection may reduce it in place
     * (allreduce_shared_heap.c), a decision every rank makes alike at no cost of its own. */
    uint8_t in_shared_heap;
    bool cached;         /* only cache_slot travels: the response cache holds the rest */
    uint32_t cache_slot;
};

/* Internal, beside chorus_collective: adds the process set `members` name (rank 0 gives it its
 * id in `process_set`), or, with no members, removes set `process_set`. Negotiated like any
 * tensor, so every rank changes its sets at the same point of the order all ranks run. */
enum { COLLECTIVE_PROCESS_SET = CHORUS_COLLECTIVE_COUNT };
/* Internal too: chorus_barrier where it runs in the job's lane (lib/lane), in call order with
 * the ordered operations, its members checking they all called it there. Never on the wire:
 * elsewhere chorus_barrier is a negotiated allreduce. */
enum { COLLECTIVE_BARRIER = CHORUS_COLLECTIVE_COUNT + 1 };
/* The process set whose names hold the request's name (name tables key by set and name, so a
 * user's name is never rewritten): its own set, or 0 for a process set change, whose addition
 * learns its set's id only from rank 0's answer. */
static inline int request_name_set(const struct wire_request *request)
{
    return request->collective == COLLECTIVE_PROCESS_SET ? 0 : request->process_set;
}
/* chorus_collective_name, "process set change" or "barrier". */
const char *request_collective_name(const struct wire_request *request);
/* The same for a collective's number (chorus_collective or one of the internal ones above). */
const char *request_collective_number_name(int collective);

/* What a submitted request asks for. A collective's description says which collective it is
 * and is negotiated (unless the request is ordered: then its members check it as they run it).
 * A transfer is no collective: its ends are its own (struct transfer_args), it is never
 * negotiated nor on the wire, and its description only names and shapes its tensor. */
enum request_kind {
    REQUEST_COLLECTIVE = 0, /* what a zeroed request is */
    REQUEST_TRANSFER,       /* chorus_send_async, chorus_recv_async */
};

enum transfer_direction { TRANSFER_SEND, TRANSFER_RECEIVE };
/* "send" or "receive", as messages name a transfer. */
const char *transfer_direction_name(enum transfer_direction direction);
/* What messages call an operation of kind `kind`, as its request or its handle knows it: the
 * name of collective `collective`, or a transfer's direction. */
const char *request_kind_name(enum request_kind kind, int collective,
                              enum transfer_direction direction);

/* A point-to-point transfer, which the background thread posts in submission order with the
 * ordered operations (lib/coordinator/transfers.h). */
struct transfer_args {
    enum transfer_direction direction;
    int peer; /* the job rank at the other end; a receive's may be CHORUS_ANY_SOURCE */
    int tag;
};

enum response_type {
    RESPONSE_EXECUTE = 1,   /* run the collective */
    RESPONSE_ERROR = 2,     /* complete the handles of `request.name` with `status`, `message` */
    RESPONSE_JOIN_DONE = 3, /* every rank has joined; last_joined_rank is the last that did */
    RESPONSE_CACHED = 4,    /* run the collective of response-cache slot request.cache_slot */
};

struct wire_response {
    uint8_t type;
    int32_t status;
    uint32_t contributors;       /* allreduce: ranks with data (the rest joined) */
    char *message;               /* RESPONSE_ERROR */
    struct wire_request request; /* the agreed description */
    uint32_t first_dim_count;    /* allgather: the number of members; else 0 */
    int64_t *first_dims;         /* allgather: every member's first dimension */
    uint32_t rank_mask_count;    /* a RESPONSE_ERROR of a stall or a process set: nranks; else 0 */
    uint8_t *rank_mask;          /* 1 for the ranks that submitted, whom alone it fails (see
                                  * response_applies_to) */
    int32_t last_joined_rank;    /* RESPONSE_JOIN_DONE: the last rank to join (Horovod's join()
                                  * returns it); else 0 */
    double agreed_at;            /* rank 0 only, not sent: when it was decided (timeline) */
};

struct chorus_handle;

/* What the members of an ordered operation agreed before it was queued (its lane checked their
 * descriptions, lib/lane): its position in the set's order, and what their records add to the
 * response, so that the background thread runs it without a check of its own. */
struct ordered_agreement {
    uint64_t position;
    uint32_t members;
    int64_t *first_dims;    /* allgather: every member's rows (malloc'd); else NULL */
    uint8_t even_split;     /* alltoall: every member splits evenly, with the same rows */
    uint8_t in_shared_heap; /* allreduce: every member's output lies in the shared heap */
};
void ordered_agreement_free(struct ordered_agreement *agreement);
/* The response every member of an ordered operation runs: its description `desc` (copied),
 * with what the members agreed. False when out of memory (free the response anyway). */
bool ordered_agreement_response(struct wire_response *response, const struct wire_request *desc,
                                const struct ordered_agreement *agreed);

/* One submitted tensor, from submit until its handle member completes. */
struct request {
    enum request_kind kind;
    /* A collective's: what is negotiated. A transfer's: its name (for messages), dtype, shape,
     * device and process set; the rest is zero, its `collective` no collective of its own. */
    struct wire_request desc;
    void *input;
    void *output; /* == input when in place; unused for allgather */
    int64_t *splits; /* alltoall: rows for each rank (one entry per rank); else NULL */
    size_t count; /* elements */
    /* A lossy allreduce's residual (chorus_op_args.error_feedback, count float32 values: INT8,
     * INT4, TOPK), or NULL: none, or the allreduce is not lossy (what DEFAULT resolved to). */
    float *error_feedback;
    struct chorus_handle *handle;
    uint32_t member; /* its index in its group (0 when alone): where its output goes */
    bool ordered;    /* CHORUS_OP_ORDERED, or a transfer: run in call order, not negotiated */
    double timeout_seconds; /* ordered: the caller's bound on waiting for the members (0: none) */
    struct ordered_agreement *agreed; /* ordered, checked by its lane; else NULL */
    struct transfer_args transfer; /* REQUEST_TRANSFER's */
    double submitted_at;
    /* A CUDA tensor's ready event on its producer's stream (lib/gpu's gpu_ready_record), and
     * what lets it go when the request is freed; NULL for host tensors. */
    void *ready;
    void (*release_ready)(void *ready);
    void *cuda_stream; /* a CUDA tensor's chorus_op_args.cuda_stream: where its output is read */
    struct request *next;
    bool strings_inline; /* desc.name and desc.group lie in `strings`, not on their own */
    char strings[];
};

void request_free(struct request *request);
/* request_kind_name of a submitted request. */
const char *request_operation_name(const struct request *request);

void wire_request_free(struct wire_request *request);
/* Deep copy; false when out of memory. */
bool wire_request_copy(struct wire_request *to, const struct wire_request *from);
void wire_response_free(struct wire_response *response);

/* Whether a response concerns rank `rank`: all do but an error that lists its ranks (a stall's,
 * a process set's), which fails only the ranks that submitted the tensor. (A rank that did not
 * may submit the name afresh before the error reaches it; that request is not the failed one.)
 * An EXECUTE of a process set concerns its members alone: the executor's caller skips it. */
bool response_applies_to(const struct wire_response *response, int rank);

/* Elements of the tensor a request describes (the product of its shape; 1 for a scalar). */
size_t request_elements(const struct wire_request *request);
/* Bytes of the tensor a response describes. */
size_t response_bytes(const struct wire_response *response);
/* What an allreduce's or reducescatter's result is multiplied by: the postscale factor, and
 * for an average the division by the ranks that contributed. */
double request_output_factor(const struct wire_request *request, uint32_t contributors);
/* Bytes an allgather's row (everything but the first dimension) takes. */
size_t allgather_row_bytes(const struct wire_request *request);
/* Bytes a response adds to a batch: an allgather's whole gathered tensor, else its tensor. */
size_t request_batch_member_bytes(const struct wire_response *response);

#endif
