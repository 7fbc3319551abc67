/*
 * gpu_capability.c — see gpu_capability.h. The rules, in the order they are tried:
 *   - Adasum: each step needs dot products of whole vectors, which no NCCL call gives;
 *   - int16 and uint16: NCCL has no 16-bit integer types;
 *   - integers with an average or a scale factor: NCCL's average truncates and its
 *     pre-multiplied sum takes floats only, where chorus divides exactly and rounds;
 *   - min, max and product with a scale factor: NCCL scales only sums;
 *   - float sums with scale factors, and float averages: ncclRedOpCreatePreMulSum;
 *   - everything else: NCCL's own reduction (bools as bytes: min is and, max is or).
 */
#include "gpu_capability.h"

enum gpu_route gpu_route_of(chorus_dtype dtype, chorus_op op, bool scaled)
{
    return gpu_route_reason(dtype, op, scaled)[0] != '\0'                    ? GPU_ROUTE_HOST
           : (op == CHORUS_AVERAGE || scaled) && dtype_is_floating(dtype) ? GPU_ROUTE_NCCL_SCALED
                                                                             : GPU_ROUTE_NCCL;
}

const char *gpu_route_reason(chorus_dtype dtype, chorus_op op, bool scaled)
{
    bool summing = op == CHORUS_SUM || op == CHORUS_AVERAGE;
    if (op == CHORUS_ADASUM)
        return "Adasum needs dot products of whole vectors";
    if (dtype == CHORUS_INT16 || dtype == CHORUS_UINT16)
        return "NCCL has no 16-bit integers";
    if (!dtype_is_floating(dtype) && (op == CHORUS_AVERAGE || scaled))
        return "NCCL's average truncates and its scaled sum takes floats only";
    if (!summing && scaled)
        return "NCCL scales only sums";
    return "";
}

const char *gpu_route_name(enum gpu_route route)
{
    switch (route) {
    case GPU_ROUTE_NCCL:
        return "nccl";
    case GPU_ROUTE_NCCL_SCALED:
        return "nccl premulsum";
    case GPU_ROUTE_HOST:
        return "host";
    }
    return "?";
}
