/*
 * allreduce_quantized.c — allreduce of float32 sums in 8 or 4 bits per value (the INT8 and
 * INT4 compressions), quantizing each value exactly twice rather than at every hop of a ring:
 *
 *   1. The tensor is cut into one shard per rank, on block boundaries (QUANTIZE_BLOCK_VALUES,
 *      the blocks split as part_start splits them), so that the blocks are the tensor's own
 *      whatever the ranks. Every rank quantizes every shard and sends shard j to rank j
 *      (a pairwise alltoall).
 *   2. Rank j decodes every rank's quantized shard j and sums them in double, in rank order,
 *      applies the postscale (an average's division among it), rounds to float32 and quantizes
 *      the result once more.
 *   3. A pairwise allgather of the quantized sums; every rank, rank j too, decodes every shard
 *      from the same bytes, so that every rank ends with the same bits.
 *
 * Error per value, nearest rounding: at most S/2 + |postscale| * sum_k s_k/2 (plus float32
 * rounding), where s_k is the scale of rank k's block holding it and S that of the sum's
 * block; stochastic rounding: S + |postscale| * sum_k s_k. A block holding a nan or an
 * infinity, or a sum that overflows float32, comes back as a block of nans (quantize.h).
 *
 * Cost: 2(p-1) steps; each rank sends (p-1)/p of the tensor's quantized bytes twice, about
 * 2 (p-1)/p * count * (bits/8 + 8/QUANTIZE_BLOCK_VALUES) bytes: 2(p-1)/p * count * 1.03 B for
 * 8 bits and * 0.53 B for 4 bits, against * 4 B for float32's ring. Scratch: the quantized
 * tensor three times over (what goes out, what comes in for this rank's shard, the gathered
 * sums) and this rank's shard in double.
 *
 * Example, p = 3, a tensor of 5 blocks: shards are blocks {0,1}, {2,3}, {4}. Rank 0 sends its
 * quantized blocks 2-3 to rank 1 and block 4 to rank 2, and receives blocks 0-1 from ranks 1
 * and 2; each rank sums and requantizes its shard; ranks 1 and 2 then send theirs to everyone,
 * and everyone decodes the five blocks.
 *
 * Error feedback (args->error_feedback, rank k's residual e_k; chorus.h). Per value, with x_k
 * rank k's contribution and f the postscale:
 *   - step 1 sends c_k = x_k + e_k (float32) quantized, which decodes to d_k; rank k keeps
 *     e_k' = c_k - d_k, what its quantization dropped;
 *   - the owner sums S = d_1 + ... + d_p (double) and sends u, the decoded quantization of
 *     f * S; the result is u, not f * S, so the owner adds g = S - u / f to its e' (for its
 *     shard's values only), which the next step multiplies by f back into the sum.
 * Summed over the ranks, e_1' + ... + e_p' = (c_1 - d_1) + ... + (c_p - d_p) + S - u/f
 * = sum x_k + sum e_k - u/f, that is u = f * (sum x_k + sum e_k - sum e_k'); over steps
 * t = 1..T from zero residuals, the sums telescope: sum_t u_t + f * sum_k e_k(T) =
 * f * sum_t sum_k x_k(t), each step off by float32 roundings only (of c_k, e_k' and
 * (float)(e_k' + g)). With f = 0 the result is zero whatever was sent and g is not kept. A
 * value whose c_k - d_k or e_k' + g is not finite (a nan or infinity in its block) keeps the
 * residual it had, so that one bad step does not poison every later one. The residual touches
 * neither what goes on the wire nor the sum's quantization, so every rank still ends with the
 * same bits. Cost: none beyond the residual's own read and write, in step 1's pass (the sum
 * of c_k and what it decodes to are computed while each block is quantized) and the fold over
 * the owner's shard.
 */
#include "algorithms.h"

#include "../compression/quantize.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Where shard `k` starts, in values: block boundaries split among the ranks. */
static size_t shard_start(size_t count, int nranks, int k)
{
    size_t blocks = (count + QUANTIZE_BLOCK_VALUES - 1) / QUANTIZE_BLOCK_VALUES;
    size_t start = part_start(blocks, (size_t)nranks, (size_t)k) * QUANTIZE_BLOCK_VALUES;
    return start < count ? start : count;
}

/* Streams of random numbers: this rank's, for one phase, from the tensor's. */
enum quantized_phase { QUANTIZED_SHARDS = 1, QUANTIZED_SUMS = 2 };

static struct quantize_scheme phase_scheme(const struct quantize_scheme *tensor, int rank,
                                           enum quantized_phase phase)
{
    struct quantize_scheme scheme = *tensor;
    scheme.stream = quantize_stream(tensor->stream, (uint64_t)rank, phase);
    return scheme;
}

/* Error feedback of the owner's second quantization: residual[i] += sums[i] - result[i] /
 * factor, what the result lacks of factor * sums[i] in the residual's units (see above). */
static void fold_sum_error(float *residual, const double *sums, const float *result,
                           size_t count, double factor)
{
    for (size_t i = 0; i < count; i++) {
        float folded = (float)((double)residual[i] + (sums[i] - (double)result[i] / factor));
        if (isfinite(folded))
            residual[i] = folded;
    }
}

chorus_status allreduce_quantized(const struct allreduce_args *args)
{
    if (args->pieces != NULL || args->quantize == NULL || args->dtype != CHORUS_FLOAT32)
        return CHORUS_ERR_NOT_SUPPORTED;
    struct transport *transport = args->transport;
    int p = transport->nranks, r = transport->rank;
    size_t count = args->count;
    unsigned bits = args->quantize->bits;
    float *values = args->buffer;
    if (count == 0)
        return CHORUS_OK;
    chorus_status status = CHORUS_OK;
    /* Per shard: its first value, its quantized bytes, and where those lie in the gathered
     * area (which is laid out as the outgoing one). */
    size_t *starts = calloc((size_t)p + 1, sizeof *starts);
    size_t *bytes = calloc((size_t)p, sizeof *bytes);
    size_t *offsets = calloc((size_t)p, sizeof *offsets);
    if (starts == NULL || bytes == NULL || offsets == NULL) {
        status = CHORUS_ERR_OUT_OF_MEMORY;
        goto out;
    }
    size_t total = 0;
    for (int k = 0; k <= p; k++)
        starts[k] = shard_start(count, p, k);
    for (int k = 0; k < p; k++) {
        bytes[k] = quantize_bytes(starts[k + 1] - starts[k], bits);
        offsets[k] = total;
        total += bytes[k];
    }
    size_t mine = starts[r + 1] - starts[r];
    size_t sums_bytes = mine * sizeof(double);
    unsigned char *area = scratch_reserve(args->scratch, sums_bytes + 2 * total +
                                                             (size_t)p * bytes[r] + 1);
    if (area == NULL) {
        status = CHORUS_ERR_OUT_OF_MEMORY;
        goto out;
    }
    double *sums = (double *)area; /* first, so that it is aligned */
    unsigned char *outgoing = area + sums_bytes;
    unsigned char *gathered = outgoing + total;
    unsigned char *incoming = gathered + total; /* rank k's shard r at k * bytes[r] */

    /* With error feedback, what earlier steps dropped rides with this one's contribution. */
    float *residual = args->error_feedback;
    struct quantize_scheme shards = phase_scheme(args->quantize, r, QUANTIZED_SHARDS);
    for (int k = 0; k < p; k++) {
        if (residual != NULL)
            quantize_encode_compensated(outgoing + offsets[k], values + starts[k],
                                        residual + starts[k], starts[k + 1] - starts[k],
                                        &shards, starts[k]);
        else
            quantize_encode(outgoing + offsets[k], values + starts[k],
                            starts[k + 1] - starts[k], &shards, starts[k]);
    }
    memcpy(incoming + (size_t)r * bytes[r], outgoing + offsets[r], bytes[r]);
    for (int step = 1; step < p; step++) {
        int to = (r + step) % p, from = (r - step + p) % p;
        status = transport_sendrecv(transport, outgoing + offsets[to], bytes[to], to,
                                    incoming + (size_t)from * bytes[r], bytes[r], from,
                                    TAG_QUANTIZED_SHARDS);
        if (status != CHORUS_OK)
            goto out;
    }

    /* This rank's shard: the sum in double, in rank order, scaled, rounded to float32 where
     * the tensor's own values were (they went out in step 1), and quantized once more. */
    memset(sums, 0, sums_bytes);
    for (int k = 0; k < p; k++)
        quantize_decode_add(sums, incoming + (size_t)k * bytes[r], mine, bits);
    double factor = args->postscale != NULL ? *args->postscale : 1.0;
    for (size_t i = 0; i < mine; i++)
        values[starts[r] + i] = (float)(sums[i] * factor);
    struct quantize_scheme sums_scheme = phase_scheme(args->quantize, r, QUANTIZED_SUMS);
    quantize_encode(gathered + offsets[r], values + starts[r], mine, &sums_scheme, starts[r]);
    for (int step = 1; step < p; step++) {
        int to = (r + step) % p, from = (r - step + p) % p;
        status = transport_sendrecv(transport, gathered + offsets[r], bytes[r], to,
                                    gathered + offsets[from], bytes[from], from,
                                    TAG_QUANTIZED_SUMS);
        if (status != CHORUS_OK)
            goto out;
    }
    /* Every shard from its quantized bytes, this rank's own too. */
    for (int k = 0; k < p; k++)
        quantize_decode(values + starts[k], gathered + offsets[k], starts[k + 1] - starts[k],
                        bits);
    if (residual != NULL && factor != 0.0)
        fold_sum_error(residual + starts[r], sums, values + starts[r], mine, factor);
out:
    free(starts);
    free(bytes);
    free(offsets);
    return status;
}
