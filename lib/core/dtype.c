/*
 * dtype.c — facts about dtypes, reduction operators and collectives: sizes and names.
 */
#include "common.h"

static const struct {
    const char *name;
    size_t size;
    bool floating;
} dtype_table[CHORUS_DTYPE_COUNT] = {
    [CHORUS_UINT8] = {"uint8", 1, false},       [CHORUS_INT8] = {"int8", 1, false},
    [CHORUS_INT32] = {"int32", 4, false},       [CHORUS_INT64] = {"int64", 8, false},
    [CHORUS_FLOAT16] = {"float16", 2, true},    [CHORUS_BFLOAT16] = {"bfloat16", 2, true},
    [CHORUS_FLOAT32] = {"float32", 4, true},    [CHORUS_FLOAT64] = {"float64", 8, true},
    [CHORUS_INT16] = {"int16", 2, false},       [CHORUS_UINT16] = {"uint16", 2, false},
    [CHORUS_BOOL] = {"bool", 1, false},
};

static const char *const op_names[CHORUS_OP_COUNT] = {
    [CHORUS_SUM] = "sum", [CHORUS_AVERAGE] = "average", [CHORUS_MIN] = "min",
    [CHORUS_MAX] = "max", [CHORUS_PRODUCT] = "product", [CHORUS_ADASUM] = "adasum",
};

static const char *const collective_names[CHORUS_COLLECTIVE_COUNT] = {
    [CHORUS_ALLREDUCE] = "allreduce",
    [CHORUS_BROADCAST] = "broadcast",
    [CHORUS_ALLGATHER] = "allgather",
    [CHORUS_REDUCESCATTER] = "reducescatter",
    [CHORUS_ALLTOALL] = "alltoall",
};

bool dtype_is_valid(int dtype)
{
    return dtype >= 0 && dtype < CHORUS_DTYPE_COUNT;
}

bool dtype_op_is_valid(int op)
{
    return op >= 0 && op < CHORUS_OP_COUNT;
}

bool dtype_collective_is_valid(int collective)
{
    return collective >= 0 && collective < CHORUS_COLLECTIVE_COUNT;
}

bool dtype_is_floating(chorus_dtype dtype)
{
    return dtype_is_valid((int)dtype) && dtype_table[dtype].floating;
}

size_t chorus_dtype_size(chorus_dtype dtype)
{
    return dtype_is_valid((int)dtype) ? dtype_table[dtype].size : 0;
}

const char *chorus_dtype_name(chorus_dtype dtype)
{
    return dtype_is_valid((int)dtype) ? dtype_table[dtype].name : "unknown";
}

const char *chorus_op_name(chorus_op op)
{
    return dtype_op_is_valid((int)op) ? op_names[op] : "unknown";
}

const char *chorus_collective_name(chorus_collective collective)
{
    return dtype_collective_is_valid((int)collective) ? collective_names[collective] : "unknown";
}

size_t chorus_tensor_count(const chorus_tensor *tensor)
{
    if (tensor == NULL)
        return 0;
    size_t count = 1;
    for (size_t i = 0; i < tensor->ndims && i < CHORUS_MAX_DIMS; i++)
        count *= tensor->shape[i] > 0 ? (size_t)tensor->shape[i] : 0;
    return count;
}

const char *dtype_compression_name(int compression)
{
    switch (compression) {
    case CHORUS_COMPRESSION_DEFAULT:
        return "default";
    case CHORUS_COMPRESSION_NONE:
        return "none";
    case CHORUS_COMPRESSION_FP16:
        return "fp16";
    case CHORUS_COMPRESSION_BF16:
        return "bf16";
    case CHORUS_COMPRESSION_INT8:
        return "int8";
    case CHORUS_COMPRESSION_INT4:
        return "int4";
    case CHORUS_COMPRESSION_TOPK:
        return "topk";
    }
    return "unknown";
}

unsigned dtype_compression_bits(int compression)
{
    return compression == CHORUS_COMPRESSION_INT8   ? 8
           : compression == CHORUS_COMPRESSION_INT4 ? 4
                                                    : 0;
}

bool dtype_compression_sums_only(int compression)
{
    return dtype_compression_bits(compression) != 0 || compression == CHORUS_COMPRESSION_TOPK;
}

bool dtype_compression_applies(chorus_dtype dtype, int compression)
{
    if (dtype == CHORUS_FLOAT32)
        return true;
    return (dtype == CHORUS_FLOAT16 || dtype == CHORUS_BFLOAT16) &&
           dtype_compression_sums_only(compression);
}
