/*
 * gpu_capability.h — the one statement of what NCCL does for chorus's GPU reductions: for each
 * dtype x op, with and without scale factors, whether NCCL reduces it as chorus defines it, by
 * which means, or whether the batch goes through host memory instead (copied to the host,
 * reduced by the host collectives, copied back). The executor routes by it, chorus-info prints
 * it, and chorus.h points to chorus-info, so the three cannot drift apart again.
 */
#ifndef CHORUS_GPU_CAPABILITY_H
#define CHORUS_GPU_CAPABILITY_H

#include "../core/common.h"

enum gpu_route {
    GPU_ROUTE_NCCL,        /* an NCCL reduction of its own (sum, min, max, product) */
    GPU_ROUTE_NCCL_SCALED, /* NCCL's pre-multiplied sum: scale factors and averages of floats */
    GPU_ROUTE_HOST,        /* through host memory */
};

/* How a GPU reduction of `dtype` with `op` runs; `scaled` when a prescale or postscale factor
 * is not 1. */
enum gpu_route gpu_route_of(chorus_dtype dtype, chorus_op op, bool scaled);
/* Why a reduction goes through host memory ("NCCL has no 16-bit integers", ...); "" when NCCL
 * takes it. */
const char *gpu_route_reason(chorus_dtype dtype, chorus_op op, bool scaled);
/* "nccl", "nccl premulsum" or "host". */
const char *gpu_route_name(enum gpu_route route);

#endif
