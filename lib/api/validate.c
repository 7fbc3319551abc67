/*
 * validate.c — see validate.h.
 */
#include "instance.h"
#include "validate.h"

#include "../gpu/gpu.h"

#include <math.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* What allreduce and reducescatter check alike: a known op; bool only with min, max, product
 * (and) or sum (or) and without scale factors; finite scale factors. */
static chorus_status validate_reduction(const chorus_op_args *args)
{
    const char *kind = chorus_collective_name(args->collective);
    const char *name = args->name;
    if (!dtype_op_is_valid((int)args->op))
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT, "%s \"%s\": unknown op %d", kind, name,
                      (int)args->op);
    if (args->op == CHORUS_ADASUM &&
        (args->collective != CHORUS_ALLREDUCE ||
         (args->input.dtype != CHORUS_FLOAT16 && args->input.dtype != CHORUS_FLOAT32 &&
          args->input.dtype != CHORUS_FLOAT64) ||
         args->prescale_factor != 1.0 || args->postscale_factor != 1.0 ||
         (args->compression != CHORUS_COMPRESSION_DEFAULT &&
          args->compression != CHORUS_COMPRESSION_NONE)))
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "%s \"%s\": adasum takes allreduces of float16, float32 or float64 tensors, "
                      "without scale factors or compression; not %s%s",
                      kind, name, chorus_dtype_name(args->input.dtype),
                      args->prescale_factor != 1.0 || args->postscale_factor != 1.0
                          ? " with scale factors"
                          : "");
    if (args->input.dtype == CHORUS_BOOL &&
        (args->op == CHORUS_AVERAGE || args->prescale_factor != 1.0 ||
         args->postscale_factor != 1.0))
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "%s \"%s\": bool tensors take min, max, product (and) or sum (or), "
                      "without scale factors; not %s",
                      kind, name, args->op == CHORUS_AVERAGE ? "average" : "scale factors");
    if (!isfinite(args->prescale_factor) || !isfinite(args->postscale_factor))
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "%s \"%s\": scale factors must be finite (prescale %g, postscale %g)",
                      kind, name, args->prescale_factor, args->postscale_factor);
    return CHORUS_OK;
}

/* Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte (compared as addresses: they may
 * be different objects). */
static bool ranges_overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes)
{
    uintptr_t a_start = (uintptr_t)a, b_start = (uintptr_t)b;
    return a_bytes != 0 && b_bytes != 0 && a_start < b_start + b_bytes &&
           b_start < a_start + a_bytes;
}

/* "host memory" or "GPU 2's memory", for messages. */
static const char *memory_place(int device, char *text, size_t text_size)
{
    if (device < 0)
        return "host memory";
    snprintf(text, text_size, "GPU %d's memory", device);
    return text;
}

/* An allreduce's error feedback buffer (float32) goes with a float32, float16 or bfloat16
 * tensor of host memory whose
 * compression is lossy (INT8, INT4, TOPK) or DEFAULT (which may resolve to one), and lies apart
 * from the input and output: the library writes it while it reads the one and writes the
 * other. */
static chorus_status validate_error_feedback(const chorus_op_args *args)
{
    const float *residual = api_op_error_feedback(args);
    if (residual == NULL)
        return CHORUS_OK;
    const chorus_tensor *tensor = &args->input;
    if (args->compression != CHORUS_COMPRESSION_DEFAULT &&
        args->compression != CHORUS_COMPRESSION_TOPK &&
        dtype_compression_bits((int)args->compression) == 0)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "allreduce \"%s\": error_feedback needs a lossy compression (INT8, INT4, "
                      "TOPK, or DEFAULT), not %s",
                      args->name, dtype_compression_name((int)args->compression));
    if (!dtype_compression_applies(tensor->dtype, CHORUS_COMPRESSION_INT8))
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "allreduce \"%s\": error_feedback takes float32, float16 or bfloat16 "
                      "tensors (the ones chorus compresses lossily), not %s",
                      args->name, chorus_dtype_name(tensor->dtype));
    /* The residual lies where the tensor does: the library reads and writes it there. */
    int tensor_device = tensor->memory == CHORUS_MEMORY_CUDA ? tensor->device : -1;
    int residual_device = gpu_pointer_device(residual);
    if (residual_device != tensor_device) {
        char residual_place[32], tensor_place[32];
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "allreduce \"%s\": the error_feedback buffer lies in %s and the tensor in "
                      "%s; it must lie where the tensor does",
                      args->name, memory_place(residual_device, residual_place, 32),
                      memory_place(tensor_device, tensor_place, 32));
    }
    size_t bytes = chorus_tensor_count(tensor) * sizeof(float);
    size_t tensor_bytes = chorus_tensor_count(tensor) * chorus_dtype_size(tensor->dtype);
    if (ranges_overlap(residual, bytes, tensor->data, tensor_bytes) ||
        (args->output != NULL && ranges_overlap(residual, bytes, args->output, tensor_bytes)))
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "allreduce \"%s\": the error_feedback buffer overlaps the %s; it needs "
                      "memory of its own",
                      args->name,
                      ranges_overlap(residual, bytes, tensor->data, tensor_bytes) ? "input"
                                                                                  : "output");
    return CHORUS_OK;
}

/* An allreduce's compression_ratio: in (0, 1] (0: the parameter's), for TOPK alone (or DEFAULT,
 * which may resolve to it); TOPK takes fewer than 2^32 values (the pairs' indices are uint32). */
static chorus_status validate_compression_ratio(const chorus_op_args *args)
{
    const char *name = args->name;
    double ratio = api_op_compression_ratio(args);
    bool topk = args->compression == CHORUS_COMPRESSION_TOPK;
    bool may_be_topk = topk || args->compression == CHORUS_COMPRESSION_DEFAULT;
    if (!(ratio >= 0 && ratio <= 1))
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "allreduce \"%s\": compression_ratio is %g; it must be above 0 and at most "
                      "1 (or 0 for CHORUS_COMPRESSION_TOPK_RATIO)",
                      name, ratio);
    if (ratio != 0 && !may_be_topk)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "allreduce \"%s\": compression_ratio is for topk compression, not %s", name,
                      dtype_compression_name((int)args->compression));
    if (topk && dtype_compression_applies(args->input.dtype, CHORUS_COMPRESSION_TOPK) &&
        chorus_tensor_count(&args->input) > UINT32_MAX)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "allreduce \"%s\": topk compression takes tensors of fewer than 2^32 "
                      "values, not %zu",
                      name, chorus_tensor_count(&args->input));
    return CHORUS_OK;
}

/* The reducescatter's own checks, after validate's common ones. */
static chorus_status validate_reducescatter(const chorus_op_args *args)
{
    if (args->input.ndims == 0)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "reducescatter \"%s\": the tensor needs at least one dimension (rows to "
                      "scatter)",
                      args->name);
    return validate_reduction(args);
}

/* The alltoall's own checks: rows to split, and splits that add up to them. */
static chorus_status validate_alltoall(const chorus_op_args *args, int nranks)
{
    const chorus_tensor *tensor = &args->input;
    if (tensor->ndims == 0)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "alltoall \"%s\": the tensor needs at least one dimension (rows to send)",
                      args->name);
    int64_t rows = tensor->shape[0];
    if (args->splits == NULL) {
        if (rows % nranks != 0)
            return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                          "alltoall \"%s\": %lld rows do not split evenly over %d ranks; pass "
                          "splits",
                          args->name, (long long)rows, nranks);
        return CHORUS_OK;
    }
    int64_t total = 0;
    for (int r = 0; r < nranks; r++) {
        if (args->splits[r] < 0 || args->splits[r] > rows)
            return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                          "alltoall \"%s\": splits[%d] is %lld, outside 0..%lld (the rows)",
                          args->name, r, (long long)args->splits[r], (long long)rows);
        total += args->splits[r];
    }
    if (total != rows)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "alltoall \"%s\": the splits add up to %lld rows; the tensor has %lld",
                      args->name, (long long)total, (long long)rows);
    return CHORUS_OK;
}

/* The layouts of chorus_op_args that chorus has released: callers built before process sets
 * pass the struct without its last field. Any other size is a caller's mistake (a struct built
 * by hand, a binding whose layout drifted), refused rather than read as some older layout. */
static bool op_args_size_released(size_t struct_size)
{
    static const size_t released[] = {
        offsetof(chorus_op_args, process_set), /* 0.1.0 before process sets */
        offsetof(chorus_op_args, flags),       /* with process_set */
        offsetof(chorus_op_args, timeout_seconds), /* with flags */
        offsetof(chorus_op_args, error_feedback),  /* with timeout_seconds */
        offsetof(chorus_op_args, cuda_stream), /* with error_feedback and compression_ratio */
        sizeof(chorus_op_args),                /* with cuda_stream */
    };
    for (size_t i = 0; i < ARRAY_LENGTH(released); i++)
        if (struct_size == released[i])
            return true;
    return false;
}

int api_op_process_set(const chorus_op_args *args)
{
    return args->struct_size >= offsetof(chorus_op_args, process_set) + sizeof args->process_set
               ? args->process_set
               : 0;
}

uint64_t api_op_flags(const chorus_op_args *args)
{
    return args->struct_size >= offsetof(chorus_op_args, flags) + sizeof args->flags ? args->flags
                                                                                      : 0;
}

void *api_op_error_feedback(const chorus_op_args *args)
{
    return args->struct_size >= offsetof(chorus_op_args, error_feedback) +
                                    sizeof args->error_feedback
               ? args->error_feedback
               : NULL;
}

double api_op_compression_ratio(const chorus_op_args *args)
{
    return args->struct_size >= offsetof(chorus_op_args, compression_ratio) +
                                    sizeof args->compression_ratio
               ? args->compression_ratio
               : 0.0;
}

void *api_op_cuda_stream(const chorus_op_args *args)
{
    return args->struct_size >= offsetof(chorus_op_args, cuda_stream) + sizeof args->cuda_stream
               ? args->cuda_stream
               : NULL;
}

double api_op_timeout(const chorus_op_args *args)
{
    return args->struct_size >= offsetof(chorus_op_args, timeout_seconds) +
                                    sizeof args->timeout_seconds
               ? args->timeout_seconds
               : 0.0;
}

chorus_status api_validate_tensor(const char *kind, const char *name,
                                  const chorus_tensor *tensor)
{
    if (!dtype_is_valid((int)tensor->dtype))
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT, "%s \"%s\": unknown dtype %d", kind, name,
                      (int)tensor->dtype);
    if (tensor->ndims > CHORUS_MAX_DIMS)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "%s \"%s\": %zu dimensions; at most %d are supported", kind, name,
                      tensor->ndims, CHORUS_MAX_DIMS);
    size_t count = 1;
    for (size_t i = 0; i < tensor->ndims; i++) {
        if (tensor->shape[i] < 0)
            return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                          "%s \"%s\": dimension %zu is negative (%lld)", kind, name, i,
                          (long long)tensor->shape[i]);
        if (tensor->shape[i] != 0 && count > SIZE_MAX / 16 / (size_t)tensor->shape[i])
            return REJECT(CHORUS_ERR_INVALID_ARGUMENT, "%s \"%s\": the shape is too large",
                          kind, name);
        count *= (size_t)tensor->shape[i];
    }
    if (count != 0 && tensor->data == NULL)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT, "%s \"%s\": data is NULL", kind, name);
    if (tensor->memory != CHORUS_MEMORY_HOST && tensor->memory != CHORUS_MEMORY_CUDA)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT, "%s \"%s\": unknown memory kind %d", kind,
                      name, (int)tensor->memory);
    if (tensor->memory == CHORUS_MEMORY_CUDA && tensor->device < 0)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT, "%s \"%s\": invalid CUDA device %d", kind,
                      name, tensor->device);
    if (tensor->memory == CHORUS_MEMORY_CUDA) {
        if (!gpu_compiled())
            return REJECT(CHORUS_ERR_NOT_SUPPORTED,
                          "%s \"%s\": tensor is on GPU %d, but chorus was built without GPU "
                          "support (CUDA and NCCL)",
                          kind, name, tensor->device);
        if (tensor->device >= gpu_device_count())
            return REJECT(CHORUS_ERR_NOT_SUPPORTED,
                          "%s \"%s\": tensor is on GPU %d, but this host has %d GPU(s)", kind,
                          name, tensor->device, gpu_device_count());
    }
    return CHORUS_OK;
}

chorus_status api_validate_op(const chorus_op_args *args, int nranks)
{
    if (!op_args_size_released(args->struct_size))
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "chorus_submit: args.struct_size is %zu, which no released chorus_op_args "
                      "has (%zu now, %zu before cuda_stream, %zu before error_feedback, %zu "
                      "before timeout_seconds, %zu before flags, %zu before process sets); "
                      "initialize args with CHORUS_OP_ARGS_INIT",
                      args->struct_size, sizeof *args, offsetof(chorus_op_args, cuda_stream),
                      offsetof(chorus_op_args, error_feedback),
                      offsetof(chorus_op_args, timeout_seconds),
                      offsetof(chorus_op_args, flags), offsetof(chorus_op_args, process_set));
    if ((api_op_flags(args) & ~CHORUS_OP_ORDERED) != 0)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT, "chorus_submit: unknown flags 0x%llx",
                      (unsigned long long)(api_op_flags(args) & ~CHORUS_OP_ORDERED));
    const char *kind = chorus_collective_name(args->collective);
    if (!dtype_collective_is_valid((int)args->collective))
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT, "chorus_submit: unknown collective %d",
                      (int)args->collective);
    if (args->name == NULL || args->name[0] == '\0')
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT, "%s: the tensor name is empty", kind);
    size_t name_length = strnlen(args->name, CHORUS_MAX_NAME_LENGTH + 1);
    if (name_length > CHORUS_MAX_NAME_LENGTH)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "%s: the tensor name is longer than %d bytes", kind,
                      CHORUS_MAX_NAME_LENGTH);
    const char *name = args->name;
    double timeout = api_op_timeout(args);
    if (!(timeout >= 0) || !isfinite(timeout))
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "%s \"%s\": timeout_seconds is %g; it must be finite and not negative",
                      kind, name, timeout);
    if (timeout > 0 && (api_op_flags(args) & CHORUS_OP_ORDERED) == 0)
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "%s \"%s\": timeout_seconds is for ordered operations (CHORUS_OP_ORDERED); "
                      "a negotiated one that a rank never submits is bounded by the stall check "
                      "(CHORUS_STALL_SHUTDOWN_SECONDS)",
                      kind, name);
    const chorus_tensor *tensor = &args->input;
    chorus_status checked = api_validate_tensor(kind, name, tensor);
    if (checked != CHORUS_OK)
        return checked;
    if (args->collective != CHORUS_ALLREDUCE &&
        (api_op_error_feedback(args) != NULL || api_op_compression_ratio(args) != 0))
        return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                      "%s \"%s\": error_feedback and compression_ratio are for allreduces", kind,
                      name);
    switch (args->collective) {
    case CHORUS_ALLREDUCE: {
        chorus_status reduction = validate_reduction(args);
        if (reduction != CHORUS_OK)
            return reduction;
        if ((int)args->compression < CHORUS_COMPRESSION_DEFAULT ||
            args->compression > DTYPE_COMPRESSION_LAST)
            return REJECT(CHORUS_ERR_INVALID_ARGUMENT, "allreduce \"%s\": unknown compression %d",
                          name, (int)args->compression);
        chorus_status feedback = validate_error_feedback(args);
        if (feedback != CHORUS_OK)
            return feedback;
        bool compressed = args->compression != CHORUS_COMPRESSION_DEFAULT &&
                          args->compression != CHORUS_COMPRESSION_NONE;
        /* Converting to 16 bits on the device needs a kernel, which chorus does not have: cast
         * the tensor before submitting it instead. (INT8, INT4 and TOPK go through host
         * memory, where the bytes they save are worth the copies.) */
        if (tensor->memory == CHORUS_MEMORY_CUDA && compressed &&
            !dtype_compression_sums_only((int)args->compression) &&
            dtype_compression_applies(tensor->dtype, (int)args->compression))
            return REJECT(CHORUS_ERR_NOT_SUPPORTED,
                          "allreduce \"%s\": %s compression of GPU tensors is not supported; "
                          "cast the tensor to float16 or bfloat16, or copy it to host memory, "
                          "before submitting it",
                          name, dtype_compression_name((int)args->compression));
        /* A quantized or sparsified value is a sum's share: a minimum or a product of shares
         * means nothing. */
        if (dtype_compression_applies(tensor->dtype, (int)args->compression) &&
            dtype_compression_sums_only((int)args->compression) && args->op != CHORUS_SUM &&
            args->op != CHORUS_AVERAGE)
            return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                          "allreduce \"%s\": %s compression takes sum or average, not %s",
                          name, dtype_compression_name((int)args->compression),
                          chorus_op_name(args->op));
        return validate_compression_ratio(args);
    }
    case CHORUS_BROADCAST:
        if (args->root < 0 || args->root >= nranks)
            return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                          "broadcast \"%s\": root %d is not a rank (there are %d ranks)", name,
                          args->root, nranks);
        break;
    case CHORUS_ALLGATHER:
        if (tensor->ndims == 0)
            return REJECT(CHORUS_ERR_INVALID_ARGUMENT,
                          "allgather \"%s\": the tensor needs at least one dimension (rows to "
                          "gather)",
                          name);
        break;
    case CHORUS_REDUCESCATTER:
        return validate_reducescatter(args);
    case CHORUS_ALLTOALL:
        return validate_alltoall(args, nranks);
    }
    return CHORUS_OK;
}
