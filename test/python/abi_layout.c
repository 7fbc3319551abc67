/*
 * abi_layout.c — prints the layout of chorus.h's structs and the values of its enums, one per
 * line, for test_abi.py, which compares them with the ctypes declarations of the Python binding
 * (python/chorus/_library.py): a drifted field or value then fails CI instead of being read as
 * an older caller's layout.
 *   struct <python name> <size>
 *   field <python name> <field> <offset> <size>
 *   value <python name> <value>
 */
#include <chorus.h>

#include <stddef.h>
#include <stdio.h>

#define STRUCT(python, type) printf("struct %s %zu\n", python, sizeof(type))
#define FIELD(python, type, field)                                                               \
    printf("field %s %s %zu %zu\n", python, #field, offsetof(type, field),                      \
           sizeof(((type *)0)->field))
#define VALUE(python, value) printf("value %s %lld\n", python, (long long)(value))

int main(void)
{
    STRUCT("Tensor", chorus_tensor);
    FIELD("Tensor", chorus_tensor, data);
    FIELD("Tensor", chorus_tensor, dtype);
    FIELD("Tensor", chorus_tensor, ndims);
    FIELD("Tensor", chorus_tensor, shape);
    FIELD("Tensor", chorus_tensor, memory);
    FIELD("Tensor", chorus_tensor, device);

    STRUCT("OpArgs", chorus_op_args);
    FIELD("OpArgs", chorus_op_args, struct_size);
    FIELD("OpArgs", chorus_op_args, collective);
    FIELD("OpArgs", chorus_op_args, name);
    FIELD("OpArgs", chorus_op_args, input);
    FIELD("OpArgs", chorus_op_args, output);
    FIELD("OpArgs", chorus_op_args, op);
    FIELD("OpArgs", chorus_op_args, root);
    FIELD("OpArgs", chorus_op_args, prescale_factor);
    FIELD("OpArgs", chorus_op_args, postscale_factor);
    FIELD("OpArgs", chorus_op_args, compression);
    FIELD("OpArgs", chorus_op_args, splits);
    FIELD("OpArgs", chorus_op_args, process_set);
    FIELD("OpArgs", chorus_op_args, flags);
    FIELD("OpArgs", chorus_op_args, timeout_seconds);
    FIELD("OpArgs", chorus_op_args, error_feedback);
    FIELD("OpArgs", chorus_op_args, compression_ratio);
    FIELD("OpArgs", chorus_op_args, cuda_stream);

    STRUCT("Topology", chorus_topology);
    FIELD("Topology", chorus_topology, struct_size);
    FIELD("Topology", chorus_topology, rank);
    FIELD("Topology", chorus_topology, size);
    FIELD("Topology", chorus_topology, local_rank);
    FIELD("Topology", chorus_topology, local_size);
    FIELD("Topology", chorus_topology, cross_rank);
    FIELD("Topology", chorus_topology, cross_size);
    FIELD("Topology", chorus_topology, cores);
    FIELD("Topology", chorus_topology, pus);
    FIELD("Topology", chorus_topology, numa_nodes);
    FIELD("Topology", chorus_topology, homogeneous);

    STRUCT("InitOptions", chorus_init_options);
    FIELD("InitOptions", chorus_init_options, struct_size);
    FIELD("InitOptions", chorus_init_options, parameters);

    VALUE("MAX_DIMS", CHORUS_MAX_DIMS);
    VALUE("OK", CHORUS_OK);
    VALUE("IN_PROGRESS", CHORUS_IN_PROGRESS);
    VALUE("ERR_INVALID_ARGUMENT", CHORUS_ERR_INVALID_ARGUMENT);
    VALUE("ERR_NOT_INITIALIZED", CHORUS_ERR_NOT_INITIALIZED);
    VALUE("ERR_DUPLICATE_NAME", CHORUS_ERR_DUPLICATE_NAME);
    VALUE("UINT8", CHORUS_UINT8);
    VALUE("INT8", CHORUS_INT8);
    VALUE("INT32", CHORUS_INT32);
    VALUE("INT64", CHORUS_INT64);
    VALUE("FLOAT16", CHORUS_FLOAT16);
    VALUE("BFLOAT16", CHORUS_BFLOAT16);
    VALUE("FLOAT32", CHORUS_FLOAT32);
    VALUE("FLOAT64", CHORUS_FLOAT64);
    VALUE("INT16", CHORUS_INT16);
    VALUE("UINT16", CHORUS_UINT16);
    VALUE("BOOL", CHORUS_BOOL);
    VALUE("DTYPE_COUNT", CHORUS_DTYPE_COUNT);
    VALUE("SUM", CHORUS_SUM);
    VALUE("AVERAGE", CHORUS_AVERAGE);
    VALUE("MIN", CHORUS_MIN);
    VALUE("MAX", CHORUS_MAX);
    VALUE("PRODUCT", CHORUS_PRODUCT);
    VALUE("ADASUM", CHORUS_ADASUM);
    VALUE("OP_COUNT", CHORUS_OP_COUNT);
    VALUE("ALLREDUCE", CHORUS_ALLREDUCE);
    VALUE("BROADCAST", CHORUS_BROADCAST);
    VALUE("ALLGATHER", CHORUS_ALLGATHER);
    VALUE("REDUCESCATTER", CHORUS_REDUCESCATTER);
    VALUE("ALLTOALL", CHORUS_ALLTOALL);
    VALUE("COLLECTIVE_COUNT", CHORUS_COLLECTIVE_COUNT);
    VALUE("ANY_SOURCE", CHORUS_ANY_SOURCE);
    VALUE("MEMORY_HOST", CHORUS_MEMORY_HOST);
    VALUE("MEMORY_CUDA", CHORUS_MEMORY_CUDA);
    VALUE("COMPRESSION_DEFAULT", CHORUS_COMPRESSION_DEFAULT);
    VALUE("COMPRESSION_NONE", CHORUS_COMPRESSION_NONE);
    VALUE("COMPRESSION_FP16", CHORUS_COMPRESSION_FP16);
    VALUE("COMPRESSION_BF16", CHORUS_COMPRESSION_BF16);
    VALUE("COMPRESSION_INT8", CHORUS_COMPRESSION_INT8);
    VALUE("COMPRESSION_INT4", CHORUS_COMPRESSION_INT4);
    VALUE("COMPRESSION_TOPK", CHORUS_COMPRESSION_TOPK);
    return 0;
}
